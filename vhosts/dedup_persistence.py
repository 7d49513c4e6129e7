"""``x-cache-persistence: disk`` for ``x-message-deduplication`` exchanges: the cache's keys
survive a restart.

Theory of operation
-------------------
When such an exchange is declared on a vhost with storage, :func:`attach` opens its
:class:`~queue_store.key_journal.KeyJournal` (``<vhost>/dedup/<exchange-id>.keys``) and sets
the exchange's ``on_record`` hook: every key the cache records is appended with its deadline
in wall-clock ms (the cache's own deadlines are monotonic, meaningless after a restart), and
the journal is handed to the group commit as a dirty journal. The journal is rewritten from
the cache's live entries when it grows past twice the cache size.

:func:`recover_dedup` (at start, after the definitions are imported) reloads each durable
exchange's journal into its cache with the remaining TTLs, rewrites it compactly, and removes
journals of exchanges that do not exist any more. :func:`forget` removes a deleted exchange's
journal.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from exchanges.deduplication import DeduplicationExchange
from queue_store.key_journal import KeyJournal
from queue_store.storage import name_id

if TYPE_CHECKING:
    from exchanges.exchange import Exchange
    from vhosts.vhost import VirtualHost

DEDUP_DIR = "dedup"


def attach(vhost: VirtualHost, exchange: Exchange) -> None:
    """Journal the cache of a newly declared ``x-message-deduplication`` exchange with
    ``x-cache-persistence: disk`` (no-op otherwise, or without storage)."""
    router = exchange.router
    storage = vhost.storage
    if (storage is None or not isinstance(router, DeduplicationExchange)
            or router.persistence != "disk"):
        return
    journal = KeyJournal(storage.directory / DEDUP_DIR / f"{name_id(exchange.name)}.keys",
                         router.cache.size or 1)
    durability = storage.durability
    cache = router.cache
    timers = vhost.timers

    def record(key: Any, ttl_ms: int | None) -> None:
        journal.record(key, 0 if ttl_ms is None else timers.wall_ms() + ttl_ms)
        durability.index_dirty(journal)  # type: ignore[arg-type]
        if journal.needs_rewrite and not durability.syncing:
            journal.rewrite(_live(cache, timers.wall_ms()))

    router.on_record = record
    exchange.dedup_journal = journal


def _live(cache: Any, wall: int) -> list[tuple[Any, int]]:
    """The cache's live entries as (key, wall-clock deadline ms or 0); ``wall``: wall-clock
    ms now (the vhost's timers)."""
    now = cache.clock()
    out = []
    for key, deadline in cache.items():
        if deadline is None:
            out.append((key, 0))
        elif deadline > now:
            out.append((key, wall + max(1, int((deadline - now) * 1000))))
    return out


def recover_dedup(vhost: VirtualHost) -> int:
    """Reload the journaled keys of the vhost's deduplication exchanges; remove the journals
    of exchanges that are gone. Returns keys reloaded."""
    storage = vhost.storage
    if storage is None:
        return 0
    found = 0
    keep: set[str] = set()
    now = vhost.timers.wall_ms()
    for x in vhost.exchanges.values():
        journal = getattr(x, "dedup_journal", None)
        if journal is None:
            continue
        keep.add(journal.path.name)
        cache = x.router.cache
        entries = journal.load(now)
        for key, deadline in entries:
            cache.insert(key, None if deadline == 0 else max(1, deadline - now))
        found += len(entries)
        journal.rewrite(_live(cache, now))
    folder = storage.directory / DEDUP_DIR
    if folder.is_dir():
        for child in folder.iterdir():
            if child.name not in keep:
                child.unlink(missing_ok=True)
    return found


def forget(vhost: VirtualHost, exchange: Exchange) -> None:
    """The exchange was deleted: remove its journal (after any fsync in flight)."""
    journal = getattr(exchange, "dedup_journal", None)
    if journal is None or vhost.storage is None:
        return
    durability = vhost.storage.durability
    durability.forget_index(journal)  # type: ignore[arg-type]
    exchange.router.on_record = None
    aside = journal.path.with_name(f"{journal.path.name}.deleted-{id(journal)}")
    try:  # at once: an exchange of the same name may be declared before the delete runs
        os.replace(journal.path, aside)
        journal.path = aside
    except OSError:
        pass
    if durability.syncing:
        durability.after_sync(journal.delete)
    else:
        journal.delete()
