"""The leader's copy of a replicated quorum queue: an ordinary queue behind a replica log.

On its leader node a replicated quorum queue is a :class:`ReplicatedQueue`: the queue
semantics of :class:`~queue_store.queue.Queue` (consumers, prefetch, requeue, TTL, dead
lettering, ``x-delivery-limit``) over messages that are all *committed*. A publish is first an
``ENQ`` entry of the group's replica log (:mod:`queue_store.replica_log`,
:class:`~amqp_server.cluster.quorum_group.QuorumGroup`), fetched by the followers; only once
the in-sync replicas have it on disk (the high watermark passed it) does it enter the
queue, where consumers can see it, and is its publisher confirmed. What takes a message out for
good (ack, reject, expiry, a drop at the length limit, purge) is an ``ACK`` entry, and a
requeue of a quorum queue a ``RET`` (its delivery count), replicated the same way.

The queue delivers (consumers, Basic.Get) only while its replica *serves*
(:meth:`~amqp_server.cluster.replication.Replica.serving`): a new leader first commits what
its log held when elected, so a return the old leader committed counts before a delivery, and
a leader whose etcd session may have lapsed stops. Publishes made while the election that
makes this node the leader is still under way wait (:meth:`release_held`) instead of being
refused.

The queue keeps no queue index of its own: the replica log is its durability.

Replication is a commit gate under any local queue kind: :func:`replicated_class` puts the
gate under message groups (``x-group-by``), deduplication (``x-message-deduplication``) or
both, so those kinds keep their rules on a quorum queue in a cluster. A deduplicating quorum
queue drops a duplicate before it is replicated (the keys of pending messages count as
held); a pending message that a full ``reject-publish`` queue refuses at commit gives its key
back; a new leader's queue learns the keys of the messages its replica holds.

Source: RabbitMQ quorum queues (https://www.rabbitmq.com/docs/quorum-queues: "messages are
only delivered once confirmed by a quorum"); Kafka's high watermark.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING, Any

from queue_store.dedup_queue import DeduplicatingQueue
from queue_store.grouped_queue import GroupedDeduplicatingQueue, GroupedQueue, queue_class
from queue_store.message import Message
from queue_store.outcomes import NOT_LEADER, REJECTED, REMOTE, ROUTED, PublishContext
from queue_store.queue import Queue, QueuedMessage

if TYPE_CHECKING:
    from amqp_server.cluster.quorum_group import QuorumGroup
    from queue_store.consumer import Consumer
    from queue_store.queue_kind import Requester


class ReplicatedQueue(Queue):
    """Quorum queue ``name`` led here, replicated by ``group`` (keyword; other arguments
    as :class:`~queue_store.queue.Queue`'s). The gate sits under the queue kinds:
    ``publish``/``publish_for`` append to the replica log and :meth:`commit` puts the
    message in with :meth:`Queue.publish <queue_store.queue.Queue.publish>` itself."""

    uses_index = False

    def __init__(self, name: str, vhost_name: str, *, group: QuorumGroup,
                 **kwargs: Any) -> None:
        super().__init__(name, vhost_name, **kwargs)
        self.group = group
        # (lsn, offset, message, result key or None): appended, not committed yet
        self.pending: deque[tuple[int, int, Message, tuple[int, int] | None]] = deque()
        # (message, result key or None): published before this node's election was done
        self.held: deque[tuple[Message, tuple[int, int] | None]] = deque()
        # (LSN of their RET entries, messages): requeued, back in the queue once committed
        self.returning: deque[tuple[int, list[QueuedMessage]]] = deque()
        # Basic.Gets that found nothing ready while requeues were returning: answered once
        # those are committed (a get after a requeue on one channel sees it, as on RabbitMQ)
        self.gets_waiting: list[tuple[Requester | None, bool,
                                      Callable[[QueuedMessage | None, int], None]]] = []

    def __repr__(self) -> str:
        return (f"<{type(self).__name__} {self.name!r} vhost={self.vhost_name!r} "
                f"epoch={self.group.epoch}>")

    def publish(self, message: Message) -> int:
        """:meth:`publish_for` a publisher that waits for no answer."""
        return self._replicate(message, None)

    def publish_for(self, message: Message, context: PublishContext | None) -> int:
        """Append to the replica log; the message enters the queue once committed.

        Returns ROUTED|REMOTE when the publisher waits for a confirm (``context``'s
        ``want_results``: the group answers the key it adds to ``context.waits`` then),
        ROUTED otherwise; REJECTED|NOT_LEADER when this node no longer leads the queue."""
        return self._replicate(message, context)

    def _replicate(self, message: Message, context: PublishContext | None) -> int:
        group = self.group
        if not group.leading:
            if not group.expecting:
                return REJECTED | NOT_LEADER  # a publisher on another node waits again
            key = group.runtime.local_pending(context)
            self.held.append((message, key))
            return ROUTED | REMOTE if key is not None else ROUTED
        self._append(message, group.runtime.local_pending(context))
        return ROUTED | REMOTE if self.pending[-1][3] is not None else ROUTED

    def _append(self, message: Message, key: tuple[int, int] | None) -> None:
        group = self.group
        offset, payload = group.log.enq(message.ex_rk_raw, message.properties_raw,
                                        message.body)
        self.pending.append((group.append(payload), offset, message, key))

    def release_held(self) -> None:
        """This node leads now: the publishes that waited for it are appended."""
        while self.held and self.group.leading:
            self._append(*self.held.popleft())

    def dispatch(self) -> None:
        """:meth:`Queue.dispatch <queue_store.queue.Queue.dispatch>` while the replica
        serves (module docstring); nothing otherwise."""
        if self.group.serving():
            super().dispatch()

    def get(self, no_ack: bool = False) -> QueuedMessage | None:
        """:meth:`Queue.get <queue_store.queue.Queue.get>` while the replica serves; None
        (Basic.GetEmpty) otherwise."""
        if not self.group.serving():
            return None
        return super().get(no_ack)

    def request_get(self, requester: Requester | None, no_ack: bool,
                    then: Callable[[QueuedMessage | None, int], None]) -> None:
        """:meth:`Queue.request_get <queue_store.queue.Queue.request_get>`, except that a
        get finding nothing ready while requeued messages wait for their RET entry to be
        committed is answered once they are back (:meth:`commit`), or with nothing if
        this node stops leading first (:meth:`fail_pending`) or the queue is deleted. The
        ``requester`` waits meanwhile (a channel's connection reads no frame), and the
        answer is its continuation: a channel closed meanwhile gives the message back."""
        qm = self.get(no_ack)
        if qm is None and self.returning and self.group.serving():
            if requester is not None:
                requester.await_answer()
            self.gets_waiting.append((requester, no_ack, then))
            return
        then(qm, self.message_count if qm is not None else 0)

    def _answer_gets(self, empty: bool = False) -> None:
        waiting, self.gets_waiting = self.gets_waiting, []
        for requester, no_ack, then in waiting:
            qm = None if empty else self.get(no_ack)
            left = self.message_count if qm is not None else 0
            if requester is None:
                then(qm, left)
            else:
                requester.answered(partial(then, qm, left))

    def purge(self) -> int:
        """:meth:`Queue.purge <queue_store.queue.Queue.purge>`, requeued messages whose RET
        entry is not committed yet included (their ACK entries follow the RET entries in
        the log, so every replica drops them too), as a purge after a requeue on RabbitMQ."""
        dropped = super().purge()
        while self.returning:
            for qm in self.returning.popleft()[1]:
                self._forget(qm)
                dropped += 1
        return dropped

    def mark_deleted(self) -> list[Consumer]:
        """:meth:`Queue.mark_deleted <queue_store.queue.Queue.mark_deleted>`; a Basic.Get
        still waiting for a requeue gets nothing."""
        self._answer_gets(empty=True)
        return super().mark_deleted()

    def commit(self, hw: int) -> None:
        """Every pending message up to LSN ``hw`` is committed: into the queue, publishers
        confirmed (or nacked when a length limit with ``reject-publish`` refused it)."""
        pending = self.pending
        runtime = self.group.runtime
        confirmed: list[tuple[int, int]] = []  # keys of the publishes to confirm
        while pending and pending[0][0] <= hw:
            _, offset, message, key = pending.popleft()
            self._seq = offset - 1  # the queue's sequence number is the log's offset
            result = Queue.publish(self, message)  # the kinds above checked it already
            if result & REJECTED:
                self._refused(message)
                self.group.acks.append(offset)
                self.group.changed()
                if key is not None:
                    runtime.local_result(key, REJECTED)
            elif key is not None:
                confirmed.append(key)
        if confirmed:
            runtime.local_results(confirmed, ROUTED)
        returning = self.returning
        back = False
        while returning and returning[0][0] <= hw:
            self.ready.requeue(returning.popleft()[1])
            back = True
        if self.gets_waiting and (back or not returning):
            self._answer_gets()

    def fail_pending(self) -> None:
        """This node stopped leading (or will not lead): refuse every publish not committed
        and every one that waited for the election, as REJECTED|NOT_LEADER: a publisher
        here is nacked, one on another node waits for the next leader and is sent there
        (:mod:`amqp_server.workers.remote_client`; at-least-once: the old leader's entry
        may still commit)."""
        runtime = self.group.runtime
        self._answer_gets(empty=True)
        while self.pending:
            key = self.pending.popleft()[3]
            if key is not None:
                runtime.local_result(key, REJECTED | NOT_LEADER)
        while self.held:
            key = self.held.popleft()[1]
            if key is not None:
                runtime.local_result(key, REJECTED | NOT_LEADER)

    def restore(self, entries: Iterable[tuple[int, Message, int]]) -> None:  # type: ignore[override]
        """A new leader's queue from its replica: ``(offset, message, returns)`` in offset
        order, each flagged redelivered (it may have been delivered by the old leader)."""
        prioritised = bool(self.settings.max_priority)
        for offset, message, returns in entries:
            qm = QueuedMessage(offset, message, True, None,
                               message.priority if prioritised else 0)
            qm.returns = returns
            self.ready.append(qm)
            self._holding(message)
            self._seq = max(self._seq, offset)

    def _forget(self, qm: QueuedMessage) -> None:
        super()._forget(qm)
        if self.group.leading and not self.deleted:
            self.group.acks.append(qm.seq)  # one ACK record per event-loop turn
            self.group.changed()

    def _count_returns(self, back: list[QueuedMessage]) -> list[QueuedMessage]:
        """A RET entry per requeued message; they come back to the queue (and to consumers)
        once those are committed (:meth:`commit`): a delivery before that could carry a
        delivery count a new leader would not know, and a later one a lower count."""
        group = self.group
        if not group.leading:
            return super()._count_returns(back)
        for qm in back:  # after this turn's ACK entry: the log keeps their order
            group.ret(qm.seq, qm.returns + 1)
        kept = super()._count_returns(back)  # past x-delivery-limit: dead-lettered now
        if kept:
            self.returning.append((group.log.lsn, kept))
        return []


class ReplicatedGroupedQueue(GroupedQueue, ReplicatedQueue):
    """A quorum queue with message groups (``x-group-by``) led here."""


class ReplicatedDeduplicatingQueue(DeduplicatingQueue, ReplicatedQueue):
    """A deduplicating quorum queue (``x-message-deduplication``) led here."""


class ReplicatedGroupedDeduplicatingQueue(GroupedDeduplicatingQueue, ReplicatedQueue):
    """A quorum queue with message groups and deduplication led here."""


_GATED: dict[type[Queue], type[ReplicatedQueue]] = {
    Queue: ReplicatedQueue, GroupedQueue: ReplicatedGroupedQueue,
    DeduplicatingQueue: ReplicatedDeduplicatingQueue,
    GroupedDeduplicatingQueue: ReplicatedGroupedDeduplicatingQueue,
}


def replicated_class(arguments: dict[str, Any]) -> type[ReplicatedQueue]:
    """The leader's queue class for a quorum queue's validated Queue.Declare
    ``arguments``: the kind :func:`~queue_store.grouped_queue.queue_class` picks, over the
    commit gate."""
    return _GATED[queue_class(arguments)]
