"""The replication records on the node link (amqp_server/cluster/replica_records.py): each
record survives encode/decode with its fields, entry payloads are carried unchanged, and a
cut or unknown body is refused."""

from __future__ import annotations

import pytest

from amqp_server.cluster.replica_records import (
    ChunkRequest,
    RecordError,
    SnapshotChunk,
    decode,
    encode,
)
from amqp_server.cluster.replication_types import Diverging, Fetch, Records, Snapshot
from amqp_server.workers.link_codec import REPL, Outbox, RecordReader, queue_key
from queue_store.replica_log import ReplicaLog

QKEY = queue_key("/", "orders")


def test_every_record_round_trips(tmp_path) -> None:
    log = ReplicaLog(tmp_path / "q.log")
    payloads = (log.enq(b"\x00\x02rk", b"\x90\x00", b"body")[1], log.ack([1]))
    records = [
        Fetch(7, 2**40, 6, 2**40 - 3, 2**64 - 1),
        Records(7, 12, 6, ((6, payloads[0]), (7, payloads[1])), 11),
        Records(3, 0, 0, (), 0),
        Diverging(9, 100, 8, 5, 77),
        SnapshotChunk(4, 1000, 3, 999, 2**33, 2**32, b"\x01" * 5000),
        ChunkRequest(4, 1000, 2**32 + 5000),
    ]
    for record in records:
        assert decode(encode(QKEY, record)) == (QKEY, record)


def test_a_repl_record_crosses_the_link_unchanged() -> None:
    box = Outbox()
    body = encode(QKEY, Fetch(2, 5, 1, 4))
    box.repl(body)
    reader = RecordReader()
    assert reader.feed(box.take()) == [(REPL, body)]


def test_a_cut_or_unknown_body_is_refused() -> None:
    body = encode(QKEY, Records(1, 0, 0, ((1, b"x" * 40),), 0))
    for bad in (body[:-1], body[:5], b"\x09" + body[1:]):
        with pytest.raises(RecordError):
            decode(bad)
    with pytest.raises(TypeError):
        encode(QKEY, Snapshot(1, 1, 1, b"", 1))  # a snapshot is sent in chunks
