"""One quorum queue's replica on a node: the asyncio, etcd and node-link shell around the
sans-IO :class:`~amqp_server.cluster.replication.Replica`.

The replication rules (fetch from an offset, leader epochs and truncation of a divergent
tail, the high watermark, ISR shrink and expand, elections, fencing) are the replica's; this
shell only feeds it events and carries out its actions:

=================================  ==========================================================
event                              from
=================================  ==========================================================
``append_many``                    the leader's :class:`ReplicatedQueue` (its operations of
                                   one event-loop turn: ENQ, ACK, RET payloads)
``receive``                        a REPL record of the node link
                                   (:mod:`amqp_server.cluster.replica_records`)
``on_state`` / ``cas_result``      etcd's watch of the queue's state / an etcd transaction
``fsync_done``                     the replica log's fsync, run off the event loop
``session`` / ``on_alive``         this node's etcd lease (membership) / the running nodes
``tick``                           once a second (the runtime's tick), and a member's death
=================================  ==========================================================

========================  =========================================================
action                    carried out as
========================  =========================================================
Send                      a REPL record on the node link (lost when the link is down); a
                          Snapshot for a follower whose offset the log file still holds
                          is the entries from there, read from the file; otherwise the
                          file up to the snapshot point, in chunks the follower asks for
Write / Truncate          :meth:`ReplicaLog.write` / :meth:`ReplicaLog.truncate`
Install                   :meth:`ReplicaLog.install` of the snapshot just received (its
                          chunks written to a file beside the log)
Fsync                     :meth:`ReplicaLog.sync` in the broker's blocking pool
Cas                       an etcd transaction comparing the value it replaces
Commit                    :meth:`ReplicatedQueue.commit` (publishers confirmed)
Become / StepDown         the queue here becomes the leader's / a stand-in for the new one
========================  =========================================================

The leader's queue delivers only while :meth:`Replica.serving`: its epoch's start is
committed (so an operation the last leader committed, a return say, is applied before any
delivery) and its etcd session is surely alive. Publishes to a queue whose etcd state names
this node but whose election is not done yet (a restart, a new queue) wait here and are
appended once it leads.

The replica's log id (:mod:`amqp_server.cluster.log_ids`) is kept beside its log
(:mod:`amqp_server.cluster.log_id_file`), read when the log is opened (a new or migrated log
gets one, logged); etcd's state records the ISR members' ids as ``"log_ids": {"node":
"16 hex digits"}``. A replica that may not lead although etcd names it or it is in sync
(its disk lost) logs why, once.

Source: Kafka replication (fetch, ISR, high watermark, leader epochs: KIP-101, KIP-279,
KIP-320); RabbitMQ quorum queues; h11's sans-IO split.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from amqp_server.cluster import replica_records
from amqp_server.cluster.isr import LAG_TIMEOUT
from amqp_server.cluster.log_id_file import open_log_id, remove_log_id
from amqp_server.cluster.replica_catch_up import SNAPSHOT_IN_FILE, CatchUp
from amqp_server.cluster.replica_records import ChunkRequest, SnapshotChunk
from amqp_server.cluster.replication import Replica
from amqp_server.cluster.replication_rules import Timing
from amqp_server.cluster.replication_types import (
    Become,
    Cas,
    Commit,
    Fetch,
    Fsync,
    GroupState,
    Install,
    Records,
    Send,
    Snapshot,
    StepDown,
    Truncate,
    Write,
)
from amqp_server.workers.link_codec import message_from, queue_key
from queue_store.replica_log import ReplicaLog, ReplicaLogError, check_entry

if TYPE_CHECKING:
    from amqp_server.cluster.quorum import QuorumManager
    from amqp_server.cluster.quorum_queue import ReplicatedQueue

log = logging.getLogger("amqpq.quorum")

#: committed entries a replica keeps in RAM behind its high watermark, so a follower away
#: for fewer fetches them instead of a snapshot; the snapshot point moves by as many at once
KEEP_ENTRIES = 8192
TIMING = Timing(lag_timeout=LAG_TIMEOUT, fetch_interval=0.5, batch=512)
LEASE_MARGIN = 0.9  # the share of the etcd lease a leader counts on (clock drift, delays)
FSYNC_RETRY = 1.0  # seconds before a failed fsync is tried again


def group_state(state: dict[str, Any], version: int) -> GroupState:
    """etcd's JSON state of a quorum queue as a :class:`GroupState` (``run`` 0 when the
    value names none: written by a membership change or a leader transfer, so the leader
    it names takes a new epoch of its own first; ``log_ids`` None when the value has none:
    written before log ids), with the log ids of its ISR members only."""
    isr = tuple(int(m) for m in state["isr"])
    ids = state.get("log_ids")
    log_ids = None if ids is None else tuple(sorted(
        (int(m), int(i, 16)) for m, i in ids.items() if int(m) in isr))
    return GroupState(int(state["leader"]), int(state.get("run") or 0), int(state["epoch"]),
                      tuple(int(m) for m in state["members"]), isr, version, log_ids)


def log_ids_value(log_ids: tuple[tuple[int, int], ...]) -> dict[str, str]:
    """:attr:`GroupState.log_ids` as etcd's JSON holds them (ids as 16 hex digits: exact
    in any JSON reader)."""
    return {str(m): f"{i:016x}" for m, i in log_ids}


class QuorumGroup:
    """One quorum queue's replica on this node, leader or follower (module docstring)."""

    timing = TIMING  # the replica's (a stream's group: the high watermark pushed)
    what = "quorum queue"  # in log lines

    def __init__(self, manager: QuorumManager, vhost: str, name: str) -> None:
        self.manager = manager
        self.runtime = manager.runtime
        self.me = manager.runtime.index
        self.vhost, self.name = vhost, name
        self.qkey = queue_key(vhost, name)
        self.log = self._open_log()
        self.replica = self._replica(manager.run)
        self.state: dict[str, Any] | None = None
        self.raw = b""  # the etcd value the state was read from (for transactions)
        self._versions = 0  # etcd values seen (GroupState.version counts them)
        self._raws: dict[int, bytes] = {}  # version -> its value, for a swap's compare
        self.queue: ReplicatedQueue | None = None
        self.acks: list[int] = []  # offsets that left the queue, for this turn's ACK entry
        self._ops: list[bytes] = []  # this turn's operations, appended at its end
        self._scheduled = False
        self._incoming: Path | None = None  # a snapshot being installed
        #: followers' fetches, snapshots sent and received (:mod:`.replica_catch_up`)
        self.catch_up = CatchUp(self.what, name, vhost)
        self._closed = False
        self._not_eligible: str | None = None  # the replica's, as last logged
        # the last Records encoded: (epoch, first, prev_epoch, hw, count), its last and first
        # payloads (the objects), its body (_encoded)
        self._last_records: tuple[tuple[int, ...], bytes, bytes, bytes] | None = None

    def _open_log(self) -> Any:
        """The replica's log: a quorum queue's :class:`ReplicaLog` (a stream's group gives
        its stream log, :mod:`amqp_server.cluster.stream_group`)."""
        digest = hashlib.sha1(self.qkey).hexdigest()[:16]
        return ReplicaLog(self.manager.data_dir / f"{digest}.log")

    #: ``check_entry(payload)`` raises ReplicaLogError when an entry from the leader is
    #: damaged (the replica log's check itself, no call in between: once per entry on a
    #: follower; a stream's group has its own)
    check_entry = staticmethod(check_entry)

    def _replica(self, run: int) -> Replica:
        log_ = self.log
        tail = log_.tail()
        log_id, how = open_log_id(log_.path, empty=not log_.start and not tail)
        if how != "read":
            log.info("%s '%s' in vhost '%s': replica log id %016x (%s)", self.what, self.name,
                     self.vhost, log_id, "a new log" if how == "new"
                     else "a log written before log ids")
        return Replica(self.me, run, tail, self.timing, start=log_.start,
                       start_epoch=log_.start_epoch,
                       snapshot=SNAPSHOT_IN_FILE if log_.start else None, log_id=log_id)

    # ---- views ---------------------------------------------------------------------------

    @property
    def leading(self) -> bool:
        return self.replica.leading

    @property
    def epoch(self) -> int:
        return self.replica.epoch

    @property
    def progress(self) -> dict[int, int]:
        """Leader: follower -> entries it has on disk (empty on a follower)."""
        lead = self.replica.lead
        return dict(lead.progress) if lead is not None else {}

    @property
    def expecting(self) -> bool:
        """Not leading yet, but etcd names this node (or names nobody yet): publishes to
        the queue here wait for the election instead of being refused."""
        return not self.replica.leading and not self._closed and (
            self.state is None or int(self.state["leader"]) == self.me)

    def serving(self) -> bool:
        """May the leader's queue deliver now (:meth:`Replica.serving`)?"""
        return self.replica.serving(self._now())

    # ---- the queue here ------------------------------------------------------------------

    def lead(self, queue: ReplicatedQueue, from_disk: bool = False) -> None:
        """``queue`` is this queue's object here (declared or recovered here while etcd
        names this node, or created at an election): it takes the replica's messages,
        flagged redelivered; it delivers once the replica leads and serves."""
        self.queue = queue
        queue.restore((offset, message_from(m[0], m[1], m[2]), m[3])
                      for offset, m in self.log.messages())

    def append(self, payload: bytes | None) -> int:
        """The leader's queue applied an operation (its replica log payload; None: nothing
        to log): appended at the end of this event-loop turn. Returns the log's LSN."""
        if payload is not None:
            self._ops.append(payload)
            self.changed()
        return self.log.lsn

    def changed(self) -> None:
        """Operations wait: appended at the end of this turn (one Write, one fsync)."""
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def take_acks(self) -> None:
        """The messages that left the leader's queue this turn: one ACK entry."""
        if self.acks:
            acks, self.acks = self.acks, []
            self.append(self.log.ack(acks))

    def ret(self, offset: int, returns: int) -> None:
        """A message went back to the leader's queue (``returns`` so far): a RET entry,
        after this turn's ACK (the log keeps their order)."""
        self.take_acks()
        self.append(self.log.ret(offset, returns))

    def flush(self) -> None:
        self._scheduled = False
        if self._closed:  # deleted or stopped this turn: the log file is closed or gone
            self._ops.clear()
            self.acks.clear()
            return
        self.take_acks()
        if not self._ops:
            return
        ops, self._ops = self._ops, []
        first, actions = self.replica.append_many(ops, self._now())
        if first is None:  # no longer leading (stepped down this turn): never logged
            self.log.discard_unwritten()
            return
        self._do(actions)

    # ---- events in -----------------------------------------------------------------------

    def on_state(self, state: dict[str, Any], raw: bytes) -> None:
        """etcd's state of the queue changed (or was read at start)."""
        if raw == self.raw:
            return
        self.state, self.raw = state, raw
        self._versions += 1
        self._raws[self._versions] = raw
        for v in [v for v in self._raws if v < self._versions - 8]:
            del self._raws[v]
        self.replica.on_alive(self.manager.hub.running)
        self._do(self.replica.on_state(group_state(state, self._versions), self._now()))
        leader = int(state["leader"])
        if not self.replica.leading and leader != self.me and self.queue is not None:
            self._hand_over(leader)  # waited for an election another node won
        if self.me not in state["members"]:
            self.manager.drop(self)

    def on_record(self, peer: int, record: Any) -> None:
        """A replication record from node ``peer`` (a decoded REPL body)."""
        if isinstance(record, SnapshotChunk):
            self._on_chunk(peer, record)
            return
        if isinstance(record, ChunkRequest):
            self._on_chunk_request(peer, record)
            return
        if isinstance(record, Records):
            try:
                for _, payload in record.entries:
                    self.check_entry(payload)
            except ReplicaLogError as exc:
                log.error("%s '%s': damaged entries from node %d: %s", self.what, self.name,
                          peer, exc)
                return
        elif isinstance(record, Fetch):
            self.catch_up.on_fetch(peer, record, self.replica.start, self._now())
        try:
            self._do(self.replica.receive(peer, record, self._now()))
        finally:
            self._incoming = None

    def tick(self) -> None:
        """Once a second: the lease, the running nodes, the replica's timers, compaction."""
        r = self.replica
        m = self.manager.hub.m
        run = self.manager.run
        if m.refreshed_at:
            self._do(r.session(run, m.refreshed_at + LEASE_MARGIN * m.etcd.lease_ttl))
        r.on_alive(self.manager.hub.running)
        self._do(r.tick(self._now()))
        if r.not_eligible != self._not_eligible:
            self._not_eligible = r.not_eligible
            if r.not_eligible is not None:
                log.warning("%s '%s' in vhost '%s': %s", self.what, self.name, self.vhost,
                            r.not_eligible)
        self._compact()
        if self.queue is not None and r.leading and self.serving():
            self.queue.dispatch()

    def elect(self) -> None:
        """A member's node died or stopped (an ordered record): take over now if it led
        and this node may; a leader here asks etcd to drop it from the in-sync replicas."""
        self.replica.on_alive(self.manager.hub.running)
        self._do(self.replica.tick(self._now()))

    # ---- actions out ---------------------------------------------------------------------

    def _do(self, actions: Sequence[Any]) -> None:
        for a in actions:
            if isinstance(a, Send):
                self._send(a.to, a.record)
            elif isinstance(a, Write):
                try:
                    self.log.write(a.first, a.entries)
                except (ReplicaLogError, OSError) as exc:  # not expected: start again
                    log.error("%s '%s': replica log write failed: %s", self.what, self.name,
                              exc)
                    self._restart_replica()
                    return
            elif isinstance(a, Fsync):
                self._fsync(a.token)
            elif isinstance(a, Commit):
                self._commit(a.end)
            elif isinstance(a, Cas):
                self._cas(a)
            elif isinstance(a, Truncate):
                log.warning("%s '%s' in vhost '%s': replica log cut to offset %d "
                            "(the entries after it are not epoch %d's leader's)", self.what,
                            self.name,
                            self.vhost, a.offset, self.replica.epoch)
                self.log.truncate(a.offset)
            elif isinstance(a, Install):
                self._install(a)
            elif isinstance(a, Become):
                self._become(a)
            elif isinstance(a, StepDown):
                self._step_down(a.epoch)

    def _send(self, peer: int, record: Any) -> None:
        out = self.runtime.links.out.get(peer)
        if out is None:
            return
        if isinstance(record, Snapshot):
            records = self.catch_up.file_records(peer, record, self.log, self.replica.start,
                                                 self.timing.batch, self._now())
            if records is None:
                self._send_snapshot(peer, record)
                return
            record = records
        out.outbox.repl(self._encoded(record))
        out.schedule()

    def _encoded(self, record: Any) -> bytes:
        """``record``'s REPL body; a Records like the last one encoded this event-loop turn
        (the same leader epoch, offsets, high watermark and payload objects: the followers
        at one offset answered after one append) reuses its body: one encoding per batch,
        not per follower."""
        if isinstance(record, Records) and record.entries:
            key = (record.epoch, record.first, record.prev_epoch, record.hw,
                   len(record.entries))
            last = self._last_records
            if last is not None and last[0] == key and last[1] is record.entries[-1][1] \
                    and last[2] is record.entries[0][1]:
                return last[3]
            body = replica_records.encode(self.qkey, record)
            if last is None:  # kept for this event-loop turn only (it may be large)
                asyncio.get_running_loop().call_soon(self._forget_records)
            self._last_records = (key, record.entries[-1][1], record.entries[0][1], body)
            return body
        return replica_records.encode(self.qkey, record)

    def _forget_records(self) -> None:
        self._last_records = None

    # ---- snapshots, in chunks ------------------------------------------------------------

    def _send_snapshot(self, peer: int, snapshot: Snapshot) -> None:
        """Begin sending the snapshot (the log file up to its snapshot point) to ``peer``,
        one chunk now, the next when it asks (:meth:`_on_chunk_request`); nothing while one
        is on its way to it already (its fetches go on meanwhile)."""
        chunk = self.catch_up.first_chunk(peer, snapshot, self.log, self._now())
        if chunk is not None:
            self._send(peer, chunk)

    def _on_chunk_request(self, peer: int, req: ChunkRequest) -> None:
        if not self.replica.leading:
            return  # not ours any more: the follower fetches again and gets another
        chunk = self.catch_up.next_chunk(peer, req, self.log, self._now())
        if chunk is not None:
            self._send(peer, chunk)

    def _on_chunk(self, peer: int, c: SnapshotChunk) -> None:
        """A chunk of the leader's snapshot: written to a file beside the log; the next one
        asked for; the last one makes the replica take the snapshot (:meth:`_install`)."""
        if self.replica.leading or self.state is None or peer != int(self.state["leader"]) \
                or c.epoch != self.replica.epoch:
            return
        path = self.log.path.with_name(self.log.path.name + ".snapshot")
        try:
            got = self.catch_up.receive_chunk(c, path)
        except OSError as exc:
            log.error("%s '%s': snapshot chunk not written: %s", self.what, self.name, exc)
            return
        if isinstance(got, ChunkRequest):
            self._send(peer, got)
        elif got is not None:
            self._incoming = path
            try:
                self._do(self.replica.receive(peer, got, self._now()))
            finally:
                self._incoming = None
                path.unlink(missing_ok=True)

    def _fsync(self, token: tuple[int, int]) -> None:
        def done(error: Exception | None) -> None:
            if self._closed:
                return
            if error is not None:
                log.error("%s '%s': fsync failed: %s", self.what, self.name, error)
                asyncio.get_running_loop().call_later(FSYNC_RETRY, self._fsync, token)
                return
            self._do(self.replica.fsync_done(token, self._now()))

        self.runtime.broker.env.run_blocking(self._sync_work(), done)

    def _sync_work(self) -> Any:
        """What fsyncs the log, run in the blocking pool (a callable)."""
        return self.log.sync

    def _commit(self, end: int) -> None:
        queue = self.queue
        if queue is None:
            return
        confirms = bool(queue.pending)
        queue.commit(end)  # LSN = offset + 1: entries below ``end`` have LSN <= end
        if confirms:
            self.runtime.after_commit()
        if self.serving():
            queue.dispatch()

    def _cas(self, cas: Cas) -> None:
        base = cas.new.version
        raw = self._raws.get(base)
        new = cas.new
        if raw is None or self.state is None:
            self.replica.cas_result(base, False)
            return
        value = {**self.state, "leader": new.leader, "run": new.run, "epoch": new.epoch,
                 "members": list(new.members), "isr": list(new.isr)}
        if new.log_ids is not None:
            value["log_ids"] = log_ids_value(new.log_ids)

        async def run() -> None:
            won: bool | None = None
            try:
                won = await self.manager.replace_state(self.qkey, raw, value)
                if won:
                    log.info("%s '%s' in vhost '%s': %s (epoch %d)", self.what, self.name,
                             self.vhost, cas.why, new.epoch)
            except Exception as exc:
                log.warning("%s '%s': etcd change failed: %r", self.what, self.name, exc)
            finally:
                self.replica.cas_result(base, won)

        self.runtime.keep_task(asyncio.ensure_future(run()))

    def _install(self, a: Install) -> None:
        data = self._incoming
        try:
            if data is None or not data.exists():
                raise ReplicaLogError("no snapshot received")
            self.log.install(a.offset, a.last_epoch, data)
        except (ReplicaLogError, OSError) as exc:
            log.error("%s '%s': snapshot not installed: %s", self.what, self.name, exc)
            self._restart_replica()
            return
        log.info("%s '%s' in vhost '%s': snapshot of node %s installed at offset "
                 "%d (%d messages)", self.what, self.name, self.vhost,
                 self.state and self.state["leader"],
                 a.offset, self.log.count)

    def _restart_replica(self) -> None:
        """The replica log and the replica disagree (a failed install): start the replica
        again from the file, as after a restart."""
        self.log.close()
        self.log = self._open_log()
        self.replica = self._replica(self.manager.run)
        if self.state is not None:
            state, raw = self.state, self.raw
            self.raw = b""
            self.on_state(state, raw)

    def _become(self, a: Become) -> None:
        log.info("%s '%s' in vhost '%s': leader here (epoch %d, %d messages, "
                 "%d entries to commit first)", self.what, self.name, self.vhost, a.epoch,
                 self.log.count, self.replica.log_end - a.committed)
        if self.queue is None:
            self.manager.promote(self)  # the stand-in gives way: lead() is called
        if self.queue is not None:
            self.queue.release_held()

    def _step_down(self, epoch: int) -> None:
        log.warning("%s '%s' in vhost '%s': no longer the leader here (epoch %d)",
                    self.what, self.name, self.vhost, epoch)
        self._ops.clear()
        self.acks.clear()
        self.log.discard_unwritten()
        leader = int(self.state["leader"]) if self.state else -1
        self._hand_over(leader if leader != self.me else -1)

    def _hand_over(self, leader: int) -> None:
        """Another node leads (or will): nack what was not committed, cancel consumers,
        a stand-in for ``leader`` takes the queue's place."""
        queue, self.queue = self.queue, None
        if queue is not None:
            queue.fail_pending()
            self.manager.replace(queue, leader)

    def _compact(self) -> None:
        """Move the snapshot point up behind what is committed and on disk, keeping
        :data:`KEEP_ENTRIES` entries (the replica holds only the entries after the point in
        RAM); rewrite the file when dead records outweigh live ones and nothing is in flight
        (the point then moves to the log's end): the live messages are written to a new
        file in the blocking pool while the log goes on, then what was appended meanwhile
        is copied after them and the new file takes the old one's place
        (:meth:`ReplicaLog.finish_compaction`, on the event loop)."""
        r, log_ = self.replica, self.log
        upto = min(r.committed, r.durable)
        if upto - r.start >= 2 * KEEP_ENTRIES:
            self._move_point(upto - KEEP_ENTRIES)
        if log_.needs_compaction() and r.committed == r.durable == r.log_end == log_.lsn \
                == log_.written and not self._ops and not self.acks:
            self._move_point(r.log_end)
            job = log_.begin_compaction() if r.start == r.log_end else None
            if job is None:
                return
            began = self._now()

            def done(error: Exception | None) -> None:
                try:
                    if log_.finish_compaction(job):
                        log.info("%s '%s' in vhost '%s': replica log compacted to %d "
                                 "bytes (%.1f s, written off the event loop)", self.what, self.name,
                                 self.vhost, log_.size, self._now() - began)
                        return
                except OSError as exc:
                    error = exc
                if error is not None or job.error is not None:
                    log.warning("%s '%s': replica log compaction failed: %s",
                                self.what, self.name, error or job.error)

            self.runtime.broker.env.run_blocking(job.run, done)

    def _move_point(self, upto: int) -> None:
        point = self.log.mark(upto)
        if point > self.replica.start:
            self.replica.compact(point, SNAPSHOT_IN_FILE)

    def close(self, remove: bool = False) -> None:
        self._closed = True
        if self.queue is not None:
            self.queue.fail_pending()
        if remove:
            self.log.remove()
            remove_log_id(self.log.path)
        else:
            self.log.close()

    def _now(self) -> float:
        return asyncio.get_running_loop().time()


def new_run() -> int:
    """A run number for a process without an etcd lease id (unique enough per start)."""
    return int.from_bytes(os.urandom(6), "big") or 1
