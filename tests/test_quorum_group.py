"""The quorum queue replica shell (amqp_server/cluster/quorum_group.py) over in-memory links,
a fake etcd state and real replica log files: the leader's operations reach a follower's
file with their epoch and commit; a member added later gets the leader's snapshot (the log
file up to its snapshot point) and then the tail; a member whose tail an older leader wrote
cuts it on disk. No broker process, socket or etcd: the manager and runtime are stand-ins
with the attributes the shell reads."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from amqp_server.cluster import replica_records
from amqp_server.cluster.quorum_group import QuorumGroup
from amqp_server.workers.link_codec import REPL, Outbox, RecordReader
from queue_store.replica_log import ReplicaLog

EXRK = b"\x00\x01q"


class Cluster:
    """Nodes' groups of one queue, their links (outboxes pumped by hand) and etcd's value
    (``group_class``: a subclass of QuorumGroup to test instead, made with ``extras``
    added to the manager stand-in)."""

    group_class: type[QuorumGroup] = QuorumGroup
    extras: dict[str, Any] = {}

    def __init__(self, tmp: Path, nodes: int) -> None:
        self.groups: dict[int, QuorumGroup] = {}
        self.boxes: dict[tuple[int, int], Outbox] = {}
        self.running = set(range(nodes))
        self.value: bytes = b""
        for i in range(nodes):
            self.add(tmp, i)

    def add(self, tmp: Path, i: int) -> QuorumGroup:
        loop = asyncio.get_running_loop()
        out = {}
        for j in range(8):
            box = self.boxes.setdefault((i, j), Outbox())
            out[j] = SimpleNamespace(outbox=box, schedule=lambda: None)
        env = SimpleNamespace(run_blocking=lambda fn, then: (fn(), loop.call_soon(then, None)))
        runtime = SimpleNamespace(
            index=i, links=SimpleNamespace(out=out), broker=SimpleNamespace(
                env=env, vhosts={"/": SimpleNamespace(storage=None)}),
            keep_task=lambda task: task, after_commit=lambda: None)
        membership = SimpleNamespace(refreshed_at=loop.time(),
                                     etcd=SimpleNamespace(lease_ttl=5))
        manager = SimpleNamespace(
            runtime=runtime, data_dir=tmp / f"n{i}", run=100 + i,
            hub=SimpleNamespace(running=self.running, m=membership),
            replace_state=self.replace_state, promote=lambda group: None,
            replace=lambda queue, leader: None, drop=lambda group: None, **self.extras)
        group = self.groups[i] = self.group_class(manager, "/", "q")  # type: ignore[arg-type]
        if self.value:
            group.on_state(json.loads(self.value), self.value)
        return group

    async def replace_state(self, qkey: bytes, raw: bytes | None, new: dict[str, Any]
                            ) -> bool:
        if raw != self.value:
            return False
        self.put(new)
        return True

    def put(self, state: dict[str, Any]) -> None:
        """etcd's value changes: every node's watch brings it."""
        self.value = json.dumps(state).encode()
        for group in self.groups.values():
            group.on_state(json.loads(self.value), self.value)

    async def settle(self, rounds: int = 50) -> None:
        """Run the loop and carry every link's records until nothing moves."""
        for _ in range(rounds):
            await asyncio.sleep(0)
            moved = False
            for (src, dst), box in self.boxes.items():
                data = box.take()
                if not data or dst not in self.groups:
                    continue
                moved = True
                for kind, body in RecordReader().feed(data):
                    assert kind == REPL
                    qkey, record = replica_records.decode(body)
                    assert qkey == self.groups[dst].qkey
                    self.groups[dst].on_record(src, record)
            if not moved:
                await asyncio.sleep(0)


def _publish(group: QuorumGroup, *bodies: bytes) -> None:
    for body in bodies:
        group.append(group.log.enq(EXRK, b"", body)[1])


def _bodies(group: QuorumGroup) -> list[bytes]:
    return [m[2] for _, m in group.log.messages()]


