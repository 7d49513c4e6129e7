"""The records of a quorum queue replica's log file (:mod:`queue_store.replica_log`, whose
docstring gives the format): making them, checking them and reading them from bytes or from
a file a bounded chunk at a time.

Source: the record format is amqpq's own (length, CRC-32, kind), as the stream log's chunks.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterator

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
    return make_record(ENQ, ENQ_HEAD.pack(offset, returns, len(exrk), len(props)), exrk, props,
                       body)


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
