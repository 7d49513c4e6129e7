"""The sans-IO replica state machine (:mod:`amqp_server.cluster.replication`) on examples:
records passed by hand between replicas, fsyncs finished when the test says so. Random runs
with faults are in tests/test_replication_sim.py."""

from __future__ import annotations

from typing import Any

from amqp_server.cluster.replication import Replica
from amqp_server.cluster.replication_types import (
    Become,
    Cas,
    Commit,
    Diverging,
    Fetch,
    Fsync,
    GroupState,
    Install,
    Records,
    Send,
    StepDown,
    Truncate,
)

ALL = (0, 1, 2)


def state(leader: int = 0, run: int = 10, epoch: int = 1, isr: tuple[int, ...] = ALL,
          version: int = 1) -> GroupState:
    """A state whose ISR members were admitted with log id 0 (the replicas' here)."""
    return GroupState(leader, run, epoch, ALL, isr, version, tuple((m, 0) for m in isr))


class Cluster:
    """Replicas 0, 1, 2 (runs 10, 11, 12); records go into ``wire`` until delivered."""

    def __init__(self, logs: dict[int, list[Any]] | None = None) -> None:
        logs = logs or {}
        self.r = {i: Replica(i, 10 + i, logs.get(i, ())) for i in ALL}
        self.wire: list[tuple[int, Send]] = []
        self.fsyncs: dict[int, tuple[int, int]] = {}
        self.actions: dict[int, list[Any]] = {i: [] for i in ALL}

    def do(self, i: int, actions: list[Any]) -> list[Any]:
        self.actions[i] += actions
        for a in actions:
            if isinstance(a, Send):
                self.wire.append((i, a))
            elif isinstance(a, Fsync):
                self.fsyncs[i] = a.token
        return actions

    def state(self, s: GroupState, now: float = 0.0) -> None:
        for i in ALL:
            self.do(i, self.r[i].on_state(s, now))

    def deliver(self, now: float = 0.0) -> None:
        while self.wire:
            src, send = self.wire.pop(0)
            self.do(send.to, self.r[send.to].receive(src, send.record, now))

    def sync(self, *nodes: int, now: float = 0.0) -> None:
        for i in nodes:
            token = self.fsyncs.pop(i, None)
            if token is not None:
                self.do(i, self.r[i].fsync_done(token, now))

    def commits(self, i: int) -> list[int]:
        return [a.end for a in self.actions[i] if isinstance(a, Commit)]


def test_an_entry_commits_once_every_isr_member_has_it_on_disk() -> None:
    c = Cluster()
    c.state(state())
    assert any(isinstance(a, Become) for a in c.actions[0])
    c.deliver()  # the followers' first fetches, parked
    offset, actions = c.r[0].append("m1", 0.0)
    c.do(0, actions)
    assert offset == 0
    c.deliver()  # entries to both followers
    c.sync(0, 1)
    c.deliver()
    assert c.commits(0) == []  # follower 2 has not fsynced
    c.sync(2)
    c.deliver()
    assert c.commits(0) == [1]
    assert c.r[1].log == c.r[2].log == [(1, "m1")]


def test_a_follower_cuts_a_divergent_tail_to_the_new_leaders_epoch_end() -> None:
    # node 1 led epoch 1 and wrote two entries only it has; node 0 leads epoch 2
    c = Cluster({0: [(1, "a")], 1: [(1, "a"), (1, "x"), (1, "y")], 2: [(1, "a")]})
    c.state(state(leader=0, run=10, epoch=2, version=5))
    c.r[0].append("b", 0.0)
    c.deliver()
    truncs = [a for a in c.actions[1] if isinstance(a, Truncate)]
    assert truncs == [Truncate(1)]
    assert any(isinstance(s.record, Diverging) for _, s in [(0, a) for a in c.actions[0]
                                                            if isinstance(a, Send)])
    c.deliver()
    assert c.r[1].log == [(1, "a"), (2, "b")]


def test_a_node_restarted_as_the_leader_takes_a_new_epoch_first() -> None:
    r = Replica(0, run=99, entries=[(1, "a")])
    actions = r.on_state(state(leader=0, run=10, epoch=1), 0.0)
    assert not r.leading
    (cas,) = [a for a in actions if isinstance(a, Cas)]
    assert (cas.new.leader, cas.new.run, cas.new.epoch, cas.new.version) == (0, 99, 2, 1)
    assert r.append("m", 0.0) == (None, [])


