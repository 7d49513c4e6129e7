"""Placement, rebalancing and maintenance mode of quorum queues in a three-node cluster (real
etcd and broker processes, ``amqpqctl`` as an operator runs it): RabbitMQ 3.13's
``x-queue-leader-locator``, ``rabbitmq-queues rebalance quorum``,
``rabbitmq-upgrade drain``/``revive``, ``check_if_node_is_quorum_critical`` and
``await_online_quorum_plus_one``. Skipped without etcd."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pika
import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.cluster import api, cluster_node, connect, ctl, wait_until
from tests.support.etcd import ETCD, Etcd, running_etcd

pytest.importorskip("aetcd")
pytestmark = pytest.mark.skipif(ETCD is None, reason="etcd not installed (make etcd-deps)")

QQ = {"x-queue-type": "quorum"}


def declare(node: BrokerProcess, *names: str, **arguments: object) -> None:
    conn = connect(node)
    ch = conn.channel()
    for name in names:
        ch.queue_declare(name, durable=True, arguments={**QQ, **arguments})
    conn.close()


def leaders(node: BrokerProcess, names: list[str]) -> dict[str, str]:
    return {n: api(node, f"/api/queues/%2F/{n}").get("leader") for n in names}


def all_in_sync(node: BrokerProcess, names: list[str]) -> bool:
    return all(len(api(node, f"/api/queues/%2F/{n}").get("in_sync") or []) == 3
               for n in names)


def everything_in_sync(node: BrokerProcess) -> bool:
    """Every quorum queue of the cluster has all its members in sync."""
    return all(len(q.get("in_sync") or []) == len(q.get("members") or [])
               for q in api(node, "/api/queues") if q.get("type") == "quorum")


def test_leaders_placed_by_locator_then_rebalanced(nodes: list[BrokerProcess]) -> None:
    n1 = nodes[0]
    local = [f"local-{i}" for i in range(3)]
    declare(n1, *local)  # client-local (the default): all led by n1
    wait_until(lambda: set(leaders(n1, local).values()) == {"n1"}, "led where declared")
    # a policy's queue-leader-locator wins over the argument (RabbitMQ 3.13)
    api(n1, "/api/policies/%2F/locator", "PUT", {
        "pattern": "^pol-", "apply-to": "queues",
        "definition": {"queue-leader-locator": "client-local"}})
    declare(n1, "pol-0", **{"x-queue-leader-locator": "balanced"})
    wait_until(lambda: leaders(n1, ["pol-0"]) == {"pol-0": "n1"}, "placed by the policy")
    api(n1, "/api/queues/%2F/pol-0", "DELETE")
    api(n1, "/api/policies/%2F/locator", "DELETE")
    balanced = [f"balanced-{i}" for i in range(3)]
    declare(n1, *balanced, **{"x-queue-leader-locator": "balanced"})
    # the nodes leading the fewest (n2, n3 lead nothing yet) take the balanced ones
    got = wait_until(lambda: (lambda ls: ls if None not in ls.values() else None)(
        leaders(nodes[1], balanced)), "balanced leaders")
    assert Counter(got.values()) == {"n2": 2, "n3": 1} or Counter(got.values()) == {
        "n2": 1, "n3": 2}, got
    wait_until(lambda: all_in_sync(n1, local + balanced), "every replica in sync")
    out = ctl(nodes[2], "rebalance", "quorum")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "Re-balancing leaders of quorum queues..."
    assert out.stdout.splitlines()[1] == "Node name\tNumber of quorum queues"
    wait_until(lambda: sorted(Counter(leaders(n1, local + balanced).values()).values())
               == [2, 2, 2], "two leaders per node")
    refused = ctl(n1, "rebalance", "streams")
    assert refused.returncode == 64


def test_drain_check_and_revive(nodes: list[BrokerProcess]) -> None:
    n1, n2, _ = nodes
    names = [f"m-{i}" for i in range(4)]
    declare(n2, *names)  # led by n2
    wait_until(lambda: all_in_sync(n1, names) and everything_in_sync(n1),
               "every replica in sync")
    ok = ctl(n2, "check_if_node_is_quorum_critical")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.splitlines() == [
        "Checking if node n2 is critical for quorum of any quorum queues ...",
        "Node n2 reported no quorum queues with minimum quorum"]
    client = connect(n2)
    closed: list[tuple[int, str]] = []
    drained = ctl(n2, "drain")
    assert drained.returncode == 0, drained.stderr
    assert drained.stdout.strip() == ("Will put node n2 into maintenance mode. The node will "
                                      "no longer serve any client traffic!")
    try:
        client.process_data_events(1)
        client.process_data_events(1)
    except pika.exceptions.ConnectionClosedByBroker as exc:
        closed.append((exc.reply_code, exc.reply_text))
    assert closed == [(320, "CONNECTION_FORCED - Node was put into maintenance mode")]
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        connect(n2)  # its listener is closed: clients go to the other nodes
    assert "n2" not in leaders(n1, names).values()  # leaders moved off, still a member
    assert all("n2" in api(n1, f"/api/queues/%2F/{n}")["members"] for n in names)
    assert api(n1, "/api/maintenance")["drained"] == ["n2"]
    in_maintenance = ctl(n2, "check_if_node_is_quorum_critical")
    assert in_maintenance.returncode == 0
    assert in_maintenance.stdout.splitlines()[1] == (
        "Node n2 seems to be in maintenance mode, the check does not apply")
    # a new balanced queue is not placed on the drained node
    declare(n1, "after-drain", **{"x-queue-leader-locator": "balanced"})
    wait_until(lambda: leaders(n1, ["after-drain"])["after-drain"] in ("n1", "n3"),
               "placed off the drained node")
    revived = ctl(n2, "revive")
    assert revived.returncode == 0, revived.stderr
    assert revived.stdout.strip() == (
        "Will put node n2 back into regular operating mode. The node will again serve client "
        "traffic and host primary queue replicas.")
    wait_until(lambda: connect(n2).close() or True, "n2 listening again")
    assert api(n1, "/api/maintenance")["drained"] == []
    wait_until(lambda: everything_in_sync(n1), "every replica in sync again")
    # a queue with one member (on n1) is at its minimum quorum: n1 is critical
    declare(n1, "solo", **{"x-quorum-initial-group-size": 1})
    wait_until(lambda: api(n1, "/api/queues/%2F/solo").get("members") == ["n1"], "declared")
    critical = ctl(n1, "check_if_node_is_quorum_critical")
    assert critical.returncode == 69, critical.stdout + critical.stderr
    assert critical.stderr.splitlines() == [
        "queue 'solo' in vhost '/' would lose quorum if node n1 is stopped"]
    late = ctl(n1, "await_online_quorum_plus_one", "-t", "1")
    assert late.returncode == 70
    assert "time is up, no quorum + 1 online replicas came online for at least some " \
           "quorum queues" in late.stderr
    for node in ("n2", "n3"):
        assert ctl(n1, "add_member", "solo", node).returncode == 0
    back = ctl(n1, "await_online_quorum_plus_one", "-t", "30")
    assert back.returncode == 0, back.stderr
    assert back.stdout.strip() == ("Will wait for a quorum + 1 of nodes to be online for all "
                                   "quorum queues for 30 seconds...")


@pytest.mark.slow
def test_a_node_that_joins_is_grown_into_queues_short_of_the_target_size(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--quorum-target-group-size 3``: a queue declared on a two-node cluster gets the
    third node as a member once it starts (checked once a second here)."""
    monkeypatch.setenv("AMQPQ_QUORUM_RECONCILE_SECONDS", "1")  # the brokers' environment
    started: list[BrokerProcess] = []
    with running_etcd(tmp_path) as etcd:
        try:
            grow_cluster(etcd, tmp_path, started)
        finally:
            for node in started:
                node.close()


def grow_cluster(etcd: Etcd, tmp_path: Path, started: list[BrokerProcess]) -> None:
    """g1 and g2 up, a queue on them, then g3: it becomes the third member."""
    for name in ("g1", "g2"):
        started.append(cluster_node(tmp_path, name, etcd, "--quorum-target-group-size",
                                    "3").start())
    declare(started[0], "grow-me")
    wait_until(lambda: sorted(api(started[0], "/api/queues/%2F/grow-me").get("members")
                              or []) == ["g1", "g2"], "two members")
    started.append(cluster_node(tmp_path, "g3", etcd, "--quorum-target-group-size",
                                "3").start())
    wait_until(lambda: sorted(api(started[1], "/api/queues/%2F/grow-me").get("members")
                              or []) == ["g1", "g2", "g3"], "grown to three members")
    wait_until(lambda: all_in_sync(started[2], ["grow-me"]), "the new member in sync")
