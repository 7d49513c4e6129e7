"""The message store: message bodies on disk, shared by a vhost's queues, reference-counted.

Theory of operation
-------------------
Messages are appended to numbered segment files (``00000001.seg``...; a new segment starts
past ``segment_size`` bytes). Each record is::

    u32 payload length | u32 CRC-32 of (msg_id + payload) | u64 msg_id | payload
    payload = u16 len | exchange+routing-key shortstrs | u32 len | property bytes | body

A message routed to N queues is written once; the store counts references (one per queue that
holds it on disk) and forgets the message when the count drops to zero. A segment whose every
record is dead is deleted; a closed segment that is mostly dead (live bytes below
``compact_ratio``) is compacted: its live records are copied to the current segment, and the
old file is deleted only after the copies are synced.

Writes go to an in-memory buffer (:meth:`MessageStore.write`) and reach the file on
:meth:`flush` (a plain ``write``, cheap, on the event-loop thread); :meth:`sync` (``fsync``)
is the slow part and is meant to run in a worker thread, once for many publishes (group
commit, see :mod:`queue_store.durability`).

Recovery (:meth:`recover`) scans every segment, checks each record's CRC, and skips a torn
or corrupt record with a logged error: after a bad record it searches forward for the next
record whose CRC checks, so one damaged length field does not cost the records after it; a
torn tail is truncated. Which records are live is decided afterwards by the queue indexes
that reference them (:meth:`retain`).

Source: RabbitMQ ``rabbit_msg_store`` (shared store, ref counts, GC/compaction of files);
LavinMQ's segment files.
"""

from __future__ import annotations

import errno
import logging
import os
import struct
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from queue_store.disk_writes import write_buffer
from queue_store.message import Message

log = logging.getLogger("amqpq.msg_store")

_head = struct.Struct(">IIQ")  # payload length, crc32, msg_id
_msg_id = struct.Struct(">Q")
HEAD_SIZE = _head.size


def record_crc(msg_id: int, payload: bytes | memoryview) -> int:
    """CRC-32 over the msg_id and the payload, so a damaged id is caught too."""
    return zlib.crc32(payload, zlib.crc32(_msg_id.pack(msg_id)))
SEGMENT_SIZE = 16 * 1024 * 1024  # bytes
COMPACT_RATIO = 0.5


@dataclass(slots=True)
class Location:
    """Where a message's record is: segment number, offset and total size (bytes)."""

    segment: int
    offset: int
    size: int
    refs: int = 0


def encode_payload(message: Message) -> bytes:
    """A message as bytes: routing info, raw properties, body (see the module docstring)."""
    ex_rk = message.ex_rk_raw
    props = message.properties_raw
    return b"".join((
        struct.pack(">H", len(ex_rk)), ex_rk, struct.pack(">I", len(props)), props, message.body,
    ))


def encode_record(msg_id: int, message: Message) -> bytes:
    """One store record for ``message`` (header + payload)."""
    payload = encode_payload(message)
    return _head.pack(len(payload), record_crc(msg_id, payload), msg_id) + payload


def decode_payload(payload: bytes) -> Message:
    """The Message a record payload holds.

    Raises:
        ValueError: the payload is malformed.
    """
    try:
        (n,) = struct.unpack_from(">H", payload, 0)
        ex_rk = payload[2:2 + n]
        pos = 2 + n
        (plen,) = struct.unpack_from(">I", payload, pos)
        props = payload[pos + 4:pos + 4 + plen]
        body = payload[pos + 4 + plen:]
        ex_len = ex_rk[0]
        exchange = ex_rk[1:1 + ex_len].decode("utf-8")
        routing_key = ex_rk[2 + ex_len:].decode("utf-8")
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise ValueError(f"malformed message record: {exc}") from None
    return Message(exchange, routing_key, bytes(ex_rk), bytes(props), bytes(body))


