"""Replica log ids (:mod:`amqp_server.cluster.log_ids`) in the sans-IO replica: a replica
whose log was lost (a new log id) neither leads nor counts until re-admitted. Random runs
with lost disks are in tests/test_replication_sim.py (seed 724 with wipe_waits=False)."""

from __future__ import annotations

from amqp_server.cluster.log_ids import counted, hand_over, log_ids_change, not_eligible
from amqp_server.cluster.replication import Replica
from amqp_server.cluster.replication_types import Cas, Commit, Fetch, GroupState

ALL = (0, 1, 2)
IDS = ((0, 100), (1, 101), (2, 102))  # the logs each member was admitted with


def state(leader: int = 0, run: int = 10, epoch: int = 1, isr: tuple[int, ...] = ALL,
          version: int = 1, log_ids: tuple[tuple[int, int], ...] | None = IDS) -> GroupState:
    return GroupState(leader, run, epoch, ALL, isr, version, log_ids)


def leader_with_three_entries(log_ids: tuple[tuple[int, int], ...] | None = IDS) -> Replica:
    r = Replica(0, 10, [(1, "a"), (1, "b"), (1, "c")], log_id=100)
    r.on_alive(ALL)
    r.on_state(state(log_ids=log_ids), 0.0)
    return r


def casses(actions: list[object]) -> list[Cas]:
    return [a for a in actions if isinstance(a, Cas)]


def test_fetches_carry_the_log_id() -> None:
    f = Replica(1, 11, log_id=101)
    (send,) = [a for a in f.on_state(state(), 0.0)]
    assert send.record == Fetch(1, 0, 0, 0, 101)  # type: ignore[attr-defined]


def test_a_member_back_with_a_new_log_counts_for_nothing_and_leaves_the_isr() -> None:
    r = leader_with_three_entries()
    r.fsync_done((0, 3), 0.0)
    r.receive(1, Fetch(1, 3, 1, 3, 101), 0.1)
    # node 2 had all three, then its disk was lost: its new log (id 202) says 3 by mistake
    # (a log id is what tells the leader; here even a full fetch must not count)
    actions = r.receive(2, Fetch(1, 3, 1, 3, 202), 0.1)
    assert not [a for a in actions if isinstance(a, Commit)]
    assert r.committed == 0
    (cas,) = casses(actions)  # asked at once, not at the next tick
    assert casses(r.tick(0.2)) == []  # (once)
    assert cas.new.isr == (0, 1) and cas.new.log_ids == ((0, 100), (1, 101))
    assert "node 2 leaves the in-sync replicas: its replica log is new" in cas.why
    assert r.proposed == (0, 1)  # the high watermark counts (0, 1) only from now on
    r.cas_result(1, True)
    commits = [a for a in r.on_state(cas.new.but(version=2), 0.3) if isinstance(a, Commit)]
    assert commits == [Commit(0, 3)]
    # back in by the normal rule, admitted with its new log's id
    r.receive(2, Fetch(1, 3, 1, 3, 202), 0.4)
    (cas,) = casses(r.tick(0.5))
    assert cas.new.isr == ALL and cas.new.log_ids == ((0, 100), (1, 101), (2, 202))


def test_a_replica_whose_log_is_not_the_recorded_one_does_not_take_over() -> None:
    lost = Replica(2, 12, log_id=202)  # node 2 back with its disk lost, still in the ISR
    kept = Replica(1, 11, [(1, "a")], log_id=101)
    for r in (lost, kept):
        r.on_alive((1, 2))  # the leader, node 0, is gone
        r.on_state(state(), 0.0)
    assert casses(lost.tick(1.0)) == []
    assert lost.not_eligible is not None and "id ca" in lost.not_eligible  # 202 = 0xca
    (cas,) = casses(kept.tick(1.0))
    assert (cas.new.leader, cas.new.epoch, cas.new.isr) == (1, 2, (1, 2))
    assert cas.new.log_ids == ((1, 101), (2, 102))


def test_a_leader_restarted_with_a_new_log_hands_the_lead_over() -> None:
    r = Replica(0, 99, log_id=200)  # node 0 restarted with its disk lost
    r.on_alive(ALL)
    actions = r.on_state(state(), 0.0)
    assert not r.leading
    (cas,) = casses(actions) or casses(r.tick(0.1))
    assert (cas.new.leader, cas.new.run, cas.new.isr) == (1, 0, (1, 2))
    assert cas.new.log_ids == ((1, 101), (2, 102))
    # alone in the ISR: no leader at all (the operator's call: docs/cluster.md)
    alone = Replica(0, 99, log_id=200)
    alone.on_state(state(isr=(0,), log_ids=((0, 100),)), 0.0)
    assert casses(alone.tick(0.1)) == [] and not alone.leading
    assert alone.not_eligible is not None


def test_a_new_queues_followers_count_once_their_log_id_is_recorded() -> None:
    r = leader_with_three_entries(log_ids=((0, 100),))  # a new queue: the leader's only
    r.fsync_done((0, 3), 0.0)
    (cas,) = casses(r.receive(1, Fetch(1, 3, 1, 3, 101), 0.1))  # asked at once
    assert casses(r.receive(2, Fetch(1, 3, 1, 3, 102), 0.1)) == []  # one swap at a time
    assert r.committed == 0  # unrecorded members count for nothing
    assert cas.new.isr == ALL and cas.new.log_ids == ((0, 100), (1, 101))
    assert cas.why == "replica log ids of node(s) 1 recorded"
    r.cas_result(1, True)
    (cas,) = casses(r.on_state(cas.new.but(version=2), 0.3))  # the next one at once
    assert cas.new.log_ids == IDS
    r.cas_result(2, True)
    commits = [a for a in r.on_state(cas.new.but(version=3), 0.5) if isinstance(a, Commit)]
    assert commits == [Commit(0, 3)]


def test_a_state_from_before_log_ids_counts_as_before_and_gets_them_recorded() -> None:
    r = leader_with_three_entries(log_ids=None)
    r.fsync_done((0, 3), 0.0)
    r.receive(1, Fetch(1, 3, 1, 3, 101), 0.1)
    r.receive(2, Fetch(1, 3, 1, 3, 102), 0.1)
    assert r.committed == 3  # counted as before
    (cas,) = casses(r.tick(0.2))
    assert cas.new.log_ids == IDS and cas.why == "replica log ids recorded"


def test_the_pure_rules() -> None:
    s = state()
    assert not_eligible(s, 1, 101) is None
    assert not_eligible(s.but(log_ids=((0, 100),)), 1, 5) is None  # none recorded
    assert not_eligible(s.but(log_ids=None), 1, 5) is None
    assert "not the one it was in sync with" in (not_eligible(s, 1, 5) or "")
    assert counted(s, {1: 3, 2: 3}, {1: 101, 2: 5}) == {1: 3}
    assert counted(s.but(isr=(0, 1)), {1: 3, 2: 3}, {1: 101, 2: 5}) == {1: 3, 2: 3}
    assert log_ids_change(s, 0, 100, {1: 101, 2: 102}) is None
    change = hand_over(s.but(leader=1), 1, (0,), "lost")
    assert change is not None and change[0].leader == 0 and change[0].isr == (0, 2)
