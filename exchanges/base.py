"""The interface every exchange routing table implements, plus shared bookkeeping.

Source: AMQP 0-9-1 spec 3.1.3 (exchanges, bindings) and RabbitMQ's ``rabbit_exchange_type``
behaviour (``route/2``, ``validate_binding/2``, ``add_binding/3``, ``remove_bindings/3``).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any, ClassVar, Protocol, TypeVar

from exchanges.binding import Binding, Destination

K = TypeVar("K", bound=Hashable)


class ExchangeType(Protocol):
    """A routing table for one exchange: its bindings and how a message is routed over them.

    * ``add_binding(b)`` is idempotent for an identical binding (same ``b.key``);
      ``remove_binding(b) -> bool`` removes only that binding (True if it existed), so a
      destination bound twice with different keys/arguments stays bound by the other one.
    * ``route(routing_key, headers) -> set[Destination]``: each destination at most once.
    * ``needs_headers``: True only when ``route`` reads message headers (headers exchange),
      so the caller decodes them lazily.
    * ``needs_message``: True when the caller must call ``route_message(routing_key,
      message)`` instead (the consistent-hash exchange's ``hash-property``).
    * ``validate_binding(b)`` raises an :class:`~amqp_common.errors.AMQPError` where RabbitMQ
      refuses the binding (``rabbit_exchange_type:validate_binding/2``).
    """

    needs_headers: ClassVar[bool]
    needs_message: bool

    def add_binding(self, binding: Binding) -> None: ...

    def remove_binding(self, binding: Binding) -> bool: ...

    def route(self, routing_key: str, headers: Mapping[str, Any] | None) -> set[Destination]: ...

    def route_message(self, routing_key: str, message: Any) -> set[Destination]: ...

    def bindings(self) -> list[Binding]: ...

    def validate_binding(self, binding: Binding) -> None: ...

    def __len__(self) -> int: ...


class BaseExchangeType:
    """Shared bookkeeping: bindings kept by ``Binding.key`` (dedupe), subclasses index them.

    Subclasses implement :meth:`_index` / :meth:`_unindex` (called once per distinct binding)
    and :meth:`route`; :meth:`validate_binding` accepts everything unless overridden, as the
    direct, fanout and topic types of RabbitMQ do.
    """

    needs_headers: ClassVar[bool] = False
    needs_message = False

    def __init__(self) -> None:
        self._by_key: dict[tuple[Any, ...], Binding] = {}

    def add_binding(self, binding: Binding) -> None:
        """Add ``binding``; a second identical binding (same ``.key``) is a no-op."""
        key = binding.key
        if key in self._by_key:
            return
        self._by_key[key] = binding
        self._index(binding)

    def remove_binding(self, binding: Binding) -> bool:
        """Remove the binding equal to ``binding`` (by ``.key``); False when there was none."""
        stored = self._by_key.pop(binding.key, None)
        if stored is None:
            return False
        self._unindex(stored)
        return True

    def route_message(self, routing_key: str, message: Any) -> set[Destination]:
        """:meth:`route` given the whole message (types with ``needs_message`` override)."""
        return self.route(routing_key,  # type: ignore[attr-defined]
                          message.headers if self.needs_headers else None)

    def bindings(self) -> list[Binding]:
        """All current bindings, in the order they were added."""
        return list(self._by_key.values())

    def validate_binding(self, binding: Binding) -> None:
        """Accept every binding (RabbitMQ's direct/fanout/topic ``validate_binding`` is ok)."""

    def route(self, routing_key: str, headers: Mapping[str, Any] | None) -> set[Destination]:
        raise NotImplementedError

    def _index(self, binding: Binding) -> None:
        raise NotImplementedError

    def _unindex(self, binding: Binding) -> None:
        raise NotImplementedError

    def __len__(self) -> int:
        return len(self._by_key)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} bindings={len(self)}>"


def incr(counts: dict[K, int], key: K) -> None:
    """Count one more binding leading to ``key``."""
    counts[key] = counts.get(key, 0) + 1


def decr(counts: dict[K, int], key: K) -> bool:
    """Count one binding less for ``key``; True when that was the last one (key dropped)."""
    left = counts.get(key, 0) - 1
    if left > 0:
        counts[key] = left
        return False
    counts.pop(key, None)
    return True
