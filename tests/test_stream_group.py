"""The replicated stream shell (amqp_server/cluster/stream_group.py's StreamGroup) over the
quorum group tests' in-memory links and fake etcd (tests/test_quorum_group.py's Cluster),
with real stream log files and a stand-in for the node's stream queue: records reach every
follower's stream log as the leader wrote them and commit; an old leader's tail that only
it wrote is cut from the stream log's epochs when the new leader's RAM no longer holds
that offset; the leader's retention reaches the followers; a node joining below the
leader's log start begins its log there."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

from amqp_server.cluster.stream_group import StreamGroup
from tests.test_quorum_group import Cluster


class StreamCluster(Cluster):
    group_class = StreamGroup
    extras = {"arguments_of": lambda qkey: {"x-stream-max-segment-size-bytes": 60}}


class Queue:
    """What the group calls on the node's ReplicatedStream."""

    def __init__(self, group: StreamGroup) -> None:
        self.pending: list[int] = []
        self.confirmed: list[int] = []
        self.leader = -1
        group.lead(self)

    def cache_tail(self, offset: int, timestamp_ms: int, record: bytes) -> None:
        pass

    def forget_tail(self) -> None:
        pass

    def commit(self, end: int) -> None:
        self.confirmed += [o for o in self.pending if o < end]
        self.pending = [o for o in self.pending if o >= end]

    def dispatch(self) -> None:
        pass

    def fail_pending(self) -> None:
        self.pending.clear()

    def follow(self, leader: int) -> None:
        self.leader = leader

    def release_held(self) -> None:
        pass

    def apply_retention(self) -> None:
        pass


def records(group: StreamGroup) -> list[tuple[int, bytes]]:
    return [(o, r) for o, _, r in group.log.stream.read(0, 1 << 30)]


def epochs(group: StreamGroup) -> list[int]:
    return [e for e, _ in group.log.read_entries(group.log.stream.first_offset, 1 << 30,
                                                 group.log.lsn)]


async def publish(c: Cluster, group: StreamGroup, *bodies: bytes) -> None:
    """One turn of the leader per body (each its own chunk), carried to the followers."""
    for body in bodies:
        group.queue.pending.append(group.append_record(body, 1000))  # type: ignore[union-attr]
        await asyncio.sleep(0)  # the turn ends: written, fsynced
        await c.settle()


def test_records_divergence_retention_and_a_late_member(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
        ) -> None:
    monkeypatch.setattr("amqp_server.cluster.quorum_group.KEEP_ENTRIES", 1)

    async def main() -> None:
        c = StreamCluster(tmp_path, 3)
        queues = {i: Queue(g) for i, g in c.groups.items()}  # type: ignore[arg-type]
        c.put({"leader": 1, "run": 101, "epoch": 1, "members": [0, 1, 2], "isr": [0, 1, 2],
               "type": "stream"})
        old = c.groups[1]
        await publish(c, old, b"a", b"b", b"c")  # type: ignore[arg-type]
        assert queues[1].confirmed == [0, 1, 2]
        for i in (0, 2):  # the same log, and every offset committed on the followers too
            assert records(c.groups[i]) == records(old) == [(0, b"a"), (1, b"b"), (2, b"c")]
            assert c.groups[i].replica.committed == 3 and queues[i].leader == 1
        old.queue.pending.append(old.append_record(b"lost", 1000))  # type: ignore[union-attr]
        await asyncio.sleep(0)  # in node 1's log only
        c.boxes[(1, 0)].take()
        c.boxes[(1, 2)].take()
        assert old.log.lsn == 4
        c.groups.pop(1).close()  # node 1 dies: node 0 takes over with node 2
        c.running.discard(1)
        c.put({**json.loads(c.value), "leader": 0, "run": 100, "epoch": 2, "isr": [0, 2]})
        new = c.groups[0]
        assert new.leading
        await publish(c, new, b"d", b"e", b"f", b"g")  # type: ignore[arg-type]
        for _ in range(3):
            new.tick()
        assert new.replica.start > 4  # node 1's offset is below the leader's RAM tail
        back = c.add(tmp_path, 1)  # node 1 restarts: its log ends with "lost" (epoch 1)
        Queue(back)  # type: ignore[arg-type]
        c.running.add(1)
        back.tick()
        await c.settle(rounds=100)
        assert "node 1's log diverges at offset 4 (epoch 1)" in caplog.text
        want = [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d"), (4, b"e"), (5, b"f"), (6, b"g")]
        assert records(back) == records(c.groups[2]) == records(new) == want
        assert epochs(back) == epochs(new) == [1, 1, 1, 2, 2, 2, 2]
        # retention: the leader dropped its oldest segments (60-byte segments: several);
        # its next tick tells the followers its first offset
        stream = new.log.stream
        assert len(stream.segments) > 2
        stream.drop_before(stream.segments[-1].first)
        new.tick()
        await c.settle()
        first = stream.first_offset
        assert first > 0
        assert [g.log.stream.first_offset for g in c.groups.values()] == [first] * 3
        # a member added now fetches from 0, below the leader's log start: it starts there
        late = c.add(tmp_path, 3)
        Queue(late)  # type: ignore[arg-type]
        c.running.add(3)
        c.put({**json.loads(c.value), "members": [0, 1, 2, 3]})
        late.tick()
        await c.settle(rounds=100)
        assert records(late) == records(new) == want[first:]
        assert late.log.stream.first_offset == first and late.log.epoch_at(first) == 1 + (
            first > 3)

    with caplog.at_level(logging.INFO):
        asyncio.run(main())
