"""The quorum queue replica log (queue_store/replica_log.py): what a replica holds after
operations, a restart, a torn tail, entries from a leader, a truncation, snapshots and
compaction; every entry keeps the leader epoch that appended it."""

from __future__ import annotations

from pathlib import Path

import pytest

from queue_store.replica_log import ReplicaLog, ReplicaLogError, check_entry

EXRK = b"\x00\x02rk"


def _lead(log: ReplicaLog, epoch: int, payloads: list[bytes | None]) -> list[tuple[int, bytes]]:
    """Write the leader's operations (as the replication log's Write would)."""
    entries = [(epoch, p) for p in payloads if p is not None]
    log.write(log.written, entries)
    return entries


def _bodies(log: ReplicaLog) -> dict[int, tuple[bytes, int]]:
    return {o: (m[2], m[3]) for o, m in log.messages()}


def test_operations_and_epochs_survive_a_reopen_and_a_torn_tail_is_cut(tmp_path: Path) -> None:
    log = ReplicaLog(tmp_path / "q.log")
    enqs = [log.enq(EXRK, b"\x00\x00", f"m{i}".encode()) for i in range(5)]
    assert [o for o, _ in enqs] == [1, 2, 3, 4, 5]
    _lead(log, 1, [p for _, p in enqs[:3]])
    _lead(log, 2, [p for _, p in enqs[3:]] + [log.ack([1, 3]), log.ret(2, 1)])
    assert log.ack([99]) is None and log.ret(99, 1) is None  # not here: no entry
    log.sync()
    lsn, size = log.lsn, log.size
    log.close()
    with open(tmp_path / "q.log", "ab") as f:
        f.write(b"\x00\x00\x00\x30garbage")  # a write cut by a crash
    again = ReplicaLog(tmp_path / "q.log")
    assert again.lsn == again.written == lsn == 7 and again.size == size
    assert _bodies(again) == {2: (b"m1", 1), 4: (b"m3", 0), 5: (b"m4", 0)}
    tail = again.tail()
    assert [e for e, _ in tail] == [1, 1, 1, 2, 2, 2, 2] and again.last_epoch == 2
    assert tail[0][1] == enqs[0][1]  # the entry's payload: the record bytes as sent
    assert again.enq(EXRK, b"", b"next")[0] == 6  # offsets go on after the restart


def test_a_follower_applies_the_leaders_entries_and_refuses_a_gap(tmp_path: Path) -> None:
    leader, follower = ReplicaLog(tmp_path / "l.log"), ReplicaLog(tmp_path / "f.log")
    first = _lead(leader, 1, [leader.enq(EXRK, b"", b"a")[1], leader.enq(EXRK, b"", b"b")[1]])
    follower.write(0, first)
    second = _lead(leader, 1, [leader.ack([1]), leader.enq(EXRK, b"", b"c")[1]])
    with pytest.raises(ReplicaLogError):
        follower.write(3, second)  # not at its end
    follower.write(2, second)
    assert follower.lsn == leader.lsn == 4
    assert [m[2] for _, m in follower.messages()] == [b"b", b"c"]
    check_entry(second[1][1])
    for bad in (second[1][1][:-1], second[0][1] + second[1][1]):
        with pytest.raises(ReplicaLogError):
            check_entry(bad)  # cut, or two records


def test_truncation_cuts_a_divergent_tail_on_disk_and_undoes_its_operations(
        tmp_path: Path) -> None:
    log = ReplicaLog(tmp_path / "f.log")
    _lead(log, 1, [log.enq(EXRK, b"", b"a")[1], log.enq(EXRK, b"", b"b")[1]])
    _lead(log, 2, [log.ack([1]), log.ret(2, 3), log.enq(EXRK, b"", b"x")[1]])
    log.truncate(2)  # epoch 2's entries were never the new leader's
    assert log.lsn == log.written == 2 and log.last_epoch == 1
    assert _bodies(log) == {1: (b"a", 0), 2: (b"b", 0)}
    _lead(log, 3, [log.enq(EXRK, b"", b"y")[1]])
    log.close()
    again = ReplicaLog(tmp_path / "f.log")
    assert again.lsn == 3 and [e for e, _ in again.tail()] == [1, 1, 3]
    assert _bodies(again) == {1: (b"a", 0), 2: (b"b", 0), 3: (b"y", 0)}
    again.truncate(0)
    assert again.lsn == 0 and again.count == 0 and again.offsets() == [] and again.size == 0


