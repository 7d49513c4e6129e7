"""The records of a quorum queue replica's log file (:mod:`queue_store.replica_log`, whose
docstring tells what they are for): making them, checking them and reading them from bytes
or from a file a bounded chunk at a time. A record is::

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
    POINT lsn:u64 epoch:u32                   (the snapshot point moved to that LSN, whose
                                              entry has that epoch: ``ReplicaLog.mark``; not an
                                              entry)

``exrk`` is Basic.Deliver's exchange and routing key as AMQP shortstrs and ``props`` the
content header's property bytes, as received: never decoded here. A file written before
epochs existed (no EPOCH record, a 16-byte BASE) reads as epoch 0.

Source: the record format is amqpq's own (length, CRC-32, kind), as the stream log's chunks.
"""

from __future__ import annotations

import os
import struct
import zlib
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ENQ, ACK, RET, BASE, EPOCH, POINT = 1, 2, 3, 4, 5, 6
ENTRY_KINDS = frozenset((ENQ, ACK, RET))

HEAD = struct.Struct(">II")
ENQ_HEAD = struct.Struct(">QIHI")
COUNT = struct.Struct(">I")
RET_BODY = struct.Struct(">QI")
BASE_BODY = struct.Struct(">QQ")
EPOCH_BODY = struct.Struct(">I")
POINT_BODY = struct.Struct(">QI")
KINDS = {k: bytes([k]) for k in (ENQ, ACK, RET, BASE, EPOCH, POINT)}
_ENQ_KIND = KINDS[ENQ]
#: bytes read from the file at once (a scan at open, a run of messages read back)
READ_CHUNK = 4 * 1024 * 1024


class ReplicaLogError(Exception):
    """Bytes that are not a sequence of whole, checked records (a chunk from the wire), or
    a snapshot that does not stand where it says."""


def make_record(kind: int, *parts: bytes) -> bytes:
    crc = zlib.crc32(KINDS[kind])
    n = 1
    for part in parts:
        crc = zlib.crc32(part, crc)
        n += len(part)
    return b"".join((HEAD.pack(n, crc), KINDS[kind], *parts))


def make_enq(offset: int, returns: int, exrk: bytes, props: bytes, body: bytes) -> bytes:
    """An ENQ record (:func:`make_record`'s bytes, in one join and one CRC: one per publish
    on a quorum queue's leader)."""
    rest = b"".join((_ENQ_KIND, ENQ_HEAD.pack(offset, returns, len(exrk), len(props)), exrk,
                     props, body))
    return HEAD.pack(len(rest), zlib.crc32(rest)) + rest


def parse_enq(record: bytes | memoryview) -> tuple[int, int, bytes, bytes, bytes]:
    """``(offset, returns, exrk, props, body)`` of a whole ENQ record (header included)."""
    offset, returns, exrk_len, props_len = ENQ_HEAD.unpack_from(record, 9)
    pos = 9 + ENQ_HEAD.size
    return (offset, returns, bytes(record[pos:pos + exrk_len]),
            bytes(record[pos + exrk_len:pos + exrk_len + props_len]),
            bytes(record[pos + exrk_len + props_len:]))


def write_all(fd: int, data: bytes) -> None:
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
        n, crc = HEAD.unpack_from(data, pos)
        payload = data[pos + 8:pos + 8 + n]
        if n == 0 or len(payload) < n or zlib.crc32(payload) != crc:
            if strict:
                raise ReplicaLogError("damaged record")
            return
        pos += 8 + n
        yield payload[0], payload[1:], pos


def scan_file(fd: int, end: int, pos: int = 0, chunk: int = 0
              ) -> Iterator[tuple[int, bytes, int]]:
    """``(kind, record, position)`` of each whole, checked record of the file ``fd`` from
    ``pos`` to ``end`` (``record``: its bytes, header included), read ``chunk`` bytes (default
    :data:`READ_CHUNK`) at a time (a record longer than that in one read); stops at a cut or
    damaged record (a torn tail)."""
    chunk = chunk or READ_CHUNK
    buf, i = b"", 0  # file bytes from pos - i
    while True:
        have = len(buf) - i
        n = HEAD.unpack_from(buf, i)[0] if have >= 8 else 0
        if have < 8 or have < 8 + n:
            if have >= 8 and (n == 0 or pos + 8 + n > end):
                return  # a damaged length, or cut at the end
            at = pos + have
            want = min(max(chunk, 8 + n - have), end - at)
            more = os.pread(fd, want, at) if want > 0 else b""
            if not more:
                return
            buf, i = buf[i:] + more, 0
            continue
        crc = HEAD.unpack_from(buf, i)[1]
        record = buf[i:i + 8 + n]
        if n == 0 or zlib.crc32(memoryview(record)[8:]) != crc:
            return
        yield record[8], record, pos
        i += 8 + n
        pos += 8 + n


