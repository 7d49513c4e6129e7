"""Replicated streams of a cluster: a stream's replica on a node is its stream log.

Theory of operation
-------------------
A stream declared in a cluster (``x-queue-type: stream``) has members, chosen as a quorum
queue's are (:func:`amqp_server.cluster.placement.choose_members`):
``x-initial-cluster-size`` of them (the ``initial-cluster-size`` policy key wins over the
argument, as RabbitMQ's ``policy_precedence``; default: every node of the cluster, RabbitMQ's
``length(rabbit_nodes:list_members())``), the declaring node first and leading. Its etcd
state is a quorum queue's (``{"leader", "run", "epoch", "members", "isr"}`` under
``qq/<vhost>/<name>``) with ``"type": "stream"``, changed by the same transactions, and its
data path is the same sans-IO :class:`~amqp_server.cluster.replication.Replica` driven by
the same shell: :class:`StreamGroup` is a
:class:`~amqp_server.cluster.quorum_group.QuorumGroup` whose log is the stream's
:class:`~queue_store.stream_log.StreamLog` (there is no second copy of the messages):

* **One log.** Replica offset = stream offset, entry epoch = the chunk's epoch (the leader
  epoch that appended it). An entry's payload is ``u8 flags | u64 timestamp ms | record``
  (:data:`HEAD`): the stream record as stored, its chunk's append time, and whether it
  begins a chunk (:data:`CHUNK_START`: the leader's chunk is one event-loop turn's
  publishes) or a segment (:data:`SEGMENT_START`: the leader's segment was full). Every
  replica writes the records with the leader's timestamps and epochs and rolls segments at
  the leader's offsets (a follower may split a chunk the leader wrote whole, where a fetch
  answer ended), so timestamps, offsets and segment boundaries are the same on every
  replica. The :class:`Replica` keeps only the last :data:`~amqp_server.cluster.
  quorum_group.KEEP_ENTRIES` entries in RAM (read back from the log at start); a
  follower fetching below them gets entries read from the stream log's segments
  (:meth:`StreamLog.read_entries`), 512 at a time.
* **Commit.** The leader's publishes are confirmed once every in-sync replica has them on
  disk (the high watermark); consumers on every member read their own replica, up to the
  committed offset (:meth:`ReplicatedStream.readable_end`): the leader's commit, or the
  high watermark the leader's last answer carried on a follower.
* **Publishers on any node**: on the leader, appended; on a follower, sent to the leader
  over the node link (as to a quorum queue's leader: while there is none, they wait, and
  one refused by a node that no longer leads waits for the next); on a node holding no
  replica the stream is a stand-in for its leader (consumers read over the link).
* **Divergence**: a follower whose tail is not the leader's (an old leader's uncommitted
  chunks) is answered from the stream log's epoch checkpoint (Kafka's
  OffsetsForLeaderEpoch) and cuts its tail (:meth:`StreamLog.truncate`); a follower below
  the leader's log start (retention passed it) starts its log over there
  (:meth:`StreamLog.start_at`, an empty "snapshot").
* **Retention** is decided by the leader alone (its ``x-max-length-bytes`` /
  ``x-max-age``, checked every tick) and replicated: each tick it sends its log's first
  offset (a RETAIN record, :class:`~amqp_server.cluster.replica_records.Retain`) and the
  followers drop the segments below it (:meth:`StreamLog.drop_before`; same segment
  boundaries, so the same first offset). A follower applies no retention of its own.
* **Failover** is a quorum queue's: an in-sync member takes over in etcd; consumers on the
  surviving members go on reading their replica; a new leader's offsets continue the log.

Source: RabbitMQ streams (https://www.rabbitmq.com/docs/streams, osiris: a leader and
replicas of one segmented log, readers on any replica up to the committed offset); Kafka's
replication (fetch, ISR, high watermark, leader epochs).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import deque
from typing import TYPE_CHECKING, Any

from amqp_server.cluster.quorum_group import TIMING, QuorumGroup
from amqp_server.cluster.replica_records import Retain
from amqp_server.cluster.replication_types import Diverging, Snapshot
from amqp_server.cluster.stream_replica_log import (
    CHUNK_START,
    HEAD,
    NO_ROLL,
    SEGMENT_START,
    StreamReplicaLog,
    entry_payload,
)
from amqp_server.workers.link_codec import queue_key
from amqp_server.workers.remote_queue import RemoteQueue
from queue_store.consumer import Consumer
from queue_store.message import Message
from queue_store.outcomes import NOT_LEADER, REJECTED, REMOTE, ROUTED, PublishContext
from queue_store.queue import Queue
from queue_store.replica_log import ReplicaLogError
from queue_store.storage import name_id
from queue_store.stream_log import StreamLog
from queue_store.stream_queue import StreamQueue, segment_bytes

if TYPE_CHECKING:
    from amqp_server.cluster.quorum import QuorumManager

log = logging.getLogger("amqpq.stream")

__all__ = ["ReplicatedStream", "StreamGroup", "adopt", "initial_cluster_size", "make_stream",
           "new_stream_size"]


def initial_cluster_size(arguments: dict[str, Any], policy_value: Any, nodes: int) -> int:
    """How many replicas a new stream gets: the policy's ``initial-cluster-size``, else the
    ``x-initial-cluster-size`` argument, else ``nodes`` (the cluster's node count; RabbitMQ's
    default); at least 1."""
    for value in (policy_value, arguments.get("x-initial-cluster-size")):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return max(1, nodes)


class StreamGroup(QuorumGroup):
    """A replicated stream's replica on this node, leader or follower (module docstring):
    the quorum group shell over a :class:`StreamReplicaLog`."""

    log: StreamReplicaLog
    queue: ReplicatedStream | None  # type: ignore[assignment]
    _chunk_ms = 0  # leader: wall-clock ms of the chunk being built (its first publish)
    _following = -1  # the leader this replica last followed (logged when it changes)
    what = "stream"
    timing = dataclasses.replace(TIMING, push_hw=True)  # followers' readers: commits at once

    def _open_log(self) -> StreamReplicaLog:
        storage = self.runtime.broker.vhosts[self.vhost].storage
        args = self.manager.arguments_of(self.qkey)
        if storage is not None:
            directory = storage.directory / "streams" / name_id(self.name)
        else:
            directory = self.manager.data_dir / "streams" / name_id(self.name)
        return StreamReplicaLog(StreamLog(directory, NO_ROLL),
                                segment_bytes(args.get("x-stream-max-segment-size-bytes")))

    def _restart_replica(self) -> None:
        """:meth:`QuorumGroup._restart_replica`; the queue here reads the log opened again."""
        super()._restart_replica()
        if self.queue is not None:
            self.queue.log = self.log.stream
            self.queue.forget_tail()
            self.lead(self.queue)

    def check_entry(self, payload: bytes) -> None:
        if len(payload) < HEAD.size:
            raise ReplicaLogError(f"a stream entry of {len(payload)} bytes")

    def _sync_work(self) -> Any:
        return self.log.sync_work()

    # ---- the queue here -----------------------------------------------------------------

    def lead(self, queue: Any, from_disk: bool = False) -> None:
        """``queue`` (this node's :class:`ReplicatedStream`) reads this replica."""
        self.queue = queue
        self.log.on_write = queue.cache_tail
        self.log.on_reset = queue.forget_tail

    def append_record(self, record: bytes, now_ms: int) -> int:
        """Leader: ``record`` is appended at the end of this turn; its offset."""
        flags = 0
        if not self._ops:  # the turn's first: a chunk of its own (and maybe a segment)
            flags = CHUNK_START | (SEGMENT_START if self.log.segment_full() else 0)
            self._chunk_ms = now_ms
        offset = self.replica.log_end + len(self._ops)
        self.append(entry_payload(record, self._chunk_ms, flags))
        return offset

    def _commit(self, end: int) -> None:
        queue = self.queue
        if queue is None:
            return
        confirms = bool(queue.pending)
        queue.commit(end)
        if confirms:
            self.runtime.after_commit()

    def _become(self, a: Any) -> None:
        log.info("stream '%s' in vhost '%s': leader here (epoch %d, offsets %d to %d, "
                 "%d to commit first)", self.name, self.vhost, a.epoch,
                 self.log.stream.first_offset, self.replica.log_end,
                 self.replica.log_end - a.committed)
        if self.queue is not None:
            self.queue.release_held()

    def _hand_over(self, leader: int) -> None:
        """Another node leads (or will): this node's publishes not committed are refused
        (NOT_LEADER: a publisher on another node waits for the next leader); consumers
        here go on reading this replica; publishes go to ``leader``."""
        if leader >= 0 and leader != self._following:
            self._following = leader
            log.info("stream '%s' in vhost '%s': following node %d (epoch %d) from offset %d "
                     "(epoch %d), committed %d", self.name, self.vhost, leader,
                     self.replica.epoch, self.replica.log_end, self.replica.last_epoch(),
                     self.replica.committed)
        if self.queue is not None:
            self.queue.fail_pending()
            self.queue.follow(leader)

    # ---- records ------------------------------------------------------------------------

    def on_record(self, peer: int, record: Any) -> None:
        if isinstance(record, Retain):
            self._on_retain(peer, record)
            return
        committed = self.replica.committed
        super().on_record(peer, record)
        if self.queue is not None and self.replica.committed != committed:
            self.queue.dispatch()  # a follower's readers: more is committed

    def _on_retain(self, peer: int, r: Retain) -> None:
        if self.replica.leading or self.state is None or peer != int(self.state["leader"]) \
                or r.epoch != self.replica.epoch:
            return
        removed = self.log.stream.drop_before(r.first)
        if removed:
            log.info("stream '%s' in vhost '%s': %d messages removed by the leader's "
                     "retention (log from offset %d)", self.name, self.vhost, removed,
                     self.log.stream.first_offset)

    def _send_snapshot(self, peer: int, snapshot: Snapshot) -> None:
        """A follower fetched below the entries kept in RAM and the file could not answer:
        its tail diverges (answered from the epoch checkpoint: it cuts and fetches again),
        or it is below the log's start (it starts over at the log's first offset)."""
        f = self.catch_up.fetches.get(peer)
        stream = self.log.stream
        first = stream.first_offset
        if f is not None and first <= f.offset <= stream.next_offset:
            found, end = stream.epoch_end(f.last_epoch)
            log.info("stream '%s' in vhost '%s': node %d's log diverges at offset %d "
                     "(epoch %d): it cuts to offset %d", self.name, self.vhost, peer,
                     f.offset, f.last_epoch, min(end, f.offset))
            self._send(peer, Diverging(snapshot.epoch, f.offset, f.last_epoch, found, end))
            return
        super()._send_snapshot(peer, dataclasses.replace(
            snapshot, offset=first, last_epoch=self.log.epoch_at(first) or 0))

    def tick(self) -> None:
        """Once a second: :meth:`QuorumGroup.tick`; the committed offset saved; a leader
        applies retention and sends its log's start to the followers; readers are
        served."""
        super().tick()
        queue = self.queue
        if queue is None or self._closed:
            return
        try:
            self.log.save_committed(min(self.replica.committed, self.replica.durable))
        except OSError as exc:
            log.warning("stream '%s': committed offset not saved: %s", self.name, exc)
        if self.replica.leading and self.state is not None:
            queue.apply_retention()
            first = self.log.stream.first_offset
            for m in self.state["members"]:
                if m != self.me:
                    self._send(int(m), Retain(self.replica.epoch, first))
        queue.dispatch()


class ReplicatedStream(StreamQueue):
    """Stream ``name`` on a member node, reading its replica (``group``; other arguments as
    :class:`StreamQueue`'s). Publishes append on the leader and go to the leader from a
    follower; consumers read up to the committed offset."""

    def __init__(self, name: str, vhost_name: str, *, group: StreamGroup,
                 **kwargs: Any) -> None:
        super().__init__(name, vhost_name, stream_log=group.log.stream, **kwargs)
        self.group = group
        # (offset, result key or None): appended, not committed yet
        self.pending: deque[tuple[int, tuple[int, int] | None]] = deque()
        # (message, result key or None): published before this node's election was done
        self.held: deque[tuple[Message, tuple[int, int] | None]] = deque()
        leader = int(group.state["leader"]) if group.state else group.me
        self.forward = RemoteQueue(group.runtime.client, leader, name, vhost_name,
                                   durable=self.durable, arguments=self.arguments)
        self.forward.home_moves = True  # a publish waits for the next leader
        group.lead(self)

    def readable_end(self) -> int:
        """The committed offset: consumers never see what a failover could cut."""
        return min(self.group.replica.committed, self.log.next_offset)

    def follow(self, leader: int) -> None:
        """Publishes here go to ``leader`` (-1: none known yet)."""
        self.forward.home = leader

    def leader_stand_in(self) -> RemoteQueue | None:
        """Where publishes that waited for a leader go (``RemoteClient.release_parked``):
        the leader's stand-in, or None when this node leads (or is about to)."""
        group = self.group
        return None if group.leading or group.expecting else self.forward

    # ---- publishing ----------------------------------------------------------------------

    def publish(self, message: Message) -> int:
        return self._replicate(message, None)

    def publish_for(self, message: Message, context: PublishContext | None) -> int:
        """Leader: appended, answered once committed (ROUTED|REMOTE with a key in
        ``context.waits`` when the publisher waits); elected but not leading yet: held;
        otherwise sent to the leader (:class:`RemoteQueue`)."""
        return self._replicate(message, context)

    def _replicate(self, message: Message, context: PublishContext | None) -> int:
        group = self.group
        if not group.leading:
            if not group.expecting:
                if self.forward.home == group.me:  # not known yet: the publisher may retry
                    return REJECTED | NOT_LEADER
                return self.forward.publish_for(message, context)  # type: ignore[arg-type]
            key = group.runtime.local_pending(context)
            self.held.append((message, key))
            return ROUTED | REMOTE if key is not None else ROUTED
        key = group.runtime.local_pending(context)
        self._append(message, key)
        return ROUTED | REMOTE if key is not None else ROUTED

    def _append(self, message: Message, key: tuple[int, int] | None) -> None:
        offset = self.group.append_record(self.record_of(message), self._wall_ms())
        self.pending.append((offset, key))
        self.published += 1

    def release_held(self) -> None:
        """This node leads now: the publishes that waited for it are appended."""
        while self.held and self.group.leading:
            self._append(*self.held.popleft())

    def commit(self, end: int) -> None:
        """Offsets below ``end`` are committed: their publishers confirmed, readers
        served."""
        pending = self.pending
        runtime = self.group.runtime
        while pending and pending[0][0] < end:
            key = pending.popleft()[1]
            if key is not None:
                runtime.local_result(key, ROUTED)
        self.dispatch()

    def fail_pending(self) -> None:
        """This node stopped leading: publishes not committed (and held ones) are refused
        with NOT_LEADER (a publisher on another node sends them to the next leader; the
        old leader's entry may still commit: at-least-once)."""
        runtime = self.group.runtime
        for queue in (self.pending, self.held):
            while queue:
                key = queue.popleft()[1]
                if key is not None:
                    runtime.local_result(key, REJECTED | NOT_LEADER)

    # ---- consumers ----------------------------------------------------------------------

    def add_consumer(self, consumer: Consumer) -> None:
        """:meth:`StreamQueue.add_consumer`; a cursor past the committed end (``next``,
        ``last`` or a number naming uncommitted offsets) starts at it: what this replica
        holds beyond may still be cut."""
        super().add_consumer(consumer)
        reader = self._readers.get(consumer)
        if reader is not None:
            reader.offset = min(reader.offset, self.readable_end())

    def forget_tail(self) -> None:
        """The log was cut or started over: the RAM tail goes, and cursors past the new
        end come back to it."""
        super().forget_tail()
        end = self.log.next_offset
        for reader in self._readers.values():
            reader.offset = min(reader.offset, end)

    # ---- retention and life cycle -------------------------------------------------------

    def tick(self) -> None:
        """Retention is the leader's (:meth:`StreamGroup.tick`); readers are served there."""

    def apply_retention(self) -> None:
        """The leader's retention (``x-max-length-bytes``, ``x-max-age``)."""
        super().tick()

    def mark_deleted(self) -> list[Consumer]:
        """The stream went: its consumers (the log is the group's: removed with it)."""
        consumers = list(self._readers)
        self._readers.clear()
        self._consumer_order.clear()
        self.deleted = True
        self.fail_pending()
        return consumers


# ---- the node's side (QuorumManager's streams) --------------------------------------------


def make_stream(manager: QuorumManager, name: str, vhost_name: str, home: int,
                kwargs: dict[str, Any]) -> Queue:
    """Stream ``name``'s object on this node: a :class:`ReplicatedStream` on a member (or
    on the declaring node, ``home``, before etcd has its state), else a stand-in for the
    leader."""
    qkey = queue_key(vhost_name, name)
    me = manager.runtime.index
    known = manager.states.get(qkey)
    leader = int(known[0]["leader"]) if known else home
    if (known is None and home != me) or (known is not None and me not in known[0]["members"]):
        q = RemoteQueue(manager.runtime.client, leader, name, vhost_name, **kwargs)
        q.home_moves = True  # publishes wait for the next leader
        return q
    manager.declaring[qkey] = kwargs["arguments"]
    try:
        group = manager.group(qkey)
    finally:
        manager.declaring.pop(qkey, None)
    queue = ReplicatedStream(name, vhost_name, group=group, **kwargs)
    if known:
        group.on_state(*known)
    else:
        manager.runtime.keep_task(asyncio.ensure_future(manager.create(group, kwargs)))
    return queue


def new_stream_size(manager: QuorumManager, vhost_name: str, kwargs: dict[str, Any]) -> int:
    """The replicas of a stream being declared with Queue ``kwargs``
    (:func:`initial_cluster_size`: its policy's ``initial-cluster-size``, its argument, or
    the cluster's node count)."""
    settings = kwargs.get("settings")
    vhost = manager.runtime.broker.vhosts.get(vhost_name)
    policy = vhost.policies.get(settings.policy or "") if vhost is not None \
        and settings is not None else None
    return initial_cluster_size(
        kwargs.get("arguments") or {},
        policy.definition.get("initial-cluster-size") if policy is not None else None,
        len(set(manager.hub.nodes.values())))


def adopt(manager: QuorumManager, group: StreamGroup) -> None:
    """This node became a member of a stream it knew as a stand-in (etcd named it after
    the declare): the stand-in gives way to a :class:`ReplicatedStream` (its consumers,
    reading the leader over the link, are cancelled: they consume again here)."""
    old = manager.runtime.queue_by_key(group.qkey)
    if not isinstance(old, RemoteQueue):
        return
    vhost = manager.runtime.broker.vhosts[old.vhost_name]
    queue = ReplicatedStream(old.name, old.vhost_name, group=group, durable=old.durable,
                             auto_delete=old.auto_delete, arguments=old.arguments,
                             settings=old.settings, vhost=vhost)
    for consumer in list(old.consumers):
        old.remove_consumer(consumer)
        consumer.channel.consumer_cancelled_by_broker(consumer)
    if vhost.queues.get(old.name) is old:
        vhost.queues[old.name] = queue
