"""Replicated quorum queues of a cluster: leaders, followers, in-sync replicas, failover.

Theory of operation
-------------------
A quorum queue declared in a cluster (``x-queue-type: quorum``) has *members*: the declaring
node, its first leader, and the next running nodes, ``x-quorum-initial-group-size`` of them in
all (default 3, or the cluster's size when smaller). Its replication state lives in etcd
(``/amqpq/<cluster>/qq/<vhost>/<name>``, JSON)::

    {"leader": node index, "epoch": n, "members": [...], "isr": [...]}

and changes only by etcd transactions that compare the value they replace, so two nodes never
both win a change (no consensus here: etcd's).

* **Replication** (Kafka's in-sync replicas): each member keeps the queue's
  :class:`~queue_store.replica_log.ReplicaLog`. The leader appends an operation per publish,
  ack and return; once per event-loop turn it writes the new bytes to its file, sends the same
  bytes to its followers (a REPL record on the node link, tagged with its epoch), and fsyncs. A
  follower appends, fsyncs and acknowledges the last LSN it has on disk. The *high watermark*
  is the lowest such LSN over the in-sync replicas (``isr``, the leader included); a message
  below it is committed: it enters the leader's queue (:class:`ReplicatedQueue`), consumers see
  it, its publisher is confirmed. Nothing commits while the ISR is smaller than a majority of
  the members.
* **ISR changes** are written to etcd *before* they count: a follower whose link is down or
  that acknowledged nothing for :data:`LAG_TIMEOUT` s is removed from ``isr`` (then commits go
  on without it); one that caught up (installed a snapshot and acknowledged the leader's own
  durable LSN) is added back. So every replica in ``isr`` has every committed message.
* **Failover**: when the leader's node dies (its etcd lease expires: a ``worker_down``
  record), every surviving in-sync member tries one transaction: leader = itself, epoch + 1,
  ``isr`` without the old leader. One wins; its replica becomes the queue (every message
  flagged redelivered: it may have been delivered by the old leader), the other members take a
  snapshot from it. Consumers of the queue on surviving nodes were sent Basic.Cancel (their
  consumer-cancel notification); publishes waiting for the old leader were nacked.
* **Fencing**: a follower refuses a REPL record of an epoch older than the one etcd holds, or
  from a node that is not the leader of that epoch, and says so (``qfenced``); a leader that
  learns of a newer epoch (that answer, or etcd's watch) steps down: its uncommitted publishes
  are nacked, its consumers cancelled, its replica resynchronised from the new leader. An old
  leader resumed after a partition therefore never commits again.
* **Catch-up**: a member that (re)starts, falls behind or changes leader asks the leader for
  a snapshot (``qsync``) and installs it in place of its log; it counts as in sync once it
  acknowledged what the leader has on disk.

An acknowledgement still on its way to the followers when the leader dies is lost: that message
is delivered again (flagged redelivered), as with RabbitMQ when an ack was not yet committed by
the quorum.

Source: Kafka replication (ISR, high watermark, leader epoch); RabbitMQ quorum queues
(https://www.rabbitmq.com/docs/quorum-queues); etcd transactions.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from amqp_server.cluster.quorum_queue import ReplicatedQueue
from amqp_server.workers.link_codec import queue_key, split_queue_key
from amqp_server.workers.message_path import message_from
from amqp_server.workers.remote_queue import RemoteQueue
from queue_store.queue import Queue
from queue_store.replica_log import ReplicaLog, ReplicaLogError

if TYPE_CHECKING:
    from amqp_server.cluster.metadata import EtcdHub
    from amqp_server.workers.runtime import WorkerRuntime

log = logging.getLogger("amqpq.quorum")

LAG_TIMEOUT = 5.0  # seconds without an acknowledgement before a follower leaves the ISR
RESYNC_AFTER = 2.0  # seconds before a snapshot request is repeated
DEFAULT_GROUP_SIZE = 3


class QuorumGroup:
    """One quorum queue's replica on this node, leader or follower (module docstring)."""

    def __init__(self, manager: QuorumManager, vhost: str, name: str) -> None:
        self.manager = manager
        self.runtime = manager.runtime
        self.me = manager.runtime.index
        self.vhost, self.name = vhost, name
        self.qkey = queue_key(vhost, name)
        digest = hashlib.sha1(self.qkey).hexdigest()[:16]
        self.log = ReplicaLog(manager.data_dir / f"{digest}.log")
        self.state: dict[str, Any] | None = None
        self.raw = b""  # the etcd value the state was read from (for transactions)
        self.queue: ReplicatedQueue | None = None
        self.leading = False
        self.epoch = 0  # the epoch this replica leads or follows
        # leader side
        self.progress: dict[int, int] = {}  # follower -> LSN it has on disk
        self.last_ack: dict[int, float] = {}
        self.ready: set[int] = set()  # followers that took a snapshot of this epoch
        self.durable = 0  # this replica's LSN on disk
        self.lead_since = 0.0
        self._scheduled = False
        self._syncing = False
        self._sync_again = False
        self._changing = False  # an etcd transaction of this group is on its way
        # follower side
        self.leader = -1  # the node whose chunks this replica takes (etcd's may lag)
        self.stepped_down = 0  # the epoch this node stopped leading at
        self._expand_mark = 0  # the leader's durable LSN at the last tick
        self.synced = False
        self.asked = 0.0  # when a snapshot was last asked for

    # ---- roles ---------------------------------------------------------------------------

    @property
    def isr(self) -> list[int]:
        return list(self.state["isr"]) if self.state else []

    @property
    def members(self) -> list[int]:
        return list(self.state["members"]) if self.state else [self.me]

    def lead(self, queue: ReplicatedQueue, from_disk: bool = False) -> None:
        """This node leads the queue (declared here, elected, or led here before a restart):
        ``queue`` holds the replica's messages, flagged redelivered. ``from_disk``: the log
        was just read from the file (all of it is on disk); else what was fsynced so far
        counts, and an fsync covers the rest."""
        self.queue = queue
        queue.restore((offset, message_from(e[0], e[1], e[2]), e[3])
                      for offset, e in self.log.entries.items())
        self.leading = True
        self.epoch = int(self.state["epoch"]) if self.state else 1
        self.progress.clear()
        self.ready.clear()
        if from_disk:
            self.durable = self.log.lsn
        else:
            self.sync()
        self.lead_since = self._now()
        self._expand_mark = self.durable
        log.info("quorum queue '%s' in vhost '%s': leader here (epoch %d, %d messages)",
                 self.name, self.vhost, self.epoch, len(self.log.entries))

    def step_down(self) -> None:
        """Another node leads now: nack what was not committed, cancel consumers, and follow."""
        queue = self.queue
        self.leading = False
        self.stepped_down = max(self.stepped_down, self.epoch)
        self.queue = None
        self.ready.clear()
        if queue is not None:
            log.warning("quorum queue '%s' in vhost '%s': no longer the leader here "
                        "(epoch %s)", self.name, self.vhost, self.state and self.state["epoch"])
            queue.fail_pending()
            self.manager.replace(queue, self.state["leader"] if self.state else None)
        self.synced = False

    def on_state(self, state: dict[str, Any], raw: bytes) -> None:
        """etcd's state of the queue changed (or was read at start)."""
        self.state, self.raw = state, raw
        leader, epoch = int(state["leader"]), int(state["epoch"])
        if leader == self.me:
            if epoch <= self.stepped_down:
                return  # an old state (fenced meanwhile): a newer one follows
            if not self.leading and self.manager.queue_of(self) is not None:
                self.manager.promote(self)
            if epoch != self.epoch:  # a new epoch: followers take a snapshot of it first
                self.ready.clear()
            self.epoch = epoch
            self.changed()
            self.try_commit()
            return
        if self.leading:
            self.step_down()
        if self.me not in state["members"]:
            self.manager.drop(self)
            return
        if epoch != self.epoch:
            self.epoch = epoch
            self.synced = False
        if self.me in state["members"] and not self.synced:
            self.ask_snapshot()

    # ---- leader: replication -------------------------------------------------------------

    def changed(self) -> None:
        """Operations were appended: written, sent and fsynced at the end of this turn."""
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self._scheduled = False
        first, data = self.log.take_chunk()
        if not data:
            return
        if self.leading:
            for peer in self.ready:
                self._send(peer, first, False, data)
        self.sync()

    def _send(self, peer: int, first: int, snapshot: bool, data: bytes) -> None:
        out = self.runtime.links.out.get(peer)
        if out is not None:
            out.outbox.repl(self.qkey, self.epoch, first, snapshot, data)
            out.schedule()

    def sync(self) -> None:
        """fsync the replica off the event loop; then acknowledge (follower) or commit."""
        if self._syncing:
            self._sync_again = True
            return
        self._syncing = True
        target = self.log.lsn
        self.runtime.broker.env.run_blocking(self.log.sync, lambda error: self._synced(
            target, error))

    def _synced(self, target: int, error: Exception | None) -> None:
        self._syncing = False
        if error is not None:
            log.error("quorum queue '%s': fsync failed: %s", self.name, error)
        else:
            self.durable = max(self.durable, target)
        if self._sync_again:
            self._sync_again = False
            self.sync()
        if self.leading:
            self.try_commit()
        elif error is None and self.synced and self.leader >= 0:
            self.runtime._control(self.leader, ("qack", self.qkey, self.epoch, self.durable))

    def high_watermark(self) -> int | None:
        """The LSN every in-sync replica has on disk (None: the ISR is below a majority)."""
        isr = self.isr
        if len(isr) < len(self.members) // 2 + 1:
            return None
        return min(self.durable if m == self.me else self.progress.get(m, 0) for m in isr)

    def try_commit(self) -> None:
        hw = self.high_watermark()
        if hw is not None and self.queue is not None and self.queue.pending:
            self.queue.commit(hw)
            self.runtime.after_commit()

    def on_ack(self, peer: int, epoch: int, lsn: int) -> None:
        if not self.leading or epoch != self.epoch:
            return
        self.progress[peer] = max(self.progress.get(peer, 0), lsn)
        self.last_ack[peer] = self._now()
        self.try_commit()

    def on_snapshot_request(self, peer: int, epoch: int) -> None:
        if not self.leading:
            if self.state is not None:
                self.runtime._control(peer, ("qfenced", self.qkey, int(self.state["epoch"])))
            return
        self.flush()  # what the others have, before the snapshot
        self._send(peer, self.log.lsn, True, self.log.snapshot())
        self.ready.add(peer)
        self.last_ack[peer] = self._now()

    # ---- follower ------------------------------------------------------------------------

    def ask_snapshot(self) -> None:
        if self.state is None or self.leading:
            return
        self.asked = self._now()
        self.runtime._control(int(self.state["leader"]), ("qsync", self.qkey,
                                                          int(self.state["epoch"])))

    def on_repl(self, peer: int, epoch: int, first: int, snapshot: bool, data: bytes) -> None:
        """A chunk (or a snapshot) from the leader of ``epoch``."""
        state = self.state
        known = max(int(state["epoch"]) if state else 0, self.epoch)
        stale = epoch < known or (epoch == known and (
            self.leading or (state is not None and int(state["epoch"]) == epoch
                             and peer != int(state["leader"]))))
        if stale:
            log.warning("quorum queue '%s': refused replication from node %d with stale "
                        "epoch %d (current %d)", self.name, peer, epoch, known)
            self.runtime._control(peer, ("qfenced", self.qkey, known))
            return
        if self.leading:  # a newer leader: this one was cut off
            self.step_down()
        if epoch != self.epoch or peer != self.leader:
            self.synced = self.synced and epoch == self.epoch and peer == self.leader
        self.epoch, self.leader = epoch, peer
        if snapshot:
            self._install_snapshot(data)
            return
        if not self.synced:
            return  # a snapshot is on its way
        try:
            ok = self.log.append_chunk(first, data)
        except ReplicaLogError as exc:
            log.error("quorum queue '%s': damaged chunk from node %d: %s", self.name, peer, exc)
            ok = False
        if not ok:
            self.synced = False
            self.ask_snapshot()
            return
        self.sync()

    def _install_snapshot(self, data: bytes) -> None:
        try:
            self.log.install(data)
        except (ReplicaLogError, OSError) as exc:
            log.error("quorum queue '%s': snapshot not installed: %s", self.name, exc)
            return
        self.synced = True
        self.durable = self.log.lsn
        log.info("quorum queue '%s' in vhost '%s': replica in step with node %s (%d messages)",
                 self.name, self.vhost, self.state and self.state["leader"],
                 len(self.log.entries))
        self.sync()

    def on_fenced(self, epoch: int) -> None:
        if self.leading and epoch > self.epoch:
            log.warning("quorum queue '%s': a follower knows epoch %d: stepping down",
                        self.name, epoch)
            self.step_down()

    # ---- once a second -------------------------------------------------------------------

    def tick(self) -> None:
        now = self._now()
        if self.leading and self.state is not None and not self._changing:
            isr = self.isr
            out = self.runtime.links.out
            for m in isr:
                if m == self.me:
                    continue
                behind = self.progress.get(m, 0) < self.log.lsn
                silent = now - max(self.last_ack.get(m, 0.0), self.lead_since) > LAG_TIMEOUT
                if m not in out or (behind and silent):
                    self._change({"isr": [x for x in isr if x != m]},
                                 f"node {m} leaves the in-sync replicas")
                    return
            mark, self._expand_mark = self._expand_mark, self.durable
            for m in self.members:  # caught up with where this leader was a second ago
                if m not in isr and m in self.ready and self.progress.get(m, 0) >= mark:
                    self._change({"isr": sorted({*isr, m})}, f"node {m} is in sync again")
                    return
        elif not self.leading and self.state is not None:
            if self.me in self.members and not self.synced and now - self.asked > RESYNC_AFTER:
                self.ask_snapshot()
            if self.manager.leader_down(self):
                self.elect()

    def elect(self) -> None:
        """The leader's node is down: try to take over (only an in-sync member may)."""
        state = self.state
        if state is None or self.me not in state["isr"] or self._changing:
            return
        old = int(state["leader"])
        self._change({"leader": self.me, "epoch": int(state["epoch"]) + 1,
                      "isr": [m for m in state["isr"] if m != old]},
                     f"node {self.me} takes over from node {old}")

    def _change(self, update: dict[str, Any], why: str) -> None:
        """Replace the state in etcd if nobody changed it meanwhile (the watch brings the
        result back to :meth:`on_state`)."""
        assert self.state is not None
        new = {**self.state, **update}
        self._changing = True

        async def run() -> None:
            try:
                won = await self.manager.replace_state(self, self.raw, new)
                if won:
                    log.info("quorum queue '%s' in vhost '%s': %s (epoch %d)", self.name,
                             self.vhost, why, new["epoch"])
            except Exception as exc:
                log.warning("quorum queue '%s': etcd change failed: %r", self.name, exc)
            finally:
                self._changing = False

        self.runtime._keep(asyncio.ensure_future(run()))

    def close(self, remove: bool = False) -> None:
        if self.queue is not None:
            self.queue.fail_pending()
        self.leading = False
        if remove:
            self.log.remove()
        else:
            self.log.close()

    def _now(self) -> float:
        return asyncio.get_running_loop().time()


