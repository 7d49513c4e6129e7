"""Group commit (queue_store.durability): one fsync round for many publishes, callbacks run
only after the round that covers them, flush_writes without fsync, and what the end of a
round does to the message store (closing rotated files, deleting compacted segments)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from pamqp import commands
from pamqp.header import ContentHeader

import queue_store.durability as durability_mod
from broker.broker import Broker
from broker.config import BrokerConfig
from broker.environment import BrokerEnvironment
from broker.persistence import TopologyStore, recover_messages
from queue_store.durability import Durability, run_inline
from queue_store.message import Message
from queue_store.msg_store import MessageStore
from queue_store.queue import ACCEPTED_UNSYNCED
from queue_store.queue_index import QueueIndex

PERSISTENT = ContentHeader(0, 0, commands.Basic.Properties(delivery_mode=2)).marshal()[12:]


def msg(body: bytes, routing_key: str = "q") -> Message:
    return Message.create("", routing_key, PERSISTENT, body)


class DeferredRunner:
    """A SyncRunner that keeps each round's ``work``/``done`` until the test runs them."""

    def __init__(self) -> None:
        self.rounds: list[tuple[Callable[[], None], Callable[[OSError | None], None]]] = []
        self.started = 0

    def __call__(self, work: Callable[[], None],
                 done: Callable[[OSError | None], None]) -> None:
        self.started += 1
        self.rounds.append((work, done))

    def finish_one(self) -> None:
        work, done = self.rounds.pop(0)
        run_inline(work, done)

    def finish_all(self, limit: int = 100) -> None:
        for _ in range(limit):
            if not self.rounds:
                return
            self.finish_one()
        raise AssertionError("sync rounds never stop")


@pytest.fixture
def runner() -> DeferredRunner:
    return DeferredRunner()


