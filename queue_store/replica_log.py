"""A quorum queue replica's log: the operations that make the queue, on disk and on the wire.

Every replica of a replicated quorum queue (the leader and its followers,
:mod:`amqp_server.cluster.quorum_group`) keeps the same log: a message entered (``ENQ``),
messages left for good (``ACK``: acked, dead-lettered, expired, dropped, purged), a message
went back with one more return (``RET``: quorum queues count deliveries,
``x-delivery-limit``). Each operation is one *entry* of the replication log
(:class:`~amqp_server.cluster.replication.Replica`), which counts them from offset 0: the
operation at offset ``o`` has *log sequence number* (LSN) ``o + 1``, so :attr:`ReplicaLog.lsn`
is the replica's log end. Each entry carries the *leader epoch* that appended it (Kafka's
leader epochs: a follower cuts a divergent tail of an older epoch, :meth:`truncate`).

The bytes the leader appends to its own file are the bytes its followers get and append
to theirs: one encoding, no re-encoding on either side. A record is::

    length:u32 crc32:u32 kind:u8 body        (big-endian; length counts kind and body;
                                              crc32 of kind and body)
    ENQ   offset:u64 returns:u32 exrk_len:u16 props_len:u32, exrk, props, message body
    ACK   count:u32, count x offset:u64
    RET   offset:u64 returns:u32
    BASE  lsn:u64 next_offset:u64 epoch:u32   (a snapshot's first record: the LSN before its
                                              ENQ records, so it stands at BASE + their
                                              count; epoch: that of its last entry)
    EPOCH epoch:u32                           (the entries that follow were appended in that
                                              leader epoch; not an entry itself)

ENQ, ACK and RET are entries (the payload of a replication entry is the record's bytes,
header included); BASE and EPOCH are not. A file is an optional *snapshot section* (BASE,
then an ENQ per live message), then the *tail*: EPOCH markers and entries. ``exrk`` is
Basic.Deliver's exchange and routing key as AMQP shortstrs and ``props`` the content header's
property bytes, as received: never decoded here. A torn tail (a crash mid-write) is cut at
the last whole record when the file is opened; a file written before epochs existed (no
EPOCH record, a 16-byte BASE) reads as epoch 0.

*Snapshots*: the replication log drops committed entries below a *snapshot point*
(:meth:`mark`): the file's bytes up to that point (:meth:`snapshot_bytes`) replay to the
state there, and are what a follower that fetches below it installs (:meth:`install`). The
file itself is rewritten as BASE + live messages (:meth:`compact`) only when every entry is
written, committed and fsynced and dead records outweigh live ones.

Memory: every live message of a replica is held in RAM (``entries``); paging replicas to disk
is not done yet.

Source: Kafka's replication design (log offsets, leader epochs and truncation: KIP-101,
KIP-279, the leader-epoch checkpoint); RabbitMQ quorum queue semantics
(https://www.rabbitmq.com/docs/quorum-queues).
"""

from __future__ import annotations

import errno
import os
import struct
import zlib
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

ENQ, ACK, RET, BASE, EPOCH = 1, 2, 3, 4, 5
ENTRY_KINDS = frozenset((ENQ, ACK, RET))

_HEAD = struct.Struct(">II")
_ENQ = struct.Struct(">QIHI")
_COUNT = struct.Struct(">I")
_RET = struct.Struct(">QI")
_BASE = struct.Struct(">QQ")
_EPOCH = struct.Struct(">I")
_KINDS = {k: bytes([k]) for k in (ENQ, ACK, RET, BASE, EPOCH)}
# bytes of log before compaction is considered: a replica's file stays under this or 4x its
# live bytes, and draining a smaller queue rewrites nothing
COMPACT_MIN = 64 * 1024 * 1024

#: a live message: (exrk, props, body, returns); a tuple of bytes and an int, which the
#: cyclic garbage collector stops tracking (a deep replica of lists made every full collection
#: walk all of them: most of a leader's CPU under a growing backlog)
Entry = tuple[bytes, bytes, bytes, int]
#: a replication entry: (leader epoch, the operation's record bytes)
LogEntry = tuple[int, bytes]


class ReplicaLogError(Exception):
    """Bytes that are not a sequence of whole, checked records (a chunk from the wire), or
    a snapshot that does not stand where it says."""


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


def check_entry(payload: bytes) -> None:
    """Raise :class:`ReplicaLogError` unless ``payload`` is exactly one whole ENQ, ACK or
    RET record with a good CRC (an entry from the wire, before its replica takes it; then
    :meth:`ReplicaLog.write` applies it without checking it again)."""
    if len(payload) < 9:
        raise ReplicaLogError("cut entry")
    n, crc = _HEAD.unpack_from(payload)
    if n != len(payload) - 8 or payload[8] not in ENTRY_KINDS \
            or zlib.crc32(memoryview(payload)[8:]) != crc:
        raise ReplicaLogError("an entry is one whole ENQ, ACK or RET record")


