"""One worker of a multi-process broker (``amqpq-server --workers N``): theory of operation.

Every worker is the ordinary single-process broker (its own event loop, sans-IO connections,
vhosts, queues) plus this runtime, which keeps it in step with the others:

* **Topology** has one order: a declare, bind, unbind or delete is a record
  (:mod:`amqp_server.workers.ops`) sent to the supervisor, which numbers it and sends it to
  every worker; each applies it in that order; the asking worker answers its client once it
  applied its own copy (the client's connection reads nothing meanwhile). A worker that
  (re)starts gets every record so far before it accepts clients.
* **A queue lives on one worker**, its *home*: the worker of the connection that declared it
  (RabbitMQ's ``client-local`` queue leader locator), so an exclusive queue is always with
  its connection. Elsewhere it is a :class:`~amqp_server.workers.remote_queue.RemoteQueue`.
* **Messages cross a link only when they must**: a publish routed to a queue of this worker
  costs what it costs with one worker (no link in the path); one routed to another worker's
  queue is appended to that worker's outbox (property bytes and body as received) and
  written with everything else for it at the end of the event-loop turn.
* **Confirms and transactions**: a publish that reached another worker's queue is confirmed
  once that home answered (after its fsync when the message was written to disk); a refusal
  (``reject-publish``) or the home's death is a nack.
* **Deliveries** to a consumer on another worker carry the home's delivery number; the
  consumer's worker maps them to its channel's delivery tags, and settles them back by
  number. The home keeps them outstanding (prefetch counted there) until then, or until the
  consumer's worker dies, when they are requeued.
* **A worker dies**: the supervisor tells everyone (an ordered record); its non-durable and
  exclusive queues are forgotten everywhere, consumers of its queues get Basic.Cancel, its
  consumers' deliveries are requeued, publishes waiting for its answer are nacked. Restarted,
  it recovers its durable queues from its own data directory.

Measured costs (``benchmarks``, this machine): see ``docs/workers.md``.

Source: RabbitMQ clustering (``rabbit_amqqueue`` home node, ``client-local`` leader locator,
``credit_flow``); the record layout is :mod:`amqp_server.workers.link_codec`'s.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from amqp_server.workers import ops
from amqp_server.workers.link_codec import (
    CONTROL,
    CREDIT,
    DELIVER,
    PUBLISH,
    REPL,
    RESULTS,
    SETTLE,
    message_from,
    queue_key,
    read_control,
    split_queue_key,
)
from amqp_server.workers.links import Links
from amqp_server.workers.ops import OwnerStub
from amqp_server.workers.placement import (
    Placement,
    UnplacedQueue,
    declared_by,
    movable,
    unplaced_home,
)
from amqp_server.workers.queue_home import QueueHome
from amqp_server.workers.remote_client import RemoteClient
from amqp_server.workers.remote_queue import RemoteQueue
from amqp_server.workers.topology import Sequencer, SupervisorSequencer, Topology
from amqp_server.workers.worker_stats import PeerStats
from queue_store.grouped_queue import queue_class
from queue_store.message import Message
from queue_store.outcomes import PublishContext
from queue_store.queue import Queue
from queue_store.queue_args import queue_type_of

if TYPE_CHECKING:
    from amqp_server.channel import Channel
    from broker.broker import Broker

log = logging.getLogger("amqpq.workers")

LINK_TIMEOUT = 5.0  # seconds to open the link to another worker
LINK_ATTEMPTS = 5
#: control records only the hub (peer -1: the supervisor, or a cluster node's etcd) sends; any
#: other record comes from a peer only. One from the wrong source is dropped (logged).
HUB_KINDS = frozenset({"apply", "synced", "peer_up"})


class ReplicatedQueues(Protocol):
    """A cluster node's replicated quorum queues (:class:`amqp_server.cluster.quorum.
    QuorumManager`): what the runtime hands them. A ``--workers N`` broker has none."""

    def make_queue(self, name: str, vhost_name: str, home: int, kwargs: dict[str, Any]
                   ) -> Queue:
        """Quorum queue ``name``'s object here: its leader's queue or a stand-in."""

    def queue_removed(self, q: Queue) -> None:
        """A queue was deleted (its replica group, if any, goes)."""

    def worker_down(self, w: int) -> None:
        """Node ``w`` died (an ordered record): the groups it led elect a leader."""

    def on_repl(self, peer: int, body: bytes) -> None:
        """A REPL record's body from ``peer`` (a replica's fetch, entries, divergence answer
        or snapshot)."""

    def tick(self) -> None:
        """Once a second (in-sync replica changes)."""

    def close(self) -> None:
        """The node stops: every replica log is closed."""


class WorkerRuntime:
    """The link side of worker ``index`` of ``count`` (see the module docstring), built
    from named parts: :class:`RemoteClient` (this worker's clients using queues elsewhere),
    :class:`QueueHome` (this worker's queues serving clients elsewhere), :class:`PeerStats`
    (figures and alarms of every worker); it applies the topology in the supervisor's (a
    cluster: etcd's) order and hands each part the records it receives.

    Args:
        broker: this worker's broker (``broker.workers`` is set to this runtime).
        run_dir: the supervisor's socket directory.
        make_links: builds the links instead (``(on_records, on_peer_lost, on_full)`` ->
            :class:`Links`): a cluster node's TCP links, :mod:`amqp_server.cluster.node`.
        on_declared_down: called when the ordered records say this process is down while
            it runs (a cluster node stopped longer than its lease), before it is handled.
        sequencer: who orders the topology records (default: the supervisor, over the
            links; a cluster node: etcd).
    """

    def __init__(self, broker: Broker, index: int, count: int, run_dir: Path | None,
                 make_links: Callable[..., Links] | None = None,
                 on_declared_down: Callable[[], None] | None = None,
                 sequencer: Sequencer | None = None) -> None:
        self.broker = broker
        self.index = index
        self.count = count
        broker.workers = self
        broker.reply_to.worker = index
        if make_links is not None:
            self.links = make_links(self.on_records, self._peer_lost, self._links_full)
        else:
            assert run_dir is not None
            self.links = Links(run_dir, index, self.on_records, self._peer_lost,
                               self._links_full)
        self.on_declared_down = on_declared_down
        self.quorum: ReplicatedQueues | None = None  # a cluster node's (NodeRuntime)
        self.synced = asyncio.get_running_loop().create_future()
        self.homes: dict[tuple[str, str], int] = {}  # from the definitions file
        self._wrong_sources: set[int] = set()  # peers a misplaced record was logged for
        self._connecting: list[asyncio.Future[None]] = []  # links to open before in step
        self._tasks: set[asyncio.Future[None]] = set()
        self.client = RemoteClient(broker, index, self.links)
        self.home = QueueHome(broker, self.links, self.client, self.queue_by_key,
                              self.on_records)
        self.stats = PeerStats(broker, index, count, self.links, self.links.send_control)
        self.topology = Topology(broker, index, sequencer or SupervisorSequencer(self.links),
                                 self._worker_down, self.home.drain_orphans,
                                 self._place)
        self.placement = Placement(index, self.client, self.topology.submit_async)
        broker.queue_factory.plug(self)  # every vhost's queues: make_queue, queue_removed

    # ---- start ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Link up and apply every topology record so far (returns when in step)."""
        await self.links.start()
        await self.synced

    def ready(self) -> None:
        """Tell the supervisor this worker accepts clients."""
        self.links.send_hub(("ready",))

    # ---- what channels and replicated queues call (RemoteClient) --------------------------

    @property
    def dirty_connections(self) -> set[Any]:
        """Connections whose confirms an answer settled (sent after the batch)."""
        return self.client.dirty_connections

    def after_results(self, waits: list[tuple[int, int]], ok: Callable[[], None],
                      err: Callable[[], None]) -> None:
        """:meth:`RemoteClient.after_results`."""
        self.client.after_results(waits, ok, err)

    def await_confirm(self, waits: list[tuple[int, int]], channel: Any, seq: int) -> None:
        """:meth:`RemoteClient.await_confirm`."""
        self.client.await_confirm(waits, channel, seq)

    def forward_reply(self, worker: int, message: Message) -> None:
        """:meth:`RemoteClient.forward_reply`."""
        self.client.forward_reply(worker, message)

    def local_pending(self, context: PublishContext | None) -> tuple[int, int] | None:
        """:meth:`RemoteClient.local_pending`."""
        return self.client.local_pending(context)

    def local_result(self, key: tuple[int, int], result: int) -> None:
        """:meth:`RemoteClient.local_result`."""
        self.client.local_result(key, result)

    def local_results(self, keys: list[tuple[int, int]], result: int) -> None:
        """:meth:`RemoteClient.local_results`."""
        self.client.local_results(keys, result)

    def send_control(self, peer: int, record: tuple[Any, ...]) -> None:
        """:meth:`Links.send_control`."""
        self.links.send_control(peer, record)

    # ---- broker-wide figures and alarms (PeerStats), for broker/ and management/ ----------

    @property
    def peer_summaries(self) -> dict[int, tuple[dict[str, Any], float]]:
        """Index -> (the peer's last summary, loop time it came)."""
        return self.stats.peer_summaries

    def workers(self) -> list[dict[str, Any]]:
        """:meth:`PeerStats.workers`."""
        return self.stats.workers()

    def totals(self) -> dict[str, int]:
        """:meth:`PeerStats.totals`."""
        return self.stats.totals()

    def elsewhere(self, key: str, name: str | None = None) -> int:
        """:meth:`PeerStats.elsewhere`."""
        return self.stats.elsewhere(key, name)

    def local_alarm(self, active: bool, reason: str) -> None:
        """:meth:`PeerStats.local_alarm`."""
        self.stats.local_alarm(active, reason)

    async def gather_json(self, kind: str,
                          only: list[tuple[str, str]] | None = None) -> list[dict[str, Any]]:
        """:meth:`PeerStats.gather_json`."""
        return await self.stats.gather_json(kind, only)

    async def close_elsewhere(self, name: str, text: str) -> bool:
        """:meth:`PeerStats.close_elsewhere`."""
        return await self.stats.close_elsewhere(name, text)

    # ---- the vhosts' queue factory (vhosts.queue_factory.QueueFactory) -------------------

    def make_queue(self, name: str, vhost_name: str, home: int | None = None,
                   **kwargs: Any) -> Queue:
        """A new queue: built here when this worker is its ``home`` (the declare record's;
        None: as the definitions file says, else worker 0), else a stand-in; a quorum
        queue or stream of a cluster node: the node's replicated queues decide; a negative ``home``:
        unplaced until its first use (:mod:`amqp_server.workers.placement`)."""
        if home is None:
            home = self.homes.get((vhost_name, name), 0)
        if home < 0:
            return self.placement.make(declared_by(home), name, vhost_name, **kwargs)
        if self.quorum is not None and queue_type_of(kwargs["arguments"]) in ("quorum",
                                                                                "stream"):
            return self.quorum.make_queue(name, vhost_name, home, kwargs)
        if home == self.index:
            return queue_class(kwargs["arguments"])(name, vhost_name, **kwargs)
        return RemoteQueue(self.client, home, name, vhost_name, **kwargs)

    def export_homes(self) -> list[list[Any]]:
        """``[[vhost, queue, worker], ...]`` for every durable queue (definitions.json)."""
        return [[v.name, q.name, self.home_of(q)] for v in self.broker.vhosts.values()
                for q in v.queues.values() if q.durable]

    def import_homes(self, homes: list[list[Any]]) -> None:
        for vname, name, home in homes:
            self.homes[(vname, name)] = int(home)

    def declare_home(self, vhost: Any, name: str, arguments: dict[str, Any]) -> int:
        """Where a queue declared through this worker will live (its declare record's
        ``home``): here (a cluster node places quorum queue leaders:
        :meth:`~amqp_server.cluster.node.NodeRuntime.declare_home`)."""
        return self.index

    def first_use_home(self, home: int, durable: bool, exclusive: bool,
                       arguments: dict[str, Any]) -> int:
        """The declare record's ``home`` for a new queue :meth:`declare_home` put ``home``:
        with ``--workers N``, a queue placed by its first use
        (:func:`~amqp_server.workers.placement.movable`) is declared unplaced (a negative
        ``home``); otherwise, and on a cluster node, ``home``."""
        if self.quorum is None and home == self.index and movable(durable, exclusive,
                                                                  arguments):
            return unplaced_home(self.index)
        return home

    def home_of(self, q: Queue) -> int:
        """The worker queue ``q`` lives on (an unplaced one: the worker that declared it)."""
        if isinstance(q, RemoteQueue):
            return q.declared_by if isinstance(q, UnplacedQueue) else q.home
        return self.index

    def _place(self, op: Any, vhost: Any) -> Queue | None:
        """A QueuePlace record (:meth:`Placement.apply`)."""
        return self.placement.apply(op, vhost)

    def queue_removed(self, q: Queue, everywhere: bool) -> None:
        """A queue of a vhost went: a home that removed it by itself (not ``everywhere``)
        tells everyone."""
        if self.quorum is not None:  # its replica group, if it has one, goes too
            self.quorum.queue_removed(q)
        if not everywhere and not isinstance(q, RemoteQueue):
            self.topology.forget(q.vhost_name, q.name)

    # ---- topology (Topology), for channels and the HTTP API -----------------------------

    def submit(self, ch: Channel, op: ops.Op, then: Callable[[Any], None]) -> None:
        """:meth:`Topology.submit`."""
        self.topology.submit(ch, op, then)

    def submit_async(self, op: ops.Op) -> asyncio.Future[Any]:
        """:meth:`Topology.submit_async`."""
        return self.topology.submit_async(op)

    def share_access(self, with_topology: bool) -> None:
        """:meth:`Topology.share_access`."""
        self.topology.share_access(with_topology)

    def catch_up(self, ch: Channel, then: Callable[[], None]) -> None:
        """:meth:`Topology.catch_up`."""
        self.topology.catch_up(ch, then)

    def _worker_down(self, w: int) -> None:
        """Worker ``w`` died: forget what died with it, cancel what used it. A cluster node
        told that it is itself down (it was stopped longer than its lease) closes its
        clients' connections first, as if it had died (``on_declared_down``)."""
        if w == self.index and self.synced.done() and self.on_declared_down is not None:
            self.on_declared_down()
        for vhost in self.broker.vhosts.values():
            for q in list(vhost.queues.values()):
                owner = q.exclusive_owner
                gone_owner = isinstance(owner, OwnerStub) and owner.worker == w
                # w == this worker: replayed to it after its restart (its old transient
                # queues were re-created by the records before this one)
                if isinstance(q, UnplacedQueue):  # nothing of it lived on w
                    continue
                if gone_owner or (self.home_of(q) == w and not q.durable):
                    vhost.remove_queue(q, everywhere=True)  # every worker applies this
                elif isinstance(q, RemoteQueue) and q.home == w:
                    for consumer in q.consumers:
                        q.remove_consumer(consumer)
                        consumer.channel.consumer_cancelled_by_broker(consumer)
        self._forget_peer(w)
        if self.quorum is not None and w != self.index:
            self.quorum.worker_down(w)

    def _forget_peer(self, w: int) -> None:
        self.client.peer_down(w)
        self.home.peer_down(w)

    # ---- records in ----------------------------------------------------------------------

    def on_records(self, peer: int, records: list[tuple[int, bytes]]) -> None:
        """Records ``(kind, body)`` that arrived from ``peer`` (-1: the hub), in order."""
        if peer < 0 and any(kind != CONTROL for kind, _ in records):  # the hub's are control
            self._wrong_source(peer, "binary")
            records = [r for r in records if r[0] == CONTROL]
        for kind, body in records:
            try:
                if kind == PUBLISH:
                    self.home.on_publish(peer, body)
                elif kind == DELIVER:
                    self.client.on_deliver(peer, body)
                elif kind == SETTLE:
                    self.home.on_settle(peer, body)
                elif kind == CREDIT:
                    self.home.on_credit(peer, body)
                elif kind == RESULTS:
                    self.client.on_results(peer, body)
                elif kind == REPL and self.quorum is not None:
                    self.quorum.on_repl(peer, body)
                elif kind == CONTROL:
                    self._on_control(peer, read_control(body))
            except Exception:
                log.exception("worker link record %d from %d failed", kind, peer)
        self.client.flush()
        self.broker.after_batch()
        self.client.flush_confirms()

    def _on_control(self, peer: int, rec: tuple[Any, ...]) -> None:
        kind = rec[0]
        if (kind in HUB_KINDS) != (peer < 0):
            self._wrong_source(peer, kind)
            return
        if kind == "apply":
            self.topology.on_apply(rec[1], rec[2], rec[3])
        elif kind == "synced":
            self.keep_task(asyncio.ensure_future(self._finish_sync()))
        elif kind == "peer_up":
            if rec[1] != self.index:
                task = self.keep_task(asyncio.get_running_loop().create_task(self._connect(rec[1])))
                if not self.synced.done():  # at start: in step only once linked
                    self._connecting.append(task)
        elif kind == "cancel":
            self.home.on_cancel(peer, rec[1])
        elif kind == "cancelled":
            self.client.on_cancelled(rec[1])
        elif kind == "call":
            self.home.on_call(peer, rec)
        elif kind == "reply":
            self.client.on_reply(rec)
        elif kind in ("list", "close"):
            self.stats.on_ask(peer, rec)
        elif kind == "answer":
            self.stats.on_answer(rec)
        elif kind == "reply_to":
            target = self.broker.reply_to.lookup(rec[1])
            if target is not None:
                target.deliver_reply(message_from(rec[2], rec[3], rec[4]))
        elif kind == "stats":
            self.stats.on_stats(peer, rec[2])
            for qkey, stats in rec[1].items():
                q = self.queue_by_key(qkey)
                if isinstance(q, RemoteQueue):
                    q.stats = stats
                    q.unacked_count = stats[1]

    def _wrong_source(self, peer: int, kind: object) -> None:
        """A record dropped because ``peer`` may not send its kind: logged once per peer."""
        if peer not in self._wrong_sources:
            self._wrong_sources.add(peer)
            log.warning("%r record from %s ignored: only %s send it (once per peer)",
                        str(kind)[:40], f"peer {peer}" if peer >= 0 else "the hub",
                        "the hub (etcd, the supervisor) may" if peer >= 0 else "peers")

    def keep_task(self, task: asyncio.Future[None]) -> asyncio.Future[None]:
        """Hold a reference to ``task`` until it is done (asyncio keeps only weak ones)."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _finish_sync(self) -> None:
        connecting, self._connecting = self._connecting, []
        done, pending = await asyncio.wait(connecting, timeout=LINK_TIMEOUT) if connecting \
            else (set(), set())
        if pending:
            log.warning("worker %d: %d link(s) not up after %.0f s; going on", self.index,
                        len(pending), LINK_TIMEOUT)
        log.info("worker %d in step: %d topology records applied, linked to workers %s",
                 self.index, self.topology.count, sorted(self.links.out))
        if not self.synced.done():
            self.synced.set_result(None)

    async def _connect(self, peer: int) -> None:
        for attempt in range(LINK_ATTEMPTS):
            try:
                await asyncio.wait_for(self.links.connect(peer), LINK_TIMEOUT)
                return
            except (TimeoutError, OSError) as exc:
                if attempt == LINK_ATTEMPTS - 1:
                    log.warning("cannot link to worker %d: %r", peer, exc)
                    return
            await asyncio.sleep(0.2)

    def _links_full(self, full: bool) -> None:
        self.client.set_links_full(full)

    def _peer_lost(self, peer: int) -> None:
        """A link to worker ``peer`` closed: nothing to do here (its death, if it died, comes
        as an ordered record); a cluster node opens it again."""

    def queue_by_key(self, qkey: bytes) -> Queue | None:
        """The queue (or stand-in) of ``qkey`` (:func:`link_codec.queue_key`), None when
        this process does not know it."""
        vname, name = split_queue_key(qkey)
        vhost = self.broker.vhosts.get(vname)
        return None if vhost is None else vhost.queues.get(name)

    # ---- misc ----------------------------------------------------------------------------

    def tick(self) -> None:
        """Once a second: send the home queues' counts and this worker's summary to every
        worker; expire orphans."""
        stats = {}
        for vhost in self.broker.vhosts.values():
            for q in vhost.queues.values():
                if not isinstance(q, RemoteQueue):
                    stats[queue_key(q.vhost_name, q.name)] = (
                        q.message_count, q.unacked_count, q.consumer_count)
        summary = self.stats.summary()
        for peer in list(self.links.out):
            self.links.send_control(peer, ("stats", stats, summary))
        self.home.drain_orphans()
        if self.quorum is not None:
            self.quorum.tick()
        self.client.expire_calls(asyncio.get_running_loop().time())
        self.client.release_parked(self.queue_by_key)

    def after_commit(self) -> None:
        """Publishes were answered outside a batch of link records: send the confirms."""
        self.broker.after_batch()
        self.client.flush_confirms()

    def close(self) -> None:
        if self.quorum is not None:
            self.quorum.close()
        self.links.close()