class QuorumManager:
    """A node's quorum queue groups, their etcd state and their records (module docstring).

    Args:
        runtime: the node's runtime (links, results, queues).
        hub: the node's etcd hub (its watch brings the state of every quorum queue).
        data_dir: where replica logs live (``DATA_DIR/quorum``).
    """

    def __init__(self, runtime: WorkerRuntime, hub: EtcdHub, data_dir: Path) -> None:
        self.runtime = runtime
        self.hub = hub
        self.data_dir = data_dir
        self.prefix = hub.m.root + b"qq/"
        self.groups: dict[bytes, QuorumGroup] = {}
        self.states: dict[bytes, tuple[dict[str, Any], bytes]] = {}
        hub.watchers.append(self._on_etcd)

    async def load_states(self) -> None:
        """Read every quorum queue's state (before the node's queues are recovered, so a
        queue led elsewhere is not taken for one led here)."""
        for kv in await self.hub.client.get_prefix(self.prefix):
            self._on_etcd("PUT", kv.key, kv.value)

    def _key(self, qkey: bytes) -> bytes:
        vhost, name = split_queue_key(qkey)
        return self.prefix + f"{quote(vhost, safe='')}/{quote(name, safe='')}".encode()

    def _on_etcd(self, kind: str, key: bytes, value: bytes | None) -> None:
        if not key.startswith(self.prefix):
            return
        vhost, _, name = key[len(self.prefix):].decode().partition("/")
        qkey = queue_key(unquote(vhost), unquote(name))
        if kind != "PUT" or value is None:
            self.states.pop(qkey, None)
            return
        try:
            state = json.loads(value)
        except ValueError:
            return
        self.states[qkey] = (state, value)
        group = self.groups.get(qkey)
        if group is None and self.runtime.index in state.get("members", ()) \
                and self.runtime._queue(qkey) is not None:
            group = self.group(qkey)
        if int(state.get("leader", -1)) != self.runtime.index:
            q = self.runtime._queue(qkey)
            if isinstance(q, RemoteQueue):
                q.home = int(state["leader"])
        if group is not None:
            group.on_state(state, value)

    def group(self, qkey: bytes) -> QuorumGroup:
        group = self.groups.get(qkey)
        if group is None:
            vhost, name = split_queue_key(qkey)
            group = self.groups[qkey] = QuorumGroup(self, vhost, name)
        return group

    def make_queue(self, name: str, vhost_name: str, home: int, kwargs: dict[str, Any]
                   ) -> Queue:
        """The queue object of quorum queue ``name`` on this node: its replicated queue
        where this node leads it, a stand-in for the leader elsewhere."""
        qkey = queue_key(vhost_name, name)
        known = self.states.get(qkey)
        leader = int(known[0]["leader"]) if known else home
        if leader != self.runtime.index:
            q = RemoteQueue(self.runtime, leader, name, vhost_name, **kwargs)
            if known and self.runtime.index in known[0]["members"]:
                group = self.group(qkey)
                asyncio.get_running_loop().call_soon(group.on_state, *known)
            return q
        group = self.group(qkey)
        queue = ReplicatedQueue(group, name, vhost_name, **kwargs)
        if known:
            group.state, group.raw = known
            group.lead(queue, from_disk=True)
            # led here before this start: a new epoch, so the followers take a snapshot
            group._change({"epoch": int(known[0]["epoch"]) + 1}, "leader again after a start")
        else:
            group.lead(queue, from_disk=True)
            self.runtime._keep(asyncio.ensure_future(self._create(group, kwargs)))
        return queue

    async def _create(self, group: QuorumGroup, kwargs: dict[str, Any]) -> None:
        """A new quorum queue: its members and epoch 1 in etcd."""
        arguments = kwargs.get("arguments") or {}
        size = int(arguments.get("x-quorum-initial-group-size") or DEFAULT_GROUP_SIZE)
        others = sorted(i for i in self.hub.running if i != self.runtime.index)
        members = [self.runtime.index, *others[:max(0, size - 1)]]
        state = {"leader": self.runtime.index, "epoch": 1, "members": members,
                 "isr": members}
        client = self.hub.client
        tx = client.transactions
        key = self._key(group.qkey)
        value = json.dumps(state).encode()
        await client.transaction(compare=[tx.create(key) == 0], success=[tx.put(key, value)],
                                 failure=[])

    async def replace_state(self, group: QuorumGroup, raw: bytes, new: dict[str, Any]
                            ) -> bool:
        client = self.hub.client
        tx = client.transactions
        key = self._key(group.qkey)
        won, _ = await client.transaction(compare=[tx.value(key) == raw],
                                          success=[tx.put(key, json.dumps(new).encode())],
                                          failure=[])
        return bool(won)

    def queue_of(self, group: QuorumGroup) -> Queue | None:
        return self.runtime._queue(group.qkey)

    def promote(self, group: QuorumGroup) -> None:
        """Elected: this node's replica becomes the queue (in place of the stand-in)."""
        old = self.queue_of(group)
        if old is None or not isinstance(old, RemoteQueue):
            return
        queue = ReplicatedQueue(group, old.name, old.vhost_name, durable=old.durable,
                                auto_delete=old.auto_delete, arguments=old.arguments,
                                settings=old.settings, vhost=self._vhost(old.vhost_name))
        for consumer in list(old.consumers):  # not expected: cancelled when the leader died
            old.remove_consumer(consumer)
            consumer.channel.consumer_cancelled_by_broker(consumer)
        self._swap(old, queue)
        group.lead(queue)
        queue.dispatch()

    def replace(self, queue: ReplicatedQueue, leader: int | None) -> None:
        """A queue led here no longer is: a stand-in for ``leader`` takes its place; its
        consumers get Basic.Cancel."""
        remote = RemoteQueue(self.runtime, leader if leader is not None else -1, queue.name,
                             queue.vhost_name, durable=queue.durable,
                             auto_delete=queue.auto_delete, arguments=queue.arguments,
                             settings=queue.settings)
        self._swap(queue, remote)
        for consumer in queue.mark_deleted():
            consumer.channel.consumer_cancelled_by_broker(consumer)

    def _vhost(self, name: str) -> Any:
        return self.runtime.broker.vhosts[name]

    def _swap(self, old: Queue, new: Queue) -> None:
        vhost = self._vhost(old.vhost_name)
        if vhost.queues.get(old.name) is old:
            vhost.queues[old.name] = new

    def leader_down(self, group: QuorumGroup) -> bool:
        return group.state is not None and int(group.state["leader"]) not in self.hub.running

    def worker_down(self, w: int) -> None:
        """Node ``w`` died (an ordered record): the groups it led hold an election."""
        for group in list(self.groups.values()):
            if group.state is not None and int(group.state["leader"]) == w:
                group.elect()

    def queue_removed(self, q: Queue) -> None:
        """A quorum queue was deleted: its replica goes; the leader removes its state."""
        group = self.groups.pop(q.qkey if isinstance(q, RemoteQueue) else
                                queue_key(q.vhost_name, q.name), None)
        if group is None:
            return
        was_leading = group.leading
        group.close(remove=True)
        if was_leading:
            self.runtime._keep(asyncio.ensure_future(
                self.hub.client.delete(self._key(group.qkey))))

    def on_repl(self, peer: int, qkey: bytes, epoch: int, first: int, snapshot: bool,
                data: bytes) -> None:
        group = self.groups.get(qkey)
        if group is None:
            known = self.states.get(qkey)
            if known is None or self.runtime.index not in known[0]["members"] \
                    or self.runtime._queue(qkey) is None:
                return
            group = self.group(qkey)
            group.state, group.raw = known
        group.on_repl(peer, epoch, first, snapshot, data)

    def on_control(self, peer: int, rec: tuple[Any, ...]) -> None:
        group = self.groups.get(rec[1])
        if group is None:
            return
        if rec[0] == "qack":
            group.on_ack(peer, int(rec[2]), int(rec[3]))
        elif rec[0] == "qsync":
            group.on_snapshot_request(peer, int(rec[2]))
        elif rec[0] == "qfenced":
            group.on_fenced(int(rec[2]))

    def tick(self) -> None:
        for group in list(self.groups.values()):
            group.tick()

    def drop(self, group: QuorumGroup) -> None:
        """This node is no longer a member (``delete_member``, ``shrink``): its replica goes."""
        if self.groups.get(group.qkey) is group:
            del self.groups[group.qkey]
            log.info("quorum queue '%s' in vhost '%s': replica on this node removed",
                     group.name, group.vhost)
            group.close(remove=True)

    # ---- membership (rabbitmq-queues add_member, delete_member, grow, shrink) ------------

    def node_index(self, node: str) -> int | None:
        """The index of cluster node ``node`` (by name), None when unknown."""
        if node == self.hub.m.node:
            return self.runtime.index
        return next((i for i, n in self.hub.names.items() if n == node), None)

    async def change_members(self, vhost: str, name: str, node: str, add: bool) -> str:
        """Add ``node`` to (or remove it from) quorum queue ``name``'s members, by an etcd
        transaction (retried if the state changed meanwhile). Returns "ok" or why not:
        "no queue", "no node", "already a member", "not a member", "last member". A new
        member takes a snapshot and joins the ISR once caught up; a removed leader hands
        over to an in-sync member (epoch + 1)."""
        index = self.node_index(node)
        if index is None:
            return "no node"
        qkey = queue_key(vhost, name)
        for _ in range(10):
            known = self.states.get(qkey)
            if known is None:
                return "no queue"
            state, raw = known
            members, isr = list(state["members"]), list(state["isr"])
            if add:
                if index in members:
                    return "already a member"
                new = {**state, "members": [*members, index]}
            else:
                if index not in members:
                    return "not a member"
                if len(members) == 1:
                    return "last member"
                rest = [m for m in isr if m != index] or [m for m in members if m != index]
                new = {**state, "members": [m for m in members if m != index],
                       "isr": [m for m in isr if m != index] or rest[:1]}
                if int(state["leader"]) == index:
                    new.update(leader=rest[0], epoch=int(state["epoch"]) + 1)
            client = self.hub.client
            tx = client.transactions
            won, _ = await client.transaction(
                compare=[tx.value(self._key(qkey)) == raw],
                success=[tx.put(self._key(qkey), json.dumps(new).encode())], failure=[])
            if won:
                log.info("quorum queue '%s' in vhost '%s': %s %s", name, vhost,
                         "member added:" if add else "member removed:", node)
                return "ok"
            await self.hub.barrier()  # someone else changed it: read it again
        return "busy"

    def quorum_queues(self) -> list[tuple[str, str, list[int]]]:
        """``(vhost, name, member indexes)`` of every quorum queue of the cluster."""
        out = []
        for qkey, (state, _) in self.states.items():
            vhost, name = split_queue_key(qkey)
            out.append((vhost, name, list(state["members"])))
        return out

    def fields(self, q: Queue) -> dict[str, Any]:
        """RabbitMQ's quorum queue fields of ``q`` for the API: leader, members, online
        (node names)."""
        known = self.states.get(queue_key(q.vhost_name, q.name))
        if known is None:
            return {}
        names = self.hub.names
        state = known[0]

        def name(i: int) -> str:
            return self.hub.m.node if i == self.runtime.index else names.get(i, f"node-{i}")

        running = self.hub.running
        group = self.groups.get(queue_key(q.vhost_name, q.name))
        lag = None
        if group is not None and group.leading:  # operations each follower is behind
            lag = {name(m): group.log.lsn - group.progress.get(m, 0)
                   for m in state["members"] if m != self.runtime.index}
        return {"leader": name(int(state["leader"])), "replica_lag": lag,
                "members": [name(i) for i in state["members"]],
                "online": [name(i) for i in state["members"] if i in running],
                "in_sync": [name(i) for i in state["isr"]], "epoch": state["epoch"]}
