"""The replication records of quorum queues on the node link (sans-IO): Fetch, Records,
Diverging and Snapshot (:mod:`amqp_server.cluster.replication_types`) to and from the body
of a ``REPL`` link record (:mod:`amqp_server.workers.link_codec`).

A body is ``sub:u8 qkey_len:u16 epoch:u32``, the queue's key (``vhost NUL name``), then by
``sub`` (big-endian)::

    FETCH      offset:u64 last_epoch:u32 durable:u64 log_id:u64   (log_id: the follower's
               replica log's, :mod:`amqp_server.cluster.log_ids`)
    RECORDS    first:u64 prev_epoch:u32 hw:u64 count:u32, then count x
               (epoch:u32 length:u32 payload)   (payload: one replica log record, as stored)
    DIVERGING  offset:u64 last_epoch:u32 end_epoch:u32 end_offset:u64
    SNAPSHOT   offset:u64 last_epoch:u32 hw:u64 total:u64 pos:u64, then bytes pos.. of the
               snapshot (:meth:`queue_store.replica_log.ReplicaLog.read_snapshot`)
    CHUNK      offset:u64 pos:u64   (a follower asks for the snapshot's bytes from pos)
    RETAIN     first:u64   (a replicated stream's leader kept its log from offset first:
               the followers drop the segments below it, :mod:`amqp_server.cluster.
               stream_group`)

Entry payloads are the replica log's record bytes, sent and stored unchanged; the receiver
checks each one's CRC before its replica takes it (:func:`queue_store.replica_log.
check_entry`). A snapshot travels in :class:`SnapshotChunk` records of bounded size, each
asked for by the follower once it wrote the one before (:class:`ChunkRequest`): one chunk in
flight per follower, whatever the queue's size; the follower's replica gets the
:class:`~amqp_server.cluster.replication_types.Snapshot` once the last chunk is on its disk
(:mod:`amqp_server.cluster.quorum_group`).

Source: Kafka's Fetch request and response (``lastFetchedEpoch``, ``divergingEpoch``,
KIP-320), carried on amqpq's node link.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from amqp_server.cluster.replication_types import Diverging, Fetch, Records

__all__ = ["ChunkRequest", "RecordError", "Retain", "SnapshotChunk", "decode", "encode"]


@dataclass(frozen=True)
class SnapshotChunk:
    """Bytes ``[pos, pos + len(data))`` of the ``total`` bytes of the snapshot the leader of
    ``epoch`` sends, standing at offset ``offset`` (its last entry of epoch ``last_epoch``;
    the leader's high watermark ``hw`` when it began)."""

    epoch: int
    offset: int
    last_epoch: int
    hw: int
    total: int
    pos: int
    data: bytes


@dataclass(frozen=True)
class ChunkRequest:
    """A follower (of ``epoch``) wrote the snapshot at ``offset`` up to byte ``pos``: the
    next chunk, please."""

    epoch: int
    offset: int
    pos: int


@dataclass(frozen=True)
class Retain:
    """The leader of ``epoch`` of a replicated stream applied its retention: its log begins
    at offset ``first`` (a segment's first offset)."""

    epoch: int
    first: int


ReplicaRecord = Fetch | Records | Diverging | SnapshotChunk | ChunkRequest | Retain

FETCH, RECORDS, DIVERGING, SNAPSHOT, CHUNK, RETAIN = 1, 2, 3, 4, 5, 6

_HEAD = struct.Struct(">BHI")
_FETCH = struct.Struct(">QIQQ")
_RECORDS = struct.Struct(">QIQI")
_ENTRY = struct.Struct(">II")
_DIVERGING = struct.Struct(">QIIQ")
_SNAPSHOT = struct.Struct(">QIQQQ")
_CHUNK = struct.Struct(">QQ")
_RETAIN = struct.Struct(">Q")


class RecordError(Exception):
    """A REPL body that is not a replication record (the record is dropped)."""


def encode(qkey: bytes, record: ReplicaRecord) -> bytes:
    """The REPL body of ``record`` for queue ``qkey``.

    Raises:
        TypeError: not a replication record (a replica's ``Snapshot`` is sent as
            :class:`SnapshotChunk` records).
    """
    if isinstance(record, Fetch):
        sub, rest = FETCH, [_FETCH.pack(record.offset, record.last_epoch, record.durable,
                                             record.log_id)]
    elif isinstance(record, Records):
        sub = RECORDS
        rest = [_RECORDS.pack(record.first, record.prev_epoch, record.hw, len(record.entries))]
        for epoch, payload in record.entries:
            rest += (_ENTRY.pack(epoch, len(payload)), payload)
    elif isinstance(record, Diverging):
        sub, rest = DIVERGING, [_DIVERGING.pack(record.offset, record.last_epoch,
                                                record.end_epoch, record.end_offset)]
    elif isinstance(record, SnapshotChunk):
        sub, rest = SNAPSHOT, [_SNAPSHOT.pack(record.offset, record.last_epoch, record.hw,
                                              record.total, record.pos), record.data]
    elif isinstance(record, ChunkRequest):
        sub, rest = CHUNK, [_CHUNK.pack(record.offset, record.pos)]
    elif isinstance(record, Retain):
        sub, rest = RETAIN, [_RETAIN.pack(record.first)]
    else:
        raise TypeError(f"not a replication record: {record!r:.80}")
    return b"".join((_HEAD.pack(sub, len(qkey), record.epoch), qkey, *rest))


def decode(body: bytes) -> tuple[bytes, ReplicaRecord]:
    """``(qkey, record)`` from a REPL body.

    Raises:
        RecordError: a cut body or an unknown kind.
    """
    try:
        sub, qlen, epoch = _HEAD.unpack_from(body)
        pos = _HEAD.size + qlen
        qkey = body[_HEAD.size:pos]
        if len(qkey) != qlen:
            raise RecordError("cut queue key")
        if sub == FETCH:
            offset, last_epoch, durable, log_id = _FETCH.unpack_from(body, pos)
            return qkey, Fetch(epoch, offset, last_epoch, durable, log_id)
        if sub == RECORDS:
            first, prev_epoch, hw, count = _RECORDS.unpack_from(body, pos)
            pos += _RECORDS.size
            entries = []
            append, unpack, head = entries.append, _ENTRY.unpack_from, _ENTRY.size
            for _ in range(count):
                e, n = unpack(body, pos)
                pos += head
                append((e, body[pos:pos + n]))
                pos += n
            if pos > len(body):  # a payload cut short (the ones before it end in the body)
                raise RecordError("cut entry")
            return qkey, Records(epoch, first, prev_epoch, tuple(entries), hw)
        if sub == DIVERGING:
            offset, last_epoch, end_epoch, end_offset = _DIVERGING.unpack_from(body, pos)
            return qkey, Diverging(epoch, offset, last_epoch, end_epoch, end_offset)
        if sub == SNAPSHOT:
            offset, last_epoch, hw, total, at = _SNAPSHOT.unpack_from(body, pos)
            return qkey, SnapshotChunk(epoch, offset, last_epoch, hw, total, at,
                                       body[pos + _SNAPSHOT.size:])
        if sub == CHUNK:
            offset, at = _CHUNK.unpack_from(body, pos)
            return qkey, ChunkRequest(epoch, offset, at)
        if sub == RETAIN:
            (first,) = _RETAIN.unpack_from(body, pos)
            return qkey, Retain(epoch, first)
    except struct.error as exc:
        raise RecordError(f"cut replication record: {exc}") from None
    raise RecordError(f"unknown replication record kind {sub}")
