"""The duplicates cache of message deduplication: ``x-deduplication-header`` values seen
lately, bounded in entries (LRU eviction) and optionally in time (TTL).

Shared by the ``x-message-deduplication`` exchange (:mod:`exchanges.deduplication`) and
queues declared with ``x-message-deduplication: true``
(:mod:`queue_store.dedup_queue`); it knows nothing of either.

Theory of operation
-------------------
Entries live in an insertion-ordered dict, least recently used first: a lookup that finds a
live entry moves it to the end, an insert into a full cache drops the first. Each entry holds
its deadline (seconds on :attr:`DedupCache.clock`, or None: no expiry); an entry past its
deadline counts as absent and is dropped when it is looked up. Nothing runs on a timer: an
expired entry that is never looked up again leaves by LRU eviction, so memory stays bounded
by ``size`` entries. Everything is O(1) per message.

Source: the ``rabbitmq-message-deduplication`` plugin (``lib/.../cache.ex``: insert answers
``exists``/``inserted``; ``x-cache-size``, ``x-cache-ttl``),
https://github.com/noxdafox/rabbitmq-message-deduplication.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from amqp_common.properties import NOT_A_STRING, header_value_key, string_header

#: the message header carrying the deduplication key (the plugin's and LavinMQ's name)
DEDUP_HEADER = "x-deduplication-header"
#: the message header that overrides the cache TTL for that message (ms)
TTL_HEADER = "x-cache-ttl"


def dedup_key(headers: Mapping[str, Any] | None) -> Hashable | None:
    """The deduplication key of a message with ``headers`` (None: no ``x-deduplication-header``,
    or a void value: the message is not checked).

    Strings and bytes are the same key when their UTF-8 is the same; a value that cannot be a
    dict key (a table, an array) is keyed by its ``repr``.
    """
    if not headers:
        return None
    return header_value_key(headers.get(DEDUP_HEADER))


def ttl_override(headers: Mapping[str, Any] | None) -> int | None:
    """The message's ``x-cache-ttl`` header in ms when it is a positive integer (or a string
    of one); None otherwise (the cache's own TTL applies)."""
    if not headers:
        return None
    value = headers.get(TTL_HEADER)
    if isinstance(value, bytes | str):
        try:
            value = int(value)
        except ValueError:
            return None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


_DEDUP_HEADER_RAW = DEDUP_HEADER.encode()
_TTL_HEADER_RAW = TTL_HEADER.encode()


def _raw_header(message: Any, name: bytes) -> Any:
    try:
        return string_header(message.properties_raw, message.flags, name)
    except (IndexError, struct.error, KeyError):  # not expected: checked at publish
        return NOT_A_STRING


def message_dedup_key(message: Any) -> Hashable | None:
    """:func:`dedup_key` of a message (``properties_raw``, ``flags`` and ``headers`` as
    :class:`queue_store.message.Message` has them), reading a string key straight from the
    property bytes: the properties are decoded only for a key of another type."""
    found = _raw_header(message, _DEDUP_HEADER_RAW)
    if found is NOT_A_STRING:
        return dedup_key(message.headers)
    return found


def message_ttl_override(message: Any) -> int | None:
    """:func:`ttl_override` of a message, without decoding its properties unless the
    ``x-cache-ttl`` header is there with another type than a string."""
    found = _raw_header(message, _TTL_HEADER_RAW)
    if found is None:
        return None
    if found is NOT_A_STRING:
        return ttl_override(message.headers)
    return ttl_override({TTL_HEADER: found})


class DedupCache:
    """Keys seen lately (see the module docstring).

    Args:
        size: most entries kept (> 0); None: unbounded (queue-level deduplication without
            ``x-cache-size``).
        ttl_ms: how long an entry lasts, in ms (None: until evicted or removed).
        clock: seconds, monotonic (injected by tests).

    Raises:
        ValueError: ``size`` or ``ttl_ms`` not positive.
    """

    __slots__ = ("size", "ttl_ms", "clock", "_entries")

    def __init__(self, size: int | None, ttl_ms: int | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if size is not None and size <= 0:
            raise ValueError(f"cache size must be positive, got {size}")
        if ttl_ms is not None and ttl_ms <= 0:
            raise ValueError(f"cache TTL must be positive, got {ttl_ms}")
        self.size = size
        self.ttl_ms = ttl_ms
        self.clock = clock
        self._entries: dict[Hashable, float | None] = {}

    def __len__(self) -> int:
        """Entries held, expired ones not yet dropped included."""
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        """True when ``key`` is held and not expired (does not count as a use)."""
        if key not in self._entries:
            return False
        deadline = self._entries[key]
        return deadline is None or deadline > self.clock()

    def insert(self, key: Hashable, ttl_ms: int | None = None) -> bool:
        """Record ``key``; False when it was already there and alive (a duplicate: it becomes
        the most recently used, its deadline unchanged), True when it was inserted.

        Args:
            ttl_ms: this entry's TTL in ms, overriding the cache's (the message's
                ``x-cache-ttl`` header).
        """
        entries = self._entries
        if key in entries:
            deadline = entries.pop(key)
            if deadline is None or deadline > self.clock():
                entries[key] = deadline  # most recently used
                return False
        elif self.size is not None and len(entries) >= self.size:
            del entries[next(iter(entries))]  # least recently used
        ttl = ttl_ms if ttl_ms is not None else self.ttl_ms
        entries[key] = None if ttl is None else self.clock() + ttl / 1000.0
        return True

    def remove(self, key: Hashable) -> bool:
        """Forget ``key`` (True if it was held): its message left a deduplicating queue."""
        return self._entries.pop(key, False) is not False

    def clear(self) -> None:
        """Forget everything (the queue was purged)."""
        self._entries.clear()

    def items(self) -> list[tuple[Hashable, float | None]]:
        """(key, deadline in seconds on :attr:`clock` or None), least recently used first;
        expired entries not yet dropped included."""
        return list(self._entries.items())
