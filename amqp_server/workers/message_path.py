"""The message path of a worker (``--workers N``): what crosses the link for a queue whose
home is another worker, on both sides.

Publishing side: :meth:`MessagePath.forward_publish` (a PUBLISH record; an answer is asked
for when the publish's :class:`~queue_store.outcomes.PublishContext` wants one: confirm or
transaction mode) and the answers
(:meth:`after_results`). Home side: PUBLISH records are published to the queue and answered
after the fsync when the message was written to disk.

Consuming side: a consumer of a remote queue is announced to the home (``consume``); its
deliveries (DELIVER records) are handed to the client's channel when it can take them
(else held, with no credit returned), and settled back by the home's delivery number
(SETTLE). Home side: the consumer is an ordinary consumer whose channel is a
:class:`~amqp_server.workers.remote_queue.LinkConsumerChannel`; deliveries handed to another
worker are kept (``_unacked``) until settled or until that worker dies.

Calls: Basic.Get, purge and Declare-Ok counts of a remote queue ask the home and suspend the
client's connection until the answer (or :data:`CALL_TIMEOUT`).

Part of :class:`~amqp_server.workers.runtime.WorkerRuntime` (whose ``__init__`` holds the
state named below).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from amqp_common import framing
from amqp_common.errors import AccessRefused, AMQPError, InternalError, NotFound, rs
from amqp_server.workers import link_values
from amqp_server.workers.link_codec import (
    CONTROL,
    PUBLISH,
    read_credit,
    read_deliver,
    read_publish,
    read_settle,
    split_queue_key,
)
from amqp_server.workers.links import Links
from amqp_server.workers.remote_queue import CREDIT_WINDOW, LinkConsumerChannel, RemoteQueue
from queue_store.consumer import Consumer
from queue_store.message import Message
from queue_store.outcomes import NEEDS_SYNC, REJECTED, REMOTE, ROUTED, PublishContext, Settlement
from queue_store.queue import Delivery, Queue, QueuedMessage
from queue_store.queue_kind import Requester

if TYPE_CHECKING:
    from broker.broker import Broker

log = logging.getLogger("amqpq.workers")

CREDIT_BATCH = CREDIT_WINDOW // 4  # deliveries whose credit goes back in one record
CALL_TIMEOUT = 10.0  # seconds a Basic.Get, purge or count may wait for the queue's home


class Join:
    """Calls ``ok`` when every awaited answer is in and none was a refusal, else ``err``."""

    __slots__ = ("left", "failed", "ok", "err")

    def __init__(self, left: int, ok: Callable[[], None], err: Callable[[], None]) -> None:
        self.left, self.failed, self.ok, self.err = left, False, ok, err

    def done(self, result: int) -> None:
        if result & REJECTED:
            self.failed = True
        self.left -= 1
        if self.left == 0:
            (self.err if self.failed else self.ok)()


def message_from(exrk: bytes, props: bytes, body: bytes) -> Message:
    """A :class:`Message` from link bytes (``exrk``: exchange and routing key shortstrs)."""
    n = exrk[0]
    exchange = exrk[1:1 + n].decode("utf-8", "surrogateescape")
    rk = exrk[2 + n:].decode("utf-8", "surrogateescape")
    return Message(exchange, rk, exrk, props, body)


def control_body(rec: tuple[Any, ...]) -> bytes:
    """A control record's body again (to keep it while its queue is unknown here)."""
    return link_values.encode(rec)


