"""The queue index (queue_store.queue_index): the journal of a durable queue's persistent
messages -- replay of publish/deliver/ack, torn and corrupt records, compaction."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from pamqp import commands
from pamqp.header import ContentHeader

import queue_store.queue_index as queue_index_mod
from broker.broker import Broker
from broker.config import BrokerConfig
from broker.environment import BrokerEnvironment
from queue_store.message import Message
from queue_store.queue_index import RECORD_SIZE, IndexEntry, QueueIndex


def as_tuples(entries: list[IndexEntry]) -> list[tuple[int, int, bool, int, int]]:
    return [(e.seq, e.msg_id, e.delivered, e.expiry_ms, e.priority) for e in entries]


def flip_byte(path: Path, offset: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        b = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([b[0] ^ 0x5A]))


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "queues" / "q.idx"


def test_missing_journal_recovers_empty(path: Path) -> None:
    assert QueueIndex.recover(path) == []


def test_replay_publish_deliver_ack(path: Path) -> None:
    idx = QueueIndex(path)
    idx.publish(1, 101)
    idx.publish(2, 102, expiry_ms=1_700_000_000_123, priority=7)
    idx.publish(3, 103, priority=255)
    idx.publish(4, 104)
    idx.deliver(2)
    idx.deliver(4)
    idx.ack(4)  # delivered then acked: gone
    idx.ack(1)
    idx.publish(5, 105, expiry_ms=5)
    assert idx.live == 3
    idx.close()
    assert path.stat().st_size == 9 * RECORD_SIZE
    assert as_tuples(QueueIndex.recover(path)) == [
        (2, 102, True, 1_700_000_000_123, 7),
        (3, 103, False, 0, 255),
        (5, 105, False, 5, 0),
    ]


def test_entries_come_back_in_sequence_order(path: Path) -> None:
    idx = QueueIndex(path)
    for seq in (5, 3, 9, 1):  # e.g. recompacted journal, then new publishes
        idx.publish(seq, seq * 10)
    idx.close()
    assert [e.seq for e in QueueIndex.recover(path)] == [1, 3, 5, 9]


def test_buffered_records_reach_the_file_only_on_flush(path: Path) -> None:
    idx = QueueIndex(path)
    idx.publish(1, 11)
    assert idx.dirty
    assert QueueIndex.recover(path) == []  # still in the buffer
    idx.flush()
    assert not idx.dirty
    assert [e.seq for e in QueueIndex.recover(path)] == [1]
    assert len(idx.sync_fds()) == 1
    assert idx.sync_fds() == []  # nothing new since
    idx.ack(1)
    assert len(idx.sync_fds()) == 1
    assert QueueIndex.recover(path) == []
    idx.close()


def test_deliver_and_ack_of_unknown_seq_are_ignored(path: Path) -> None:
    idx = QueueIndex(path)
    idx.deliver(42)
    idx.ack(43)
    idx.publish(1, 7)
    idx.close()
    assert as_tuples(QueueIndex.recover(path)) == [(1, 7, False, 0, 0)]


def test_appending_after_reopen(path: Path) -> None:
    idx = QueueIndex(path)
    idx.publish(1, 1)
    idx.close()
    idx = QueueIndex(path)  # a restart appends to the same journal
    idx.publish(2, 2)
    idx.deliver(1)
    idx.close()
    assert as_tuples(QueueIndex.recover(path)) == [(1, 1, True, 0, 0), (2, 2, False, 0, 0)]


@pytest.mark.parametrize("torn", [1, RECORD_SIZE // 2, RECORD_SIZE - 1])
def test_torn_tail_is_truncated(path: Path, torn: int) -> None:
    idx = QueueIndex(path)
    for seq in (1, 2, 3):
        idx.publish(seq, seq + 100)
    idx.ack(2)
    idx.publish(4, 104)
    idx.close()
    full = path.stat().st_size
    os.truncate(path, full - RECORD_SIZE + torn)  # the last record half written
    entries = QueueIndex.recover(path)
    assert as_tuples(entries) == [(1, 101, False, 0, 0), (3, 103, False, 0, 0)]
    assert path.stat().st_size == full - RECORD_SIZE
    # appends after the truncation are aligned again
    idx = QueueIndex(path)
    idx.publish(5, 105)
    idx.close()
    assert [e.seq for e in QueueIndex.recover(path)] == [1, 3, 5]


def test_corrupt_publish_record_is_skipped(path: Path) -> None:
    idx = QueueIndex(path)
    for seq in (1, 2, 3):
        idx.publish(seq, seq + 100, priority=seq)
    idx.deliver(2)
    idx.close()
    flip_byte(path, RECORD_SIZE * 1 + 10)  # inside publish of seq 2
    entries = QueueIndex.recover(path)
    assert as_tuples(entries) == [(1, 101, False, 0, 1), (3, 103, False, 0, 3)]
    assert path.stat().st_size == 4 * RECORD_SIZE  # a corrupt record is not truncated away


def test_corrupt_crc_field_is_skipped(path: Path) -> None:
    idx = QueueIndex(path)
    idx.publish(1, 101)
    idx.publish(2, 102)
    idx.close()
    flip_byte(path, 2 * RECORD_SIZE - 1)  # the CRC of the second record
    assert [e.seq for e in QueueIndex.recover(path)] == [1]


def test_corrupt_ack_brings_message_back(path: Path) -> None:
    """Losing an ack record errs on the side of redelivery, never of loss."""
    idx = QueueIndex(path)
    idx.publish(1, 101)
    idx.publish(2, 102)
    idx.deliver(1)
    idx.ack(1)
    idx.close()
    flip_byte(path, 3 * RECORD_SIZE + 3)  # the ack of seq 1
    assert as_tuples(QueueIndex.recover(path)) == [(1, 101, True, 0, 0), (2, 102, False, 0, 0)]


def test_corrupt_deliver_record_loses_only_the_flag(path: Path) -> None:
    idx = QueueIndex(path)
    idx.publish(1, 101)
    idx.deliver(1)
    idx.close()
    flip_byte(path, RECORD_SIZE + 5)
    assert as_tuples(QueueIndex.recover(path)) == [(1, 101, False, 0, 0)]


def test_garbage_file_recovers_nothing_and_does_not_raise(path: Path) -> None:
    path.parent.mkdir(parents=True)
    path.write_bytes(random.Random(7).randbytes(RECORD_SIZE * 10 + 7))
    assert QueueIndex.recover(path) == []
    # nothing in it checks: it is all an unreadable tail, truncated; appends read back
    assert path.stat().st_size == 0
    idx = QueueIndex(path)
    idx.publish(1, 11)
    idx.close()
    assert [e.seq for e in QueueIndex.recover(path)] == [1]


def test_compact_keeps_exactly_the_live_entries(path: Path) -> None:
    idx = QueueIndex(path)
    for seq in range(1, 101):
        idx.publish(seq, 1000 + seq, expiry_ms=seq * 3 if seq % 3 == 0 else 0,
                    priority=seq % 10)
    for seq in range(1, 101):
        if seq % 4 == 0:
            idx.deliver(seq)
        if seq % 5 != 0:
            idx.ack(seq)
    idx.flush()
    live = QueueIndex.recover(path)
    assert [e.seq for e in live] == list(range(5, 101, 5))
    idx.compact(live)
    assert idx.live == len(live) == 20
    assert idx.acked == 0
    delivered = sum(1 for e in live if e.delivered)
    assert delivered == 5  # seq 20, 40, 60, 80, 100
    assert path.stat().st_size == (len(live) + delivered) * RECORD_SIZE
    assert as_tuples(QueueIndex.recover(path)) == as_tuples(live)
    assert not path.with_suffix(".tmp").exists()
    # the journal stays appendable after the rewrite
    idx.ack(5)
    idx.publish(101, 2101)
    idx.close()
    after = QueueIndex.recover(path)
    assert [e.seq for e in after] == list(range(10, 101, 5)) + [101]


def test_compact_to_empty(path: Path) -> None:
    idx = QueueIndex(path)
    idx.publish(1, 1)
    idx.ack(1)
    idx.compact([])
    assert path.stat().st_size == 0
    idx.publish(2, 2)
    idx.close()
    assert [e.seq for e in QueueIndex.recover(path)] == [2]


def test_segment_rotates_when_acks_dominate(path: Path) -> None:
    idx = QueueIndex(path)
    assert not idx.needs_compaction()
    for seq in range(1, 10_003):
        idx.publish(seq, seq)
        idx.ack(seq)
    idx.publish(20_000, 1)
    # the ack that made acks dominate rotated the segment; the fully acked one is gone
    assert not idx.needs_compaction()
    idx.flush()
    assert path.stat().st_size <= 3 * RECORD_SIZE
    assert list(path.parent.glob(path.name + ".*")) == []
    idx.close()
    assert [e.seq for e in QueueIndex.recover(path)] == [20_000]


def test_rotated_segment_with_live_messages_is_kept_until_acked(path: Path) -> None:
    idx = QueueIndex(path)
    idx.publish(1, 1)  # stays live across the rotation
    for seq in range(2, 10_004):
        idx.publish(seq, seq)
        idx.ack(seq)
    idx.flush()
    rotated = list(path.parent.glob(path.name + ".*"))
    assert len(rotated) == 1
    assert [e.seq for e in QueueIndex.recover(path)] == [1]
    idx.ack(1)
    assert not rotated[0].exists()
    idx.close()
    assert QueueIndex.recover(path) == []


def test_delete_removes_the_journal(path: Path) -> None:
    idx = QueueIndex(path)
    idx.publish(1, 1)
    idx.flush()
    idx.delete()
    assert not path.exists()
    assert QueueIndex.recover(path) == []


def test_journal_of_queue_with_standing_backlog_stays_bounded(tmp_path: Path,
                                                              monkeypatch) -> None:
    monkeypatch.setattr(queue_index_mod, "COMPACT_MIN_ACKS", 100)  # 10_000 in production
    persistent = ContentHeader(0, 0, commands.Basic.Properties(delivery_mode=2)).marshal()[12:]
    broker = Broker(BrokerConfig(data_dir=tmp_path), BrokerEnvironment(storage=True))
    vhost = broker.vhosts["/"]
    q = vhost.declare_queue("q", durable=True)
    q.publish(Message.create("", "q", persistent, b"held"))
    assert q.get() is not None  # delivered, never acked: the queue never drains
    for i in range(1000):
        q.publish(Message.create("", "q", persistent, f"m{i}".encode()))
        q.get(no_ack=True)
        broker.after_batch()
    journal = vhost.storage.index_path("q")
    # 1000 acked messages dominate 1 live one: far less than 3000 records should be left
    assert journal.stat().st_size < 300 * RECORD_SIZE, journal.stat().st_size


# ---- embedded messages ----------------------------------------------------------------------


def embedded_journal(path: Path, n: int = 4) -> list[int]:
    """Publishes n embedded messages (seq 1..n, payload b"payload-<seq>" * seq) plus an ack
    of seq 2; returns each record's end offset."""
    idx = QueueIndex(path)
    ends = []
    for seq in range(1, n + 1):
        idx.publish_embedded(seq, b"payload-%d" % seq * seq, expiry_ms=seq, priority=seq)
        idx.flush()
        ends.append(path.stat().st_size)
    idx.ack(2)
    idx.close()
    return ends


