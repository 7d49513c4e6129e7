"""A quorum queue replica's log: the operations that make the queue, on disk and on the wire.

Every replica of a replicated quorum queue (the leader and its followers,
:mod:`amqp_server.cluster.quorum`) keeps the same log: a message entered (``ENQ``), messages
left for good (``ACK``: acked, dead-lettered, expired, dropped, purged), a message went back
with one more return (``RET``: quorum queues count deliveries, ``x-delivery-limit``). Each
operation has a *log sequence number* (LSN, 1, 2, ...); a follower acknowledges the highest
LSN it has on disk, and the leader's *high watermark* is the lowest such LSN among the
in-sync replicas (Kafka's ISR and high watermark, counted in operations).

The bytes the leader appends to its own file are the bytes it sends its followers, which append
them to theirs unchanged: one encoding, no re-encoding on either side. A record is::

    length:u32 crc32:u32 kind:u8 body        (big-endian; length counts kind and body;
                                              crc32 of kind and body)
    ENQ   offset:u64 returns:u32 exrk_len:u16 props_len:u32, exrk, props, message body
    ACK   count:u32, count x offset:u64
    RET   offset:u64 returns:u32
    BASE  lsn:u64 next_offset:u64             (a snapshot's first record: the LSN before its
                                              ENQ records, so it stands at BASE + their count)

``exrk`` is Basic.Deliver's exchange and routing key as AMQP shortstrs and ``props`` the
content header's property bytes, as received: never decoded here. A *snapshot* (a BASE, then an
ENQ per live message) is what a follower that joins or falls behind installs in place of its
log, and what a log is rewritten to when dead records outweigh live ones (compaction). A torn
tail (a crash mid-write) is cut at the last whole record when the file is opened.

Memory: every live message of a replica is held in RAM (``entries``); paging replicas to disk
is not done yet.

Source: Kafka's replication design (log, LSN as offsets, high watermark); RabbitMQ quorum
queue semantics (https://www.rabbitmq.com/docs/quorum-queues).
"""

from __future__ import annotations

import errno
import os
import struct
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

ENQ, ACK, RET, BASE = 1, 2, 3, 4

_HEAD = struct.Struct(">II")
_ENQ = struct.Struct(">QIHI")
_COUNT = struct.Struct(">I")
_RET = struct.Struct(">QI")
_BASE = struct.Struct(">QQ")
_KINDS = {k: bytes([k]) for k in (ENQ, ACK, RET, BASE)}
# bytes of log before compaction is considered: a replica's file stays under this or 4x its
# live bytes, and draining a smaller queue rewrites nothing
COMPACT_MIN = 64 * 1024 * 1024

#: a live message: (exrk, props, body, returns); a tuple of bytes and an int, which the
#: cyclic garbage collector stops tracking (a deep replica of lists made every full collection
#: walk all of them: most of a leader's CPU under a growing backlog)
Entry = tuple[bytes, bytes, bytes, int]


class ReplicaLogError(Exception):
    """Bytes that are not a sequence of whole, checked records (a chunk from the wire)."""


def _record(kind: int, *parts: bytes) -> bytes:
    crc = zlib.crc32(_KINDS[kind])
    n = 1
    for part in parts:
        crc = zlib.crc32(part, crc)
        n += len(part)
    return b"".join((_HEAD.pack(n, crc), _KINDS[kind], *parts))


def _enq_record(offset: int, returns: int, exrk: bytes, props: bytes, body: bytes) -> bytes:
    return _record(ENQ, _ENQ.pack(offset, returns, len(exrk), len(props)), exrk, props, body)


