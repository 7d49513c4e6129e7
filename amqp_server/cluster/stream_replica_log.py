"""A replicated stream's replica log: the interface the quorum group shell
(:class:`~amqp_server.cluster.quorum_group.QuorumGroup`) drives, over the stream's own
:class:`~queue_store.stream_log.StreamLog` (no second copy of the messages).

Replica offset = stream offset; an entry's epoch = its chunk's epoch; an entry's payload is
``u8 flags | u64 timestamp ms | record`` (:data:`HEAD`): the stream record as stored, its
chunk's append time, and whether it begins one of the leader's chunks
(:data:`CHUNK_START`) or segments (:data:`SEGMENT_START`), so every replica writes the
records with the leader's timestamps and epochs and starts its segments at the leader's
offsets (:mod:`amqp_server.cluster.stream_group`). The committed offset is saved once a
second beside the segments (:data:`COMMITTED_FILE`): a restarted replica's RAM tail starts
there at the latest.

Source: Kafka's log (segments, leader epochs); RabbitMQ streams (osiris).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Sequence
from pathlib import Path

from amqp_server.cluster.quorum_group import KEEP_ENTRIES
from queue_store.replica_log import ReplicaLogError
from queue_store.stream_log import StreamLog

__all__ = ["CHUNK_START", "COMMITTED_FILE", "HEAD", "NO_ROLL", "SEGMENT_START",
           "StreamReplicaLog", "entry_payload"]

HEAD = struct.Struct(">BQ")  # flags, chunk timestamp ms
CHUNK_START = 1  # the entry begins one of the leader's chunks
SEGMENT_START = 2  # ... and one of its segments
NO_ROLL = 1 << 62  # the replica's StreamLog never rolls by itself: the leader decides
COMMITTED_FILE = "committed"  # beside the segments: the committed offset, once a second


def entry_payload(record: bytes, timestamp_ms: int, flags: int = 0) -> bytes:
    """A replicated stream entry's payload (module docstring)."""
    return HEAD.pack(flags, timestamp_ms) + record



