"""The client side of queues whose home is another worker or node (``--workers N``, a
cluster): what this process's clients do to such a queue, sent over the link, and the
answers.

* **Publishing**: :meth:`RemoteClient.forward_publish` appends a PUBLISH record for the
  home; an answer (RESULTS) is asked for when the publish's
  :class:`~queue_store.outcomes.PublishContext` wants one (confirm or transaction mode), and
  :meth:`RemoteClient.after_results` joins the answers of one publish. A publisher whose link
  is full is not read until every link drained (RabbitMQ's ``credit_flow``). A publish to a
  replicated queue led here is answered the same way, by a key of this process
  (:meth:`local_pending`, :meth:`local_result`).
* **Consuming**: a consumer of a remote queue is announced to the home (a ``consume`` call:
  the home decides exclusivity); its deliveries (DELIVER records) are handed to the
  client's channel when it can take them (else held, with no credit returned), and settled
  back by the home's delivery number (SETTLE). Credit goes back :data:`CREDIT_BATCH` at a
  time.
* **A queue without a reachable leader** (a quorum queue whose leader died, until etcd
  names the next one): publishes wait here, in order, instead of being nacked, and go to the
  new leader (or into the queue, when this node became it) once it is known and linked;
  their publishers are confirmed once it commits them, as RabbitMQ's quorum queue client
  resends pending publishes to a new leader. One that waited :data:`PARK_TIMEOUT` seconds
  is nacked. A publish with confirms already sent to the leader and not answered when its
  link went waits the same way, ahead of the later ones (it may have been committed: then
  it is in the queue twice; at-least-once), and so does one refused with NOT_LEADER by a
  node that does not lead the queue (yet: etcd's news reached this node first).
* **Calls**: Basic.Get, purge, Declare-Ok counts and consume ask the home; the
  :class:`~queue_store.queue_kind.Requester` waits until the answer (or :data:`CALL_TIMEOUT`).

The home side is :mod:`amqp_server.workers.queue_home`; the runtime
(:mod:`amqp_server.workers.runtime`) builds both and hands them the records they receive.

Source: RabbitMQ's ``rabbit_channel`` side of ``rabbit_amqqueue`` calls and ``credit_flow``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from amqp_common.errors import AccessRefused, NotFound, rs
from amqp_server.workers.link_codec import (
    message_from,
    read_deliver,
    read_results,
    split_queue_key,
)
from amqp_server.workers.links import Links
from amqp_server.workers.remote_queue import CREDIT_WINDOW, RemoteQueue
from queue_store.consumer import Consumer
from queue_store.message import Message
from queue_store.outcomes import (
    NOT_LEADER,
    REJECTED,
    REMOTE,
    ROUTED,
    PublishContext,
    Settlement,
)
from queue_store.queue import Queue, QueuedMessage
from queue_store.queue_kind import Requester

if TYPE_CHECKING:
    from broker.broker import Broker

log = logging.getLogger("amqpq.workers")

__all__ = ["CALL_TIMEOUT", "CREDIT_BATCH", "PARK_TIMEOUT", "Join", "RemoteClient"]

CREDIT_BATCH = CREDIT_WINDOW // 4  # deliveries whose credit goes back in one record
CALL_TIMEOUT = 10.0  # seconds a Basic.Get, purge or count may wait for the queue's home
PARK_TIMEOUT = 30.0  # seconds a publish waits for a quorum queue's next leader, then nacked

#: A publish waiting for a quorum queue's next leader: (deadline (loop time), its place in
#: this node's publish order, the message, the key its publisher waits on or None).
Parked = tuple[float, int, Message, "tuple[int, int] | None"]


class Join:
    """Calls ``ok`` when every awaited answer is in and none was a refusal, else ``err``;
    ``not_leader`` instead of ``err`` (when given) if every refusal was NOT_LEADER's."""

    __slots__ = ("left", "failed", "other", "ok", "err", "not_leader")

    def __init__(self, left: int, ok: Callable[[], None], err: Callable[[], None],
                 not_leader: Callable[[], None] | None = None) -> None:
        self.left, self.ok, self.err, self.not_leader = left, ok, err, not_leader
        self.failed = self.other = False  # any refusal; one that was not NOT_LEADER's

    def done(self, result: int) -> None:
        if result & REJECTED:
            self.failed = True
            if not result & NOT_LEADER:
                self.other = True
        self.left -= 1
        if self.left == 0:
            if not self.failed:
                self.ok()
            elif self.other or self.not_leader is None:
                self.err()
            else:
                self.not_leader()


