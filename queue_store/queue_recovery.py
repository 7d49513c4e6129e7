"""Recovery of a durable queue from its queue index at start (:class:`QueueRecovery`, a
part of :class:`~queue_store.queue.Queue`).

The live entries of the index become ready messages again, in sequence order: either all of
them at once (:meth:`QueueRecovery.restore`: priority and message-group queues, journals
out of order), or only the head, the rest staying in the journal until the queue drains to
it (:meth:`QueueRecovery.recover`, :mod:`queue_store.journal_recovery`). A message's
persisted deadline (wall-clock ms) is placed back on the broker's clock by the vhost's
timers (:meth:`~amqp_common.timers.Timers.from_wall_ms`); one already past expires at once.

Source: RabbitMQ ``rabbit_variable_queue:init/6`` (recovery from the queue index),
``rabbit_queue_index`` (the per-message ``expiry`` it keeps).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator

from queue_store.backing import QueuedMessage
from queue_store.journal_recovery import JournalRun
from queue_store.msg_store import MessageStore, decode_payload
from queue_store.queue_index import IndexEntry
from queue_store.variable_queue import VariableQueue

__all__ = ["QueueRecovery"]

log = logging.getLogger("amqpq.queue")


class QueueRecovery:
    """The recovery methods of :class:`~queue_store.queue.Queue` (a base class of it, not
    used alone): they fill its ``ready`` list from its ``index`` and ``storage`` (message
    store), advance its ``_seq``, set ``_has_ttl``, read its ``vhost``'s timers and call its
    ``_expire_head``."""

    def restore(self, entries: Iterable[IndexEntry]) -> None:
        """Recovery: rebuild the ready list from the queue index's live entries (streamed, in
        sequence order; store references already retained by the caller), rewriting the
        index compactly as they go by."""
        if self.storage is None or self.index is None:
            return
        self.index.compact(self._restored(entries, self.storage.store))
        if self._has_ttl:
            self._expire_head()

    def recover(self) -> None:
        """Recovery of a durable queue from its index: the head (q4's budget) is read now,
        the rest stays in the journal as delta's head, read when needed
        (:mod:`queue_store.journal_recovery`). Priority and message-group queues, and
        journals out of sequence order, replay in full (:meth:`restore`)."""
        storage, index, ready = self.storage, self.index, self.ready
        if storage is None or index is None:
            return
        planned = (storage.summarize_index(self.name, index)
                   if isinstance(ready, VariableQueue) else None)
        if planned is None:
            self.restore(storage.recover_index(self.name))
            return
        summary, lost = planned
        assert isinstance(ready, VariableQueue)
        self._seq = max(self._seq, summary.max_seq)
        self._has_ttl = self._has_ttl or summary.has_expiry
        run = JournalRun(summary, summary.live - len(lost), summary.live_bytes,
                         self._recovered_message, lost, storage.stored_size)
        ready.attach_run(run)
        if self._has_ttl:
            self._expire_head()

    def _recovered_message(self, e: IndexEntry, bodies: bool = True) -> QueuedMessage | None:
        """The ready message of a recovered index entry (``bodies`` False: its entry only,
        ``message`` None); None when it cannot be read (logged, store reference released)."""
        store = self.storage.store  # type: ignore[union-attr]
        message = None
        if bodies:
            try:
                if e.payload is not None:
                    message = decode_payload(e.payload)
                else:
                    message = store.read(e.msg_id)
            except (KeyError, OSError, ValueError) as exc:
                log.error("%s: message %d lost: %s", self.name, e.msg_id or e.seq, exc)
                if e.payload is None:
                    store.release(e.msg_id)
                return None
        expires_at = None
        if e.expiry_ms:
            expires_at = self.vhost.timers.from_wall_ms(e.expiry_ms)  # type: ignore[union-attr]
        qm = QueuedMessage(e.seq, message, e.delivered, expires_at,  # type: ignore[arg-type]
                           e.priority)
        qm.msg_id = e.msg_id
        qm.indexed = True
        qm.delivery_logged = e.delivered
        qm.returns = e.returns
        return qm

    def _restored(self, entries: Iterable[IndexEntry], store: MessageStore
                  ) -> Iterator[IndexEntry]:
        """Append each entry's message to the ready list; yield the ones kept."""
        for e in entries:
            qm = self._recovered_message(e)
            if qm is None:
                continue
            if e.expiry_ms:
                self._has_ttl = True
            self.ready.append(qm)
            self._seq = max(self._seq, e.seq)
            yield e
