"""AMQP queue semantics: ready messages, consumers, dispatch, requeue.

Theory of operation
-------------------
A queue holds its *ready* messages in publish order, each wrapped in a :class:`QueuedMessage`
with a per-queue sequence number. Delivering a message to a consumer (or Basic.GetOk) moves it
out of the ready list; the consuming channel then owns it as *unacknowledged* until it is acked
(gone), or rejected/nacked with requeue, or its channel closes (both: back to the ready list at
its original position, by sequence number, flagged redelivered).

Dispatch is round-robin over the consumers that can take a message now
(:meth:`Consumer.can_take`: prefetch window not full and the consumer's socket not paused);
a consumer that cannot take one is skipped, not waited on (RabbitMQ's
``rabbit_queue_consumers``). Whoever frees capacity (ack, Basic.Qos, socket drained, new
consumer) calls :meth:`Queue.dispatch`.

Rules enforced here: exclusive queues belong to one connection (405 RESOURCE_LOCKED for
others), an exclusive consumer excludes all others (403 ACCESS_REFUSED), an auto-delete queue
is deleted when its last consumer goes (the vhost does the deletion via ``on_unused``).

Source: AMQP 0-9-1 spec 3.1.4 (message queues), 1.7.2 (queue class); RabbitMQ
``rabbit_amqqueue_process`` and https://www.rabbitmq.com/docs/queues.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from amqp_server.errors import AccessRefused, ResourceLocked, rs
from queue_store.message import Message


class QueuedMessage:
    """A message's place in one queue: sequence number (publish order), redelivered flag."""

    __slots__ = ("seq", "message", "redelivered")

    def __init__(self, seq: int, message: Message, redelivered: bool = False) -> None:
        self.seq = seq
        self.message = message
        self.redelivered = redelivered

    def __lt__(self, other: QueuedMessage) -> bool:
        return self.seq < other.seq


class ConsumerChannel(Protocol):
    """What a queue needs from the channel a consumer lives on."""

    def can_deliver(self) -> bool: ...

    def deliver(self, consumer: Consumer, qm: QueuedMessage, queue: Queue) -> None: ...

    def consumer_cancelled_by_broker(self, consumer: Consumer) -> None: ...


class Consumer:
    """One Basic.Consume subscription.

    Attributes:
        tag: consumer tag (str); ``tag_raw`` the same as an encoded shortstr.
        prefetch: per-consumer prefetch_count (messages; 0 = unlimited), from Basic.Qos
            global=false at consume time.
        unacked: deliveries to this consumer not yet settled (messages).
    """

    __slots__ = (
        "tag",
        "tag_raw",
        "channel",
        "queue",
        "no_ack",
        "exclusive",
        "prefetch",
        "unacked",
        "arguments",
    )

    def __init__(
        self,
        tag: str,
        tag_raw: bytes,
        channel: ConsumerChannel,
        queue: Queue,
        no_ack: bool,
        exclusive: bool,
        prefetch: int,
        arguments: dict[str, Any] | None = None,
    ) -> None:
        self.tag = tag
        self.tag_raw = tag_raw
        self.channel = channel
        self.queue = queue
        self.no_ack = no_ack
        self.exclusive = exclusive
        self.prefetch = prefetch
        self.unacked = 0
        self.arguments = arguments or {}

    def can_take(self) -> bool:
        if not self.no_ack and self.prefetch and self.unacked >= self.prefetch:
            return False
        return self.channel.can_deliver()


