"""A stream's log: Kafka's segmented append-only log (RabbitMQ's osiris), with offsets.

Theory of operation
-------------------
Every message appended gets the next **offset** (0, 1, 2, ...). Messages appended in one
event-loop turn are written as one **chunk** (a batch: first offset, record count, append
time in ms, epoch, CRC-32 of its records); chunks are appended to the current **segment**
file, named by the first offset it holds (``00000000000000000000.segment``); a segment that
reached ``max_segment_bytes`` is closed and a new one started. Chunk layout::

    u8 'C' | u8 version | u32 epoch | u64 first offset | u32 count | u64 timestamp ms
    | u32 data length | u32 crc of the data | data = count x (u32 length | record)

The **epoch** is Kafka's leader epoch (0 on a single node; a replicated stream's chunks
carry the epoch of the leader that appended them, :mod:`amqp_server.cluster.stream_group`).
The **epoch checkpoint** (Kafka's leader-epoch-checkpoint) lists ``(epoch, first offset)``
of every epoch seen, rebuilt from the chunk headers at start and kept in the file
``epochs`` beside the segments once there is more than epoch 0, so the epoch of an offset
retention removed is still known (a follower's fetch names it). **Index**: per segment, the
first offset, file position and timestamp of each chunk, in RAM (24 bytes a chunk), rebuilt
at start from the chunk headers (one read per chunk, no record read); lookups by offset or timestamp are binary searches.
**Retention** removes whole segments, oldest first, never the current one: while the log is
over ``max_bytes``, or when a segment's newest chunk is older than ``max_age_ms``.
**Durability**: the log is a :class:`~queue_store.disk_writes.SegmentSync` in the broker's
group commit (publisher confirms after the fsync covering the chunk). **Recovery** reads
every chunk header, checks the CRC of the last chunk of the last segment, and cuts a
segment's tail from the first header that is not a whole chunk (a crash can only tear the
end; the cut is logged); earlier chunks are trusted until read (a read that fails its CRC is
logged and the chunk skipped).

:meth:`truncate` drops every record at or after an offset (a replica's divergent tail);
:meth:`start_at` empties the log to begin at an offset (a replica that fell behind the
leader's retention). Source: Kafka's log design (https://kafka.apache.org/documentation/#log);
RabbitMQ streams (https://www.rabbitmq.com/docs/streams).
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import zlib
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path

from queue_store.disk_writes import SegmentSync, write_buffer

log = logging.getLogger("amqpq.stream")

CHUNK_HEAD = struct.Struct(">BBIQIQII")  # magic, version, epoch, first, count, ts, len, crc
MAGIC, VERSION = 0x43, 1
_LEN = struct.Struct(">I")
MAX_SEGMENT_BYTES = 500_000_000  # RabbitMQ's x-stream-max-segment-size-bytes default
EPOCHS_FILE = "epochs"  # the epoch checkpoint beside the segments
_MAX = float("inf")
_FIRST = itemgetter(1)


@dataclass(slots=True)
class Segment:
    """One segment file and its chunk index (first offset, file position, timestamp ms)."""

    first: int
    path: Path
    size: int = 0
    offsets: array = field(default_factory=lambda: array("Q"))
    positions: array = field(default_factory=lambda: array("Q"))
    timestamps: array = field(default_factory=lambda: array("Q"))


class StreamLog(SegmentSync):
    """The log in ``directory`` (created). See the module docstring.

    Args:
        max_segment_bytes: a segment is closed past this size (bytes).
    """

    def __init__(self, directory: Path, max_segment_bytes: int = MAX_SEGMENT_BYTES) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.max_segment_bytes = max_segment_bytes
        self.segments: list[Segment] = []
        self.next_offset = 0  # offset of the next record appended
        self.written_next = 0  # records below this offset are in the files (readable)
        self._pending: list[bytes] = []
        self._pending_ts = 0
        self.epoch = 0  # of the chunks written from now on
        #: the epoch checkpoint: (epoch, first offset), in order (module docstring)
        self.epochs: list[tuple[int, int]] = []
        self._buffer = bytearray()
        self._read_fds: dict[int, int] = {}  # segment first offset -> fd
        # reads run in worker threads: a segment's read fd is not closed under one
        self._read_lock = threading.Lock()
        self._init_sync()
        self._recover()
        self._fd = os.open(self.segments[-1].path, os.O_WRONLY | os.O_APPEND)

    # ---- recovery ------------------------------------------------------------------------

    def _recover(self) -> None:
        paths = sorted(self.directory.glob("*.segment"))
        self._header_epochs: list[tuple[int, int]] = []
        for path in paths:
            try:
                first = int(path.stem)
            except ValueError:
                continue
            seg = Segment(first, path)
            self._index_segment(seg, last=path == paths[-1])
            self.segments.append(seg)
        if not self.segments:
            self.segments.append(self._new_segment(0))
        last = self.segments[-1]
        end = last.offsets[-1] + self._chunk_count(last, len(last.offsets) - 1) if len(
            last.offsets) else last.first
        self.next_offset = self.written_next = end
        self._load_epochs()

    def _load_epochs(self) -> None:
        """The checkpoint file's epochs, then those of the chunk headers read (the file may
        lag them: it is written without an fsync), cut at the log's end."""
        epochs: list[tuple[int, int]] = []
        try:
            for line in (self.directory / EPOCHS_FILE).read_text().split():
                epoch, _, first = line.partition(":")
                epochs.append((int(epoch), int(first)))
        except (OSError, ValueError):
            epochs = []
        for epoch, first in self._header_epochs:
            if not epochs or (epoch != epochs[-1][0] and first >= epochs[-1][1]):
                epochs.append((epoch, first))
        self._header_epochs = []
        self.epochs = [(e, f) for e, f in epochs if f < self.next_offset or f == 0]
        if self.epochs:
            self.epoch = self.epochs[-1][0]

    def _index_segment(self, seg: Segment, last: bool) -> None:
        """Read the chunk headers of ``seg``; cut anything unreadable after the last good
        chunk (checking the last chunk's CRC when ``last``)."""
        fd = os.open(seg.path, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            pos = 0
            while pos + CHUNK_HEAD.size <= size:
                head = os.pread(fd, CHUNK_HEAD.size, pos)
                magic, version, epoch, first, _count, ts, length, crc = CHUNK_HEAD.unpack(head)
                end = pos + CHUNK_HEAD.size + length
                if magic != MAGIC or version != VERSION or end > size:
                    break
                if last and end == size and zlib.crc32(
                        os.pread(fd, length, pos + CHUNK_HEAD.size)) != crc:
                    break
                seg.offsets.append(first)
                seg.positions.append(pos)
                seg.timestamps.append(ts)
                if not self._header_epochs or self._header_epochs[-1][0] != epoch:
                    self._header_epochs.append((epoch, first))
                pos = end
            if pos != size:
                log.error("stream %s: torn or damaged tail at offset %d of %s (%d bytes) "
                          "cut", self.directory.name, pos, seg.path.name, size - pos)
                os.ftruncate(fd, pos)
            seg.size = pos
        finally:
            os.close(fd)

    def _chunk_count(self, seg: Segment, i: int) -> int:
        head = os.pread(self._read_fd(seg), CHUNK_HEAD.size, seg.positions[i])
        return CHUNK_HEAD.unpack(head)[4]

    def _new_segment(self, first: int) -> Segment:
        path = self.directory / f"{first:020d}.segment"
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        return Segment(first, path)

    # ---- append --------------------------------------------------------------------------

    def append(self, record: bytes, timestamp_ms: int) -> int:
        """Add one record to the chunk being built (written by :meth:`flush`); its offset."""
        if not self._pending:
            self._pending_ts = timestamp_ms
        self._pending.append(record)
        offset = self.next_offset
        self.next_offset = offset + 1
        return offset

    @property
    def pending(self) -> int:
        """Records appended since the last chunk was made (they form the next one)."""
        return len(self._pending)

    def flush(self) -> OSError | None:
        """Write the pending records as one chunk (no fsync). Returns the error when it
        could not be written (disk full): then it stays buffered for a retry."""
        if self._pending:
            records = self._pending
            self._pending = []
            pack = _LEN.pack
            data = b"".join([part for r in records for part in (pack(len(r)), r)])
            first = self.next_offset - len(records)
            seg = self.segments[-1]
            if seg.size >= self.max_segment_bytes and seg.offsets:
                self._roll(first)
                seg = self.segments[-1]
            if not self.epochs or self.epochs[-1][0] != self.epoch:
                self._note_epoch(self.epoch, first)
            head = CHUNK_HEAD.pack(MAGIC, VERSION, self.epoch, first, len(records),
                                   self._pending_ts, len(data), zlib.crc32(data))
            seg.offsets.append(first)
            seg.positions.append(seg.size + len(self._buffer))
            seg.timestamps.append(self._pending_ts)
            self._buffer += head
            self._buffer += data
        if not self._buffer:
            return None
        before = len(self._buffer)
        error = write_buffer(self._fd, self._buffer)
        written = before - len(self._buffer)
        if written:
            self.unsynced = True
            self.segments[-1].size += written
        if not self._buffer:
            self.written_next = self.next_offset
        return error

    def _roll(self, first: int) -> None:
        """Close the current segment (its fd is fsynced, then closed) and start one at
        ``first``."""
        if self._buffer:
            self.flush()
        self._retired_fds.append(self._fd)
        seg = self._new_segment(first)
        self.segments.append(seg)
        self._fd = os.open(seg.path, os.O_WRONLY | os.O_APPEND)

    # ---- read ----------------------------------------------------------------------------

    @property
    def first_offset(self) -> int:
        """The oldest offset still in the log (== next_offset when it is empty)."""
        for seg in self.segments:
            if len(seg.offsets):
                return seg.offsets[0]
        return self.next_offset

    def last_chunk_offset(self) -> int:
        """The first offset of the newest written chunk (``x-stream-offset: last``)."""
        for seg in reversed(self.segments):
            if len(seg.offsets):
                return seg.offsets[-1]
        return self.next_offset

    def offset_at(self, timestamp_ms: int) -> int:
        """The first offset of the first chunk appended at or after ``timestamp_ms``."""
        for seg in self.segments:
            if len(seg.timestamps) and seg.timestamps[-1] >= timestamp_ms:
                return seg.offsets[bisect_left(seg.timestamps, timestamp_ms)]
        return self.written_next

    def read(self, offset: int, max_bytes: int = 1 << 20
             ) -> list[tuple[int, int, bytes]]:
        """Records from the chunk holding ``offset`` on, whole chunks up to about
        ``max_bytes``: ``(offset, timestamp ms, record)`` for offsets >= ``offset``; empty
        at the written end. A chunk failing its CRC is logged and skipped. Safe to call from
        a worker thread while the event loop appends."""
        with self._read_lock:
            return self._read(offset, max_bytes)

    def _read(self, offset: int, max_bytes: int) -> list[tuple[int, int, bytes]]:
        out: list[tuple[int, int, bytes]] = []
        for _epoch, first, count, ts, data in self._chunks(offset, max_bytes):
            p = 0
            for n in range(count):
                (rlen,) = _LEN.unpack_from(data, p)
                if first + n >= offset:
                    out.append((first + n, ts, data[p + 4:p + 4 + rlen]))
                p += 4 + rlen
        return out

    def _chunks(self, offset: int, max_bytes: int
                ) -> Iterator[tuple[int, int, int, int, bytes]]:
        """Written chunks from the one holding ``offset`` on, about ``max_bytes`` of them:
        ``(epoch, first offset, count, timestamp ms, data)``; one failing its CRC is
        logged and skipped."""
        if offset >= self.written_next:
            return
        offset = max(offset, self.first_offset)
        si = bisect_right([s.first for s in self.segments], offset) - 1
        got = 0
        while si < len(self.segments) and got < max_bytes:
            seg = self.segments[si]
            ci = max(0, bisect_right(seg.offsets, offset) - 1)
            fd = self._read_fd(seg)
            while ci < len(seg.offsets) and got < max_bytes:
                pos = seg.positions[ci]
                if pos >= seg.size:
                    return  # still in the write buffer
                head = os.pread(fd, CHUNK_HEAD.size, pos)
                _m, _v, epoch, first, count, ts, length, crc = CHUNK_HEAD.unpack(head)
                data = os.pread(fd, length, pos + CHUNK_HEAD.size)
                ci += 1
                if zlib.crc32(data) != crc:
                    log.error("stream %s: chunk at offset %d fails its CRC: skipped",
                              self.directory.name, first)
                    continue
                got += length
                yield epoch, first, count, ts, data
            si += 1

    def _read_fd(self, seg: Segment) -> int:
        fd = self._read_fds.get(seg.first)
        if fd is None:
            fd = self._read_fds[seg.first] = os.open(seg.path, os.O_RDONLY)
        return fd

    # ---- epochs (replication) ------------------------------------------------------------

    def _note_epoch(self, epoch: int, first: int) -> None:
        self.epochs.append((epoch, first))
        self._save_epochs()

    def _save_epochs(self) -> None:
        """Write the checkpoint file (only once there is more than epoch 0: a stream of
        one node has none)."""
        if len(self.epochs) < 2 and not any(e for e, _ in self.epochs):
            return
        tmp = self.directory / (EPOCHS_FILE + ".tmp")
        tmp.write_text(" ".join(f"{e}:{f}" for e, f in self.epochs))
        os.replace(tmp, self.directory / EPOCHS_FILE)

    def epoch_of(self, offset: int) -> int | None:
        """The epoch of the record at ``offset`` (written or not, retained or not); None
        before the first epoch known."""
        i = bisect_right(self.epochs, offset, key=_FIRST) - 1
        return self.epochs[i][0] if i >= 0 else None

    def epoch_end(self, epoch: int) -> tuple[int, int]:
        """Kafka's OffsetsForLeaderEpoch: the largest epoch <= ``epoch`` and the offset where
        it ends (the next epoch's first offset, or the log's end); (0, 0) if none."""
        i = bisect_right(self.epochs, (epoch, _MAX)) - 1
        if i < 0:
            return 0, 0
        end = self.epochs[i + 1][1] if i + 1 < len(self.epochs) else self.next_offset
        return self.epochs[i][0], end

    def read_entries(self, offset: int, count: int, end: int
                     ) -> list[tuple[int, int, bool, bytes]]:
        """Records ``[offset, min(end, offset + count))`` with what a replica needs to write
        them as this log did: ``(epoch, timestamp ms, first of its chunk, record)``; fewer
        when the log does not hold them (retention, not written yet)."""
        out: list[tuple[int, int, bool, bytes]] = []
        stop = min(end, offset + count, self.written_next)
        if offset < self.first_offset or offset >= stop:
            return out
        with self._read_lock:
            for epoch, first, n, ts, data in self._chunks(offset, 1 << 62):
                p = 0
                for k in range(n):
                    (rlen,) = _LEN.unpack_from(data, p)
                    if first + k >= stop:
                        return out
                    if first + k >= offset:
                        out.append((epoch, ts, k == 0, data[p + 4:p + 4 + rlen]))
                    p += 4 + rlen
        return out

    def roll(self) -> None:
        """Close the current segment now (when it holds anything) and start the next one at
        the next offset: a replica rolls where its leader did."""
        self.flush()
        if len(self.segments[-1].offsets):
            self._roll(self.next_offset)

    def drop_before(self, offset: int) -> int:
        """Delete the oldest segments wholly below ``offset`` (never the current one): a
        replica applies its leader's retention. Returns how many records went."""
        removed = 0
        while len(self.segments) > 1 and self.segments[1].first <= offset:
            removed += self.segments[1].first - self.segments[0].first
            self._drop_segment(self.segments[0])
        return removed

    def start_at(self, offset: int, last_epoch: int) -> None:
        """Empty the log so that it begins at ``offset``, the record before it of epoch
        ``last_epoch`` (a replica installing its leader's log start)."""
        self.flush()
        self._buffer.clear()
        self._pending = []
        os.close(self._fd)
        for seg in list(self.segments):
            self._drop_segment(seg)
        self.segments.append(self._new_segment(offset))
        self._fd = os.open(self.segments[-1].path, os.O_WRONLY | os.O_APPEND)
        self.next_offset = self.written_next = offset
        self.epochs = [(last_epoch, offset - 1)] if offset else []
        self.epoch = last_epoch
        self._save_epochs()
        self.unsynced = True

    # ---- retention and truncation --------------------------------------------------------

    @property
    def bytes(self) -> int:
        """Bytes of every segment (chunk headers included)."""
        return sum(s.size for s in self.segments) + len(self._buffer)

    def apply_retention(self, max_bytes: int | None, max_age_ms: int | None,
                        now_ms: int) -> int:
        """Delete whole oldest segments (never the current one) while the log is over
        ``max_bytes`` or their newest chunk is older than ``max_age_ms``; returns how many
        records went."""
        removed = 0
        while len(self.segments) > 1:
            seg = self.segments[0]
            too_big = max_bytes is not None and self.bytes > max_bytes
            too_old = (max_age_ms is not None and len(seg.timestamps)
                       and seg.timestamps[-1] < now_ms - max_age_ms)
            if not (too_big or too_old):
                break
            removed += self.segments[1].first - seg.first
            self._drop_segment(seg)
        return removed

    def _drop_segment(self, seg: Segment) -> None:
        with self._read_lock:
            self.segments.remove(seg)
            fd = self._read_fds.pop(seg.first, None)
            if fd is not None:
                os.close(fd)
        seg.path.unlink(missing_ok=True)

    def truncate(self, offset: int) -> None:
        """Drop every record at or after ``offset`` (written or pending)."""
        self.flush()
        if offset >= self.next_offset:
            return
        if offset <= self.segments[0].first:  # nothing kept: the log begins there
            self.start_at(offset, self.epoch_of(offset - 1) or 0)
            return
        while len(self.segments) > 1 and self.segments[-1].first >= offset:
            os.close(self._fd)
            self._drop_segment(self.segments[-1])
            self._fd = os.open(self.segments[-1].path, os.O_WRONLY | os.O_APPEND)
        seg = self.segments[-1]
        ci = max(0, bisect_right(seg.offsets, offset) - 1)  # the chunk holding ``offset``
        if not len(seg.offsets) or seg.offsets[ci] >= offset:
            ci = bisect_left(seg.offsets, offset)
            kept: list[bytes] = []
        else:  # the chunk straddles ``offset``: keep its records before it
            kept = [r for o, _, r in self.read(seg.offsets[ci], 1) if o < offset]
        ts = seg.timestamps[ci] if ci < len(seg.timestamps) else 0
        start = seg.offsets[ci] if ci < len(seg.offsets) else offset
        cut = seg.positions[ci] if ci < len(seg.positions) else seg.size
        del seg.offsets[ci:], seg.positions[ci:], seg.timestamps[ci:]
        os.ftruncate(self._fd, cut)
        seg.size = cut
        self.next_offset = self.written_next = start if kept else min(start, offset)
        if any(f >= offset for _, f in self.epochs[1:]):  # epochs wholly cut
            self.epochs = [(e, f) for i, (e, f) in enumerate(self.epochs)
                           if i == 0 or f < offset]
            self._save_epochs()
        epoch = self.epoch
        if self.epochs:  # a straddling chunk's records keep their epoch
            self.epoch = self.epochs[-1][0]
        for record in kept:
            self.append(record, ts)
        self.flush()
        self.epoch = epoch
        self.unsynced = True

    def close(self, delete: bool = False) -> None:
        """Flush and close every file (``delete``: remove the log's directory too)."""
        self.flush()
        with self._read_lock:
            read_fds = list(self._read_fds.values())
        for fd in [self._fd, *self._retired_fds, *self._syncing_fds, *read_fds]:
            try:
                os.close(fd)
            except OSError:
                pass
        self._retired_fds, self._syncing_fds, self._read_fds = [], [], {}
        if delete:
            for seg in self.segments:
                seg.path.unlink(missing_ok=True)
            for name in (EPOCHS_FILE, EPOCHS_FILE + ".tmp"):
                (self.directory / name).unlink(missing_ok=True)
            try:
                self.directory.rmdir()
            except OSError:
                pass