class ConfirmWait:
    """Settles one publisher confirm, ``channel.settle_confirm(seq, ok)``, when every
    awaited answer is in (``ok``: none was a refusal): what :class:`Join` with the
    channel's closures does, as one object (a publish in confirm mode that waits only for
    answers, the common case of a quorum queue's publisher: no closure per message)."""

    __slots__ = ("left", "failed", "channel", "seq")

    def __init__(self, left: int, channel: Any, seq: int) -> None:
        self.left, self.channel, self.seq = left, channel, seq
        self.failed = False

    def done(self, result: int) -> None:
        if result & REJECTED:
            self.failed = True
        self.left -= 1
        if self.left == 0:
            self.channel.settle_confirm(self.seq, not self.failed)


class RemoteClient:
    """This process's side of every queue whose home is elsewhere (see the module docstring).

    Args:
        broker: this process's broker (after a batch of answers: ``after_batch``).
        index: this worker's (node's) index: the first half of its local result keys.
        links: the links to the other workers (nodes).
    """

    def __init__(self, broker: Broker, index: int, links: Links) -> None:
        self.broker = broker
        self.index = index
        self.links = links
        self._pub = itertools.count(1)
        self._waits: dict[tuple[int, int], Join | ConfirmWait] = {}
        self._early: dict[tuple[int, int], int] = {}  # results that came before their wait
        self._cids = itertools.count(1)
        self._consumers: dict[int, tuple[Consumer, RemoteQueue]] = {}
        self._cid_of: dict[int, int] = {}  # id(consumer) -> cid
        self._waiting: dict[int, deque[QueuedMessage]] = {}
        self._credit_due: dict[tuple[int, int], int] = {}
        self._auto_acks: dict[int, list[int]] = {}  # home -> no-ack deliveries handed out
        self._pending_cids: set[int] = set()  # consumers whose home has not answered yet
        self._calls: dict[int, tuple[Requester, Callable[[Any], None], int]] = {}
        self._call_ids = itertools.count(1)
        self._call_deadlines: deque[tuple[float, int]] = deque()
        self._flowed: set[Any] = set()  # publishers not read until the links drain
        self._flush_scheduled = False
        self.dirty_connections: set[Any] = set()  # confirms settled by a home's answer
        # qkey -> publishes waiting for the queue's next leader, in publish order
        self._parked: dict[bytes, deque[Parked]] = {}
        # (home, pub_id) of a parked publish sent on -> the local key its publisher waits on
        self._aliases: dict[tuple[int, int], tuple[int, int]] = {}
        # (home, pub_id) of a publish with confirms sent to a quorum queue's leader and not
        # answered yet -> (its queue's key, it parked again): if the leader's node goes, or
        # the node answers that it does not lead the queue, it waits for the next leader
        self._unanswered: dict[tuple[int, int], tuple[bytes, Parked]] = {}
        self._moved: dict[tuple[int, int], tuple[int, int]] = {}  # such a key -> its new one

    # ---- publish -------------------------------------------------------------------------

    def forward_publish(self, q: RemoteQueue, message: Message,
                        context: PublishContext | None) -> int:
        """Send ``message`` to ``q``'s home; PublishResult bits (REMOTE when an answer will
        come for a confirm or a transaction: ``context.want_results``, its key added to
        ``context.waits``; REJECTED when the home is down). ``context.publisher`` is not
        read from while the link is full; None (a dead letter, the HTTP API): nobody is."""
        out = self.links.out.get(q.home)
        if q.home_moves and (out is None or q.qkey in self._parked):
            return self._park(q, message, context)
        if out is None:
            return REJECTED
        order = next(self._pub)
        pub_id = order & 0xFFFFFFFF
        want = context is not None and context.want_results
        out.outbox.publish(pub_id, want, q.qkey, message.ex_rk_raw, message.properties_raw,
                           message.body)
        out.schedule()
        if out.paused and context is not None and context.publisher is not None:
            publisher = context.publisher  # the home is behind: stop reading this publisher
            publisher.set_flow(True)  # (RabbitMQ's credit_flow)
            self._flowed.add(publisher)
        if want:
            key = (q.home, pub_id)
            context.waits.append(key)  # type: ignore[union-attr]
            if q.home_moves:  # no deadline yet: it starts if it has to wait
                self._unanswered[key] = (q.qkey, (0.0, order, message, key))
            return ROUTED | REMOTE
        return ROUTED

    def forward_reply(self, worker: int, message: Message) -> None:
        """A direct reply-to reply for a channel on ``worker``."""
        self.links.send_control(worker, ("reply_to", message.routing_key, message.ex_rk_raw,
                                         message.properties_raw, message.body))

    def after_results(self, waits: list[tuple[int, int]], ok: Callable[[], None],
                      err: Callable[[], None],
                      not_leader: Callable[[], None] | None = None) -> None:
        """``ok()`` once every home of ``waits`` accepted its message, else ``err()``, or
        ``not_leader()`` when given and every refusal was a quorum queue's node that does
        not lead it (REJECTED|NOT_LEADER: the publisher may wait for the next leader).
        ``waits`` is read now, not kept."""
        self._await(waits, Join(len(waits), ok, err, not_leader))

    def await_confirm(self, waits: list[tuple[int, int]], channel: Any, seq: int) -> None:
        """``channel.settle_confirm(seq, ok)`` once every answer of ``waits`` is in (``ok``:
        none was a refusal); :meth:`after_results` without closures. ``waits`` is read now,
        not kept."""
        if len(waits) == 1 and not self._moved and not self._early:
            key = waits[0]  # one answer (a quorum queue's commit): _await's loop, unrolled
            if key[0] == self.index or key[0] in self.links.out:
                self._waits[key] = ConfirmWait(1, channel, seq)
                return
        self._await(waits, ConfirmWait(len(waits), channel, seq))

    def _await(self, waits: list[tuple[int, int]], join: Join | ConfirmWait) -> None:
        early = self._early
        moved = self._moved
        for key in waits:
            if moved:
                key = moved.pop(key, key)
            if key in early:
                join.done(early.pop(key))
            elif key[0] != self.index and key[0] not in self.links.out:
                join.done(REJECTED)
            else:
                self._waits[key] = join

    def local_pending(self, context: PublishContext | None) -> tuple[int, int] | None:
        """A key to answer a publish by later (:meth:`local_result`), added to
        ``context.waits``, when its publisher waits for one (confirms, transactions);
        None otherwise (a replicated queue led here answers once committed)."""
        if context is None or not context.want_results:
            return None
        key = (self.index, next(self._pub) & 0xFFFFFFFF)
        context.waits.append(key)
        return key

    def local_result(self, key: tuple[int, int], result: int) -> None:
        """The answer for ``key`` (a home's RESULTS, or a commit here); one that comes
        before anyone waits for it (the publisher's fsync is still running) is kept."""
        if self._unanswered:
            sent = self._unanswered.pop(key, None)
            if sent is not None and result & NOT_LEADER:
                self._park_again([(key, sent)], "its node does not lead the queue",
                                 logging.DEBUG)  # one per publish: no warning each
                return
        if self._aliases:
            key = self._aliases.pop(key, key)
        join = self._waits.pop(key, None)
        if join is not None:
            join.done(result)
        else:
            self._early[key] = result

    def local_results(self, keys: list[tuple[int, int]], result: int) -> None:
        """:meth:`local_result` of each of ``keys``, all with ``result`` (the publishes a
        replicated queue's commit confirmed), in order, in one loop."""
        if self._unanswered or self._aliases:
            for key in keys:
                self.local_result(key, result)
            return
        waits, early = self._waits, self._early
        for key in keys:
            join = waits.pop(key, None)
            if join is not None:
                join.done(result)
            else:
                early[key] = result

    def on_results(self, peer: int, body: bytes) -> None:
        """A RESULTS record: home ``peer``'s answers to publishes sent it."""
        for pub_id, result in read_results(body):
            self.local_result((peer, pub_id), result)

    def flush_confirms(self) -> None:
        """Send the confirms the answers of this batch settled."""
        if self.dirty_connections:
            for conn in self.dirty_connections:
                conn.flush_confirms()
            self.dirty_connections.clear()

    def set_links_full(self, full: bool) -> None:
        """Every link to another worker drained (``full`` False): the publishers held back
        by a full one (:meth:`forward_publish`) are read again."""
        if not full:
            flowed, self._flowed = self._flowed, set()
            for conn in flowed:
                conn.set_flow(False)

    # ---- consumers -----------------------------------------------------------------------

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
        """``consumer`` of ``q`` is gone here: deliveries held for it go back, and the home
        is told."""
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
        self.links.send_control(q.home, ("cancel", cid))

    def remote_settle(self, home: int, dids: list[int], outcome: Settlement) -> None:
        """Settle deliveries by the home's delivery numbers ``dids``."""
        out = self.links.out.get(home)
        if out is not None and dids:
            out.outbox.settle(int(outcome), dids)
            out.schedule()

    def on_cancelled(self, cid: int) -> None:
        """The home cancelled consumer ``cid`` (its queue went): Basic.Cancel to the client."""
        entry = self._consumers.get(cid)
        if entry is not None:
            consumer, q = entry
            q.remove_consumer(consumer)
            consumer.channel.consumer_cancelled_by_broker(consumer)

    def on_deliver(self, peer: int, body: bytes) -> None:
        """A DELIVER record from home ``peer``: to the consumer's channel, or held."""
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
            if n and not self._flush_scheduled:
                self._flush_scheduled = True
                asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        """Return credit and no-ack settlements to the homes (end of a batch or a turn)."""
        self._flush_scheduled = False
        self._flush_credit()
        for home, dids in self._auto_acks.items():
            self.remote_settle(home, dids, Settlement.ACK)
        self._auto_acks.clear()

    def _flush_credit(self) -> None:
        """Credit goes back CREDIT_BATCH at a time per consumer (a record per delivery would
        cost a write and a wake-up each at low rates; the window is CREDIT_WINDOW, so the
        home never waits for these)."""
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

    # ---- calls (Basic.Get, purge, counts, consume) ---------------------------------------

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
        self.links.send_control(q.home, ("call", call_id, q.qkey, request))

    def on_reply(self, rec: tuple[Any, ...]) -> None:
        """``("reply", call_id, status, answer)``: the continuation runs on its requester's
        turn (status ``ok``; ``raise``: the home's error; ``down``/``timeout``/``error``:
        404)."""
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

    def expire_calls(self, now: float) -> None:
        """Calls whose home has not answered by ``now`` (loop time) fail with 404."""
        deadlines = self._call_deadlines
        while deadlines and deadlines[0][0] <= now:  # a home that never answers
            _, call_id = deadlines.popleft()
            if call_id in self._calls:
                self.on_reply(("reply", call_id, "timeout", None))

    def fail_waits(self, w: int) -> None:
        """Nack every publish waiting for worker (node) ``w``'s answer, except those sent to
        a quorum queue it led: they wait for the queue's next leader (:meth:`_repark`)."""
        self._repark(w)
        for key in [k for k in self._waits if k[0] == w]:
            self._waits.pop(key).done(REJECTED)
        for sent in [k for k in self._aliases if k[0] == w]:
            self.local_result(sent, REJECTED)

    # ---- publishes waiting for a quorum queue's next leader ------------------------------

    def _park(self, q: RemoteQueue, message: Message, context: PublishContext | None) -> int:
        key = self.local_pending(context)
        parked = self._parked.get(q.qkey)
        if parked is None:
            parked = self._parked[q.qkey] = deque()
            log.warning("%s has no reachable leader: publishes wait for the next one "
                        "(up to %.0f s)", rs("queue", q.name, q.vhost_name), PARK_TIMEOUT)
        parked.append((asyncio.get_running_loop().time() + PARK_TIMEOUT, next(self._pub),
                       message, key))
        return ROUTED | REMOTE if key is not None else ROUTED

    def _repark(self, w: int) -> None:
        """Publishes with confirms sent to node ``w`` (a quorum queue's leader) and not
        answered when its link went: parked again (:meth:`_park_again`)."""
        gone = [(k, self._unanswered.pop(k)) for k in [k for k in self._unanswered
                                                       if k[0] == w]]
        if gone:
            self._park_again(gone, f"the link to node {w} went")

    def _park_again(self, sent: list[tuple[tuple[int, int], tuple[bytes, Parked]]],
                    why: str, level: int = logging.WARNING) -> None:
        """Publishes sent to a quorum queue's leader, ``(home, pub_id) -> (qkey, entry)``,
        that it will not answer (``why``): they wait for the next leader again, in their
        publish order among those waiting (RabbitMQ's quorum queue client resends its
        pending publishes to a new leader), until the deadline they had or
        :data:`PARK_TIMEOUT` from now. One the old leader had committed is in the queue
        twice (at-least-once, as a publisher's own resend after a nack would make it)."""
        now = asyncio.get_running_loop().time()
        again: dict[bytes, list[Parked]] = {}
        for home_key, (qkey, (deadline, order, message, key)) in sent:
            self._aliases.pop(home_key, None)
            if key == home_key:  # its publisher waits on the home's answer: on a local key
                key = (self.index, next(self._pub) & 0xFFFFFFFF)
                join = self._waits.pop(home_key, None)
                if join is not None:
                    self._waits[key] = join
                else:  # its publisher has not asked yet (after_results comes later)
                    self._moved[home_key] = key
            again.setdefault(qkey, []).append((deadline or now + PARK_TIMEOUT, order,
                                               message, key))
        for qkey, entries in again.items():
            waiting = self._parked.get(qkey)
            self._parked[qkey] = deque(sorted([*(waiting or ()), *entries],
                                              key=lambda e: e[1]))
        log.log(level, "%d publish(es) to quorum queues wait for the next leader again (%s)",
                len(sent), why)

    def release_parked(self, queue_by_key: Callable[[bytes], Queue | None]) -> None:
        """Publishes that waited for a leader go to it once it is known and linked (or
        into the queue, led here now); those past :data:`PARK_TIMEOUT` (or whose queue was
        deleted) are nacked. Called once a second and when a queue's leader changes."""
        if not self._parked:
            return
        now = asyncio.get_running_loop().time()
        for qkey in list(self._parked):
            q = queue_by_key(qkey)
            stand_in = getattr(q, "leader_stand_in", None)  # a replicated stream's replica
            if stand_in is not None:
                q = stand_in() or q  # its leader's stand-in, unless it leads here
            parked = self._parked[qkey]
            if isinstance(q, RemoteQueue) and q.home not in self.links.out:
                expired = []
                while parked and parked[0][0] <= now:
                    expired.append(parked.popleft())
                self._nack_parked(expired)
                if not parked:
                    del self._parked[qkey]
                continue
            del self._parked[qkey]
            if q is None:
                self._nack_parked(parked)
                continue
            log.info("%s: %d waiting publish(es) go to its leader",
                     rs("queue", q.name, q.vhost_name), len(parked))
            for entry in parked:
                if isinstance(q, RemoteQueue):
                    self._send_parked(q, entry)
                else:
                    self._publish_here(q, entry[2], entry[3])

    def _nack_parked(self, entries: Iterable[Parked]) -> None:
        for *_, key in entries:
            if key is not None:
                self.local_result(key, REJECTED)

    def _send_parked(self, q: RemoteQueue, entry: Parked) -> None:
        _, _, message, key = entry
        out = self.links.out[q.home]
        pub_id = next(self._pub) & 0xFFFFFFFF
        out.outbox.publish(pub_id, key is not None, q.qkey, message.ex_rk_raw,
                           message.properties_raw, message.body)
        out.schedule()
        if key is not None:
            self._aliases[(q.home, pub_id)] = key
            self._unanswered[(q.home, pub_id)] = (q.qkey, entry)

    def _publish_here(self, q: Queue, message: Message, key: tuple[int, int] | None) -> None:
        """A parked publish into the queue this node leads now."""
        context = PublishContext(None, key is not None)
        result = q.publish_for(message, context)
        if key is None:
            return
        if context.waits:
            self.after_results(context.waits, lambda: self.local_result(key, ROUTED),
                               lambda: self.local_result(key, REJECTED))
        else:
            self.local_result(key, REJECTED if result & REJECTED else ROUTED)

    def peer_down(self, w: int) -> None:
        """Worker (node) ``w`` is gone: publishes waiting for its answer are nacked, calls
        to it fail with 404."""
        self.fail_waits(w)
        for call_id, (_, _, home) in list(self._calls.items()):
            if home == w:
                self.on_reply(("reply", call_id, "down", None))
