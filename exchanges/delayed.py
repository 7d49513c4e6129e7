"""Delayed-message exchange (``x-delayed-message``): the routing side.

Theory of operation
-------------------
An ``x-delayed-message`` exchange routes like the type named by its ``x-delayed-type``
argument (direct, fanout, topic, headers, or another built-in type): this class wraps that
type's routing table and forwards every binding and routing call to it, so a delayed exchange
*is* that type as far as bindings go.

Holding a message until it is due is not done here: the vhost's publish pipeline
(:meth:`vhosts.vhost.VirtualHost.publish`) sees the exchange's ``delayed`` holder, reads the
message's ``x-delay`` with :func:`delay_ms` (through :func:`vhosts.delayed.message_delay`)
and, for a delay > 0, hands the message to that holder (:mod:`vhosts.delayed`; on disk in
:mod:`queue_store.delayed_log`, ordered in RAM by :mod:`queue_store.delay_index`). When it
falls due the holder publishes it to the same exchange again, with ``x-delay`` set to minus
the delay (as the plugin does: a consumer can tell it was delayed), as a publish marked
``released`` (the pipeline does not check its delay again); this router then routes it
through the bindings as they are at that time.

``x-delay`` as the plugin reads it (``rabbit_delayed_message_utils:get_delay/1``): an integer
of any AMQP width; a string of digits; a float or decimal, truncated. Anything else, a
missing header, zero or a negative value means "no delay": routed at once.

Source: https://github.com/rabbitmq/rabbitmq-delayed-message-exchange (README,
``rabbit_exchange_type_delayed_message.erl``: ``validate/1``, ``route/2``;
``rabbit_delayed_message_utils.erl``: ``get_delay/1``, ``swap_delay_header/1``).
"""

from __future__ import annotations

import decimal
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from amqp_common.errors import PreconditionFailed
from amqp_common.properties import Timestamp
from exchanges.binding import Binding, Destination

TYPE_NAME = "x-delayed-message"
_TYPE_TEXT = "Invalid argument, 'x-delayed-type' must be an existing exchange type"


def delayed_type(arguments: Mapping[str, Any]) -> str:
    """The ``x-delayed-type`` argument (the routing type's name).

    Raises:
        PreconditionFailed (406): missing or not a string, or ``x-delayed-message`` itself
            (the plugin's text).
    """
    value = arguments.get("x-delayed-type")
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str) or value == TYPE_NAME:
        raise PreconditionFailed(_TYPE_TEXT)
    return value


def delay_ms(headers: Mapping[str, Any] | None) -> int:
    """The message's delay in ms from its ``x-delay`` header; 0 for none (absent, zero,
    negative, or a value that is not a number: routed at once, as the plugin does)."""
    if not headers:
        return 0
    value = headers.get("x-delay")
    if value is None or isinstance(value, bool | Timestamp):  # a T value is no delay, as a
        return 0                                                # datetime (one up to 9999)
    if isinstance(value, int):
        return value if value > 0 else 0
    if isinstance(value, float | decimal.Decimal):
        try:
            value = int(value)
        except (ValueError, OverflowError):  # nan, inf
            return 0
        return value if value > 0 else 0
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        text = value.strip()
        if text.lstrip("+-").isdigit():
            number = int(text)
            return number if number > 0 else 0
    return 0


class DelayedMessageExchange:
    """The routing table of one ``x-delayed-message`` exchange: the ``x-delayed-type``
    table, wrapped (see the module docstring).

    Args:
        arguments: Exchange.Declare arguments (``x-delayed-type`` required).
        make_type: builds the wrapped table from (type name, arguments); it raises
            CommandInvalid (503) for an unknown type, as RabbitMQ's ``check_type/1``.

    Raises:
        PreconditionFailed (406): ``x-delayed-type`` missing or invalid.
        CommandInvalid (503): ``x-delayed-type`` names no exchange type.
    """

    needs_headers: ClassVar[bool] = False  # per instance below (the wrapped type's)
    needs_message: bool = False  # per instance below (the wrapped type's)
    is_delayed: ClassVar[bool] = True

    def __init__(self, arguments: Mapping[str, Any] | None,
                 make_type: Callable[[str, Mapping[str, Any]], Any]) -> None:
        args = arguments or {}
        self.type_name = delayed_type(args)
        self.inner = make_type(self.type_name, args)
        self.needs_headers = self.inner.needs_headers  # type: ignore[misc]
        self.needs_message = self.inner.needs_message

    def add_binding(self, binding: Binding) -> None:
        self.inner.add_binding(binding)

    def remove_binding(self, binding: Binding) -> bool:
        return bool(self.inner.remove_binding(binding))

    def route(self, routing_key: str, headers: Mapping[str, Any] | None) -> set[Destination]:
        """The wrapped type's destinations for a message routed now."""
        return self.inner.route(routing_key, headers)  # type: ignore[no-any-return]

    def route_message(self, routing_key: str, message: Any) -> set[Destination]:
        return self.inner.route_message(routing_key, message)  # type: ignore[no-any-return]

    def bindings(self) -> list[Binding]:
        return self.inner.bindings()  # type: ignore[no-any-return]

    def validate_binding(self, binding: Binding) -> None:
        self.inner.validate_binding(binding)

    def __len__(self) -> int:
        return len(self.inner)

    def __repr__(self) -> str:
        return f"<DelayedMessageExchange {self.type_name} bindings={len(self)}>"