def test_a_snapshot_point_installs_on_a_follower_and_entries_follow_it(tmp_path: Path) -> None:
    leader, follower = ReplicaLog(tmp_path / "l.log"), ReplicaLog(tmp_path / "f.log")
    _lead(follower, 1, [follower.enq(EXRK, b"", b"stale")[1]])  # an old leader's: replaced
    _lead(leader, 1, [leader.enq(EXRK, b"", b)[1] for b in (b"a", b"b", b"c")])
    _lead(leader, 2, [leader.ack([2])])
    assert leader.mark(4) == 4 and leader.start_epoch == 2
    later = _lead(leader, 2, [leader.enq(EXRK, b"", b"d")[1]])  # after the point
    follower.install(4, 2, leader.snapshot_bytes())
    assert follower.lsn == follower.start == 4 and follower.start_epoch == 2
    assert [m[2] for _, m in follower.messages()] == [b"a", b"c"]
    follower.write(4, later)
    follower.close()
    reopened = ReplicaLog(tmp_path / "f.log")
    assert reopened.start == 4 and reopened.start_epoch == 2 and reopened.lsn == 5
    assert reopened.tail() == later
    assert [m[2] for _, m in reopened.messages()] == [b"a", b"c", b"d"]
    with pytest.raises(ReplicaLogError):
        reopened.install(3, 2, leader.snapshot_bytes())  # not where it says it stands
    reopened.truncate(3)  # below the snapshot: it was not the leader's, start over
    assert reopened.lsn == reopened.start == 0 and reopened.count == 0
    assert reopened.size == 0 and reopened.tail() == []