def test_a_follower_rejoins_only_past_the_leaders_epoch_start() -> None:
    # node 0 was elected with 3 entries; node 2 (out of the ISR) has 1 of them on disk
    c = Cluster({0: [(1, "a"), (1, "b"), (1, "c")], 2: [(1, "a")]})
    c.state(state(epoch=2, isr=(0, 1), version=3))
    leader = c.r[0]
    c.r[1].on_alive(ALL)
    leader.receive(2, Fetch(2, 1, 1, 1), 0.0)  # node 2 fetches from offset 1
    assert not [a for a in leader.tick(0.1) if isinstance(a, Cas)]
    leader.receive(2, Fetch(2, 3, 1, 3), 0.2)  # now it has all three on disk
    (cas,) = [a for a in leader.tick(0.3) if isinstance(a, Cas)]
    assert cas.new.isr == ALL


def test_a_follower_that_restarted_with_its_log_lost_does_not_rejoin_on_what_it_had() -> None:
    c = Cluster({0: [(1, "a"), (1, "b"), (1, "c")], 2: [(1, "a"), (1, "b"), (1, "c")]})
    c.state(state(epoch=2, isr=(0, 1), version=3))
    leader = c.r[0]
    leader.receive(2, Fetch(2, 3, 1, 3), 0.0)  # node 2 had all three on disk...
    leader.receive(2, Fetch(2, 0, 0, 0), 0.1)  # ...then came back with none (disk lost)
    assert leader.lead is not None and leader.lead.progress[2] == 0
    assert not [a for a in leader.tick(0.2) if isinstance(a, Cas)]  # not in sync: no rejoin
    leader.receive(2, Fetch(2, 3, 1, 3), 0.3)  # fetched and fsynced them again
    (cas,) = [a for a in leader.tick(0.4) if isinstance(a, Cas)]
    assert cas.new.isr == ALL


def test_a_follower_whose_node_left_etcd_counts_only_once_it_fetches_again() -> None:
    c = Cluster({0: [(1, "a"), (1, "b"), (1, "c")], 2: [(1, "a"), (1, "b"), (1, "c")]})
    c.state(state(epoch=2, isr=(0, 1), version=3))
    leader = c.r[0]
    leader.on_alive(ALL)
    leader.receive(2, Fetch(2, 3, 1, 3), 0.0)  # node 2 had all three on disk
    leader.on_alive((0, 1))  # then its node left etcd (stopped; its log may be lost)
    leader.on_alive(ALL)  # and came back: not in sync on what it had before
    assert not [a for a in leader.tick(0.1) if isinstance(a, Cas)]
    leader.receive(2, Fetch(2, 3, 1, 3), 0.2)  # its fetch says what it has now
    (cas,) = [a for a in leader.tick(0.3) if isinstance(a, Cas)]
    assert cas.new.isr == ALL


def test_a_leader_steps_down_when_a_fetch_names_a_newer_epoch() -> None:
    r = Replica(0, 10)
    r.on_state(state(), 0.0)
    assert r.leading
    assert r.receive(1, Fetch(2, 0, 0, 0), 0.0) == [StepDown(1)]
    assert not r.leading


def test_a_follower_takes_entries_only_from_its_epochs_leader() -> None:
    r = Replica(1, 11)
    r.on_state(state(), 0.0)
    assert r.receive(2, Records(1, 0, 0, ((1, "x"),), 0), 0.0) == []  # not the leader
    assert r.receive(0, Records(0, 0, 0, ((0, "x"),), 0), 0.0) == []  # an older epoch
    assert r.log == []
    r.receive(0, Records(1, 0, 0, ((1, "m"),), 0), 0.0)
    assert r.log == [(1, "m")]


def test_a_silent_follower_leaves_the_isr_and_a_dead_leader_is_replaced() -> None:
    c = Cluster()
    c.state(state())
    leader = c.r[0]
    (cas,) = [a for a in leader.tick(10.0) if isinstance(a, Cas)]  # nobody fetched
    assert len(cas.new.isr) == 2
    follower = c.r[1]
    follower.on_alive((1, 2))  # etcd: node 0's lease expired
    (elect,) = [a for a in follower.tick(11.0) if isinstance(a, Cas)]
    assert (elect.new.leader, elect.new.epoch, elect.new.isr) == (1, 2, (1, 2))


