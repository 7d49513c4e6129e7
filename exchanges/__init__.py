"""Exchange routing tables by type name: ``make_exchange_type("topic") -> TopicExchange()``.

Source: AMQP 0-9-1 spec 3.1.3 (the four standard exchange types) and RabbitMQ's
``rabbit_exchange:check_type/1``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from amqp_common.errors import CommandInvalid
from exchanges.base import ExchangeType
from exchanges.consistent_hash import ConsistentHashExchange
from exchanges.deduplication import DeduplicationExchange
from exchanges.delayed import DelayedMessageExchange
from exchanges.direct import DirectExchange
from exchanges.fanout import FanoutExchange
from exchanges.federation_upstream import FederationUpstreamExchange
from exchanges.headers import HeadersExchange
from exchanges.topic import TopicExchange

#: Exchange type name (as sent in ``Exchange.Declare``) -> routing-table class.
EXCHANGE_TYPES: dict[str, type] = {
    "direct": DirectExchange,
    "fanout": FanoutExchange,
    "topic": TopicExchange,
    "headers": HeadersExchange,
    "x-consistent-hash": ConsistentHashExchange,  # RabbitMQ's plugin of that name, built in
    # the rabbitmq-message-deduplication plugin's exchange, built in
    "x-message-deduplication": DeduplicationExchange,
    # the rabbitmq-delayed-message-exchange plugin's exchange, built in (exchanges/delayed.py)
    "x-delayed-message": DelayedMessageExchange,
    # the rabbitmq_federation plugin's upstream-side exchange (exchanges/federation_upstream.py)
    "x-federation-upstream": FederationUpstreamExchange,
}
#: the types configured by the exchange's arguments (constructed with them)
_TAKES_ARGUMENTS = (ConsistentHashExchange, DeduplicationExchange, FederationUpstreamExchange)


def make_exchange_type(type_name: str, arguments: Mapping[str, Any] | None = None,
                       clock: Callable[[], float] | None = None) -> ExchangeType:
    """A fresh, empty routing table for ``type_name`` (configured by the exchange's
    ``arguments`` where the type takes some: ``x-consistent-hash``'s ``hash-header``,
    ``x-message-deduplication``'s ``x-cache-size``). ``clock``: monotonic seconds, the
    broker's, for ``x-message-deduplication``'s cache TTLs (None: ``time.monotonic``).

    Raises:
        CommandInvalid (503): ``"unknown exchange type 'foo'"`` for any other name, as
            RabbitMQ 3.10-3.13.2 do (``check_type/1``; 3.13.3 and 4.x answer 406
            PRECONDITION_FAILED with the same text).
        PreconditionFailed (406): arguments the type refuses.
    """
    cls = EXCHANGE_TYPES.get(type_name)
    if cls is None:
        raise CommandInvalid(f"unknown exchange type '{type_name}'")
    if cls is DelayedMessageExchange:  # wraps the x-delayed-type table
        return DelayedMessageExchange(arguments, make_exchange_type)  # type: ignore[return-value]
    if cls is DeduplicationExchange and clock is not None:
        return DeduplicationExchange(arguments, clock)
    instance: ExchangeType = cls(arguments) if cls in _TAKES_ARGUMENTS else cls()
    return instance


__all__ = [
    "EXCHANGE_TYPES",
    "ConsistentHashExchange",
    "DeduplicationExchange",
    "DelayedMessageExchange",
    "DirectExchange",
    "ExchangeType",
    "FanoutExchange",
    "HeadersExchange",
    "TopicExchange",
    "make_exchange_type",
]
