"""A replicated stream's log (amqp_server/cluster/stream_replica_log.py's StreamReplicaLog over
queue_store/stream_log.py): entries written as the leader wrote them (same offsets, epochs,
timestamps, segment boundaries), read back for a lagging follower, cut, started over, the
epoch checkpoint surviving a restart and retention; and the Replica pushing its high
watermark to parked fetches when asked (Timing.push_hw)."""

from __future__ import annotations

from pathlib import Path

from amqp_server.cluster.replication import Replica
from amqp_server.cluster.replication_rules import Timing
from amqp_server.cluster.replication_types import Fetch, GroupState, Records, Send
from amqp_server.cluster.stream_replica_log import (
    CHUNK_START,
    HEAD,
    NO_ROLL,
    SEGMENT_START,
    StreamReplicaLog,
    entry_payload,
)
from queue_store.stream_log import StreamLog


def replica_log(path: Path, max_segment: int = 1 << 30) -> StreamReplicaLog:
    return StreamReplicaLog(StreamLog(path, NO_ROLL), max_segment)


def leader_entries(log: StreamReplicaLog, epoch: int, turns: list[list[bytes]],
                   ts: int = 1000) -> list[tuple[int, bytes]]:
    """Entries as a leader's turns make them (the first of each turn starts a chunk, and a
    segment when the current one is full), written to ``log``."""
    out = []
    for i, turn in enumerate(turns):
        flags = CHUNK_START | (SEGMENT_START if log.segment_full() else 0)
        entries = [(epoch, entry_payload(r, ts + i, flags if k == 0 else 0))
                   for k, r in enumerate(turn)]
        log.write(log.lsn, entries)
        out += entries
    return out


def records(log: StreamLog) -> list[tuple[int, int, bytes]]:
    return log.read(0, 1 << 30)


def test_a_follower_writes_the_leaders_entries_identically(tmp_path: Path) -> None:
    leader = replica_log(tmp_path / "l", max_segment=200)
    turns = [[b"a%d" % i for i in range(5)] for _ in range(6)]
    entries = leader_entries(leader, 1, turns[:3]) + leader_entries(leader, 2, turns[3:])
    assert len(leader.stream.segments) > 1  # the leader rolled
    follower = replica_log(tmp_path / "f", max_segment=200)
    for first in range(0, len(entries), 7):  # fetch answers that split chunks
        follower.write(first, entries[first:first + 7])
    assert records(follower.stream) == records(leader.stream)
    assert [s.first for s in follower.stream.segments] == \
        [s.first for s in leader.stream.segments]
    assert follower.stream.epochs == leader.stream.epochs == [(1, 0), (2, 15)]
    # read back for a lagging follower: the same entries, flags included
    assert leader.read_entries(0, 100, leader.lsn) == entries
    assert leader.epoch_at(15) == 1 and leader.epoch_at(16) == 2 and leader.epoch_at(0) == 0


def test_cut_start_over_retention_and_restart(tmp_path: Path) -> None:
    log = replica_log(tmp_path / "s", max_segment=100)
    leader_entries(log, 1, [[b"x" * 20] * 3 for _ in range(4)])
    leader_entries(log, 3, [[b"y" * 20] * 3])
    assert log.lsn == 15
    log.truncate(13)  # a divergent tail of epoch 3 cut inside its chunk
    assert log.lsn == 13 and log.stream.epochs[-1] == (3, 12)
    firsts = [s.first for s in log.stream.segments]
    assert log.stream.drop_before(firsts[2]) == firsts[2]
    assert log.stream.first_offset == firsts[2]
    log.close()
    again = replica_log(tmp_path / "s", max_segment=100)
    assert again.lsn == 13 and again.stream.first_offset == firsts[2]
    assert again.epoch_at(firsts[2]) == 1  # known although retention removed the entry
    assert again.stream.epoch_end(2) == (1, 12)
    assert again.tail() == again.read_entries(again.start, 100, 13)
    again.install(40, 3, b"")  # below the leader's log start: begin at its first offset
    assert again.lsn == 40 and again.epoch_at(40) == 3 and records(again.stream) == []
    again.write(40, [(4, entry_payload(b"z", 5, CHUNK_START))])
    again.close()
    third = replica_log(tmp_path / "s")
    assert third.lsn == 41 and third.epoch_at(40) == 3 and third.epoch_at(41) == 4
    assert records(third.stream) == [(40, 5, b"z")]
    assert HEAD.unpack_from(third.read_entries(40, 1, 41)[0][1]) == (CHUNK_START | SEGMENT_START, 5)
    third.save_committed(41)
    third.remove()  # every file of the replica goes, and its directory
    assert not (tmp_path / "s").exists()


def test_a_leader_pushes_its_high_watermark_to_parked_fetches() -> None:
    leader = Replica(0, 7, timing=Timing(push_hw=True))
    state = GroupState(0, 7, 1, (0, 1), (0, 1), 1)
    leader.on_state(state, 0.0)
    _, out = leader.append(b"p", 0.0)
    leader.fsync_done((0, 1), 0.0)
    leader.receive(1, Fetch(1, 1, 1, 0), 0.1)  # has it, not on disk yet: parked
    out = leader.receive(1, Fetch(1, 1, 1, 1), 0.2)  # on disk: committed, answered at once
    assert Send(1, Records(1, 1, 1, (), 1)) in out