def check_entry(payload: bytes) -> None:
    """Raise :class:`ReplicaLogError` unless ``payload`` is exactly one whole ENQ, ACK or
    RET record with a good CRC (an entry from the wire, before its replica takes it; then
    :meth:`ReplicaLog.write` applies it without checking it again)."""
    if len(payload) < 9:
        raise ReplicaLogError("cut entry")
    n, crc = HEAD.unpack_from(payload)
    if n != len(payload) - 8 or payload[8] not in ENTRY_KINDS \
            or zlib.crc32(memoryview(payload)[8:]) != crc:
        raise ReplicaLogError("an entry is one whole ENQ, ACK or RET record")


def read_runs(fd: int, offsets: Sequence[int], poss: Sequence[int], lens: Sequence[int],
              first: int = 0) -> Iterator[tuple[int, memoryview]]:
    """``(offset, ENQ record)`` of each message slot from index ``first`` whose position in
    the file ``fd`` is known (``poss[i] >= 0``; the slots are in offset order, so in file
    order), read in runs of up to :data:`READ_CHUNK` bytes (one read per run)."""
    i, n = first, len(offsets)
    while i < n:
        run: list[int] = []
        lo = hi = -1
        while i < n:
            p = poss[i]
            if p >= 0:
                if run and (p < hi or p + lens[i] - lo > READ_CHUNK):
                    break
                if not run:
                    lo = p
                run.append(i)
                hi = p + lens[i]
            i += 1
        if not run:
            return
        data = memoryview(os.pread(fd, hi - lo, lo))
        for j in run:
            p = poss[j] - lo
            yield offsets[j], data[p:p + lens[j]]


@dataclass
class Compaction:
    """A replica log's live messages as they were at one moment, written to a file of their
    own (BASE, then an ENQ record per message: its record as stored, or made again with its
    returns count) by :meth:`run`, off the event loop (:meth:`queue_store.replica_log.
    ReplicaLog.begin_compaction` freezes them, ``finish_compaction`` puts the file in place).

    Attributes (filled by :meth:`run`): ``new_pos`` (each frozen slot's position in the new
    file, -1 for a dead one), ``section`` (bytes written), ``error`` (an OSError, if any).
    """

    fd: int  # a duplicate of the log's descriptor (closed by run, or close)
    dest: Path
    lsn: int
    count: int
    next_offset: int
    epoch: int
    size: int  # the log file's size when frozen
    generation: int
    offsets: array[int]
    poss: array[int]
    lens: array[int]
    returns: dict[int, int]
    new_pos: array[int] = field(default_factory=lambda: array("q"))
    section: int = 0
    error: OSError | None = None

    def run(self) -> None:
        """Write and fsync the file (blocking: in a worker thread)."""
        try:
            out = os.open(self.dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                self._write(out)
                os.fsync(out)
            finally:
                os.close(out)
        except OSError as exc:
            self.error = exc
        finally:
            self.close()

    def close(self) -> None:
        """Close the job's descriptor of the log (run does; a job never run must)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _write(self, out: int) -> None:
        base = make_record(BASE, BASE_BODY.pack(self.lsn - self.count, self.next_offset),
                           EPOCH_BODY.pack(self.epoch))
        parts, held, at = [base], len(base), len(base)
        new_pos, returns = self.new_pos, self.returns
        for offset, record in read_runs(self.fd, self.offsets, self.poss, self.lens):
            while self.offsets[len(new_pos)] != offset:  # dead slots before it
                new_pos.append(-1)
            stored = ENQ_HEAD.unpack_from(record, 9)[1]
            wanted = returns.get(offset, 0)
            if stored == wanted:
                rec: bytes | memoryview = record
            else:
                _, _, exrk, props, body = parse_enq(record)
                rec = make_enq(offset, wanted, exrk, props, body)
            new_pos.append(at)
            parts.append(bytes(rec))
            at += len(rec)
            held += len(rec)
            if held >= READ_CHUNK:
                write_all(out, b"".join(parts))
                parts, held = [], 0
        write_all(out, b"".join(parts))
        new_pos.extend([-1] * (len(self.offsets) - len(new_pos)))
        self.section = at