def test_embedded_publish_replays_with_its_payload(path: Path) -> None:
    embedded_journal(path)
    entries = QueueIndex.recover(path)
    assert [(e.seq, e.msg_id, e.expiry_ms, e.priority, e.payload) for e in entries] == [
        (seq, 0, seq, seq, b"payload-%d" % seq * seq) for seq in (1, 3, 4)]


def test_corrupt_embedded_payload_loses_only_that_message(path: Path) -> None:
    ends = embedded_journal(path)
    flip_byte(path, ends[2] - 3)  # inside the payload of seq 3
    assert [e.seq for e in QueueIndex.recover(path)] == [1, 4]
    assert path.stat().st_size == ends[3] + RECORD_SIZE  # skipped, not truncated


def test_damaged_embedded_length_field_does_not_cost_the_records_after_it(path: Path) -> None:
    ends = embedded_journal(path)
    flip_byte(path, ends[0] + 9 + 7)  # low byte of seq 2's length: points elsewhere
    entries = QueueIndex.recover(path)
    # seq 2 is lost with its record, so its ack finds nothing; 3 and 4 are intact
    assert [e.seq for e in entries] == [1, 3, 4]


@pytest.mark.parametrize("keep", [1, RECORD_SIZE - 1, RECORD_SIZE + 3])
def test_torn_embedded_tail_is_truncated(path: Path, keep: int) -> None:
    idx = QueueIndex(path)
    idx.publish_embedded(1, b"a" * 100)
    idx.flush()
    good = path.stat().st_size
    idx.publish_embedded(2, b"b" * 100)
    idx.close()
    os.truncate(path, good + keep)  # the second record half written
    assert [e.payload for e in QueueIndex.recover(path)] == [b"a" * 100]
    assert path.stat().st_size == good
    idx = QueueIndex(path)
    idx.publish_embedded(3, b"c")
    idx.close()
    assert [e.seq for e in QueueIndex.recover(path)] == [1, 3]


def test_compact_rewrites_embedded_and_stored_entries(path: Path) -> None:
    idx = QueueIndex(path)
    idx.publish_embedded(1, b"one")
    idx.publish(2, 77, priority=2)
    idx.publish_embedded(3, b"three", expiry_ms=9)
    idx.deliver(3)
    idx.ack(1)
    idx.flush()
    live = QueueIndex.recover(path)
    assert idx.compact(iter(live))  # streamed: any iterable, consumed once
    assert idx.live == 2
    assert [(e.seq, e.msg_id, e.delivered, e.payload) for e in QueueIndex.recover(path)] == [
        (2, 77, False, None), (3, 0, True, b"three")]
    idx.close()


def test_live_entries_stream_without_holding_the_journal(path: Path) -> None:
    idx = QueueIndex(path)
    for seq in range(1, 2001):
        idx.publish_embedded(seq, b"x" * 50)
    for seq in range(1, 1001):
        idx.ack(seq)
    idx.close()
    it = QueueIndex.iter_live(path)
    assert next(it).seq == 1001  # a generator: entries come one at a time
    assert sum(1 for _ in it) == 999
