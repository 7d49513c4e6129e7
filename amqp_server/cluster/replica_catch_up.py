"""A follower behind its leader's RAM tail catching up: answered from the leader's log file,
or sent the leader's snapshot in chunks (the bookkeeping of both sides, for
:class:`~amqp_server.cluster.quorum_group.QuorumGroup`).

A follower that fetches below the entries the leader's replica keeps in RAM gets the next
entries read from the log file when the file still holds them and its last entry is the
leader's; otherwise the snapshot: the log file up to its snapshot point, one chunk of
:data:`SNAPSHOT_CHUNK` bytes at a time, the next one when the follower asks for it (one in
flight per follower; given up after :data:`SNAPSHOT_IDLE` seconds without a request). The
follower writes the chunks to a file beside its log and installs it once complete.

Source: Kafka's fetch from a log segment; Raft's InstallSnapshot in chunks (offset, data,
done).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any

from amqp_server.cluster.replica_records import ChunkRequest, SnapshotChunk
from amqp_server.cluster.replication_types import Fetch, Records, Snapshot

log = logging.getLogger("amqpq.quorum")

#: the replica's snapshot, as the replication log holds it: "the replica log file's bytes
#: up to its snapshot point" (:meth:`ReplicaLog.read_snapshot`, read a chunk at a time)
SNAPSHOT_IN_FILE = "replica-log-file"
SNAPSHOT_CHUNK = 1024 * 1024  # bytes of a snapshot per link record (one in flight)
SNAPSHOT_IDLE = 10.0  # seconds without a chunk asked for: a snapshot sent is given up


@dataclasses.dataclass
class _Transfer:
    """A snapshot on its way to a follower (leader) or from the leader (follower)."""

    epoch: int
    offset: int
    last_epoch: int
    hw: int
    total: int
    generation: int = 0  # leader: the log file's generation it is read from
    done: int = 0  # follower: bytes written to the file
    active: float = 0.0  # when a chunk was last sent or asked for


class CatchUp:
    """One replica's followers catching up (leader) or its snapshot coming in (follower).

    Args:
        what, name, vhost: the queue, for log lines (``"quorum queue"`` or ``"stream"``,
            its name, its vhost).

    ``log`` arguments are the replica's log (a :class:`~queue_store.replica_log.ReplicaLog`
    or a stream's); ``now`` is the event loop's time in seconds.
    """

    def __init__(self, what: str, name: str, vhost: str) -> None:
        self.what, self.name, self.vhost = what, name, vhost
        #: leader: each follower's last fetch
        self.fetches: dict[int, Fetch] = {}
        # leader: followers fetching below the replica's RAM tail, answered from the log
        # file: the offset they started from and when
        self._from_file: dict[int, tuple[int, float]] = {}
        self._sending: dict[int, _Transfer] = {}  # leader: snapshots on their way
        self._receiving: _Transfer | None = None  # follower: a snapshot coming in

    # ---- leader --------------------------------------------------------------------------

    def on_fetch(self, peer: int, fetch: Fetch, start: int, now: float) -> None:
        """Follower ``peer`` fetched (``start``: the first entry the replica keeps in RAM):
        a snapshot sent to it is done once it fetches from its offset on; one reading from
        the log file has caught up once it fetches from ``start`` on (logged)."""
        self.fetches[peer] = fetch
        sending = self._sending.get(peer)
        if sending is not None and fetch.offset >= sending.offset:
            del self._sending[peer]  # installed
        caught_up = self._from_file.get(peer)
        if caught_up is not None and fetch.offset >= start:
            del self._from_file[peer]
            log.info("%s '%s' in vhost '%s': node %d caught up from the log "
                     "file, offset %d to %d in %.1f s", self.what, self.name, self.vhost, peer,
                     caught_up[0], fetch.offset, now - caught_up[1])

    def file_records(self, peer: int, snapshot: Snapshot, log_: Any, start: int, batch: int,
                     now: float) -> Records | None:
        """The answer to a follower that fetched below the entries the replica keeps in RAM
        (``start``: :attr:`Replica.start`), instead of ``snapshot``, when the log file still
        holds the entries from its offset and its last entry is the leader's (same epoch at
        that offset): the next ones (``batch`` at most), read from the file (Kafka's fetch
        from a log segment). None: the snapshot it is (the file was compacted past its
        offset, or it diverges)."""
        f = self.fetches.get(peer)
        if f is None or f.epoch != snapshot.epoch or f.offset >= start \
                or log_.epoch_at(f.offset) != f.last_epoch:
            return None
        entries = log_.read_entries(f.offset, batch, start)
        if not entries:
            return None
        if peer not in self._from_file:
            self._from_file[peer] = (f.offset, now)
            log.info("%s '%s' in vhost '%s': node %d fetches from offset %d, below "
                     "the entries kept in RAM (from offset %d): entries sent from the log "
                     "file", self.what, self.name, self.vhost, peer, f.offset, start)
        return Records(snapshot.epoch, f.offset, f.last_epoch, tuple(entries), snapshot.hw)

    def first_chunk(self, peer: int, snapshot: Snapshot, log_: Any, now: float
                    ) -> SnapshotChunk | None:
        """Begin sending ``snapshot`` (the log file up to its snapshot point) to ``peer``:
        its first chunk (logged), the next ones when it asks (:meth:`next_chunk`); None
        while one is on its way to it already (its fetches go on meanwhile)."""
        going = self._sending.get(peer)
        if going is not None and going.generation == log_.generation \
                and going.epoch == snapshot.epoch and now - going.active < SNAPSHOT_IDLE:
            return None
        t = _Transfer(snapshot.epoch, snapshot.offset, snapshot.last_epoch, snapshot.hw,
                      log_.snapshot_size, log_.generation, active=now)
        self._sending[peer] = t
        log.info("%s '%s' in vhost '%s': node %d fetched below this replica's log "
                 "start: snapshot at offset %d sent (%d bytes, in chunks of %d)", self.what,
                 self.name,
                 self.vhost, peer, t.offset, t.total, SNAPSHOT_CHUNK)
        return self._chunk(t, 0, log_, now)

    def next_chunk(self, peer: int, req: ChunkRequest, log_: Any, now: float
                   ) -> SnapshotChunk | None:
        """The chunk follower ``peer`` asks for; None when the request is not for the
        snapshot on its way to it (the follower fetches again and gets another)."""
        t = self._sending.get(peer)
        if t is None or t.offset != req.offset or t.epoch != req.epoch \
                or t.generation != log_.generation or req.pos >= t.total:
            return None
        return self._chunk(t, req.pos, log_, now)

    @staticmethod
    def _chunk(t: _Transfer, pos: int, log_: Any, now: float) -> SnapshotChunk:
        data = log_.read_snapshot(pos, min(SNAPSHOT_CHUNK, t.total - pos))
        t.active = now
        return SnapshotChunk(t.epoch, t.offset, t.last_epoch, t.hw, t.total, pos, data)

    # ---- follower ------------------------------------------------------------------------

    def receive_chunk(self, c: SnapshotChunk, path: Path) -> ChunkRequest | Snapshot | None:
        """A chunk of the leader's snapshot (of the epoch followed), written to ``path``:
        the request for the next one, or the whole :class:`Snapshot` to take (its data
        :data:`SNAPSHOT_IN_FILE`: the file at ``path``), or None (a chunk of another
        transfer, or one seen already).

        Raises:
            OSError: the chunk was not written (the transfer is given up).
        """
        t = self._receiving
        if c.pos == 0:
            t = self._receiving = _Transfer(c.epoch, c.offset, c.last_epoch, c.hw, c.total)
            path.unlink(missing_ok=True)
        elif t is None or (t.epoch, t.offset, t.done) != (c.epoch, c.offset, c.pos):
            return None
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                os.pwrite(fd, c.data, c.pos)
            finally:
                os.close(fd)
        except OSError:
            self._receiving = None
            raise
        t.done = c.pos + len(c.data)
        if t.done < t.total:
            return ChunkRequest(c.epoch, c.offset, t.done)
        self._receiving = None
        return Snapshot(c.epoch, c.offset, c.last_epoch, SNAPSHOT_IN_FILE, c.hw)