class Queue:
    """One AMQP queue in a vhost.

    Args:
        name, vhost: the queue's name and its vhost's name.
        durable, exclusive, auto_delete: Queue.Declare flags.
        owner: the connection object of an exclusive queue (None otherwise).
        arguments: Queue.Declare arguments (``x-...``).
        on_unused: called with the queue when an auto-delete queue loses its last consumer.
    """

    def __init__(
        self,
        name: str,
        vhost: str,
        durable: bool = False,
        exclusive: bool = False,
        auto_delete: bool = False,
        owner: object | None = None,
        arguments: dict[str, Any] | None = None,
        on_unused: Callable[[Queue], None] | None = None,
    ) -> None:
        self.name = name
        self.vhost = vhost
        self.durable = durable
        self.exclusive = exclusive
        self.auto_delete = auto_delete
        self.owner = owner
        self.arguments = arguments or {}
        self.on_unused = on_unused
        self.ready: deque[QueuedMessage] = deque()
        self.consumers: deque[Consumer] = deque()
        self.unacked_count = 0
        self.deleted = False
        self._seq = 0
        self._had_consumer = False
        self._dispatching = False
        # counters for management/stats (messages)
        self.published = 0
        self.delivered = 0

    def __repr__(self) -> str:
        return f"<Queue {self.name!r} vhost={self.vhost!r} ready={len(self.ready)}>"

    # ---- access checks -------------------------------------------------------------------

    def check_exclusive_access(self, connection: object) -> None:
        """Raises ResourceLocked (405) when an exclusive queue is used by another connection."""
        if self.exclusive and self.owner is not connection:
            raise ResourceLocked(
                f"cannot obtain exclusive access to locked {rs('queue', self.name, self.vhost)}."
                " It could be originally declared on another connection or the exclusive"
                " property value does not match that of the original declaration."
            )

    # ---- publish and dispatch ------------------------------------------------------------

    def publish(self, message: Message) -> None:
        """Append a routed message and deliver it if a consumer can take it."""
        self._seq += 1
        self.published += 1
        self.ready.append(QueuedMessage(self._seq, message))
        if self.consumers and not self._dispatching:
            self.dispatch()

    def dispatch(self) -> None:
        """Deliver ready messages round-robin to consumers that can take them, until either
        runs out."""
        if self._dispatching:
            return
        self._dispatching = True
        try:
            ready = self.ready
            consumers = self.consumers
            while ready and consumers:
                for _ in range(len(consumers)):
                    consumer = consumers[0]
                    consumers.rotate(-1)
                    if consumer.can_take():
                        break
                else:
                    return
                qm = ready.popleft()
                if not consumer.no_ack:
                    consumer.unacked += 1
                    self.unacked_count += 1
                self.delivered += 1
                consumer.channel.deliver(consumer, qm, self)
        finally:
            self._dispatching = False

    def get(self) -> QueuedMessage | None:
        """Take the head message for Basic.Get (None when empty)."""
        if not self.ready:
            return None
        self.delivered += 1
        return self.ready.popleft()

    # ---- settlement ----------------------------------------------------------------------

    def settled(self, consumer: Consumer | None, count: int = 1) -> None:
        """``count`` unacknowledged deliveries (to ``consumer``, None for Basic.Get) were acked
        or dropped."""
        self.unacked_count -= count
        if consumer is not None:
            consumer.unacked -= count

    def requeue(self, messages: Iterable[QueuedMessage]) -> None:
        """Put unacknowledged messages back at their original positions, flagged redelivered.

        The caller has already called :meth:`settled` for them when they were unacked.
        """
        if self.deleted:
            return
        back = sorted(messages)
        if not back:
            return
        for qm in back:
            qm.redelivered = True
        ready = self.ready
        if not ready or back[-1].seq < ready[0].seq:
            ready.extendleft(reversed(back))
        else:
            self.ready = deque(heapq.merge(back, ready))
        self.dispatch()

    def purge(self) -> int:
        """Drop every ready message; returns how many (messages)."""
        count = len(self.ready)
        self.ready.clear()
        return count

    # ---- consumers -----------------------------------------------------------------------

    def add_consumer(self, consumer: Consumer) -> None:
        """Raises AccessRefused (403) when an exclusive consumer is involved."""
        if self.consumers and (consumer.exclusive or self.consumers[0].exclusive):
            raise AccessRefused(f"{rs('queue', self.name, self.vhost)} in exclusive use")
        self.consumers.append(consumer)
        self._had_consumer = True
        self.dispatch()

    def remove_consumer(self, consumer: Consumer) -> None:
        """Cancel a consumer; an auto-delete queue whose last consumer goes is deleted."""
        try:
            self.consumers.remove(consumer)
        except ValueError:
            return
        if self.auto_delete and not self.consumers and self._had_consumer and self.on_unused:
            self.on_unused(self)

    @property
    def message_count(self) -> int:
        """Ready messages (what Queue.DeclareOk and Basic.GetOk report)."""
        return len(self.ready)

    @property
    def consumer_count(self) -> int:
        return len(self.consumers)

    def mark_deleted(self) -> list[Consumer]:
        """Flag the queue deleted, drop its messages; returns the consumers to notify."""
        self.deleted = True
        consumers = list(self.consumers)
        self.consumers.clear()
        self.ready.clear()
        return consumers
