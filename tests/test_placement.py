"""Quorum queue placement, rebalancing and maintenance decisions
(:mod:`amqp_server.cluster.placement`), on plain states: RabbitMQ 3.13's leader locators,
``rabbitmq-queues rebalance``, ``check_if_node_is_quorum_critical``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from amqp_server.cluster.placement import (
    choose_leader,
    choose_members,
    leader_locator,
    leaders_to_move,
    quorum_critical,
    rebalance_moves,
    short_of_target,
    target_size,
)
from amqp_server.server import parse_args


def st(leader: int, members: list[int], isr: list[int] | None = None) -> dict[str, Any]:
    return {"leader": leader, "epoch": 1, "members": members,
            "isr": members if isr is None else isr}


def test_leader_locator_policy_wins_then_argument_then_configuration() -> None:
    assert leader_locator(None, None, None) == "client-local"
    assert leader_locator("balanced", None, None) == "balanced"
    assert leader_locator("balanced", "client-local", None) == "client-local"
    assert leader_locator(None, None, "balanced") == "balanced"
    assert leader_locator(b"balanced", None, "client-local") == "balanced"
    for old in ("random", "least-leaders", "min-masters"):  # 3.13 reads them as balanced
        assert leader_locator(None, old, None) == "balanced"
    assert leader_locator(None, "far", None) == "client-local"


def test_client_local_leads_where_declared_balanced_where_fewest_lead() -> None:
    states = [st(0, [0, 1, 2]), st(0, [0, 1, 2]), st(1, [1, 0, 2])]
    assert choose_leader(0, {0, 1, 2}, set(), states, "client-local") == 0
    assert choose_leader(0, {0, 1, 2}, set(), states, "balanced") == 2
    # ties: the local node first, then the lower index
    assert choose_leader(1, {0, 1, 2}, set(), [], "balanced") == 1
    # a drained node never leads while another runs, even client-local
    assert choose_leader(2, {0, 1, 2}, {2}, states, "client-local") == 1
    assert choose_leader(2, {2}, {2}, states, "client-local") == 2


def test_members_are_the_nodes_with_fewest_replicas() -> None:
    states = [st(0, [0, 1]), st(1, [1, 2]), st(1, [1])]
    assert choose_members(0, {0, 1, 2, 3}, set(), states, 3) == [0, 3, 2]
    assert choose_members(0, {0, 1, 2, 3}, {3}, states, 3) == [0, 2, 1]  # drained last
    assert choose_members(2, {0, 1, 2}, set(), [], 5) == [2, 0, 1]  # at most the running
    assert choose_members(2, {0, 1, 2}, set(), [], 1) == [2]


def test_rebalance_evens_out_leaders_over_in_sync_members() -> None:
    states = {f"q{i}": st(0, [0, 1, 2]) for i in range(6)}
    moves = rebalance_moves(states, {0, 1, 2}, set())
    led = {k: s["leader"] for k, s in states.items()} | dict(moves)
    assert sorted(list(led.values()).count(n) for n in (0, 1, 2)) == [2, 2, 2]
    assert len(moves) == 4
    # only in-sync running members take over; a drained node takes nothing
    states = {f"q{i}": st(0, [0, 1, 2], [0, 1]) for i in range(4)}
    moves = rebalance_moves(states, {0, 1, 2}, set())
    assert {t for _, t in moves} == {1} and len(moves) == 2
    assert rebalance_moves(states, {0, 1, 2}, {1}) == []
    assert rebalance_moves({"a": st(0, [0, 1]), "b": st(1, [0, 1])}, {0, 1}, set()) == []


def test_drain_moves_each_leader_to_the_member_leading_fewest() -> None:
    states = {"a": st(0, [0, 1, 2]), "b": st(0, [0, 1, 2]), "c": st(1, [1, 2]),
              "d": st(0, [0]), "e": st(0, [0, 1, 2], [0])}
    assert leaders_to_move(states, 0, {0, 1, 2}, set()) == [
        ("a", 2), ("b", 1), ("d", None), ("e", None)]
    assert leaders_to_move(states, 0, {0, 1}, set()) == [
        ("a", 1), ("b", 1), ("d", None), ("e", None)]


def test_quorum_critical_as_rabbitmq_counts_it() -> None:
    states = {"three": st(0, [0, 1, 2]), "one": st(0, [0]), "other": st(1, [1, 2]),
              "lagging": st(1, [0, 1, 2], [0, 1]), "five": st(0, [0, 1, 2, 3, 4])}
    # up <= members // 2 + 1: three of three up is fine, two of three is critical
    assert quorum_critical(states, 0, {0, 1, 2, 3, 4}) == ["lagging", "one"]
    assert quorum_critical(states, 0, {0, 1, 3, 4}) == ["lagging", "one", "three"]
    assert quorum_critical(states, 2, {0, 1, 2}) == ["five", "lagging", "other"]


def test_reconciliation_grows_queues_short_of_the_target() -> None:
    states = {"a": st(0, [0]), "b": st(0, [0, 1]), "c": st(0, [0, 1, 2])}
    # fewest replicas first, counted as the additions go
    assert short_of_target(states, {0, 1, 2, 3}, set(), 3) == [("a", 3), ("a", 2),
                                                                ("b", 3)]
    assert short_of_target(states, {0, 1, 2, 3}, {3}, 3) == [("a", 2), ("a", 1), ("b", 2)]
    assert short_of_target(states, {0}, set(), 3) == []


def test_each_queue_grows_to_its_own_target_size() -> None:
    """RabbitMQ 3.13's get_target_size: the largest of the configured size (which turns the
    reconciliation on), x-quorum-target-group-size and the policy's target-group-size."""
    assert target_size({}, None, 1) == 1
    assert target_size({"x-quorum-target-group-size": 3}, None, 1) == 3
    assert target_size({"x-quorum-target-group-size": 3}, 5, 1) == 5
    assert target_size({"x-quorum-target-group-size": 2}, None, 4) == 4  # the floor
    for ignored in (0, -1, "3", True, 2.5):  # taken unchecked at declare: counts as none
        assert target_size({"x-quorum-target-group-size": ignored}, None, 1) == 1
    states = {"a": st(0, [0]), "b": st(0, [0]), "c": st(0, [0])}
    assert short_of_target(states, {0, 1, 2}, set(), {"a": 3, "b": 2}) == [
        ("a", 1), ("a", 2), ("b", 1)]  # c: no target of its own (0)