@pytest.fixture
def fsynced(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """The fd lists fsynced by each round's work (the real fsync still runs)."""
    calls: list[list[int]] = []
    real = durability_mod.sync_fds

    def spy(fds: list[int]) -> None:
        calls.append(list(fds))
        real(fds)

    monkeypatch.setattr(durability_mod, "sync_fds", spy)
    return calls


def test_inline_runner_runs_callback_at_once() -> None:
    d = Durability()
    ran: list[int] = []
    d.after_sync(lambda: ran.append(1))
    assert ran == [1]
    assert d.syncs == 1 and not d.syncing


def test_callback_waits_for_its_fsync_round(runner: DeferredRunner) -> None:
    d = Durability(runner)
    ran: list[str] = []
    d.after_sync(lambda: ran.append("a"))
    assert runner.started == 1
    assert d.syncing
    assert ran == []  # not before the fsync
    work, done = runner.rounds.pop()
    work()
    assert ran == []  # not before done() is back on the loop thread
    done(None)
    assert ran == ["a"]
    assert not d.syncing and d.syncs == 1


def test_callbacks_registered_during_a_sync_wait_for_the_next(runner: DeferredRunner) -> None:
    d = Durability(runner)
    ran: list[int] = []
    d.after_sync(lambda: ran.append(0))
    for i in range(1, 50):
        d.after_sync(lambda i=i: ran.append(i))
    assert runner.started == 1  # no new round while one is in flight
    runner.finish_one()
    assert ran == [0]  # the round in flight covered only what was written before it
    assert runner.started == 2  # the next round starts as soon as the first ends
    assert len(runner.rounds) == 1
    runner.finish_one()
    assert ran == list(range(50))
    assert runner.started == 2 and d.syncs == 2
    assert not d.syncing


def test_on_synced_runs_after_each_round(runner: DeferredRunner) -> None:
    d = Durability(runner)
    events: list[str] = []
    d.on_synced = lambda: events.append("synced")
    d.after_sync(lambda: events.append("cb1"))
    d.after_sync(lambda: events.append("cb2"))
    runner.finish_all()
    assert events == ["cb1", "synced", "cb2", "synced"]


def test_failing_callback_does_not_stop_the_others(runner: DeferredRunner) -> None:
    d = Durability(runner)
    ran: list[int] = []

    def boom() -> None:
        raise RuntimeError("boom")

    d.after_sync(lambda: ran.append(1))
    d.after_sync(boom)
    d.after_sync(lambda: ran.append(2))
    runner.finish_all()
    assert ran == [1, 2]
    assert not d.syncing


def test_round_flushes_and_fsyncs_what_was_written_before_it(
        tmp_path: Path, runner: DeferredRunner, fsynced: list[list[int]]) -> None:
    d = Durability(runner)
    store = MessageStore(tmp_path / "ms")
    d.add_store(store)
    index = QueueIndex(tmp_path / "q.idx")
    mid = store.write(msg(b"first"))
    index.publish(1, mid)
    d.index_dirty(index)
    d.after_sync(lambda: None)
    # the round's start wrote the buffers: the records are in the files before the fsync
    seg = store.directory / "00000001.seg"
    assert seg.stat().st_size > 0
    assert [e.seq for e in QueueIndex.recover(tmp_path / "q.idx")] == [1]
    # written while the round is in flight: stays buffered for the next round
    mid2 = store.write(msg(b"second"))
    index.publish(2, mid2)
    d.index_dirty(index)
    size_in_flight = seg.stat().st_size
    runner.finish_one()
    assert len(fsynced) == 1 and len(fsynced[0]) == 2  # store segment + index journal
    assert seg.stat().st_size == size_in_flight
    d.after_sync(lambda: None)
    assert seg.stat().st_size > size_in_flight
    runner.finish_all()
    assert [e.seq for e in QueueIndex.recover(tmp_path / "q.idx")] == [1, 2]
    index.close()
    store.close()


def test_flush_writes_writes_buffers_without_fsync(
        tmp_path: Path, runner: DeferredRunner, fsynced: list[list[int]]) -> None:
    d = Durability(runner)
    store = MessageStore(tmp_path / "ms")
    d.add_store(store)
    index = QueueIndex(tmp_path / "q.idx")
    mid = store.write(msg(b"payload"))
    index.publish(1, mid)
    index.deliver(1)
    d.index_dirty(index)
    assert QueueIndex.recover(tmp_path / "q.idx") == []
    d.flush_writes()
    assert runner.started == 0 and fsynced == []
    entries = QueueIndex.recover(tmp_path / "q.idx")
    assert [(e.seq, e.msg_id, e.delivered) for e in entries] == [(1, mid, True)]
    # what a "kill -9" now would leave: the record is in the file
    other = MessageStore(tmp_path / "ms")
    assert other.recover() == 0
    assert other.retain(mid) and other.read(mid).body == b"payload"
    other.close()
    index.close()
    store.close()


def test_group_commit_many_publishes_few_fsync_rounds(
        tmp_path: Path, runner: DeferredRunner, fsynced: list[list[int]]) -> None:
    broker = Broker(BrokerConfig(data_dir=tmp_path),
                    BrokerEnvironment(run_blocking=runner, storage=True))
    queue = broker.vhosts["/"].declare_queue("q", durable=True)
    confirmed: list[int] = []
    n = 200
    for i in range(n):
        assert queue.publish(msg(f"m{i}".encode())) == ACCEPTED_UNSYNCED
        broker.durability.after_sync(lambda i=i: confirmed.append(i))
        if i % 50 == 49:  # the worker thread finishes now and then
            runner.finish_one()
    runner.finish_all()
    assert confirmed == list(range(n))  # every confirm, in order, each once
    assert broker.durability.syncs == runner.started
    assert runner.started < n / 10
    assert len(fsynced) == runner.started


def test_end_of_round_deletes_segment_compacted_before_it(
        tmp_path: Path, runner: DeferredRunner) -> None:
    d = Durability(runner)
    store = MessageStore(tmp_path / "ms", segment_size=1000)
    d.add_store(store)
    ids = [store.write(msg(b"x" * 100))]
    while store.index[ids[-1]].segment == 1:
        ids.append(store.write(msg(b"x" * 100)))
    d.after_sync(lambda: None)
    runner.finish_all()
    for i in ids[:-3]:
        store.release(i)
    assert store.index[ids[-2]].segment != 1  # compacted
    old = tmp_path / "ms" / "00000001.seg"
    assert old.exists()
    d.after_sync(lambda: None)
    assert old.exists()  # not before the copies are fsynced
    runner.finish_all()
    assert not old.exists()
    again = MessageStore(tmp_path / "ms")
    again.recover()
    assert all(again.retain(i) for i in ids[-3:])
    again.close()
    store.close()


def test_compaction_during_a_sync_round_keeps_old_segment_until_copies_synced(
        tmp_path: Path, runner: DeferredRunner) -> None:
    d = Durability(runner)
    store = MessageStore(tmp_path / "ms", segment_size=1000)
    d.add_store(store)
    ids = [store.write(msg(b"x" * 100))]
    while store.index[ids[-1]].segment == 1:
        ids.append(store.write(msg(b"x" * 100)))
    d.after_sync(lambda: None)
    runner.finish_all()
    survivors = ids[-3:]
    d.after_sync(lambda: None)  # a round starts (e.g. confirms for other publishes) ...
    for i in ids[:-3]:
        store.release(i)  # ... and acks compact segment 1 while it is in flight
    assert store.index[survivors[0]].segment != 1
    runner.finish_one()  # the round ends; the copies were not part of it
    # crash now: nothing more is flushed or synced
    again = MessageStore(tmp_path / "ms")
    again.recover()
    try:
        assert [again.retain(i) for i in survivors] == [True, True, True]
    finally:
        again.close()
        store.close()


def test_queue_deleted_and_redeclared_during_a_sync_keeps_new_journal(
        tmp_path: Path, runner: DeferredRunner) -> None:
    broker = Broker(BrokerConfig(data_dir=tmp_path),
                    BrokerEnvironment(run_blocking=runner, storage=True))
    topology = TopologyStore(broker, tmp_path)
    vhost = broker.vhosts["/"]
    q = vhost.declare_queue("q", durable=True)
    q.publish(msg(b"old"))
    broker.durability.after_sync(lambda: None)  # round in flight
    vhost.delete_queue("q")  # its journal may only go after the fsync ...
    q2 = vhost.declare_queue("q", durable=True)  # ... but a new queue "q" exists now
    assert q2.publish(msg(b"new")) == ACCEPTED_UNSYNCED
    broker.durability.after_sync(lambda: None)
    runner.finish_all()
    broker.after_batch()
    topology.save_if_changed()
    restarted = Broker(BrokerConfig(data_dir=tmp_path), BrokerEnvironment(storage=True))
    TopologyStore(restarted, tmp_path).load()
    recover_messages(restarted)
    rq = restarted.vhosts["/"].queues["q"]
    got = rq.get()
    assert got is not None and got.message.body == b"new"
    assert rq.get() is None


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc/self/fd")
def test_persistent_publishing_without_confirms_does_not_leak(tmp_path: Path) -> None:
    broker = Broker(BrokerConfig(data_dir=tmp_path), BrokerEnvironment(storage=True))
    vhost = broker.vhosts["/"]
    store = vhost.storage.store
    store.segment_size = 2000  # 16 MiB in production: same thing, 8000 times slower
    q = vhost.declare_queue("q", durable=True)
    q.publish(msg(b"held"))
    held = q.get()  # one delivery stays unacked: its record keeps being compacted forward
    assert held is not None
    fds_before = len(os.listdir("/proc/self/fd"))
    for i in range(2000):  # what a channel without confirm mode does per publish + ack
        q.publish(msg(f"m{i}".encode() * 10))
        q.get(no_ack=True)
        broker.after_batch()
    segments = list(store.directory.glob("*.seg"))
    leaked = len(os.listdir("/proc/self/fd")) - fds_before
    store.close()
    assert len(segments) <= 5 and leaked <= 5, (
        f"{len(segments)} segment files, {leaked} fds left open after "
        f"{broker.durability.syncs} fsync rounds")


def test_saved_policies_with_keys_now_refused_still_load(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """State saved by a version that accepted any policy key: the unknown keys are dropped
    with a warning, everything else (queue, the policy's known keys) comes back."""
    broker = Broker(BrokerConfig(data_dir=tmp_path), BrokerEnvironment(storage=True))
    broker.vhosts["/"].declare_queue("kept", durable=True)
    topology = TopologyStore(broker, tmp_path)
    topology.save_if_changed()
    saved = json.loads((tmp_path / "definitions.json").read_text())
    saved["policies"] = [
        {"vhost": "/", "name": "lim", "pattern": "^kept$", "apply-to": "queues",
         "priority": 0, "definition": {"max-length": 3, "max-lenght": 5}},
        {"vhost": "/", "name": "typo-only", "pattern": ".*", "apply-to": "all",
         "priority": 0, "definition": {"mesage-ttl": 10}}]
    saved["parameters"] = [
        {"vhost": "/", "component": "operator_policy", "name": "op",
         "value": {"pattern": ".*", "apply-to": "queues", "priority": 0,
                   "definition": {"expires": 60000, "ha-mode": "all"}}}]
    (tmp_path / "definitions.json").write_text(json.dumps(saved))
    restarted = Broker(BrokerConfig(data_dir=tmp_path), BrokerEnvironment(storage=True))
    with caplog.at_level("WARNING", logger="amqpq.persistence"):
        assert TopologyStore(restarted, tmp_path).load()
    vhost = restarted.vhosts["/"]
    assert "kept" in vhost.queues
    assert {n: p.definition for n, p in vhost.policies.items()} == {"lim": {"max-length": 3}}
    assert vhost.operator_policies["op"].definition == {"expires": 60000}
    warned = [r.getMessage() for r in caplog.records]
    assert "saved definitions: dropped unknown policy 'lim' in vhost '/': setting " \
           "'max-lenght'" in warned
    assert any("'typo-only'" in w and "no setting left" in w for w in warned)
    assert any("operator policy 'op'" in w and "'ha-mode'" in w for w in warned)


def test_publisher_confirms_wait_for_the_round_that_covers_them(
        tmp_path: Path, runner: DeferredRunner) -> None:
    """Persistent publishes with confirms, as a client sees them: a publish's confirm goes
    out only after an fsync round that started after it was written (publishes that wait
    for the same round share one callback, issue #32); a failed round nacks exactly the
    publishes it covered."""
    from conftest import Client

    broker = Broker(BrokerConfig(data_dir=tmp_path),
                    BrokerEnvironment(run_blocking=runner, storage=True))
    c = Client(broker).handshake().open_channel()
    c.declare_queue(1, "d", durable=True)
    c.call(1, commands.Confirm.Select(), commands.Confirm.SelectOk)
    persistent = commands.Basic.Properties(delivery_mode=2)

    def settled(frames: list) -> list[tuple[str, int, bool]]:
        return [(type(f).__name__, f.delivery_tag, f.multiple) for _, f in frames
                if isinstance(f, commands.Basic.Ack | commands.Basic.Nack)]

    # 1 starts round 1 at once; 2 and 3 wait for the next round
    assert settled(c.send_bytes(b"".join(c.publish_bytes(1, "", "d", b"m%d" % i, persistent)
                                         for i in (1, 2, 3)))) == []
    runner.finish_one()  # round 1 (covers 1) ends, round 2 (covers 2, 3) starts
    assert settled(c.read()) == [("Ack", 1, False)]
    # 4 is written while round 2 runs: round 2 does not cover it
    assert settled(c.publish(1, "", "d", b"m4", persistent)) == []
    runner.finish_one()
    assert settled(c.read()) == [("Ack", 3, True)]
    # round 3 (covers 4) started; 5 waits for round 4; round 3 fails: only 4 is nacked
    assert settled(c.publish(1, "", "d", b"m5", persistent)) == []
    work, done = runner.rounds.pop(0)
    done(OSError(5, "Input/output error"))
    assert settled(c.read()) == [("Nack", 4, False)]
    broker.durability.maybe_sync()  # the periodic retry starts the next round
    runner.finish_all()
    assert settled(c.read()) == [("Ack", 5, False)]