class MessageStore:
    """Segment files under ``directory`` with an in-RAM index msg_id -> :class:`Location`.

    Args:
        directory: the store's folder (created).
        segment_size: bytes after which a new segment file starts.
    """

    def __init__(self, directory: Path, segment_size: int = SEGMENT_SIZE) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.segment_size = segment_size
        self.index: dict[int, Location] = {}
        self.live_bytes: dict[int, int] = {}  # segment -> bytes of live records
        self.next_id = 1
        self._segment = 0
        self._fd = -1
        self._size = 0  # bytes of the current segment written or buffered
        self._buffer = bytearray()
        self._buffer_start = 0  # file offset of the first buffered byte
        self._read_fds: dict[int, int] = {}
        self._dirty: set[int] = set()  # segments written since the last sync
        self._pending_delete: list[int] = []  # compacted segments, deleted after a sync
        self._retired_fds: list[int] = []  # rotated-out segment fds awaiting their fsync
        self._syncing_fds: list[int] = []
        self._deleting: list[int] = []  # compacted before the running sync round began

    # ---- files ---------------------------------------------------------------------------

    def _path(self, segment: int) -> Path:
        return self.directory / f"{segment:08d}.seg"

    def _open_segment(self, segment: int) -> bool:
        """Make ``segment`` the current segment. False, with nothing changed, when the current
        segment's buffer cannot be written out or the new file cannot be created (disk full):
        records then keep going to the current segment.

        Raises:
            OSError: there is no current segment and the first one cannot be created.
        """
        previous = self._segment if self._fd >= 0 else None
        if self._fd >= 0 and self.flush() is not None:
            return False
        try:
            fd = os.open(self._path(segment), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError as exc:
            if self._fd < 0:
                raise
            log.error("msg store %s: cannot start segment %d: %s", self.directory, segment, exc)
            return False
        if self._fd >= 0:
            self._retired_fds.append(self._fd)  # closed after its data is fsynced
        self._segment = segment
        self._fd = fd
        self._size = os.fstat(fd).st_size
        self._buffer_start = self._size
        self.live_bytes.setdefault(segment, 0)
        if previous is not None:
            self._maybe_collect(previous)  # records acked while it was current
        return True

    def _reader(self, segment: int) -> int:
        fd = self._read_fds.get(segment)
        if fd is None:
            fd = self._read_fds[segment] = os.open(self._path(segment), os.O_RDONLY)
        return fd

    # ---- writing -------------------------------------------------------------------------

    def write(self, message: Message) -> int:
        """Store ``message`` (once; later calls for the same Message object add a reference)
        and return its msg_id. The record is durable only after :meth:`flush` and
        :meth:`sync`."""
        msg_id = message.store_id
        if msg_id:
            loc = self.index.get(msg_id)
            if loc is not None:
                loc.refs += 1
                return msg_id
        msg_id = self.next_id
        self.next_id += 1
        self._append(msg_id, message, 1)
        message.store_id = msg_id
        return msg_id

    def _append(self, msg_id: int, message: Message, refs: int) -> None:
        if self._fd < 0:
            self._open_segment(self._segment + 1)
        elif self._size >= self.segment_size:
            self._open_segment(self._segment + 1)
        record = encode_record(msg_id, message)
        self.index[msg_id] = Location(self._segment, self._size, len(record), refs)
        self.live_bytes[self._segment] += len(record)
        self._buffer += record
        self._size += len(record)
        self._dirty.add(self._segment)
        if len(self._buffer) >= 1 << 20:  # keep the write buffer small (bytes)
            self.flush()

    def add_ref(self, msg_id: int) -> None:
        self.index[msg_id].refs += 1

    def release(self, msg_id: int) -> None:
        """Drop one reference; the record is dead when none remain."""
        loc = self.index.get(msg_id)
        if loc is None:
            return
        loc.refs -= 1
        if loc.refs > 0:
            return
        del self.index[msg_id]
        self.live_bytes[loc.segment] -= loc.size
        if loc.segment != self._segment:
            self._maybe_collect(loc.segment)

    def flush(self) -> OSError | None:
        """Write buffered records to the current segment file (no fsync). Returns the error
        when not all could be written (disk full): the rest stays buffered for a retry."""
        if not self._buffer or self._fd < 0:
            return None
        before = len(self._buffer)
        error = write_buffer(self._fd, self._buffer)
        self._buffer_start += before - len(self._buffer)
        return error

    def dirty_fds(self) -> list[int]:
        """File descriptors to fsync for everything flushed so far (for :meth:`sync`)."""
        self.flush()
        fds = [self._fd] if self._segment in self._dirty and self._fd >= 0 else []
        self._syncing_fds, self._retired_fds = self._retired_fds, []
        self._deleting, self._pending_delete = self._pending_delete, []
        self._dirty.clear()
        return fds + self._syncing_fds

    @property
    def needs_housekeeping(self) -> bool:
        """Rotated-out files to close or compacted segments to delete (after an fsync)."""
        return bool(self._retired_fds or self._pending_delete)

    @property
    def needs_sync(self) -> bool:
        """Something waits for an fsync round (unsynced data, files to close or delete)."""
        return bool(self._dirty or self._buffer or self._retired_fds or self._pending_delete)

    def sync(self) -> None:
        """Flush and fsync (blocking: call from a worker thread via
        :func:`sync_fds`, or directly in tests)."""
        sync_fds(self.dirty_fds())
        self.after_sync()

    def after_sync(self) -> None:
        """Close rotated-out segment files and delete segments whose live records were
        copied elsewhere, now that everything is synced."""
        for fd in self._syncing_fds:
            os.close(fd)
        self._syncing_fds = []
        for segment in self._deleting:  # their live records were copied before this round
            self._delete_segment(segment)
        self._deleting = []

    def sync_failed(self) -> None:
        """The fsync round failed: what it covered is due again in the next round."""
        self._retired_fds[:0] = self._syncing_fds
        self._syncing_fds = []
        self._pending_delete[:0] = self._deleting
        self._deleting = []
        if self._fd >= 0:
            self._dirty.add(self._segment)

    # ---- reading -------------------------------------------------------------------------

    def read(self, msg_id: int) -> Message:
        """The stored message.

        Raises:
            KeyError: unknown msg_id; ValueError: the record is corrupt (CRC mismatch).
        """
        loc = self.index[msg_id]
        if loc.segment == self._segment and loc.offset + loc.size > self._buffer_start:
            # (partly) still buffered: after a short write its head is in the file
            head = b""
            if loc.offset < self._buffer_start:
                head = os.pread(self._reader(loc.segment), self._buffer_start - loc.offset,
                                loc.offset)
            start = loc.offset + len(head) - self._buffer_start
            raw = head + bytes(self._buffer[start:start + loc.size - len(head)])
        else:
            raw = os.pread(self._reader(loc.segment), loc.size, loc.offset)
        length, crc, stored_id = _head.unpack_from(raw, 0)
        payload = raw[HEAD_SIZE:HEAD_SIZE + length]
        if stored_id != msg_id or len(payload) != length or record_crc(msg_id, payload) != crc:
            raise ValueError(f"corrupt record for message {msg_id} in segment {loc.segment}")
        message = decode_payload(payload)
        message.store_id = msg_id
        return message

    # ---- garbage collection --------------------------------------------------------------

    def _maybe_collect(self, segment: int) -> None:
        live = self.live_bytes.get(segment, 0)
        if live <= 0:
            self._delete_segment(segment)
            return
        try:
            size = os.path.getsize(self._path(segment))
        except OSError:
            return
        if (size and live / size < COMPACT_RATIO and segment not in self._pending_delete
                and segment not in self._deleting):
            self._compact(segment)

    def _compact(self, segment: int) -> None:
        """Copy a mostly-dead segment's live records to the current one."""
        moved = [(mid, loc) for mid, loc in self.index.items() if loc.segment == segment]
        for msg_id, loc in moved:
            try:
                message = self.read(msg_id)
            except (OSError, ValueError) as exc:
                log.error("compaction: cannot read message %d: %s", msg_id, exc)
                continue
            # same msg_id: queue indexes refer to it
            self._append(msg_id, message, loc.refs)
        self.live_bytes[segment] = 0
        self._pending_delete.append(segment)

    def _delete_segment(self, segment: int) -> None:
        fd = self._read_fds.pop(segment, None)
        if fd is not None:
            os.close(fd)
        self.live_bytes.pop(segment, None)
        try:
            os.unlink(self._path(segment))
        except FileNotFoundError:
            pass

    # ---- recovery ------------------------------------------------------------------------

    def recover(self) -> int:
        """Scan every segment; index every intact record (refs 0 until :meth:`retain`).
        Returns the number of corrupt or torn records skipped."""
        skipped = 0
        segments = sorted(int(p.stem) for p in self.directory.glob("*.seg") if p.stem.isdigit())
        for segment in segments:
            path = self._path(segment)
            data = path.read_bytes()
            view = memoryview(data)
            pos = 0
            good_end = 0
            self.live_bytes[segment] = 0
            while pos + HEAD_SIZE <= len(data):
                length, crc, msg_id = _head.unpack_from(data, pos)
                end = pos + HEAD_SIZE + length
                if end <= len(data) and record_crc(msg_id, view[pos + HEAD_SIZE:end]) == crc:
                    self.index[msg_id] = Location(segment, pos, end - pos, 0)
                    self.next_id = max(self.next_id, msg_id + 1)
                    good_end = pos = end
                    continue
                nxt = self._resync(data, view, pos + 1)
                if nxt is None:
                    break
                log.error("msg store %s: corrupt record at offset %d skipped (%d bytes)", path,
                          pos, nxt - pos)
                skipped += 1
                pos = nxt
            if good_end < len(data):
                log.error("msg store %s: torn or corrupt tail at offset %d (%d bytes) truncated",
                          path, good_end, len(data) - good_end)
                skipped += 1
                with open(path, "r+b") as fh:
                    fh.truncate(good_end)
        if segments:
            self._open_segment(segments[-1] + 1)
        return skipped

    @staticmethod
    def _resync(data: bytes, view: memoryview, start: int) -> int | None:
        """The offset of the next intact record at or after ``start``, or None."""
        for pos in range(start, len(data) - HEAD_SIZE + 1):
            length, crc, msg_id = _head.unpack_from(data, pos)
            end = pos + HEAD_SIZE + length
            if end <= len(data) and record_crc(msg_id, view[pos + HEAD_SIZE:end]) == crc:
                return pos
        return None

    def retain(self, msg_id: int) -> bool:
        """After :meth:`recover`: a queue index still references ``msg_id``. False when the
        record was lost (corrupt or missing)."""
        loc = self.index.get(msg_id)
        if loc is None:
            return False
        loc.refs += 1
        self.live_bytes[loc.segment] = self.live_bytes.get(loc.segment, 0) + loc.size
        return True

    def drop_unreferenced(self) -> None:
        """After recovery: forget records no queue references; delete dead segments."""
        for msg_id in [m for m, loc in self.index.items() if loc.refs <= 0]:
            del self.index[msg_id]
        for segment, live in list(self.live_bytes.items()):
            if live <= 0 and segment != self._segment:
                self._delete_segment(segment)

    def close(self) -> None:
        """Flush, fsync and close every file (clean shutdown)."""
        error = self.flush()
        if error is not None:
            log.error("msg store %s: %d bytes not written at shutdown (unconfirmed): %s",
                      self.directory, len(self._buffer), error)
        if self._fd >= 0:
            try:
                os.fsync(self._fd)
            except OSError as exc:  # shut down anyway: the files are closed below
                log.error("msg store %s: fsync at shutdown failed: %s", self.directory, exc)
            os.close(self._fd)
            self._fd = -1
        for fd in self._retired_fds + self._syncing_fds:
            os.close(fd)
        self._retired_fds, self._syncing_fds = [], []
        for fd in self._read_fds.values():
            os.close(fd)
        self._read_fds.clear()


PARALLEL_FSYNCS = 16  # threads fsyncing at once when a round covers many files
_fsync_pool: ThreadPoolExecutor | None = None


def _fsync(fd: int) -> None:
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno != errno.EBADF:
            raise
        log.debug("fsync skipped (closed after rotation): %s", exc)


def sync_fds(fds: list[int]) -> None:
    """fsync each file descriptor (blocking; for a worker thread). Many files (a thousand
    durable queues' indexes) are fsynced ``PARALLEL_FSYNCS`` at a time: the file system
    commits them together (1,000 files: 85 ms one after the other, 32 ms 16 at a time,
    measured on this machine's disk).

    Raises:
        OSError: an fsync failed (other than on an already closed descriptor).
    """
    global _fsync_pool
    if len(fds) <= 4:
        for fd in fds:
            _fsync(fd)
        return
    if _fsync_pool is None:
        _fsync_pool = ThreadPoolExecutor(PARALLEL_FSYNCS, thread_name_prefix="amqpq-fsync")
    for _ in _fsync_pool.map(_fsync, fds):
        pass
