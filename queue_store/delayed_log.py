"""Where a delayed exchange's held messages live: append-only segment files on disk.

Theory of operation
-------------------
Every message a delayed exchange holds is appended, whole, to the exchange's current
segment file (``00000001.dseg``...; a new one starts past ``segment_size`` bytes)::

    u32 payload length | u32 CRC-32 of the rest | u64 seq | u64 due (wall-clock ms) |
    u64 x-delay (ms) | u8 flags (1: persistent) | payload (the message store's encoding: routing, properties, body)

RAM keeps only the record's location (``segment << 40 | offset``) and size, in the
exchange's :class:`~queue_store.delay_index.DelayIndex`; the body is read back
(:meth:`DelayedLog.read`, one ``pread``) when the message falls due or is listed. So a
backlog of held messages costs disk, not RAM, as the tiered store's delta tier does.

When a message leaves (delivered or cancelled) its offset is appended to the segment's
tombstone file ``NNNNNNNN.done`` (u64 offset + u32 CRC); a segment whose last live record
left is deleted with its tombstones. Writes are buffered and reach the file on
:meth:`flush` (plain writes: a ``kill -9`` loses nothing flushed); the fsync is the broker's
group commit (:mod:`queue_store.durability`): the log is registered as a dirty journal, so a
persistent message's publisher confirm waits for the fsync that covers its record.

Recovery (:meth:`DelayedLog.recover`) scans the segments that existed at start, skips
tombstoned records and, on a durable exchange, transient ones, and stops at a torn or
corrupt record (logged). A non-durable exchange's log starts empty.

Source: RabbitMQ ``rabbit_msg_store`` segment files; the delayed-message plugin keeps its
messages in one Mnesia table per node (this replaces it).
"""

from __future__ import annotations

import logging
import os
import shutil
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

from queue_store.disk_writes import SegmentSync, write_buffer
from queue_store.message import Message
from queue_store.msg_store import decode_payload, encode_payload

log = logging.getLogger("amqpq.delayed")

_head = struct.Struct(">IIQQQB")  # payload length, crc, seq, due ms, delay ms, flags
_tomb = struct.Struct(">QI")  # offset, crc32 of the offset
HEAD_SIZE = _head.size
PERSISTENT = 1
SEGMENT_SIZE = 16 * 1024 * 1024  # bytes
_OFFSET_BITS = 40
_OFFSET_MASK = (1 << _OFFSET_BITS) - 1


def _crc(rest: bytes | memoryview, payload: bytes | memoryview) -> int:
    return zlib.crc32(payload, zlib.crc32(rest))


class MemoryLog:
    """The log of a vhost without storage (tests, ``storage=False``): records in a dict.

    Same interface as :class:`DelayedLog`; nothing survives a restart.
    """

    durable = False

    def __init__(self) -> None:
        self._records: dict[int, tuple[Message, int]] = {}
        self._next = 1

    def append(self, seq: int, due: int, delay: int, persistent: bool, message: Message
               ) -> tuple[int, int]:
        loc = self._next
        self._next += 1
        self._records[loc] = (message, delay)
        return loc, 0

    def read(self, loc: int, size: int) -> tuple[Message, int]:
        return self._records[loc]

    def done(self, loc: int) -> None:
        self._records.pop(loc, None)

    def retire(self) -> None:
        self._records.clear()

    def destroy(self) -> None:
        self._records.clear()

    def close(self) -> None:
        """Nothing to close."""