def test_compaction_keeps_the_lsn_epoch_and_the_live_messages(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("queue_store.replica_log.COMPACT_MIN", 1000)
    log = ReplicaLog(tmp_path / "q.log")
    _lead(log, 3, [log.enq(EXRK, b"", f"m{i:03}".encode() * 10)[1] for i in range(200)])
    payload = log.ack(range(1, 196))
    assert log.compact() is False  # an operation not written yet: nothing is rewritten
    _lead(log, 3, [payload])
    before = log.size
    assert log.compact() is True and log.size < before // 4
    assert log.lsn == log.start == 201 and log.start_epoch == 3
    assert log.offsets() == [196, 197, 198, 199, 200]
    _lead(log, 4, [log.enq(EXRK, b"", b"after")[1]])
    log.close()
    again = ReplicaLog(tmp_path / "q.log")
    assert again.lsn == 202 and again.start == 201 and again.offsets() == [
        196, 197, 198, 199, 200, 201]
    assert [e for e, _ in again.tail()] == [4]


def test_a_restart_starts_at_the_last_snapshot_point_and_reads_every_message_back(
        tmp_path: Path) -> None:
    log = ReplicaLog(tmp_path / "q.log")
    for i in range(6):
        _lead(log, 1, [log.enq(EXRK, b"\x00\x00", f"m{i}".encode())[1]])
    _lead(log, 2, [log.ack([2]), log.ret(3, 2)])
    assert log.mark(8) == 8 and log.start_epoch == 2
    _lead(log, 2, [log.enq(EXRK, b"", b"after")[1]])
    log.close()
    again = ReplicaLog(tmp_path / "q.log")
    assert again.start == 8 and again.start_epoch == 2 and again.lsn == 9
    assert [e for e, _ in again.tail()] == [2]  # only what follows the POINT record
    assert _bodies(again) == {1: (b"m0", 0), 3: (b"m2", 2), 4: (b"m3", 0), 5: (b"m4", 0),
                              6: (b"m5", 0), 7: (b"after", 0)}
    assert again.message(3) == (EXRK, b"\x00\x00", b"m2", 2) and again.message(2) is None
    copy = ReplicaLog(tmp_path / "f.log")
    copy.install(8, 2, again.snapshot_bytes())  # the file up to the point replays there
    assert copy.lsn == copy.start == 8 and _bodies(copy) == {
        o: b for o, b in _bodies(again).items() if o != 7}


def test_messages_are_read_back_in_runs_and_compaction_keeps_their_returns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("queue_store.replica_log_records.READ_CHUNK", 100)  # runs, longer records
    monkeypatch.setattr("queue_store.replica_log.COMPACT_MIN", 1000)
    log = ReplicaLog(tmp_path / "q.log")
    want = {}
    for i in range(1, 301):
        body = bytes([i % 256]) * (i % 7 * 40)
        _lead(log, 1, [log.enq(EXRK, b"p", body)[1]])
        want[i] = (body, 0)
    gone = [o for o in want if o % 10]
    _lead(log, 1, [log.ack(gone), log.ret(10, 4)])
    want = {o: (b, 4 if o == 10 else 0) for o, (b, _) in want.items() if o not in gone}
    assert _bodies(log) == want and log.count == 30
    assert log.compact() is True
    assert _bodies(log) == want and log.start == log.lsn == 302
    log.close()
    assert _bodies(ReplicaLog(tmp_path / "q.log")) == want


def test_a_replica_keeps_no_message_body_in_ram(tmp_path: Path) -> None:
    import tracemalloc

    log = ReplicaLog(tmp_path / "q.log")
    body = b"x" * 4000
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(25):  # 5,000 messages of 4,000 bytes: 20 MB of bodies
            _lead(log, 1, [log.enq(EXRK, b"", body)[1] for _ in range(200)])
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert log.count == 5_000
    assert held < 1_000_000, held  # 20 bytes of slots per message, no bytes objects


def test_entries_are_read_back_from_the_file_with_their_epochs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("queue_store.replica_log_index.INDEX_EVERY", 4)
    log = ReplicaLog(tmp_path / "q.log")
    written = []
    for epoch in (1, 1, 2, 3):
        written += _lead(log, epoch, [log.enq(EXRK, b"", f"m{i}".encode())[1]
                                      for i in range(5)])
    written += _lead(log, 3, [log.ack([1, 2])])
    log.mark(10)
    assert log.read_entries(0, 100, 100) == written
    assert log.read_entries(7, 3, 100) == written[7:10]
    assert log.read_entries(19, 5, 20) == written[19:20] and log.read_entries(21, 5, 99) == []
    assert [log.epoch_at(n) for n in (0, 1, 10, 11, 15, 16, 21)] == [0, 1, 1, 2, 2, 3, 3]
    assert log.epoch_at(22) is None
    log.close()
    again = ReplicaLog(tmp_path / "q.log")  # the index is rebuilt at open
    assert again.read_entries(3, 9, 100) == written[3:12] and again.epoch_at(16) == 3
    follower = ReplicaLog(tmp_path / "f.log")
    follower.install(10, 2, again.snapshot_bytes())  # a snapshot section: no entries before
    assert follower.disk_start == 10 and follower.epoch_at(10) == 2
    assert follower.read_entries(9, 5, 100) == [] and follower.epoch_at(9) is None
    follower.write(10, written[10:])
    assert follower.read_entries(10, 99, 99) == written[10:]


def test_a_compaction_run_aside_keeps_what_was_written_and_acked_meanwhile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("queue_store.replica_log.COMPACT_MIN", 1000)
    monkeypatch.setattr("queue_store.replica_log_index.INDEX_EVERY", 4)
    log = ReplicaLog(tmp_path / "q.log")
    _lead(log, 1, [log.enq(EXRK, b"", f"m{i:03}".encode() * 10)[1] for i in range(200)])
    _lead(log, 1, [log.ack(range(1, 191)), log.ret(195, 2)])
    assert log.mark(log.lsn) == 202
    job = log.begin_compaction()
    assert job is not None and log.begin_compaction() is None  # one at a time
    # the log goes on while the job runs (in a thread, in production)
    later = _lead(log, 2, [log.enq(EXRK, b"", b"new1")[1], log.ack([191, 193]),
                           log.ret(196, 1), log.enq(EXRK, b"", b"new2")[1]])
    later += _lead(log, 2, [log.ack([201])])
    assert log.mark(206) == 206
    job.run()
    before = log.size
    assert log.finish_compaction(job) is True and log.size < before // 4
    want = {192: (b"m191" * 10, 0), 194: (b"m193" * 10, 0), 195: (b"m194" * 10, 2),
            196: (b"m195" * 10, 1), 197: (b"m196" * 10, 0), 198: (b"m197" * 10, 0),
            199: (b"m198" * 10, 0), 200: (b"m199" * 10, 0), 202: (b"new2", 0)}
    assert _bodies(log) == want and log.count == 9
    assert log.disk_start == 202 and log.start == 206 and log.lsn == 207
    assert log.read_entries(202, 10, 999) == later and log.epoch_at(203) == 2
    assert log.read_entries(201, 10, 999) == []  # compacted away
    snapshot = log.snapshot_bytes()
    _lead(log, 2, [log.enq(EXRK, b"", b"after")[1]])
    log.close()
    again = ReplicaLog(tmp_path / "q.log")
    assert _bodies(again) == {**want, 203: (b"after", 0)}
    assert again.lsn == 208 and again.start == 206 and again.disk_start == 202
    copy = ReplicaLog(tmp_path / "f.log")
    copy.install(206, 2, snapshot)  # the state at 206: new1 was acked after it
    assert _bodies(copy) == {**want, 201: (b"new1", 0)}


def test_a_compaction_is_dropped_when_the_log_is_cut_meanwhile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("queue_store.replica_log.COMPACT_MIN", 100)
    log = ReplicaLog(tmp_path / "q.log")
    _lead(log, 1, [log.enq(EXRK, b"", b"x" * 50)[1] for _ in range(20)])
    _lead(log, 1, [log.ack(range(1, 20))])
    log.mark(log.lsn)
    job = log.begin_compaction()
    assert job is not None
    _lead(log, 1, [log.enq(EXRK, b"", b"y")[1]])
    log.truncate(21)  # a divergent tail cut
    job.run()
    assert log.finish_compaction(job) is False and not job.dest.exists()
    assert _bodies(log) == {20: (b"x" * 50, 0)}
    log.mark(log.lsn)
    unfinished = log.begin_compaction()  # its run never finished (it failed): dropped too
    assert unfinished is not None and log.finish_compaction(unfinished) is False
    assert log.compact() is True and _bodies(log) == {20: (b"x" * 50, 0)}


def test_one_write_of_mixed_operations_leaves_a_follower_as_its_leader(tmp_path: Path) -> None:
    """A Write whose entries mix ENQ, ACK and RET (an ACK of a message entered in the same
    batch, a RET, messages after them) is applied in order on a follower (its ENQ slots are
    added in runs) and places the leader's own messages: both read back the same."""
    leader, follower = ReplicaLog(tmp_path / "l.log"), ReplicaLog(tmp_path / "f.log")
    ops = [leader.enq(EXRK, b"", f"m{i}".encode())[1] for i in range(4)]
    ops += [leader.ack([2]), leader.ret(3, 2)]
    ops += [leader.enq(EXRK, b"\x00\x00", f"n{i}".encode())[1] for i in range(3)]
    ops += [leader.ack([1, 6])]
    batch = _lead(leader, 1, ops)
    follower.write(0, batch[:7])  # a batch may end anywhere
    follower.write(7, batch[7:])
    expected = {3: (b"m2", 2), 4: (b"m3", 0), 5: (b"n0", 0), 7: (b"n2", 0)}
    assert _bodies(leader) == _bodies(follower) == expected
    assert leader.lsn == follower.lsn == leader.written == follower.written == len(ops)
    assert leader.count == follower.count == 4 and leader.live_bytes == follower.live_bytes
    assert follower.enq(EXRK, b"", b"x")[0] == leader.enq(EXRK, b"", b"x")[0] == 8
    for log in (leader, follower):
        log.close()
    again = ReplicaLog(tmp_path / "f.log")
    assert _bodies(again) == expected