class ReplicaLog:
    """One replica's log file and the state it makes (see the module docstring).

    Args:
        path: the file (created when missing; replayed when there).

    Attributes:
        entries: offset -> :data:`Entry` of every live message, in offset order.
        lsn: LSN of the last operation applied to ``entries`` (the replication log's end).
        written: LSN of the last entry written to the file (below ``lsn`` while the leader's
            new operations wait for their Write).
        next_offset: the message offset the next ENQ gets.
        start, start_epoch: the snapshot point (LSN and epoch of its last entry): the
            replication log holds the entries after it (:meth:`tail`).
        last_epoch: epoch of the last entry written.
        size: bytes in the file.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = -1
        self._load(path.read_bytes() if path.exists() else b"")

    def _reset(self) -> None:
        self.entries: dict[int, Entry] = {}
        self.lsn = self.written = self.start = 0
        self.start_epoch = self.last_epoch = 0
        self.next_offset = 1
        self.size = self.live_bytes = 0
        self._snap_pos = 0  # file bytes that replay to the snapshot point
        self._tail: list[LogEntry] = []
        # (LSN, file position, epoch) after each write since the snapshot point: where mark()
        # may put the next one
        self._marks: deque[tuple[int, int, int]] = deque()
        self._marker_due = True  # the next entry written needs an EPOCH record first

    def _load(self, data: bytes) -> None:
        """Replay ``data`` (the file's bytes), cut a torn tail, open the file for appends."""
        self._reset()
        good, in_section, epoch, marked = 0, False, 0, False
        for kind, body, end in iter_records(data, strict=False):
            if kind == BASE:
                self._apply_base(body)
                in_section, epoch, marked = True, self.start_epoch, False
                self._tail.clear()
            elif kind == EPOCH:
                (epoch,) = _EPOCH.unpack_from(body)
                marked = True
                if in_section:
                    in_section = False
                    self.start, self._snap_pos = self.lsn, good
            else:
                self._apply(kind, body)
                if not in_section:
                    self._tail.append((epoch, data[good:end]))
            good = end
        if in_section:  # a snapshot section alone
            self.start, self._snap_pos = self.lsn, good
        self.written = self.lsn
        self.last_epoch = self._tail[-1][0] if self._tail else self.start_epoch
        self._marker_due = not marked
        if self.lsn > self.start:
            self._marks.append((self.lsn, good, self.last_epoch))
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        os.ftruncate(self._fd, good)  # a torn tail is cut
        os.lseek(self._fd, good, os.SEEK_SET)
        self.size = good

    def tail(self) -> list[LogEntry]:
        """The entries after the snapshot point as read at open (for the replication log;
        handed over once: the log keeps no copy)."""
        tail, self._tail = self._tail, []
        return tail

    # ---- the leader's operations: applied now, written by write() ------------------------

    def enq(self, exrk: bytes, props: bytes, body: bytes, returns: int = 0
            ) -> tuple[int, bytes]:
        """A message enters: ``(its offset, the entry's payload)``."""
        offset = self.next_offset
        self._apply_enq(offset, returns, exrk, props, body)
        self.lsn += 1
        return offset, _enq_record(offset, returns, exrk, props, body)

    def ack(self, offsets: Iterable[int]) -> bytes | None:
        """Messages leave for good: the entry's payload (None: none of them is here)."""
        offsets = [o for o in offsets if o in self.entries]
        if not offsets:
            return None
        self._apply_ack(offsets)
        self.lsn += 1
        return _record(ACK, _COUNT.pack(len(offsets)), struct.pack(f">{len(offsets)}Q",
                                                                   *offsets))

    def ret(self, offset: int, returns: int) -> bytes | None:
        """A message went back to the queue, ``returns`` times so far: the payload (None:
        the message is not here)."""
        if offset not in self.entries:
            return None
        self._apply_ret(offset, returns)
        self.lsn += 1
        return _record(RET, _RET.pack(offset, returns))

    # ---- the replication log's actions ---------------------------------------------------

    def write(self, first: int, entries: Sequence[LogEntry]) -> None:
        """Append ``entries`` (``(epoch, payload)``; the replication log's Write) at offset
        ``first``, the file's end: the leader's own operations (applied already) or a
        follower's from its leader (applied now; each payload checked by
        :func:`check_entry` when it arrived). Not fsynced (:meth:`sync`).

        Raises:
            ReplicaLogError: ``first`` is not the file's end.
        """
        if first != self.written:
            raise ReplicaLogError(f"write at {first}, the log ends at {self.written}")
        parts = []
        for epoch, payload in entries:
            if epoch != self.last_epoch or self._marker_due:
                parts.append(_record(EPOCH, _EPOCH.pack(epoch)))
                self.last_epoch, self._marker_due = epoch, False
            if self.written >= self.lsn:  # a follower's (checked on arrival): apply it
                self._apply(payload[8], payload[9:])
            self.written += 1
            parts.append(payload)
        self._write(b"".join(parts))
        self._marks.append((self.written, self.size, self.last_epoch))

    def discard_unwritten(self) -> None:
        """Forget operations applied but never written (the leader stepped down before
        its Write): the state is replayed from the file."""
        if self.lsn != self.written:
            self._reload(self._read(self.size))

    def truncate(self, offset: int) -> None:
        """Cut the log to ``offset`` entries (a divergent tail of an older epoch): the file
        is cut after that entry and the state replayed from it (rare: after a failover).
        Below the snapshot point (the snapshot itself is not the leader's) the log starts
        over empty."""
        if offset >= self.written:
            return
        if offset < self.start:
            os.ftruncate(self._fd, 0)
            self._load(b"")
            return
        data = self._read(self.size)
        lsn, cut = 0, 0
        for kind, body, end in iter_records(data, strict=False):
            if lsn >= offset and kind != BASE:
                break
            if kind == BASE:
                lsn = _BASE.unpack_from(body)[0]
            elif kind in ENTRY_KINDS:
                lsn += 1
            cut = end
        os.ftruncate(self._fd, cut)
        self._reload(data[:cut])

    def _reload(self, data: bytes) -> None:
        """:meth:`_load` keeping the snapshot point (never above what is cut)."""
        point = (self.start, self._snap_pos, self.start_epoch)
        self._load(data)
        self._tail = []
        if point[0] > self.start:
            self.start, self._snap_pos, self.start_epoch = point
            self._marks = deque(m for m in self._marks if m[0] > self.start)

    def mark(self, upto: int) -> int:
        """Make the snapshot point the last write boundary at or below LSN ``upto`` (the
        entries up to it committed and fsynced); its LSN (:attr:`start` when there is none
        above it)."""
        marks = self._marks
        best = None
        while marks and marks[0][0] <= upto:
            best = marks.popleft()
        if best is not None and best[0] > self.start:
            self.start, self._snap_pos, self.start_epoch = best
        return self.start

    def snapshot_bytes(self) -> bytes:
        """The file's bytes up to the snapshot point: they replay to the state there (what a
        follower that fetches below it installs). Reads the file (blocking)."""
        return self._read(self._snap_pos)

    def install(self, offset: int, last_epoch: int, snapshot: bytes) -> None:
        """Replace the log by a leader's ``snapshot`` (:meth:`snapshot_bytes`) standing at
        LSN ``offset`` with last epoch ``last_epoch``: written as BASE + live messages to a
        new file, fsynced and renamed over the old one.

        Raises:
            ReplicaLogError: the snapshot is damaged or does not replay to ``offset``.
        """
        probe = ReplicaLog.__new__(ReplicaLog)
        probe._reset()
        for kind, body, _ in iter_records(snapshot):
            if kind == BASE:
                probe._apply_base(body)
            elif kind != EPOCH:
                probe._apply(kind, body)
        if probe.lsn != offset:
            raise ReplicaLogError(f"a snapshot of LSN {probe.lsn} said to stand at {offset}")
        probe.start_epoch = last_epoch
        self._replace(probe._snapshot_file())

    def compact(self) -> bool:
        """Rewrite the file as BASE + live messages (same LSN) when dead records outweigh
        live ones and every operation is written; True when it did. The caller knows every
        entry is committed and fsynced. Blocking: it writes and fsyncs the live bytes."""
        if self.written != self.lsn or not self.needs_compaction():
            return False
        self.start_epoch = self.last_epoch
        self._replace(self._snapshot_file())
        return True

    def needs_compaction(self) -> bool:
        """Dead records outweigh live messages (and the file is past :data:`COMPACT_MIN`)."""
        return self.size > COMPACT_MIN and self.size > 4 * (self.live_bytes + 64 * len(
            self.entries))

    def _snapshot_file(self) -> bytes:
        parts = [_record(BASE, _BASE.pack(self.lsn - len(self.entries), self.next_offset),
                         _EPOCH.pack(self.start_epoch))]
        for offset, (exrk, props, body, returns) in self.entries.items():
            parts.append(_enq_record(offset, returns, exrk, props, body))
        return b"".join(parts)

    def _replace(self, data: bytes) -> None:
        tmp = self.path.with_name(self.path.name + ".new")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        self._load(data)

    # ---- state ---------------------------------------------------------------------------

    @staticmethod
    def _base_epoch(body: bytes) -> int:
        return _EPOCH.unpack_from(body, _BASE.size)[0] if len(body) >= _BASE.size + 4 else 0

    def _apply_base(self, body: bytes) -> None:
        self.entries, self.live_bytes = {}, 0
        self.lsn, self.next_offset = _BASE.unpack_from(body)
        self.start_epoch = self._base_epoch(body)

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

    def _read(self, n: int) -> bytes:
        return os.pread(self._fd, n, 0) if n else b""

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
