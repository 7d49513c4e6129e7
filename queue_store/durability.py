"""Group commit: one fsync for many publishes, then their publisher confirms.

A persistent message on a durable queue is confirmed only once its store record and index
entry are on disk. Instead of one fsync per message, callers register a callback with
:meth:`Durability.after_sync`; the coordinator flushes every dirty message store and queue
index (plain writes, on the event-loop thread), fsyncs the files in a worker thread, and runs
all callbacks registered before that flush. Callbacks registered while a sync runs wait for
the next one, which starts as soon as the current one ends: confirms flow at disk speed.

``flush_writes()`` (called after each batch of input) writes buffered records without
fsync, so a killed broker (``kill -9``) loses nothing it had written: acks and deliveries
reach the page cache at once.

Source: RabbitMQ's ``rabbit_msg_store`` sync-on-confirm and ``rabbit_variable_queue``
confirm handling (group commit is our wording).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from queue_store.msg_store import MessageStore, sync_fds
from queue_store.queue_index import QueueIndex

log = logging.getLogger("amqpq.durability")

#: runs ``work`` (blocking fsyncs) somewhere, then ``done`` on the event-loop thread
SyncRunner = Callable[[Callable[[], None], Callable[[], None]], None]


def run_inline(work: Callable[[], None], done: Callable[[], None]) -> None:
    """The default runner: fsync on the calling thread (tests, tools)."""
    work()
    done()


class Durability:
    """The broker's group-commit coordinator over all message stores and queue indexes."""

    def __init__(self, runner: SyncRunner = run_inline) -> None:
        self.runner = runner
        self.stores: list[MessageStore] = []
        self.indexes: set[QueueIndex] = set()
        self._waiting: list[Callable[[], None]] = []
        self._syncing = False
        self.on_synced: Callable[[], None] | None = None  # e.g. flush publisher confirms
        self.syncs = 0  # fsync rounds done (stats)

    def add_store(self, store: MessageStore) -> None:
        self.stores.append(store)

    def index_dirty(self, index: QueueIndex) -> None:
        self.indexes.add(index)

    def flush_writes(self) -> None:
        """Write every buffered record to its file (no fsync); start a sync round when a
        store has files waiting to be closed or deleted."""
        housekeeping = False
        for store in self.stores:
            store.flush()
            housekeeping = housekeeping or store.needs_housekeeping
        for index in self.indexes:
            index.flush()
        if housekeeping and not self._syncing:
            self._start()

    def maybe_sync(self) -> None:
        """Start a sync round if anything waits for one (called periodically), so files are
        fsynced, closed and deleted even when no publisher asks for confirms."""
        if not self._syncing and (self.indexes or any(s.needs_sync for s in self.stores)):
            self._start()

    @property
    def syncing(self) -> bool:
        """True while a worker fsyncs (files must not be closed or replaced meanwhile)."""
        return self._syncing

    def after_sync(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once everything written so far is fsynced."""
        self._waiting.append(callback)
        if not self._syncing:
            self._start()

    def _start(self) -> None:
        callbacks, self._waiting = self._waiting, []
        fds: list[int] = []
        for store in self.stores:
            fds.extend(store.dirty_fds())
        indexes = list(self.indexes)
        for index in indexes:
            fds.extend(index.sync_fds())
        self.indexes.clear()
        self._syncing = True

        def work() -> None:
            sync_fds(fds)

        def done() -> None:
            self._syncing = False
            self.syncs += 1
            for store in self.stores:
                store.after_sync()
            for index in indexes:
                index.after_sync()
            for callback in callbacks:
                try:
                    callback()
                except Exception:
                    log.exception("confirm callback failed")
            if self.on_synced is not None:
                self.on_synced()
            if self._waiting:
                self._start()

        self.runner(work, done)