def _write_all(fd: int, data: bytes) -> None:
    """``os.write`` until every byte of ``data`` is written (a write may take fewer)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def iter_records(data: bytes, strict: bool = True) -> Iterator[tuple[int, bytes, int]]:
    """``(kind, body, end position)`` of each whole record of ``data``.

    Raises:
        ReplicaLogError: with ``strict``, a cut or damaged record (without it, iteration
            stops there: a torn tail).
    """
    pos, end = 0, len(data)
    while pos < end:
        if end - pos < 9:
            if strict:
                raise ReplicaLogError("cut record")
            return
        n, crc = _HEAD.unpack_from(data, pos)
        payload = data[pos + 8:pos + 8 + n]
        if n == 0 or len(payload) < n or zlib.crc32(payload) != crc:
            if strict:
                raise ReplicaLogError("damaged record")
            return
        pos += 8 + n
        yield payload[0], payload[1:], pos


class ReplicaLog:
    """One replica's log file and the state it makes (see the module docstring).

    Args:
        path: the file (created when missing; replayed when there).

    Attributes:
        entries: offset -> :data:`Entry` of every live message, in offset order.
        lsn: the last operation's LSN; ``next_offset``: the offset the next message gets.
        size: bytes in the file.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: dict[int, Entry] = {}
        self.lsn = 0
        self.next_offset = 1
        self.size = 0
        self.live_bytes = 0
        self._chunk: list[bytes] = []
        self._chunk_first = 1
        path.parent.mkdir(parents=True, exist_ok=True)
        good = 0
        if path.exists():
            data = path.read_bytes()
            for kind, body, end in iter_records(data, strict=False):
                self._apply(kind, body)
                good = end
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        os.ftruncate(self._fd, good)  # a torn tail is cut
        os.lseek(self._fd, good, os.SEEK_SET)
        self.size = good
        self._chunk_first = self.lsn + 1

    # ---- the leader's operations ---------------------------------------------------------

    def enq(self, exrk: bytes, props: bytes, body: bytes, returns: int = 0) -> tuple[int, int]:
        """A message enters: ``(its offset, the operation's LSN)``."""
        offset = self.next_offset
        self._add(_enq_record(offset, returns, exrk, props, body))
        self._apply_enq(offset, returns, exrk, props, body)
        return offset, self.lsn

    def ack(self, offsets: Iterable[int]) -> int:
        """Messages leave for good; the LSN."""
        offsets = [o for o in offsets if o in self.entries]
        if not offsets:
            return self.lsn
        self._add(_record(ACK, _COUNT.pack(len(offsets)),
                          struct.pack(f">{len(offsets)}Q", *offsets)))
        self._apply_ack(offsets)
        return self.lsn

    def ret(self, offset: int, returns: int) -> int:
        """A message went back to the queue, ``returns`` times so far; the LSN."""
        if offset not in self.entries:
            return self.lsn
        self._add(_record(RET, _RET.pack(offset, returns)))
        self._apply_ret(offset, returns)
        return self.lsn

    def _add(self, record: bytes) -> None:
        self._chunk.append(record)
        self.lsn += 1

    def take_chunk(self) -> tuple[int, bytes]:
        """The operations since the last take, written to the file (not yet fsynced):
        ``(first LSN, bytes)`` to send to the followers (b"" when none)."""
        first = self._chunk_first
        data = b"".join(self._chunk)
        self._chunk.clear()
        self._chunk_first = self.lsn + 1
        if data:
            self._write(data)
        return first, data

    # ---- a follower's side ---------------------------------------------------------------

    def append_chunk(self, first_lsn: int, data: bytes) -> bool:
        """Apply and write a chunk of the leader's (False, nothing done, when it does not
        start right after this log's last LSN: a snapshot is needed).

        Raises:
            ReplicaLogError: the chunk is damaged.
        """
        if first_lsn != self.lsn + 1:
            return False
        records = list(iter_records(data))
        for kind, body, _ in records:
            self._apply(kind, body)
        self._write(data)
        self._chunk_first = self.lsn + 1
        return True

    def snapshot(self) -> bytes:
        """This log as a snapshot: BASE, then every live message; read back, it stands at
        this log's LSN (BASE holds the LSN before its ENQ records, which count one each)."""
        parts = [_record(BASE, _BASE.pack(self.lsn - len(self.entries), self.next_offset))]
        for offset, (exrk, props, body, returns) in self.entries.items():
            parts.append(_enq_record(offset, returns, exrk, props, body))
        return b"".join(parts)

    def install(self, snapshot: bytes) -> None:
        """Replace the log by ``snapshot`` (a leader's, or this log's own: compaction),
        written to a new file, fsynced and renamed over the old one.

        Raises:
            ReplicaLogError: the snapshot is damaged or does not start with BASE.
        """
        records = list(iter_records(snapshot))
        if not records or records[0][0] != BASE:
            raise ReplicaLogError("a snapshot starts with BASE")
        self.entries = {}
        self.live_bytes = 0
        for kind, body, _ in records:
            self._apply(kind, body)
        tmp = self.path.with_name(self.path.name + ".new")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            _write_all(fd, snapshot)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        os.close(self._fd)
        self._fd = os.open(self.path, os.O_RDWR)
        os.lseek(self._fd, 0, os.SEEK_END)
        self.size = len(snapshot)
        self._chunk.clear()
        self._chunk_first = self.lsn + 1

    def compact(self) -> bool:
        """Rewrite the file as a snapshot of this log (same LSN, live messages only) when dead
        records outweigh live ones and nothing is waiting to be taken (:meth:`take_chunk`);
        True when it did. Blocking: it writes and fsyncs the live bytes."""
        if self._chunk or not self.needs_compaction():
            return False
        self.install(self.snapshot())
        return True

    def needs_compaction(self) -> bool:
        """Dead records outweigh live messages (and the file is past :data:`COMPACT_MIN`)."""
        return self.size > COMPACT_MIN and self.size > 4 * (self.live_bytes + 64 * len(
            self.entries))

    # ---- state ---------------------------------------------------------------------------

    def _apply(self, kind: int, body: bytes) -> None:
        if kind == ENQ:
            offset, returns, exrk_len, props_len = _ENQ.unpack_from(body)
            pos = _ENQ.size
            exrk = body[pos:pos + exrk_len]
            props = body[pos + exrk_len:pos + exrk_len + props_len]
            self._apply_enq(offset, returns, exrk, props, body[pos + exrk_len + props_len:])
            self.lsn += 1
        elif kind == ACK:
            (count,) = _COUNT.unpack_from(body)
            self._apply_ack(struct.unpack_from(f">{count}Q", body, 4))
            self.lsn += 1
        elif kind == RET:
            self._apply_ret(*_RET.unpack_from(body))
            self.lsn += 1
        elif kind == BASE:
            self.lsn, self.next_offset = _BASE.unpack_from(body)

    def _apply_enq(self, offset: int, returns: int, exrk: bytes, props: bytes,
                   body: bytes) -> None:
        self.entries[offset] = (exrk, props, body, returns)
        self.live_bytes += len(body)
        self.next_offset = max(self.next_offset, offset + 1)

    def _apply_ret(self, offset: int, returns: int) -> None:
        entry = self.entries.get(offset)
        if entry is not None:
            self.entries[offset] = (entry[0], entry[1], entry[2], returns)

    def _apply_ack(self, offsets: Iterable[int]) -> None:
        for offset in offsets:
            entry = self.entries.pop(offset, None)
            if entry is not None:
                self.live_bytes -= len(entry[2])

    # ---- the file ------------------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        _write_all(self._fd, data)
        self.size += len(data)

    def sync(self) -> None:
        """fsync the file (blocking: run it off the event loop). A file replaced by a
        snapshot meanwhile (closed: EBADF) needs none: :meth:`install` fsynced its own; nor
        does a closed log."""
        fd = self._fd
        if fd < 0:  # closed meanwhile (the queue was deleted)
            return
        try:
            os.fsync(fd)
        except OSError as exc:
            if exc.errno != errno.EBADF:
                raise

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def remove(self) -> None:
        """Close and delete the file (the queue was deleted)."""
        self.close()
        self.path.unlink(missing_ok=True)