class StreamReplicaLog:
    """The replica log interface :class:`QuorumGroup` drives, over a :class:`StreamLog`
    (module docstring). ``max_segment``: bytes after which the leader starts a segment
    (``x-stream-max-segment-size-bytes``)."""

    def __init__(self, stream: StreamLog, max_segment: int, keep: int = KEEP_ENTRIES) -> None:
        self.stream = stream
        self.max_segment = max_segment
        self.path = stream.directory
        self.generation = 0  # the snapshot is never a file: nothing to invalidate
        self.snapshot_size = 0
        #: called with (offset, timestamp ms, record) for each record written (the queue's
        #: RAM tail), and with no argument when the log was cut or started over
        self.on_write: Callable[[int, int, bytes], None] | None = None
        self.on_reset: Callable[[], None] | None = None
        end = stream.next_offset
        saved = self.saved_committed()
        start = end - keep if saved is None else min(end - keep, saved)
        self.start = max(stream.first_offset, min(start, end))
        self.start_epoch = (stream.epoch_of(self.start - 1) or 0) if self.start else 0
        self._saved = saved
        self.closed = False

    # ---- the committed offset, kept across restarts ------------------------------------

    def saved_committed(self) -> int | None:
        """The committed offset as last saved (:meth:`save_committed`), None without one.
        The Replica's RAM tail starts there at the latest: what a restarted replica lets
        its consumers read before it hears from a leader is committed."""
        try:
            return int((self.path / COMMITTED_FILE).read_text())
        except (OSError, ValueError):
            return None

    def save_committed(self, offset: int) -> None:
        """Note ``offset`` as committed (once a second; no fsync: a stale value is lower,
        and only holds readers back after a restart)."""
        if offset != self._saved and not self.closed:
            tmp = self.path / (COMMITTED_FILE + ".tmp")
            tmp.write_text(str(offset))
            os.replace(tmp, self.path / COMMITTED_FILE)
            self._saved = offset

    # ---- what the shell reads ----------------------------------------------------------

    def tail(self) -> list[tuple[int, bytes]]:
        """The entries from :attr:`start` to the end (the Replica's RAM tail at start)."""
        return self.read_entries(self.start, self.stream.next_offset - self.start,
                                 self.stream.next_offset)

    @property
    def lsn(self) -> int:
        return self.stream.next_offset

    @property
    def written(self) -> int:
        return self.stream.written_next

    @property
    def count(self) -> int:
        return self.stream.next_offset - self.stream.first_offset

    @property
    def size(self) -> int:
        return self.stream.bytes

    def epoch_at(self, offset: int) -> int | None:
        """The epoch of the entry before ``offset`` (0 at 0), None when unknown."""
        return self.stream.epoch_of(offset - 1) if offset else 0

    def read_entries(self, first: int, count: int, end: int) -> list[tuple[int, bytes]]:
        """Entries ``(epoch, payload)`` from ``first``, at most ``count``, below ``end``,
        read from the segments (a chunk's first record flagged, and a segment's)."""
        seg_firsts = {s.first for s in self.stream.segments}
        out = []
        for i, (epoch, ts, chunk_start, record) in enumerate(
                self.stream.read_entries(first, count, end)):
            flags = 0
            if chunk_start:
                flags = CHUNK_START | (SEGMENT_START if first + i in seg_firsts
                                       and first + i else 0)
            out.append((epoch, entry_payload(record, ts, flags)))
        return out

    def segment_full(self) -> bool:
        """Does the next chunk begin a segment (the current one reached the size)?"""
        seg = self.stream.segments[-1]
        return seg.size >= self.max_segment and len(seg.offsets) > 0

    # ---- what the shell changes --------------------------------------------------------

    def write(self, first: int, entries: Sequence[tuple[int, bytes]]) -> None:
        """Append ``entries`` at offset ``first`` (the log's end) as the leader wrote them.

        Raises:
            ReplicaLogError: ``first`` is not the log's end.
        """
        s = self.stream
        if first != s.next_offset:
            raise ReplicaLogError(f"write at offset {first}, the stream log ends at "
                                  f"{s.next_offset}")
        on_write = self.on_write
        for epoch, payload in entries:
            flags, ts = HEAD.unpack_from(payload)
            if s.pending and (flags & CHUNK_START or epoch != s.epoch):
                s.flush()
            if flags & SEGMENT_START:
                s.roll()
            s.epoch = epoch
            record = payload[HEAD.size:]
            offset = s.append(record, ts)
            if on_write is not None:
                on_write(offset, ts, record)
        error = s.flush()
        if error is not None:
            raise error

    def truncate(self, offset: int) -> None:
        self.stream.truncate(offset)
        if self.on_reset is not None:
            self.on_reset()

    def install(self, offset: int, last_epoch: int, data: Path | bytes) -> None:
        """Start over at ``offset`` (the leader's log start; ``data``: the empty snapshot)."""
        self.stream.start_at(offset, last_epoch)
        if self.on_reset is not None:
            self.on_reset()

    def discard_unwritten(self) -> None:
        """Nothing: entries are written when the replica appends them."""

    def mark(self, upto: int) -> int:
        """The Replica's RAM tail may drop the entries below ``upto``: the log keeps them."""
        return upto

    def needs_compaction(self) -> bool:
        return False  # retention, not compaction, shortens a stream

    def read_snapshot(self, pos: int, n: int) -> bytes:
        return b""

    def sync_work(self) -> Callable[[], None]:
        """On the event loop: what fsyncs what is written so far (run in the blocking
        pool); the segments it closed are closed after it."""
        s = self.stream
        fds = s.sync_fds()

        def work() -> None:
            for fd in fds:
                os.fsync(fd)
            s.after_sync()

        return work

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.stream.close()

    def remove(self) -> None:
        """Close and delete the log's files (the stream or this replica went)."""
        if not self.closed:
            self.closed = True
            for name in (COMMITTED_FILE, COMMITTED_FILE + ".tmp"):
                (self.path / name).unlink(missing_ok=True)
            self.stream.close(delete=True)
