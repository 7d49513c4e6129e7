"""Deduplication exchange (``x-message-deduplication``): a fanout exchange that drops a message
whose ``x-deduplication-header`` value it has seen lately.

Theory of operation
-------------------
Routing is fanout's (every bound destination, keys ignored). Before that, a message carrying
``x-deduplication-header`` is checked against the exchange's :class:`DedupCache`: a value
seen within the cache (at most ``x-cache-size`` entries, LRU eviction; entries last
``x-cache-ttl`` ms, or the message's own ``x-cache-ttl`` header) makes :meth:`route` raise
:class:`DuplicateMessage`; the vhost's publish pipeline turns that into the ``DUPLICATE``
outcome: the message goes nowhere (not to an alternate exchange either), a mandatory publish
is *not* returned and the publisher's confirm is an ack. A message without the header is
routed normally and not recorded.

The plugin does the same check in its ``route/2`` but answers "no destinations", so RabbitMQ
returns a mandatory duplicate (312 NO_ROUTE) and sends it to an alternate exchange; amqpq
does neither (README, "Deliberate differences").

Exchange arguments (the plugin's names and 406 texts): ``x-cache-size`` (required, integer
> 0, or a string of digits), ``x-cache-ttl`` (ms, integer > 0, optional),
``x-cache-persistence`` (``memory``, the default, or ``disk``: on a vhost with storage the
cache's keys are journaled and reloaded at restart, see :mod:`vhosts.dedup_persistence`).

Source: https://github.com/noxdafox/rabbitmq-message-deduplication (README,
``rabbit_message_deduplication_exchange.ex``: ``validate/1``, ``route/2``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from amqp_common.dedup_cache import (
    DedupCache,
    dedup_key,
    message_dedup_key,
    message_ttl_override,
    ttl_override,
)
from amqp_common.errors import PreconditionFailed
from exchanges.binding import Destination
from exchanges.fanout import FanoutExchange

PERSISTENCE = ("memory", "disk")
_SIZE_TEXT = "Missing or invalid argument, 'x-cache-size' must be an integer greater than 0"
_TTL_TEXT = "Invalid argument, 'x-cache-ttl' must be an integer greater than 0"
_PERSISTENCE_TEXT = "Invalid argument, 'x-cache-persistence' must be either 'disk' or 'memory'"


class DuplicateMessage(Exception):  # noqa: N818 (an outcome, not an error)
    """Raised by :meth:`DeduplicationExchange.route` for a duplicate: the publish pipeline
    drops the message as ``DUPLICATE`` (no return, confirm ack)."""


def _positive_int(value: Any) -> int | None:
    """``value`` as an integer > 0 (an int or a string of digits), else None."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            return None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def validate_arguments(arguments: Mapping[str, Any]) -> tuple[int, int | None, str]:
    """``(cache size, TTL in ms or None, persistence)`` from Exchange.Declare arguments.

    Raises:
        PreconditionFailed (406): ``x-cache-size`` missing or not an integer > 0,
            ``x-cache-ttl`` not an integer > 0, ``x-cache-persistence`` neither ``disk``
            nor ``memory`` (the plugin's texts).
    """
    size = _positive_int(arguments.get("x-cache-size"))
    if size is None:
        raise PreconditionFailed(_SIZE_TEXT)
    ttl = None
    if arguments.get("x-cache-ttl") is not None:
        ttl = _positive_int(arguments["x-cache-ttl"])
        if ttl is None:
            raise PreconditionFailed(_TTL_TEXT)
    persistence = arguments.get("x-cache-persistence", "memory")
    if isinstance(persistence, bytes):
        persistence = persistence.decode("utf-8", "replace")
    if persistence not in PERSISTENCE:
        raise PreconditionFailed(_PERSISTENCE_TEXT)
    return size, ttl, persistence


class DeduplicationExchange(FanoutExchange):
    """The routing table and duplicates cache of one ``x-message-deduplication`` exchange.

    Args:
        arguments: Exchange.Declare arguments (see :func:`validate_arguments`).
        clock: seconds, monotonic, for the cache TTL (tests inject one).

    Raises:
        PreconditionFailed (406): see :func:`validate_arguments`.
    """

    needs_headers: ClassVar[bool] = False
    needs_message = True  # reads the deduplication header from the raw properties

    def __init__(self, arguments: Mapping[str, Any] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        size, ttl, self.persistence = validate_arguments(arguments or {})
        self.cache = DedupCache(size, ttl, clock)
        self.duplicates = 0  # messages dropped as duplicates (stats)
        # x-cache-persistence disk: called with (key, TTL ms or None) for each key recorded
        # (vhosts/dedup_persistence.py journals it)
        self.on_record: Callable[[Any, int | None], None] | None = None

    def route(self, routing_key: str, headers: Mapping[str, Any] | None) -> set[Destination]:
        """Every bound destination, unless the message is a duplicate.

        Raises:
            DuplicateMessage: its ``x-deduplication-header`` value is in the cache (the
                value is recorded otherwise, with the ``x-cache-ttl`` header's TTL if any).
        """
        key = dedup_key(headers)
        return self._admit(key, ttl_override(headers) if key is not None else None)

    def route_message(self, routing_key: str, message: Any) -> set[Destination]:
        """:meth:`route` for a whole message: the key and TTL headers are read from the raw
        property bytes, so a string key costs no property decode.

        Raises:
            DuplicateMessage: as :meth:`route`.
        """
        key = message_dedup_key(message)
        return self._admit(key, message_ttl_override(message) if key is not None else None)

    def _admit(self, key: Any, ttl: int | None) -> set[Destination]:
        if key is not None:
            if not self.cache.insert(key, ttl):
                self.duplicates += 1
                raise DuplicateMessage(key)
            if self.on_record is not None:
                self.on_record(key, ttl if ttl is not None else self.cache.ttl_ms)
        return set(self._dests)
