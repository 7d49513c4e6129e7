"""One quorum queue's replica on a node: replication, commits, ISR changes, elections.

The leader's side (append, send, fsync, high watermark, ISR shrink and growth) and a
follower's (chunks, snapshots, acknowledgements, taking over) of a replicated quorum queue;
:mod:`amqp_server.cluster.quorum` explains the design and holds the node's groups.

Source: Kafka replication (ISR, high watermark, leader epoch); RabbitMQ quorum queues.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from typing import TYPE_CHECKING, Any

from amqp_server.cluster.isr import Replicas, high_watermark, isr_change
from amqp_server.cluster.quorum_queue import ReplicatedQueue
from amqp_server.workers.link_codec import message_from, queue_key
from queue_store.replica_log import ReplicaLog, ReplicaLogError

if TYPE_CHECKING:
    from amqp_server.cluster.quorum import QuorumManager

log = logging.getLogger("amqpq.quorum")

RESYNC_AFTER = 2.0  # seconds before a snapshot request is repeated


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
        self.acks: list[int] = []  # offsets that left the queue, for this turn's ACK record
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
        # the ISR asked of etcd, counted by the high watermark until etcd's state has it
        # or the request lost (the maximal ISR: amqp_server.cluster.isr)
        self.proposed: tuple[int, ...] | None = None
        self.committed = 0  # the highest LSN committed while leading this epoch
        # follower side
        self.leader = -1  # the node whose chunks this replica takes (etcd's may lag)
        self.stepped_down = 0  # the epoch this node stopped leading at
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
        self.committed = 0
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
        self.proposed = None  # etcd's state now says what the ISR is
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
        if not self.synced:
            self.ask_snapshot()

    # ---- leader: replication -------------------------------------------------------------

    def changed(self) -> None:
        """Operations were appended: written, sent and fsynced at the end of this turn."""
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def take_acks(self) -> None:
        """The messages that left the leader's queue this turn: one ACK record."""
        if self.acks:
            acks, self.acks = self.acks, []
            self.log.ack(acks)

    def flush(self) -> None:
        self._scheduled = False
        self.take_acks()
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
        elif error is None and not self.acks and self.log.compact():
            log.info("quorum queue '%s' in vhost '%s': replica log compacted to %d bytes",
                     self.name, self.vhost, self.log.size)
        if self.leading:
            self.try_commit()
        elif error is None and self.synced and self.leader >= 0:
            self.runtime.send_control(self.leader, ("qack", self.qkey, self.epoch, self.durable))

    def replicas(self) -> Replicas:
        """What this leader knows of the replicas (:mod:`amqp_server.cluster.isr`)."""
        return Replicas(self.me, tuple(self.members), tuple(self.isr), self.proposed,
                        self.durable, self.log.lsn, self.progress, self.committed)

    def high_watermark(self) -> int | None:
        """:func:`amqp_server.cluster.isr.high_watermark` (None: below a majority)."""
        return high_watermark(self.replicas())

    def try_commit(self) -> None:
        hw = self.high_watermark()
        if hw is None:
            return
        self.committed = max(self.committed, hw)
        if self.queue is not None and self.queue.pending:
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
                self.runtime.send_control(peer, ("qfenced", self.qkey, int(self.state["epoch"])))
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
        self.runtime.send_control(int(self.state["leader"]), ("qsync", self.qkey,
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
            self.runtime.send_control(peer, ("qfenced", self.qkey, known))
            return
        if self.leading:  # a newer leader: this one was cut off
            self.step_down()
        if epoch != self.epoch or peer != self.leader:
            self.synced = False  # another leader's log: a snapshot of it first
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
            silent_for = {m: now - max(self.last_ack.get(m, 0.0), self.lead_since)
                          for m in self.members if m != self.me}
            change = isr_change(self.replicas(), {*self.runtime.links.out, self.me},
                                self.ready, silent_for)
            if change is not None:
                self._change({"isr": list(change[0])}, change[1])
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
        if self.leading and "isr" in update:
            self.proposed = tuple(update["isr"])

        async def run() -> None:
            try:
                won = await self.manager.replace_state(self.qkey, self.raw, new)
                if not won:
                    self.proposed = None  # etcd kept another state: the watch brings it
                if won:
                    log.info("quorum queue '%s' in vhost '%s': %s (epoch %d)", self.name,
                             self.vhost, why, new["epoch"])
            except Exception as exc:
                self.proposed = None
                log.warning("quorum queue '%s': etcd change failed: %r", self.name, exc)
            finally:
                self._changing = False

        self.runtime.keep_task(asyncio.ensure_future(run()))

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