class DelayedLog(SegmentSync):
    """The segment files of one delayed exchange under ``directory`` (see the module
    docstring).

    Args:
        directory: the exchange's folder (created; emptied first unless ``durable``).
        durable: keep tombstones and recover persistent records at start.
        segment_size: bytes after which a new segment starts.
    """

    def __init__(self, directory: Path, durable: bool,
                 segment_size: int = SEGMENT_SIZE) -> None:
        self.directory = Path(directory)
        self.durable = durable
        if not durable and self.directory.exists():
            shutil.rmtree(self.directory, ignore_errors=True)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.segment_size = segment_size
        self._old = sorted(int(p.stem) for p in self.directory.glob("*.dseg")
                           if p.stem.isdigit())
        self._current = 1 + max(self._old, default=0)
        self._fd = os.open(self._path(self._current), os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                           0o600)
        self._offset = 0  # where the next record goes in the current segment
        self._written = 0  # bytes of the current segment already in the file
        self._buffer = bytearray()
        self.live: dict[int, int] = {}  # segment -> records not yet delivered or cancelled
        self._read_fds: dict[int, int] = {}
        self._done: dict[int, bytearray] = {}  # segment -> tombstones to write
        self._done_fds: dict[int, int] = {}
        self._init_sync()
        self.dirty = False

    def _path(self, segment: int) -> Path:
        return self.directory / f"{segment:08d}.dseg"

    # ---- writing -------------------------------------------------------------------------

    def append(self, seq: int, due: int, delay: int, persistent: bool, message: Message
               ) -> tuple[int, int]:
        """Append one held message (due at wall-clock ms ``due``, its ``x-delay`` ms);
        returns (location, record size in bytes)."""
        payload = encode_payload(message)
        rest = struct.pack(">QQQB", seq, due, delay, PERSISTENT if persistent else 0)
        record = struct.pack(">II", len(payload), _crc(rest, payload)) + rest + payload
        if self._offset and self._offset + len(record) > self.segment_size:
            self._rotate()
        loc = self._current << _OFFSET_BITS | self._offset
        self._buffer += record
        self._offset += len(record)
        self.live[self._current] = self.live.get(self._current, 0) + 1
        self.dirty = True
        return loc, len(record)

    def _rotate(self) -> None:
        """Start the next segment (skipped while the buffer cannot be written)."""
        if self.flush() is not None:
            return
        try:
            fd = os.open(self._path(self._current + 1),
                         os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError as exc:
            log.error("delayed log %s: cannot start a segment: %s", self.directory, exc)
            return
        old = self._current
        self._retired_fds.append(self._fd)
        self._fd = fd
        self._current += 1
        self._offset = self._written = 0
        if not self.live.get(old):
            self._drop_segment(old)

    def done(self, loc: int) -> None:
        """The message at ``loc`` left (delivered or cancelled)."""
        segment, offset = loc >> _OFFSET_BITS, loc & _OFFSET_MASK
        left = self.live.get(segment, 0) - 1
        if left <= 0 and segment != self._current:
            self._drop_segment(segment)
            return
        self.live[segment] = max(left, 0)
        if self.durable:
            self._done.setdefault(segment, bytearray()).extend(
                _tomb.pack(offset, zlib.crc32(offset.to_bytes(8, "big"))))
            self.dirty = True

    def _drop_segment(self, segment: int) -> None:
        self.live.pop(segment, None)
        self._done.pop(segment, None)
        for fds in (self._read_fds, self._done_fds):
            fd = fds.pop(segment, None)
            if fd is not None:
                os.close(fd)
        self._path(segment).unlink(missing_ok=True)
        self._path(segment).with_suffix(".done").unlink(missing_ok=True)

    def flush(self) -> OSError | None:
        """Write buffered records and tombstones (no fsync). Returns the error when not all
        could be written (disk full): the rest stays buffered for a retry."""
        error = None
        if self._buffer:
            before = len(self._buffer)
            error = write_buffer(self._fd, self._buffer)
            self._written += before - len(self._buffer)
            self.unsynced = True
        for segment, buf in list(self._done.items()):
            fd = self._done_fds.get(segment)
            if fd is None:
                try:
                    fd = os.open(self._path(segment).with_suffix(".done"),
                                 os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                except OSError as exc:
                    error = error or exc
                    continue
                self._done_fds[segment] = fd
            error = write_buffer(fd, buf) or error
            if not buf:
                del self._done[segment]
        self.dirty = error is not None
        return error


    # ---- reading -------------------------------------------------------------------------

    def read(self, loc: int, size: int) -> tuple[Message, int]:
        """The message whose record is at ``loc`` (``size`` bytes), and its x-delay (ms).

        Raises:
            ValueError: the record is damaged (CRC) or malformed; OSError: unreadable.
        """
        segment, offset = loc >> _OFFSET_BITS, loc & _OFFSET_MASK
        if segment == self._current and offset >= self._written:
            start = offset - self._written
            data = bytes(self._buffer[start:start + size])
        else:
            fd = self._read_fds.get(segment)
            if fd is None:
                fd = self._read_fds[segment] = os.open(self._path(segment), os.O_RDONLY)
            data = os.pread(fd, size, offset)
        _seq, _due, delay, _flags, message = self._decode(data)
        return message, delay

    @staticmethod
    def _decode(data: bytes) -> tuple[int, int, int, int, Message]:
        """(seq, due, delay, flags, message) of one whole record.

        Raises:
            ValueError: short, damaged or malformed record.
        """
        if len(data) < HEAD_SIZE:
            raise ValueError("short delayed record")
        length, crc, seq, due, delay, flags = _head.unpack_from(data, 0)
        view = memoryview(data)
        if len(data) < HEAD_SIZE + length or _crc(view[8:HEAD_SIZE],
                                                    view[HEAD_SIZE:HEAD_SIZE + length]) != crc:
            raise ValueError("damaged delayed record")
        return seq, due, delay, flags, decode_payload(bytes(view[HEAD_SIZE:HEAD_SIZE + length]))

    # ---- recovery ------------------------------------------------------------------------

    def recover(self, add: Callable[[int, int, int, int], None]) -> tuple[int, int]:
        """Feed every live record of the segments found at start to ``add(due, seq, loc,
        size)``; delete segments with none. Returns (records recovered, highest seq)."""
        found = top = 0
        for segment in self._old:
            path = self._path(segment)
            try:
                data = path.read_bytes()
            except OSError as exc:
                log.error("delayed log %s: cannot read: %s", path, exc)
                continue
            dead = self._tombstones(path.with_suffix(".done"))
            live = pos = 0
            while pos + HEAD_SIZE <= len(data):
                length, crc, seq, due, _delay, flags = _head.unpack_from(data, pos)
                end = pos + HEAD_SIZE + length
                view = memoryview(data)
                if end > len(data) or _crc(view[pos + 8:pos + HEAD_SIZE],
                                           view[pos + HEAD_SIZE:end]) != crc:
                    log.error("delayed log %s: torn or corrupt record at offset %d: %d bytes "
                              "skipped", path, pos, len(data) - pos)
                    break
                top = max(top, seq)
                if flags & PERSISTENT and pos not in dead:
                    add(due, seq, segment << _OFFSET_BITS | pos, end - pos)
                    live += 1
                pos = end
            if live:
                self.live[segment] = live
                found += live
            else:
                self._drop_segment(segment)
        self._old = []
        return found, top

    @staticmethod
    def _tombstones(path: Path) -> set[int]:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return set()
        out = set()
        for pos in range(0, len(data) - len(data) % _tomb.size, _tomb.size):
            offset, crc = _tomb.unpack_from(data, pos)
            if zlib.crc32(offset.to_bytes(8, "big")) == crc:
                out.add(offset)
        return out

    # ---- end -----------------------------------------------------------------------------

    def close(self) -> None:
        """Write what is buffered and close every file."""
        error = self.flush()
        if error is not None:
            log.error("delayed log %s: not written at shutdown: %s", self.directory, error)
        for fd in (self._fd, *self._read_fds.values(), *self._done_fds.values(),
                   *self._retired_fds, *self._syncing_fds):
            try:
                os.close(fd)
            except OSError:
                pass
        self._read_fds, self._done_fds = {}, {}
        self._retired_fds, self._syncing_fds = [], []
        self._buffer.clear()

    def retire(self) -> None:
        """The exchange was deleted: move its folder aside at once (an exchange of the same
        name may be declared before :meth:`destroy` runs); open files stay usable."""
        aside = self.directory.with_name(f"{self.directory.name}.deleted-{os.getpid()}-{id(self)}")
        try:
            os.replace(self.directory, aside)
        except OSError as exc:
            log.error("delayed log %s: cannot move aside: %s", self.directory, exc)
            return
        self.directory = aside

    def destroy(self) -> None:
        """Close and remove the folder (after :meth:`retire`, once no fsync uses the files)."""
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)