def test_entries_reach_the_followers_file_commit_and_a_late_member_gets_the_snapshot(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
        ) -> None:
    monkeypatch.setattr("amqp_server.cluster.quorum_group.KEEP_ENTRIES", 1)
    monkeypatch.setattr("amqp_server.cluster.replica_catch_up.SNAPSHOT_CHUNK", 16)  # several
    compacting = False
    monkeypatch.setattr(ReplicaLog, "needs_compaction", lambda log: compacting)

    async def main() -> None:
        nonlocal compacting
        c = Cluster(tmp_path, 2)
        c.put({"leader": 0, "run": 100, "epoch": 1, "members": [0, 1], "isr": [0, 1]})
        leader, follower = c.groups[0], c.groups[1]
        assert leader.leading and not follower.leading
        _publish(leader, b"a", b"b", b"c")
        await c.settle()
        assert leader.replica.committed == 3 and follower.log.written == 3
        assert _bodies(follower) == [b"a", b"b", b"c"]
        leader.append(leader.log.ack([1]))
        await c.settle()
        leader.tick()  # the snapshot point moves behind what is committed and fsynced
        assert leader.replica.start == leader.log.start == 3  # a write boundary
        compacting = True  # the file is rewritten: its entries before offset 4 are gone
        leader.tick()
        compacting = False
        await asyncio.sleep(0)  # the rewrite ran in the "blocking pool": put in place now
        assert leader.replica.start == leader.log.disk_start == 4
        _publish(leader, b"d")  # after the snapshot point: the tail
        await c.settle()
        late = c.add(tmp_path, 2)
        c.put({**json.loads(c.value), "members": [0, 1, 2]})
        late.tick()  # fetches from 0: below the leader's log start
        await c.settle()
        assert late.log.lsn == late.replica.log_end == 5 and late.log.start == 4
        assert _bodies(late) == [b"b", b"c", b"d"] == _bodies(leader)
        assert late.replica.durable == 5
        assert "node 2 fetched below this replica's log start: snapshot at offset 4 sent" \
            in caplog.text and not list(tmp_path.glob("n2/*.snapshot"))
        late.log.close()
        again = ReplicaLog(late.log.path)
        assert again.lsn == 5 and [e for e, _ in again.tail()] == [1]

    with caplog.at_level(logging.INFO, "amqpq.quorum"):
        asyncio.run(main())


def test_a_restarted_follower_fetches_what_it_missed_from_the_leaders_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
        ) -> None:
    """A follower down while its leader took 3,000 messages (the leader keeps 16 entries in
    RAM) restarts and fetches from its own offset: the entries come from the leader's log
    file, 512 at a time, not as a snapshot of the whole queue."""
    monkeypatch.setattr("amqp_server.cluster.quorum_group.KEEP_ENTRIES", 8)

    async def main() -> None:
        c = Cluster(tmp_path, 3)
        c.put({"leader": 0, "run": 100, "epoch": 1, "members": [0, 1, 2], "isr": [0, 1, 2]})
        leader = c.groups[0]
        _publish(leader, *(f"m{i}".encode() for i in range(100)))
        await c.settle()
        assert _bodies(c.groups[2]) == _bodies(leader)
        c.groups.pop(2).close()  # node 2 stops; the others go on without it
        c.running.discard(2)
        c.put({**json.loads(c.value), "isr": [0, 1]})
        for i in range(100, 3100):
            _publish(leader, f"m{i}".encode())
            if i % 500 == 0:
                await c.settle()
                leader.tick()
        await c.settle()
        leader.tick()
        assert leader.replica.start > 3000  # what node 2 lacks is in the file only
        back = c.add(tmp_path, 2)  # restarts from its file: offset 100
        c.running.add(2)
        assert back.log.lsn == 100
        back.tick()
        await c.settle(rounds=400)
        assert back.log.lsn == leader.log.lsn == 3100
        assert _bodies(back) == [f"m{i}".encode() for i in range(3100)]
        assert "node 2 fetches from offset 100, below the entries kept in RAM" in caplog.text
        assert "snapshot" not in caplog.text
        back.tick()
        await c.settle()
        assert "node 2 caught up from the log file, offset 100 to" in caplog.text

    with caplog.at_level(logging.INFO, "amqpq.quorum"):
        asyncio.run(main())


def test_a_tail_only_the_old_leader_wrote_is_cut_on_disk(tmp_path: Path) -> None:
    async def main() -> None:
        c = Cluster(tmp_path, 2)
        c.put({"leader": 1, "run": 101, "epoch": 1, "members": [0, 1], "isr": [0, 1]})
        old, new = c.groups[1], c.groups[0]
        _publish(old, b"a")
        await c.settle()
        assert _bodies(new) == [b"a"] and old.replica.committed == 1
        _publish(old, b"lost")  # written to node 1's file, never reaches node 0
        await asyncio.sleep(0)
        c.boxes[(1, 0)].take()
        assert old.log.written == 2
        c.put({"leader": 0, "run": 100, "epoch": 2, "members": [0, 1], "isr": [0]})
        assert new.leading and not old.leading
        _publish(new, b"new")  # offset 1 again, epoch 2
        await c.settle()
        assert _bodies(old) == [b"a", b"new"] and old.log.written == 2
        old.log.close()
        assert [e for e, _ in ReplicaLog(old.log.path).tail()] == [1, 2]

    asyncio.run(main())
