"""The quorum queue replica log (queue_store/replica_log.py): what a replica holds after
operations, a restart, a torn tail, chunks from a leader and snapshots."""

from __future__ import annotations

from pathlib import Path

import pytest

from queue_store.replica_log import ReplicaLog, ReplicaLogError

EXRK = b"\x00\x02rk"


def test_operations_survive_a_reopen_and_a_torn_tail_is_cut(tmp_path: Path) -> None:
    log = ReplicaLog(tmp_path / "q.log")
    offsets = [log.enq(EXRK, b"\x00\x00", f"m{i}".encode())[0] for i in range(5)]
    assert offsets == [1, 2, 3, 4, 5]
    log.ack([1, 3])
    log.ret(2, 1)
    log.take_chunk()
    log.sync()
    lsn, size = log.lsn, log.size
    log.close()
    with open(tmp_path / "q.log", "ab") as f:
        f.write(b"\x00\x00\x00\x30garbage")  # a write cut by a crash
    again = ReplicaLog(tmp_path / "q.log")
    assert again.lsn == lsn == 7 and again.size == size
    assert {o: (e[2], e[3]) for o, e in again.entries.items()} == {
        2: (b"m1", 1), 4: (b"m3", 0), 5: (b"m4", 0)}
    assert again.enq(EXRK, b"", b"next")[0] == 6  # offsets go on after the restart


def test_a_follower_applies_the_leaders_chunks_and_refuses_a_gap(tmp_path: Path) -> None:
    leader, follower = ReplicaLog(tmp_path / "l.log"), ReplicaLog(tmp_path / "f.log")
    leader.enq(EXRK, b"", b"a")
    leader.enq(EXRK, b"", b"b")
    first, data = leader.take_chunk()
    assert follower.append_chunk(first, data)
    leader.ack([1])
    first2, data2 = leader.take_chunk()
    leader.enq(EXRK, b"", b"c")
    first3, data3 = leader.take_chunk()
    assert not follower.append_chunk(first3, data3)  # the ack's chunk is missing
    assert follower.append_chunk(first2, data2) and follower.append_chunk(first3, data3)
    assert follower.lsn == leader.lsn == 4
    assert [e[2] for e in follower.entries.values()] == [b"b", b"c"]
    with pytest.raises(ReplicaLogError):
        follower.append_chunk(follower.lsn + 1, data3[:-1])


def test_a_snapshot_stands_at_the_leaders_lsn_and_chunks_follow_it(tmp_path: Path) -> None:
    leader, follower = ReplicaLog(tmp_path / "l.log"), ReplicaLog(tmp_path / "f.log")
    follower.enq(EXRK, b"", b"stale")  # what an old leader left: replaced whole
    follower.take_chunk()
    for body in (b"a", b"b", b"c"):
        leader.enq(EXRK, b"", body)
    leader.ack([2])
    leader.take_chunk()
    follower.install(leader.snapshot())
    assert follower.lsn == leader.lsn == 4
    leader.enq(EXRK, b"", b"d")
    assert follower.append_chunk(*leader.take_chunk())
    follower.close()
    reopened = ReplicaLog(tmp_path / "f.log")
    assert reopened.lsn == 5 and [e[2] for e in reopened.entries.values()] == [b"a", b"c", b"d"]


def test_compaction_keeps_the_lsn_and_the_live_messages(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("queue_store.replica_log.COMPACT_MIN", 1000)
    log = ReplicaLog(tmp_path / "q.log")
    for i in range(200):
        log.enq(EXRK, b"", f"m{i:03}".encode() * 10)
    log.ack(range(1, 196))
    assert log.compact() is False  # operations not taken yet: nothing is rewritten under them
    log.take_chunk()
    before = log.size
    assert log.compact() is True and log.size < before // 4
    assert log.lsn == 201 and [o for o in log.entries] == [196, 197, 198, 199, 200]
    log.enq(EXRK, b"", b"after")
    log.take_chunk()
    log.close()
    again = ReplicaLog(tmp_path / "q.log")
    assert again.lsn == 202 and list(again.entries) == [196, 197, 198, 199, 200, 201]