class MessagePath:
    """Publishes, consumers, deliveries, settlements and calls across the link."""

    broker: Broker
    links: Links
    _waits: dict[tuple[int, int], Join]
    _pub: Any
    _cids: Any
    _dids: Any
    _call_ids: Any
    _consumers: dict[int, tuple[Consumer, RemoteQueue]]
    _cid_of: dict[int, int]
    _waiting: dict[int, deque[QueuedMessage]]
    _credit_due: dict[tuple[int, int], int]
    _auto_acks: dict[int, list[int]]
    _pending_cids: set[int]
    _flowed: set[Any]
    _calls: dict[int, tuple[Requester, Callable[[Any], None], int]]
    _call_deadlines: deque[tuple[float, int]]
    _remote_consumers: dict[tuple[int, int], Consumer]
    _unacked: dict[int, dict[int, Delivery]]
    _results_due: dict[int, list[tuple[int, int]]]
    _home_context: PublishContext
    _flush_scheduled: bool
    _early: dict[tuple[int, int], int]
    index: int
    quorum: Any

    def _home_queue(self, peer: int, kind: int, body: bytes, qkey: bytes) -> Queue | None:
        raise NotImplementedError  # WorkerRuntime's

    # ---- publish -------------------------------------------------------------------------

    def forward_publish(self, q: RemoteQueue, message: Message,
                        context: PublishContext | None) -> int:
        """Send ``message`` to ``q``'s home; PublishResult bits (REMOTE when an answer will
        come for a confirm or a transaction: ``context.want_results``, its key added to
        ``context.waits``; REJECTED when the home is down). ``context.publisher`` is not
        read from while the link is full; None (a dead letter, the HTTP API): nobody is."""
        out = self.links.out.get(q.home)
        if out is None:
            return REJECTED
        pub_id = next(self._pub) & 0xFFFFFFFF
        want = context is not None and context.want_results
        out.outbox.publish(pub_id, want, q.qkey, message.ex_rk_raw, message.properties_raw,
                           message.body)
        out.schedule()
        if out.paused and context is not None and context.publisher is not None:
            publisher = context.publisher  # the home is behind: stop reading this publisher
            publisher.set_flow(True)  # (RabbitMQ's credit_flow)
            self._flowed.add(publisher)
        if want:
            context.waits.append((q.home, pub_id))  # type: ignore[union-attr]
            return ROUTED | REMOTE
        return ROUTED

    def forward_reply(self, worker: int, message: Message) -> None:
        """A direct reply-to reply for a channel on ``worker``."""
        self.send_control(worker, ("reply_to", message.routing_key, message.ex_rk_raw,
                               message.properties_raw, message.body))

    def after_results(self, waits: list[tuple[int, int]], ok: Callable[[], None],
                      err: Callable[[], None]) -> None:
        """``ok()`` once every home of ``waits`` accepted its message, else ``err()``."""
        join = Join(len(waits), ok, err)
        early = self._early
        for key in waits:
            if key in early:
                join.done(early.pop(key))
            elif key[0] != self.index and key[0] not in self.links.out:
                join.done(REJECTED)
            else:
                self._waits[key] = join

    def _on_publish(self, peer: int, body: bytes) -> None:
        pub_id, want, qkey, exrk, props, data = read_publish(body)
        q = self._home_queue(peer, PUBLISH, body, qkey)
        if q is None:
            return
        message = message_from(exrk, props, data)
        if not want:
            q.publish(message)
            return
        context = self._home_context  # one, reused: after_results reads waits at once
        context.waits.clear()
        result = q.publish_for(message, context)
        if context.waits:  # a queue that answers later (replicated: once committed)
            self.after_results(context.waits, lambda: self._result(peer, pub_id, ROUTED),
                               lambda: self._result(peer, pub_id, REJECTED))
        elif result & NEEDS_SYNC:
            self.broker.durability.after_sync(
                lambda: self._result(peer, pub_id, ROUTED),
                lambda: self._result(peer, pub_id, REJECTED))
        else:
            self._result(peer, pub_id, result)

    def _result(self, peer: int, pub_id: int, result: int) -> None:
        due = self._results_due.get(peer)
        if due is None:
            due = self._results_due[peer] = []
        due.append((pub_id, result))
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        for peer, due in self._results_due.items():
            out = self.links.out.get(peer)
            if out is not None and due:
                out.outbox.results(due)
                out.schedule()
        self._results_due.clear()
        self._flush_credit()
        self._flush_auto_acks()

    # ---- consumers: this worker's clients ------------------------------------------------

    def remote_consume(self, ch: Requester, q: RemoteQueue, consumer: Consumer,
                       then: Callable[[], None]) -> None:
        """Subscribe ``consumer`` at ``q``'s home, then ``then()`` (ConsumeOk): the home
        decides exclusivity, as RabbitMQ's queue process does (403 ``in exclusive use``);
        deliveries that come before ``then`` ran wait for it."""
        cid = next(self._cids)
        self._consumers[cid] = (consumer, q)
        self._cid_of[id(consumer)] = cid
        self._pending_cids.add(cid)

        def answered(answer: Any) -> None:
            self._pending_cids.discard(cid)
            if answer != "ok":
                self._consumers.pop(cid, None)
                self._cid_of.pop(id(consumer), None)
                self._waiting.pop(cid, None)
                raise AccessRefused(str(answer))
            then()

        self.call_home(ch, q, ("consume", cid, consumer.tag, consumer.no_ack,
                               consumer.exclusive, consumer.prefetch, consumer.priority,
                               consumer.arguments, CREDIT_WINDOW), answered)

    def remote_cancel(self, q: RemoteQueue, consumer: Consumer) -> None:
        cid = self._cid_of.pop(id(consumer), None)
        if cid is None:
            return
        self._consumers.pop(cid, None)
        self._credit_due.pop((q.home, cid), None)
        waiting = self._waiting.pop(cid, None)
        if waiting:  # not handed to the client yet: back to the queue
            dids = [qm.seq for qm in waiting if qm.seq]
            if dids:
                self.remote_settle(q.home, dids, Settlement.REQUEUE)
        self.send_control(q.home, ("cancel", cid))

    def remote_settle(self, home: int, dids: list[int], outcome: Settlement) -> None:
        out = self.links.out.get(home)
        if out is not None and dids:
            out.outbox.settle(int(outcome), dids)
            out.schedule()

    def _on_deliver(self, peer: int, body: bytes) -> None:
        cid, did, redelivered, exrk, props, data = read_deliver(body)
        entry = self._consumers.get(cid)
        if entry is None:  # cancelled meanwhile
            if did:
                self.remote_settle(peer, [did], Settlement.REQUEUE)
            return
        consumer, q = entry
        qm = QueuedMessage(did, message_from(exrk, props, data), redelivered)
        waiting = self._waiting.get(cid)
        if waiting is not None or cid in self._pending_cids \
                or not consumer.channel.can_deliver():
            if waiting is None:
                waiting = self._waiting[cid] = deque()
            waiting.append(qm)
            return
        consumer.channel.deliver(consumer, qm, q)
        self._handed(consumer, peer, cid, qm)

    def _handed(self, consumer: Consumer, home: int, cid: int, qm: QueuedMessage) -> None:
        """A delivery went to the client: its credit goes back; for a no-ack consumer the
        home is told it is delivered (it keeps it until then, so a delivery that arrives
        after the consumer was cancelled here goes back to the queue, never lost)."""
        key = (home, cid)
        self._credit_due[key] = self._credit_due.get(key, 0) + 1
        if consumer.no_ack:
            self._auto_acks.setdefault(home, []).append(qm.seq)

    def drain_waiting(self, q: RemoteQueue) -> None:
        """Hand deliveries held for ``q``'s consumers to their channels as they can take."""
        if not self._waiting:
            return
        for consumer in q.consumers:
            cid = self._cid_of.get(id(consumer))
            waiting = self._waiting.get(cid) if cid is not None else None
            if not waiting:
                continue
            n = 0
            while waiting and consumer.channel.can_deliver():
                qm = waiting.popleft()
                consumer.channel.deliver(consumer, qm, q)
                self._handed(consumer, q.home, cid, qm)  # type: ignore[arg-type]
                n += 1
            if not waiting:
                del self._waiting[cid]  # type: ignore[arg-type]
            if n:
                self._schedule_flush()

    def _flush_auto_acks(self) -> None:
        for home, dids in self._auto_acks.items():
            self.remote_settle(home, dids, Settlement.ACK)
        self._auto_acks.clear()

    def _flush_credit(self) -> None:
        """Return credit to the homes, CREDIT_BATCH at a time per consumer (a record per
        delivery would cost a write and a wake-up each at low rates; the window is
        CREDIT_WINDOW, so the home never waits for these)."""
        if not self._credit_due:
            return
        sent = []
        for key, n in self._credit_due.items():
            if n < CREDIT_BATCH:
                continue
            out = self.links.out.get(key[0])
            if out is not None:
                out.outbox.credit(key[1], n)
                out.schedule()
            sent.append(key)
        for key in sent:
            del self._credit_due[key]

    # ---- consumers: clients elsewhere (home side) ----------------------------------------

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

    def _on_credit(self, peer: int, body: bytes) -> None:
        cid, n = read_credit(body)
        consumer = self._remote_consumers.get((peer, cid))
        if consumer is not None:
            consumer.channel.credit += n  # type: ignore[attr-defined]
            consumer.queue.dispatch()

    def deliver_remote(self, channel: LinkConsumerChannel, consumer: Consumer,
                       qm: QueuedMessage, queue: Queue) -> None:
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
        if self._remote_consumers.pop((channel.peer, channel.cid), None) is not None:
            self.send_control(channel.peer, ("cancelled", channel.cid))

    def _on_settle(self, peer: int, body: bytes) -> None:
        outcome, dids = read_settle(body)
        unacked = self._unacked.get(peer, {})
        by_queue: dict[Queue, list[Delivery]] = {}
        for did in dids:
            entry = unacked.pop(did, None)
            if entry is not None:
                by_queue.setdefault(entry[1], []).append(entry)
        for q, group in by_queue.items():
            q.settle(group, Settlement(outcome))

    # ---- calls (Basic.Get, purge, counts) ------------------------------------------------

    def call_home(self, requester: Requester, q: RemoteQueue, request: tuple[Any, ...],
                  then: Callable[[Any], None]) -> None:
        """Ask ``q``'s home (``("get", no_ack)``, ``("purge",)``, ``("counts",)``,
        ``("consume", ...)``); ``requester`` waits until ``then(answer)`` runs on its turn.
        Raises NotFound (404) when the home is down now; later, 404 inside the
        continuation when it goes down or does not answer in CALL_TIMEOUT seconds."""
        if q.home not in self.links.out:
            raise NotFound(f"{rs('queue', q.name, q.vhost_name)} is on a worker that is down")
        call_id = next(self._call_ids)
        self._calls[call_id] = (requester, then, q.home)
        self._call_deadlines.append((asyncio.get_running_loop().time() + CALL_TIMEOUT, call_id))
        requester.await_answer()
        self.send_control(q.home, ("call", call_id, q.qkey, request))

    def _on_call(self, peer: int, rec: tuple[Any, ...]) -> None:
        _, call_id, qkey, request = rec
        q = self._home_queue(peer, CONTROL, control_body(rec), qkey)
        if q is None:
            return
        try:
            answer = self._answer_call(peer, q, request)
        except AMQPError as exc:  # raised to the client on the asking worker (its class)
            self.send_control(peer, ("reply", call_id, "raise", exc))
            return
        except Exception as exc:
            log.exception("worker call %r failed", request)
            self.send_control(peer, ("reply", call_id, "raise",
                                 InternalError(f"{type(exc).__name__}: {exc}")))
            return
        self.send_control(peer, ("reply", call_id, "ok", answer))

    def _answer_call(self, peer: int, q: Queue, request: tuple[Any, ...]) -> Any:
        what = request[0]
        answer: Any
        if what == "get":
            qm = q.get(request[1])
            if qm is None:
                answer = None
            else:
                did = 0 if request[1] else self._hand_out(peer, qm, q, None)
                msg = qm.message
                answer = (did, qm.redelivered, msg.ex_rk_raw, msg.properties_raw, msg.body,
                          q.message_count)
        elif what == "purge":
            answer = q.purge()
        elif what == "consume":
            answer = self._register_consumer(peer, q, request)
        else:
            answer = (q.message_count, q.consumer_count)
        return answer

    def _on_reply(self, rec: tuple[Any, ...]) -> None:
        _, call_id, status, answer = rec
        pending = self._calls.pop(call_id, None)
        if pending is None:
            return
        requester, then, _ = pending

        def run() -> None:
            if status == "down":
                raise NotFound("the queue's worker is down")
            if status == "timeout":
                raise NotFound("the queue's worker did not answer")
            if status == "raise":
                raise answer
            if status != "ok":
                vname, name = split_queue_key(answer)
                raise NotFound(f"no {rs('queue', name, vname)}")
            then(answer)

        requester.answered(run)

    def send_control(self, peer: int, record: tuple[Any, ...]) -> None:
        """Queue control ``record`` (a tuple of link values) for ``peer``; dropped when its
        link is down (the peer's loss is handled by the peer-lost path)."""
        out = self.links.out.get(peer)
        if out is not None:
            out.outbox.control(record)
            out.schedule()

