"""The exchange entity: its declared properties, its bindings and its routing table.

Source: AMQP 0-9-1 spec 3.1.3 (exchanges), 1.6.2 (exchange.declare);
https://www.rabbitmq.com/docs/exchanges.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from amqp_common.errors import AccessRefused, rs
from exchanges import make_exchange_type
from exchanges.binding import Binding


class Exchange:
    """One exchange in a vhost.

    Args:
        name, type_name: exchange name and type (``direct``, ``fanout``, ``topic``,
            ``headers``, ``x-consistent-hash``).
        durable, auto_delete, internal, arguments: Exchange.Declare fields.
        clock: the broker's monotonic clock (seconds) for ``x-message-deduplication``'s
            cache TTLs; None: ``time.monotonic``.

    Raises:
        CommandInvalid (503): unknown exchange type.
        PreconditionFailed (406): arguments the type refuses.
    """

    def __init__(
        self,
        name: str,
        type_name: str,
        durable: bool = False,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: dict[str, Any] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.name = name
        self.type_name = type_name
        self.durable = durable
        self.auto_delete = auto_delete
        self.internal = internal
        self.arguments = arguments or {}
        self.router = make_exchange_type(type_name, self.arguments, clock)
        self.bindings: dict[Any, Binding] = {}
        self.published = 0  # messages published to this exchange (stats)
        self.unroutable = 0  # of which reached no queue (publish_out = the rest)
        self.policy_alternate_exchange: str | None = None  # from a matching policy
        self.delayed: Any = None  # x-delayed-message: the messages it holds (vhosts.delayed)

    def __repr__(self) -> str:
        return f"<Exchange {self.name!r} {self.type_name}>"

    @property
    def alternate_exchange(self) -> str | None:
        """Name from the ``alternate-exchange`` argument (which wins) or policy, or None."""
        value = self.arguments.get("alternate-exchange")
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        return value if isinstance(value, str) else self.policy_alternate_exchange

    def internal_error(self, vhost_name: str) -> AccessRefused:
        """RabbitMQ's 403 for a publish to this internal exchange (the caller checks
        ``internal`` first, so the publish path pays no call)."""
        return AccessRefused(
            f"cannot publish to internal {rs('exchange', self.name, vhost_name)}")

    def add_binding(self, binding: Binding) -> bool:
        """Add a binding; False when an identical one exists already (idempotent)."""
        key = binding.key
        if key in self.bindings:
            return False
        self.router.validate_binding(binding)
        self.bindings[key] = binding
        self.router.add_binding(binding)
        return True

    def remove_binding(self, binding: Binding) -> bool:
        """Remove a binding; False when it did not exist."""
        existing = self.bindings.pop(binding.key, None)
        if existing is None:
            return False
        self.router.remove_binding(existing)
        return True
