"""Exchange routing tables by type name: ``make_exchange_type("topic") -> TopicExchange()``.

Source: AMQP 0-9-1 spec 3.1.3 (the four standard exchange types) and RabbitMQ's
``rabbit_exchange:check_type/1``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from amqp_common.errors import CommandInvalid
from exchanges.base import ExchangeType
from exchanges.consistent_hash import ConsistentHashExchange
from exchanges.direct import DirectExchange
from exchanges.fanout import FanoutExchange
from exchanges.headers import HeadersExchange
from exchanges.topic import TopicExchange

#: Exchange type name (as sent in ``Exchange.Declare``) -> routing-table class.
EXCHANGE_TYPES: dict[str, type] = {
    "direct": DirectExchange,
    "fanout": FanoutExchange,
    "topic": TopicExchange,
    "headers": HeadersExchange,
    "x-consistent-hash": ConsistentHashExchange,  # RabbitMQ's plugin of that name, built in
}


def make_exchange_type(type_name: str,
                       arguments: Mapping[str, Any] | None = None) -> ExchangeType:
    """A fresh, empty routing table for ``type_name`` (configured by the exchange's
    ``arguments`` where the type takes some: ``x-consistent-hash``'s ``hash-header``).

    Raises:
        CommandInvalid (503): ``"unknown exchange type 'foo'"`` for any other name, as
            RabbitMQ 3.10-3.13.2 do (``check_type/1``; 3.13.3 and 4.x answer 406
            PRECONDITION_FAILED with the same text).
        PreconditionFailed (406): arguments the type refuses.
    """
    cls = EXCHANGE_TYPES.get(type_name)
    if cls is None:
        raise CommandInvalid(f"unknown exchange type '{type_name}'")
    instance: ExchangeType = cls(arguments) if cls is ConsistentHashExchange else cls()
    return instance


__all__ = [
    "EXCHANGE_TYPES",
    "ConsistentHashExchange",
    "DirectExchange",
    "ExchangeType",
    "FanoutExchange",
    "HeadersExchange",
    "TopicExchange",
    "make_exchange_type",
]
