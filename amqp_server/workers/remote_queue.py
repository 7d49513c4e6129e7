"""Stand-ins for queues whose home is another worker, and for consumers on another worker.

On every worker but its home, a queue is a :class:`RemoteQueue`: it is in the vhost's table,
so routing, permission and exclusivity checks, Basic.Consume and the management API find it
as any queue; what would change the queue is sent to its home over the link
(:class:`~amqp_server.workers.remote_client.RemoteClient` does the sending):

* ``publish``: the message, its property bytes and body as received (a PUBLISH record);
* ``add_consumer``/``remove_consumer``: a consume/cancel record; the home runs the consumer
  as a :class:`LinkConsumerChannel` and delivers over the link (DELIVER records);
* ``settle``: the deliveries' numbers at the home (SETTLE); ``dispatch``: deliveries that
  arrived while the client's channel could not take them (global prefetch, a full socket).

On the home, a consumer whose client is on another worker is an ordinary
:class:`~queue_store.consumer.Consumer` whose channel is a :class:`LinkConsumerChannel`: the
queue checks its prefetch and picks it as any consumer; the channel side adds *credit*
(deliveries in flight over the link, :data:`CREDIT_WINDOW`), returned by the consuming worker
as it hands deliveries to its client, so a slow client's worker is not flooded (RabbitMQ's
``credit_flow`` between queue and channel processes).

Counts a remote worker cannot know at once (ready messages, consumers) come from the home's
snapshot, sent every second (:attr:`RemoteQueue.stats`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from amqp_server.workers.link_codec import queue_key
from queue_store.consumer import Consumer
from queue_store.message import Message
from queue_store.outcomes import PublishContext, Settlement
from queue_store.queue import Delivery, Queue, QueuedMessage
from queue_store.queue_kind import Requester

if TYPE_CHECKING:
    from amqp_server.workers.queue_home import QueueHome
    from amqp_server.workers.remote_client import RemoteClient

CREDIT_WINDOW = 500  # deliveries a consumer may have in flight over the link


class RemoteQueue(Queue):
    """Queue ``name`` of ``vhost_name`` whose home is worker ``home`` (keyword arguments as
    :class:`~queue_store.queue.Queue`'s; nothing is stored here)."""

    uses_index = False

    def __init__(self, client: RemoteClient, home: int, name: str, vhost_name: str,
                 **kwargs: Any) -> None:
        kwargs["vhost"] = None  # no storage, timers or dead lettering here: the home has them
        super().__init__(name, vhost_name, **kwargs)
        self.client = client
        self.home = home
        self.qkey = queue_key(vhost_name, name)
        self.stats = (0, 0, 0)  # (ready, unacked, consumers) at the home, last snapshot
        # its home can change (a quorum queue's leader): a publish that reaches a node that
        # no longer leads it is nacked there, never confirmed
        self.home_moves = self.kind == "quorum"

    def __repr__(self) -> str:
        return f"<RemoteQueue {self.name!r} vhost={self.vhost_name!r} home={self.home}>"

    def publish(self, message: Any) -> int:
        return self.client.forward_publish(self, message, None)

    def publish_for(self, message: Any, context: PublishContext) -> int:
        return self.client.forward_publish(self, message, context)

    def add_consumer(self, consumer: Consumer) -> None:
        """Local bookkeeping once the home took the consumer (:meth:`request_consume`)."""
        super().add_consumer(consumer)  # dispatch(): deliveries that waited for ConsumeOk

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer in self._consumer_order:
            super().remove_consumer(consumer)
            self.client.remote_cancel(self, consumer)

    def dispatch(self) -> None:
        self.client.drain_waiting(self)

    def tick(self) -> None:
        """Nothing: the broker's tick reaches a stream's stand-in too; its home applies the
        stream's retention."""

    def settle(self, deliveries: Sequence[Delivery], outcome: Settlement) -> None:
        self.client.remote_settle(self.home, [qm.seq for qm, _, _ in deliveries], outcome)

    def get(self, no_ack: bool = False) -> QueuedMessage | None:
        raise RuntimeError("a remote queue's Basic.Get goes through request_get")

    def purge(self) -> int:
        raise RuntimeError("a remote queue's purge goes through request_purge")

    def request_consume(self, requester: Requester, consumer: Consumer,
                        then: Callable[[], None]) -> None:
        """Subscribe at the home (which may refuse: 403 in exclusive use), then ``then()``."""
        self.client.remote_consume(requester, self, consumer, then)

    def request_get(self, requester: Requester, no_ack: bool,
                    then: Callable[[QueuedMessage | None, int], None]) -> None:
        """The home takes the message (its delivery number there is the
        :class:`QueuedMessage`'s ``seq``, which :meth:`settle` sends back)."""
        self.client.call_home(requester, self, ("get", no_ack),
                               lambda answer: then(*_got(answer)))

    def request_purge(self, requester: Requester, then: Callable[[int], None]) -> None:
        self.client.call_home(requester, self, ("purge",), then)

    def request_counts(self, requester: Requester,
                       then: Callable[[int, int], None]) -> None:
        self.client.call_home(requester, self, ("counts",), lambda counts: then(*counts))

    @property
    def message_count(self) -> int:
        return self.stats[0]

    @property
    def consumer_count(self) -> int:
        return max(len(self._consumer_order), self.stats[2])

    def mark_deleted(self) -> list[Consumer]:
        consumers = super().mark_deleted()
        for consumer in consumers:
            self.client.remote_cancel(self, consumer)
        return consumers


def _got(answer: Any) -> tuple[QueuedMessage | None, int]:
    """A Basic.Get answer from the home: None (empty) or ``(delivery number there,
    redelivered, exchange+routing key bytes, property bytes, body, messages left)``."""
    if answer is None:
        return None, 0
    did, redelivered, exrk, props, body, count = answer
    n = exrk[0]
    msg = Message(exrk[1:1 + n].decode("utf-8", "surrogateescape"),
                  exrk[2 + n:].decode("utf-8", "surrogateescape"), exrk, props, body)
    return QueuedMessage(did, msg, redelivered), count


class LinkConsumerChannel:
    """The home's view of a consumer whose client is on worker ``peer`` (its ``cid`` there):
    a :class:`~queue_store.consumer.ConsumerChannel` that delivers over the link while it
    has credit."""

    __slots__ = ("home_side", "peer", "cid", "credit", "consumer")

    def __init__(self, home_side: QueueHome, peer: int, cid: int, credit: int) -> None:
        self.home_side = home_side
        self.peer = peer
        self.cid = cid
        self.credit = credit
        self.consumer: Consumer | None = None

    def can_deliver(self) -> bool:
        return self.credit > 0 and self.home_side.link_open(self.peer)

    def deliver(self, consumer: Consumer, qm: QueuedMessage, queue: Queue) -> None:
        self.credit -= 1
        self.home_side.deliver_remote(self, consumer, qm, queue)

    def consumer_cancelled_by_broker(self, consumer: Consumer) -> None:
        self.home_side.home_consumer_cancelled(self)
