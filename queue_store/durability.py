"""Group commit: one fsync for many publishes, then their publisher confirms.

A persistent message on a durable queue is confirmed only once its store record and index
entry are on disk. Instead of one fsync per message, callers register a callback with
:meth:`Durability.after_sync`; the coordinator flushes every dirty message store and queue
index (plain writes, on the event-loop thread), fsyncs the files in a worker thread, and runs
all callbacks registered before that flush. Callbacks registered while a sync runs wait for
the next one, which starts as soon as the current one ends: confirms flow at disk speed.

``flush_writes()`` (called after each batch of input) writes buffered records without
fsync, so a killed broker (``kill -9``) loses nothing it had written: acks and deliveries
reach the page cache at once. Callbacks registered with :meth:`Durability.after_write` run
right after such a write succeeded, without waiting for an fsync: a stream's publisher
confirms (RabbitMQ's streams confirm once the chunk is written, and leave the fsync to the
operating system; amqpq still fsyncs the log every tick).

When a write fails (disk full) the unwritten records stay buffered and the file is listed in
:attr:`Durability.write_errors` (the broker's disk alarm follows it); a sync round then does
not start, so nothing is confirmed that is not on disk, and waiting confirms go out after a
later round whose writes and fsyncs all succeeded (:meth:`maybe_sync` retries every tick). A
failed fsync is not retried for the confirms it covered: after one, Linux may have dropped the
dirty pages, so those publishes are nacked (their ``on_error``) and the publisher resends;
the messages stay queued.

Source: RabbitMQ's ``rabbit_msg_store`` sync-on-confirm and ``rabbit_variable_queue``
confirm handling (group commit is our wording).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from queue_store.disk_writes import WriteErrors
from queue_store.msg_store import MessageStore, sync_fds
from queue_store.queue_index import QueueIndex

log = logging.getLogger("amqpq.durability")

#: runs ``work`` (blocking fsyncs) somewhere, then ``done(error)`` on the event-loop thread,
#: with the OSError that ``work`` raised or None
SyncRunner = Callable[[Callable[[], None], Callable[[OSError | None], None]], None]


def run_inline(work: Callable[[], None], done: Callable[[OSError | None], None]) -> None:
    """The default runner: fsync on the calling thread (tests, tools)."""
    try:
        work()
    except OSError as exc:
        done(exc)
        return
    done(None)


class _FsyncRounds:
    """The fsync rounds as a :class:`WriteErrors` source: failing from a failed round until
    a round succeeds."""

    def __init__(self) -> None:
        self.error: OSError | None = None

    def flush(self) -> OSError | None:
        return self.error


class Durability:
    """The broker's group-commit coordinator over all message stores and queue indexes.

    ``write_errors`` lists the files whose writes are failing (disk full); the broker's disk
    alarm follows it (``write_errors.on_change``).
    """

    def __init__(self, runner: SyncRunner = run_inline) -> None:
        self.runner = runner
        self.stores: list[MessageStore] = []
        self.indexes: set[QueueIndex] = set()
        self.write_errors = WriteErrors()
        self._fsync = _FsyncRounds()
        # (callback, on_error): on_error runs instead when the fsync covering it failed
        self._waiting: list[tuple[Callable[[], None], Callable[[], None] | None]] = []
        self._written_waiting: list[Callable[[], None]] = []  # see after_write
        # write rounds run (callbacks of after_write): a callback registered while this
        # count stays the same runs with the ones registered before it (one round)
        self.write_rounds = 0
        self._syncing = False
        self.on_synced: Callable[[], None] | None = None  # e.g. flush publisher confirms
        self.syncs = 0  # fsync rounds done (stats)
        # fsync rounds started: a callback registered while this count stays the same has
        # not been taken by a round yet (what is written meanwhile is covered by its fsync)
        self.rounds = 0

    def add_store(self, store: MessageStore) -> None:
        self.stores.append(store)

    def remove_store(self, store: MessageStore) -> None:
        """``store`` was closed for good (its vhost is deleted)."""
        if store in self.stores:
            self.stores.remove(store)
        self.write_errors.clear(store)

    def index_dirty(self, index: QueueIndex) -> None:
        self.indexes.add(index)

    def forget_index(self, index: QueueIndex) -> None:
        """``index``'s queue was deleted."""
        self.indexes.discard(index)
        self.write_errors.clear(index)

    def _flush_all(self) -> bool:
        """Write every buffered record (no fsync); False when some could not be written."""
        errors = self.write_errors
        ok = True
        for source in (*self.stores, *self.indexes):
            error = source.flush()
            if error is not None or errors.failing:
                errors.update(source, error)
                ok = ok and error is None
        return ok

    def flush_writes(self) -> None:
        """Write every buffered record to its file (no fsync); start a sync round when a
        store has files waiting to be closed or deleted."""
        if not self._flush_all():
            return
        if self._written_waiting:
            self._written()
        if not self._syncing and any(store.needs_housekeeping for store in self.stores):
            self._start()

    def maybe_sync(self) -> None:
        """Retry failed writes and start a sync round if anything waits for one (called
        periodically), so files are fsynced, closed and deleted even when no publisher asks
        for confirms, and held confirms go out once the disk takes writes again."""
        self.write_errors.retry()
        if self._written_waiting and self._flush_all():
            self._written()
        if not self._syncing and (self.indexes or self._waiting
                                  or any(s.needs_sync for s in self.stores)):
            self._start()

    @property
    def syncing(self) -> bool:
        """True while a worker fsyncs (files must not be closed or replaced meanwhile)."""
        return self._syncing

    def after_sync(self, callback: Callable[[], None],
                   on_error: Callable[[], None] | None = None) -> None:
        """Run ``callback`` once everything written so far is fsynced. When that fsync fails,
        ``on_error`` runs instead (without one, ``callback`` waits for a later round)."""
        self._waiting.append((callback, on_error))
        if not self._syncing:
            self._start()

    def after_write(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once everything buffered so far is written to its file (no
        fsync): at the end of the current batch of input (:meth:`flush_writes`); while
        writes fail (disk full), once they succeed again (:meth:`maybe_sync` retries). For
        stream publishes: RabbitMQ confirms them once the chunk is written."""
        self._written_waiting.append(callback)

    def _written(self) -> None:
        callbacks, self._written_waiting = self._written_waiting, []
        self.write_rounds += 1
        self._confirmed(callbacks)

    def _confirmed(self, callbacks: Iterable[Callable[[], None]]) -> None:
        """Run each confirm callback (one failing does not stop the others), then
        :attr:`on_synced`."""
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.exception("confirm callback failed")
        if self.on_synced is not None:
            self.on_synced()

    def _start(self) -> None:
        if not self._flush_all():
            return  # disk full: callbacks keep waiting; maybe_sync retries
        callbacks, self._waiting = self._waiting, []
        self.rounds += 1
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

        def done(error: OSError | None) -> None:
            self._syncing = False
            if error is not None:
                self._failed(error, indexes, callbacks)
                return
            self.syncs += 1
            if self._fsync.error is not None:
                self._fsync.error = None
                self.write_errors.clear(self._fsync)
            for store in self.stores:
                store.after_sync()
            for index in indexes:
                index.after_sync()
            self._confirmed(callback for callback, _ in callbacks)
            if self._waiting:
                self._start()

        self.runner(work, done)

    def _failed(self, error: OSError, indexes: list[QueueIndex],
                callbacks: list[tuple[Callable[[], None], Callable[[], None] | None]]) -> None:
        """An fsync round failed: its files stay due for the next round, its publishes are
        nacked, other callbacks wait for a round that succeeds."""
        log.error("fsync failed: %s", error)
        self._fsync.error = error
        self.write_errors.update(self._fsync, error)
        for store in self.stores:
            store.sync_failed()
        for index in indexes:
            index.sync_failed()
            self.indexes.add(index)
        retry = []
        for callback, on_error in callbacks:
            if on_error is None:
                retry.append((callback, on_error))
                continue
            try:
                on_error()
            except Exception:
                log.exception("confirm error callback failed")
        self._waiting[:0] = retry
        if self.on_synced is not None:
            self.on_synced()