def test_a_follower_below_the_leaders_compacted_start_gets_the_snapshot_then_the_tail() -> None:
    log = [(1, "a"), (1, "b"), (1, "c")]
    c = Cluster({0: log, 1: log})
    s = state(isr=(0, 1), version=2)
    for i in (0, 1):
        c.do(i, c.r[i].on_state(s, 0.0))
    leader = c.r[0]
    c.deliver()
    assert leader.committed == 3
    assert leader.compact(2, "state after a, b")
    assert not leader.compact(4, "x")  # not past what is committed
    assert not leader.compact(1, "x")  # only forward
    c.do(0, leader.append("d", 0.0)[1])
    c.do(2, c.r[2].on_state(s, 0.0))
    c.deliver()  # node 2 (empty) fetches from 0: the snapshot
    follower = c.r[2]
    installs = [a for a in c.actions[2] if isinstance(a, Install)]
    assert installs == [Install(2, 1, "state after a, b")]
    c.sync(2)
    c.deliver()  # then it fetches from 2: the tail
    assert (follower.start, follower.snapshot, follower.log) == (
        2, "state after a, b", [(1, "c"), (1, "d")])
    assert follower.entries(2, 4) == [(1, "c"), (1, "d")]


def test_the_leader_epoch_checkpoint_answers_where_an_epoch_ends() -> None:
    r = Replica(0, 10, [(1, "a"), (1, "b"), (2, "c"), (2, "d"), (2, "e"), (4, "f")])
    assert r.epochs == [(1, 0), (2, 2), (4, 5)]
    assert [r.epoch_end(e) for e in (0, 1, 2, 3, 4, 9)] == [
        (0, 0), (1, 2), (2, 5), (2, 5), (4, 6), (4, 6)]
    # compacted below offset 3: epoch 2 goes on past the start, epoch 1 is gone
    c = Replica(0, 10, [(2, "d"), (2, "e"), (4, "f")], start=3, start_epoch=2, snapshot="s")
    assert [c.epoch_end(e) for e in (1, 2, 3, 4)] == [(0, 0), (2, 5), (2, 5), (4, 6)]
    assert (c.last_epoch(3), c.last_epoch(), c.entries(4, 6)) == (2, 4, [(2, "e"), (4, "f")])


def test_a_follower_whose_node_leaves_etcd_is_dropped_at_once_and_commits_resume() -> None:
    c = Cluster()
    c.state(state())
    leader = c.r[0]
    leader.on_alive(ALL)
    c.deliver()  # the followers' first fetches, parked
    c.do(0, leader.append("m1", 0.0)[1])
    c.deliver()
    c.sync(0, 1)  # node 2 got m1 but stops before its fsync
    c.deliver()
    assert c.commits(0) == []  # waits for node 2, an ISR member
    assert not [a for a in leader.tick(0.5) if isinstance(a, Cas)]  # not silent long
    leader.on_alive((0, 1))  # node 2 stopped: its registration is gone from etcd
    (cas,) = [a for a in c.do(0, leader.tick(0.6)) if isinstance(a, Cas)]
    assert cas.new.isr == (0, 1) and cas.new.version == 1  # a swap of version 1
    assert c.commits(0) == []  # node 2 counts until etcd says it left (maximal ISR)
    c.state(state(isr=(0, 1), version=2))  # etcd took it
    assert c.commits(0) == [1]  # m1 is on disk on nodes 0 and 1
    c.do(0, leader.append("m2", 0.7)[1])
    c.deliver()
    c.sync(0, 1)
    c.deliver()
    assert c.commits(0) == [1, 2]
    # back in etcd and in sync: it rejoins
    leader.on_alive(ALL)
    c.do(2, c.r[2].tick(1.0))
    for _ in range(3):  # it takes m2, fsyncs and acknowledges both
        c.deliver()
        c.sync(2)
    c.deliver()
    (back,) = [a for a in c.do(0, leader.tick(1.1)) if isinstance(a, Cas)]
    assert back.new.isr == ALL
