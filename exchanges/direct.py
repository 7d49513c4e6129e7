"""Direct exchange: a message goes to the bindings whose binding key equals its routing key.

Source: AMQP 0-9-1 spec 3.1.3.1 (direct exchange type); RabbitMQ
``rabbit_exchange_type_direct`` (exact, byte-wise key equality).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from exchanges.base import BaseExchangeType, decr, incr
from exchanges.binding import Binding, Destination


class DirectExchange(BaseExchangeType):
    """Routing table ``{routing_key: {Destination: binding count}}``; ``route`` is one lookup.

    >>> x = DirectExchange()
    >>> x.add_binding(Binding("x", Destination("queue", "q"), "k"))
    >>> x.route("k", None)
    {Destination(kind='queue', name='q')}
    """

    def __init__(self) -> None:
        super().__init__()
        self._table: dict[str, dict[Destination, int]] = {}

    def route(self, routing_key: str, headers: Mapping[str, Any] | None) -> set[Destination]:
        """Destinations bound with exactly ``routing_key`` (headers are ignored)."""
        dests = self._table.get(routing_key)
        return set(dests) if dests else set()

    def _index(self, binding: Binding) -> None:
        incr(self._table.setdefault(binding.routing_key, {}), binding.destination)

    def _unindex(self, binding: Binding) -> None:
        dests = self._table.get(binding.routing_key)
        if dests is not None:
            decr(dests, binding.destination)
            if not dests:
                del self._table[binding.routing_key]
