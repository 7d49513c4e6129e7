"""The home side of queues used from another worker or node: what the link brings for a
queue that lives here, and the answers.

* **Publishes** (PUBLISH records) are published to the queue and answered (RESULTS) when
  their publisher waits: after the fsync when the message was written to disk, once
  committed for a replicated queue (the queue adds to the
  :class:`~queue_store.outcomes.PublishContext`'s ``waits``), at once otherwise.
* **Consumers** whose client is elsewhere are ordinary consumers whose channel is a
  :class:`~amqp_server.workers.remote_queue.LinkConsumerChannel`: the queue checks their
  prefetch and picks them as any consumer; deliveries go over the link (DELIVER) while the
  consumer has credit, and are kept here (by delivery number) until settled (SETTLE) or until
  that worker dies, when they are requeued.
* **Calls** (Basic.Get, purge, counts, consume) are answered by a ``reply`` record; an
  error is sent back to be raised on the asking side.
* **Orphans**: a record for a queue whose declare (or placement on this worker:
  :mod:`amqp_server.workers.placement`) has not reached this worker yet waits up to
  :data:`ORPHAN_WAIT` seconds; a record for a queue that does not live here is answered
  as for a queue that is gone (a publish nacked when the queue's home can move: a quorum
  queue's leader).

The client side is :mod:`amqp_server.workers.remote_client`.

Source: RabbitMQ's ``rabbit_amqqueue_process`` (a queue serves channels on every node).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from amqp_common import framing
from amqp_common.errors import AMQPError, InternalError, rs
from amqp_server.workers.link_codec import (
    CONTROL,
    PUBLISH,
    PublishReader,
    control_body,
    read_control,
    read_credit,
    read_publish,
    read_settle,
)
from amqp_server.workers.links import Links
from amqp_server.workers.placement import UnplacedQueue
from amqp_server.workers.remote_client import RemoteClient
from amqp_server.workers.remote_queue import LinkConsumerChannel, RemoteQueue
from queue_store.consumer import Consumer
from queue_store.outcomes import (
    NEEDS_SYNC,
    NEEDS_WRITE,
    NOT_LEADER,
    REJECTED,
    ROUTED,
    PublishContext,
    Settlement,
)
from queue_store.queue import Delivery, Queue, QueuedMessage

if TYPE_CHECKING:
    from broker.broker import Broker

__all__ = ["ORPHAN_WAIT", "QueueHome"]

log = logging.getLogger("amqpq.workers")

ORPHAN_WAIT = 5.0  # seconds a record for a queue not declared here yet is kept


class QueueHome:
    """This process's queues, served to the other workers (nodes) (see the module
    docstring).

    Args:
        broker: this process's broker (durability for answers after an fsync).
        links: the links to the other workers (nodes).
        client: this process's :class:`RemoteClient` (a replicated queue's answer is one of
            its local results).
        queue_by_key: the queue (or stand-in) of a link queue key, None when unknown.
        redeliver: feeds records that waited for their queue back in, ``(peer, records)``.
    """

    def __init__(self, broker: Broker, links: Links, client: RemoteClient,
                 queue_by_key: Callable[[bytes], Queue | None],
                 redeliver: Callable[[int, list[tuple[int, bytes]]], None]) -> None:
        self.broker = broker
        self.links = links
        self.client = client
        self.queue_by_key = queue_by_key
        self.redeliver = redeliver
        self._remote_consumers: dict[tuple[int, int], Consumer] = {}
        self._dids = itertools.count(1)
        self._unacked: dict[int, dict[int, Delivery]] = {}
        self._results_due: dict[int, list[tuple[int, int]]] = {}
        self._context = PublishContext(None, True)  # a publish from a peer that waits
        self._orphans: dict[bytes, list[tuple[int, int, bytes, float]]] = {}
        self._flush_scheduled = False
        self._reader = PublishReader()

    # ---- publishes -----------------------------------------------------------------------

    def on_publish(self, peer: int, body: bytes) -> None:
        """A PUBLISH record from ``peer``: into its queue, answered when asked."""
        pub_id, want, qkey, message = self._reader.read(body)
        q = self.home_queue(peer, PUBLISH, body, qkey)
        if q is None:
            return
        if not want:
            q.publish(message)
            return
        context = self._context  # one, reused: after_results reads waits at once
        context.waits.clear()
        result = q.publish_for(message, context)
        if context.waits:  # a queue that answers later (replicated: once committed)
            self.client.after_results(
                context.waits, lambda: self._result(peer, pub_id, ROUTED),
                lambda: self._result(peer, pub_id, REJECTED),
                lambda: self._result(peer, pub_id, REJECTED | NOT_LEADER))
        elif result & NEEDS_SYNC:
            self.broker.durability.after_sync(
                lambda: self._result(peer, pub_id, ROUTED),
                lambda: self._result(peer, pub_id, REJECTED))
        elif result & NEEDS_WRITE:  # a stream's: once the batch is written (no fsync)
            self.broker.durability.after_write(lambda: self._result(peer, pub_id, ROUTED))
        else:
            self._result(peer, pub_id, result)

    def _result(self, peer: int, pub_id: int, result: int) -> None:
        due = self._results_due.get(peer)
        if due is None:
            due = self._results_due[peer] = []
        due.append((pub_id, result))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        """The answers of this turn, one RESULTS record per peer."""
        self._flush_scheduled = False
        for peer, due in self._results_due.items():
            out = self.links.out.get(peer)
            if out is not None and due:
                out.outbox.results(due)
                out.schedule()
        self._results_due.clear()

    # ---- consumers whose client is elsewhere ---------------------------------------------

    def _register_consumer(self, peer: int, q: Queue, request: tuple[Any, ...]) -> str:
        """A consumer of worker ``peer`` subscribes to ``q`` (here): ``"ok"``, or why not
        (RabbitMQ's 403 text)."""
        _, cid, tag, no_ack, exclusive, prefetch, priority, arguments, credit = request
        if q.consumer_count and (exclusive or q.has_exclusive_consumer()):
            return f"{rs('queue', q.name, q.vhost_name)} in exclusive use"
        channel = LinkConsumerChannel(self, peer, cid, credit)
        # a no-ack consumer's deliveries are outstanding here until its worker handed them
        # to its client (an ack comes back): none is lost to a cancel crossing them
        consumer = Consumer(tag, framing.encode_shortstr(tag), channel, q, False, exclusive,
                            0 if no_ack else prefetch, priority, arguments)
        channel.consumer = consumer
        self._remote_consumers[(peer, cid)] = consumer
        q.add_consumer(consumer)
        return "ok"

    def on_cancel(self, peer: int, cid: int) -> None:
        """Worker ``peer`` cancelled its consumer ``cid``."""
        consumer = self._remote_consumers.pop((peer, cid), None)
        if consumer is not None:
            consumer.queue.remove_consumer(consumer)

    def on_credit(self, peer: int, body: bytes) -> None:
        """A CREDIT record: a consumer of ``peer`` may take more deliveries."""
        cid, n = read_credit(body)
        consumer = self._remote_consumers.get((peer, cid))
        if consumer is not None:
            consumer.channel.credit += n  # type: ignore[attr-defined]
            consumer.queue.dispatch()

    def link_open(self, peer: int) -> bool:
        """True when deliveries to ``peer`` may go now (its link is up, not congested)."""
        s = self.links.out.get(peer)
        return s is not None and not s.congested

    def deliver_remote(self, channel: LinkConsumerChannel, consumer: Consumer,
                       qm: QueuedMessage, queue: Queue) -> None:
        """``qm`` of ``queue`` goes to ``consumer`` on ``channel``'s worker (DELIVER)."""
        did = self._hand_out(channel.peer, qm, queue, consumer)
        out = self.links.out[channel.peer]
        msg = qm.message
        out.outbox.deliver(channel.cid, did, qm.redelivered, msg.ex_rk_raw,
                           msg.properties_raw, msg.body)
        out.schedule()

    def _hand_out(self, peer: int, qm: QueuedMessage, queue: Queue,
                  consumer: Consumer | None) -> int:
        did = next(self._dids) & 0xFFFFFFFF or next(self._dids)
        unacked = self._unacked.get(peer)
        if unacked is None:
            unacked = self._unacked[peer] = {}
        unacked[did] = (qm, queue, consumer)
        return did

    def home_consumer_cancelled(self, channel: LinkConsumerChannel) -> None:
        """The queue cancelled a consumer of another worker (deleted): it is told."""
        if self._remote_consumers.pop((channel.peer, channel.cid), None) is not None:
            self.links.send_control(channel.peer, ("cancelled", channel.cid))

    def on_settle(self, peer: int, body: bytes) -> None:
        """A SETTLE record: ``peer`` settled deliveries by number."""
        outcome, dids = read_settle(body)
        unacked = self._unacked.get(peer, {})
        by_queue: dict[Queue, list[Delivery]] = {}
        for did in dids:
            entry = unacked.pop(did, None)
            if entry is not None:
                by_queue.setdefault(entry[1], []).append(entry)
        for q, group in by_queue.items():
            q.settle(group, Settlement(outcome))

    def peer_down(self, w: int) -> None:
        """Worker (node) ``w`` is gone: its consumers go, its deliveries are requeued."""
        for key in [k for k in self._remote_consumers if k[0] == w]:
            consumer = self._remote_consumers.pop(key)
            consumer.queue.remove_consumer(consumer)
        unacked = self._unacked.pop(w, {})
        by_queue: dict[Queue, list[Delivery]] = {}
        for entry in unacked.values():
            by_queue.setdefault(entry[1], []).append(entry)
        for q, group in by_queue.items():
            q.settle(group, Settlement.REQUEUE)

    # ---- calls ---------------------------------------------------------------------------

    def on_call(self, peer: int, rec: tuple[Any, ...]) -> None:
        """``("call", call_id, qkey, request)`` from ``peer``: answered by a ``reply``."""
        _, call_id, qkey, request = rec
        q = self.home_queue(peer, CONTROL, control_body(rec), qkey)
        if q is None:
            return
        try:
            if request[0] == "get":  # may be answered later (a quorum queue's requeue)
                q.request_get(None, request[1], lambda qm, left: self.links.send_control(
                    peer, ("reply", call_id, "ok", self._got(peer, q, request[1], qm, left))))
                return
            answer = self._answer_call(peer, q, request)
        except AMQPError as exc:  # raised to the client on the asking worker (its class)
            self.links.send_control(peer, ("reply", call_id, "raise", exc))
            return
        except Exception as exc:
            log.exception("worker call %r failed", request)
            self.links.send_control(peer, ("reply", call_id, "raise",
                                           InternalError(f"{type(exc).__name__}: {exc}")))
            return
        self.links.send_control(peer, ("reply", call_id, "ok", answer))

    def _answer_call(self, peer: int, q: Queue, request: tuple[Any, ...]) -> Any:
        what = request[0]
        answer: Any
        if what == "purge":
            answer = q.purge()
        elif what == "consume":
            answer = self._register_consumer(peer, q, request)
        else:
            answer = (q.message_count, q.consumer_count)
        return answer

    def _got(self, peer: int, q: Queue, no_ack: bool, qm: QueuedMessage | None,
             left: int) -> Any:
        """A get's answer for ``peer``: None, or (delivery number here, redelivered,
        exchange/routing key, properties, body, messages left)."""
        if qm is None:
            return None
        did = 0 if no_ack else self._hand_out(peer, qm, q, None)
        msg = qm.message
        return (did, qm.redelivered, msg.ex_rk_raw, msg.properties_raw, msg.body, left)

    # ---- records for queues not (yet) here -----------------------------------------------

    def home_queue(self, peer: int, kind: int, body: bytes, qkey: bytes) -> Queue | None:
        """The queue of a record if it lives here; a record for a queue this worker has not
        heard of yet (its declare is still on its way) waits."""
        q = self.queue_by_key(qkey)
        if q is None:
            self._orphan_waits(peer, kind, body, qkey)
            return None
        if isinstance(q, RemoteQueue):  # the sender thinks it lives here: as if it were gone
            if isinstance(q, UnplacedQueue):  # placed here by a record still on its way
                self._orphan_waits(peer, kind, body, qkey)
                return None
            log.warning("worker %d sent a record for %r, which does not live here", peer, q)
            self._orphan_dropped(peer, kind, body, refuse=q.home_moves)
            return None
        return q

    def _orphan_waits(self, peer: int, kind: int, body: bytes, qkey: bytes) -> None:
        now = asyncio.get_running_loop().time()
        self._orphans.setdefault(qkey, []).append((peer, kind, body, now))

    def drain_orphans(self) -> None:
        """Records whose queue arrived are fed back in; those that waited too long are
        answered as for a queue that is gone."""
        if not self._orphans:
            return
        now = asyncio.get_running_loop().time()
        for qkey in list(self._orphans):
            q = self.queue_by_key(qkey)
            if q is not None and not isinstance(q, UnplacedQueue):
                for peer, kind, body, _ in self._orphans.pop(qkey):
                    self.redeliver(peer, [(kind, body)])
            elif all(now - t > ORPHAN_WAIT for *_, t in self._orphans[qkey]):
                for peer, kind, body, _ in self._orphans.pop(qkey):
                    self._orphan_dropped(peer, kind, body)

    def _orphan_dropped(self, peer: int, kind: int, body: bytes, refuse: bool = False) -> None:
        """A record for a queue that is not here: a publish is answered as dropped (the queue
        is gone, as RabbitMQ), or refused (``refuse``: a quorum queue that moved to another
        leader, or whose leadership has not reached this node yet: never a confirm for a
        message nobody has; NOT_LEADER tells the sender to wait for the leader again)."""
        if kind == PUBLISH:
            pub_id, want, *_ = read_publish(body)
            if want:
                self._result(peer, pub_id, REJECTED | NOT_LEADER if refuse else ROUTED)
        elif kind == CONTROL:
            rec = read_control(body)
            if rec[0] == "call":
                self.links.send_control(peer, ("reply", rec[1], "error", rec[2]))
