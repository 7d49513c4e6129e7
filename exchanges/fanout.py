"""Fanout exchange: every message goes to every bound destination; keys are ignored.

Source: AMQP 0-9-1 spec 3.1.3.2 (fanout exchange type); RabbitMQ
``rabbit_exchange_type_fanout``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from exchanges.base import BaseExchangeType, decr, incr
from exchanges.binding import Binding, Destination


class FanoutExchange(BaseExchangeType):
    """Routing table ``{Destination: binding count}``; ``route`` returns all its keys."""

    def __init__(self) -> None:
        super().__init__()
        self._dests: dict[Destination, int] = {}

    def route(self, routing_key: str, headers: Mapping[str, Any] | None) -> set[Destination]:
        """Every bound destination, once each, whatever the routing key and headers."""
        return set(self._dests)

    def _index(self, binding: Binding) -> None:
        incr(self._dests, binding.destination)

    def _unindex(self, binding: Binding) -> None:
        decr(self._dests, binding.destination)
