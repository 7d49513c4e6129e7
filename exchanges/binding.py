"""Bindings: the edges from an exchange to a queue or to another exchange.

Source: AMQP 0-9-1 spec 3.1.3 (bindings); RabbitMQ's ``#binding{}`` record and
exchange-to-exchange bindings (https://www.rabbitmq.com/docs/e2e).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

DestinationKind = Literal["queue", "exchange"]


class Destination(NamedTuple):
    """Where a binding leads: ``Destination("queue", "q1")`` or ``Destination("exchange", "x")``."""

    kind: DestinationKind
    name: str


def freeze(value: Any) -> Any:
    """A hashable, order-independent form of a field-table value (dicts, lists, bytes...)."""
    if isinstance(value, dict):
        return tuple(sorted((str(k), freeze(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value


@dataclass(eq=False)
class Binding:
    """One binding ``source -> destination`` with a binding key and arguments.

    Two bindings are the same binding when :attr:`key` is equal: RabbitMQ identifies a binding
    by (source, destination, binding key, arguments).
    """

    source: str
    destination: Destination
    routing_key: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, Destination, str, Any]:
        return (self.source, self.destination, self.routing_key, freeze(self.arguments))