def test_locator_and_target_size_from_options_and_rabbitmq_conf(tmp_path: Path) -> None:
    conf = tmp_path / "amqpq.conf"
    conf.write_text("queue_leader_locator = least-leaders\n"
                    "quorum_queue.continuous_membership_reconciliation.enabled = true\n")
    config = parse_args(["--config", str(conf)])
    assert (config.queue_leader_locator, config.quorum_target_group_size) == ("balanced", 3)
    conf.write_text("queue_leader_locator = client-local\n"
                    "quorum_queue.continuous_membership_reconciliation.target_group_size = 5\n")
    config = parse_args(["--config", str(conf)])
    assert (config.queue_leader_locator, config.quorum_target_group_size) == ("client-local", 5)
    config = parse_args(["--queue-leader-locator", "balanced", "--config", str(conf),
                         "--quorum-target-group-size", "4"])
    assert (config.queue_leader_locator, config.quorum_target_group_size) == ("balanced", 4)
    conf.write_text("quorum_queue.continuous_membership_reconciliation.enabled = false\n"
                    "quorum_queue.continuous_membership_reconciliation.target_group_size = 5\n")
    assert parse_args(["--config", str(conf)]).quorum_target_group_size == 0
    conf.write_text("queue_leader_locator = far\n")
    with pytest.raises(SystemExit):
        parse_args(["--config", str(conf)])


#: members 0-5 of three nodes of two workers each (``--workers 2 --node-name``)
NODES_OF_TWO = {0: "n1", 1: "n1", 2: "n2", 3: "n2", 4: "n3", 5: "n3"}


def test_members_of_nodes_of_several_workers_are_on_distinct_nodes() -> None:
    """A node's workers are not independent replicas: one member per node, the nodes with
    the fewest replicas first (then the worker with fewest), at most the nodes running."""
    every = set(NODES_OF_TWO)
    assert choose_members(1, every, set(), [], 3, NODES_OF_TWO) == [1, 2, 4]
    # n2 holds two replicas (on both workers), n3 one: n3 before n2, its emptier worker
    states = [st(2, [2, 0]), st(3, [3, 1]), st(4, [4, 0])]
    assert choose_members(0, every, set(), states, 2, NODES_OF_TWO) == [0, 5]
    assert choose_members(0, every, set(), states, 5, NODES_OF_TWO) == [0, 5, 2]
    assert choose_members(0, {0, 1}, set(), [], 3, NODES_OF_TWO) == [0]  # n1 alone runs


def test_growing_and_quorum_critical_count_nodes_not_workers() -> None:
    every = set(NODES_OF_TWO)
    states = {"q": st(0, [0, 2])}  # on n1 and n2: grows onto n3 only, never n1's worker 1
    assert short_of_target(states, every, set(), 3, NODES_OF_TWO) == [("q", 4)]
    assert short_of_target(states, every - {4, 5}, set(), 3, NODES_OF_TWO) == []
    # n2 stopping stops both its workers: "q" (member 2) and "r" (member 3) are critical
    states = {"q": st(0, [0, 2, 4]), "r": st(3, [1, 3, 5], [3, 5]), "s": st(0, [0, 4])}
    n2 = {i for i, n in NODES_OF_TWO.items() if n == "n2"}
    assert quorum_critical(states, n2, every) == ["r"]
    assert quorum_critical(states, n2, every - {4}) == ["q", "r"]
