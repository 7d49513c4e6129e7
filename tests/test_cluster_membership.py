"""Cluster membership in etcd (``--node-name``, ``--cluster-etcd``): three nodes and a real
etcd (Debian's ``etcd-server``, ``make etcd-deps``) on loopback ports of their own; skipped
when etcd or the ``aetcd`` client is not installed. On the same three nodes: quorum queue
placement (RabbitMQ 3.13's ``x-queue-leader-locator``), ``amqpqctl rebalance quorum``,
maintenance mode (``drain``/``revive``) and the upgrade checks
(``check_if_node_is_quorum_critical``, ``await_online_quorum_plus_one``); the rolling
restart is ``tests/test_cluster_rolling_restart.py``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pika
import pytest

from tests.support.broker_process import BrokerProcess, free_port
from tests.support.cluster import (
    all_in_sync,
    api,
    connect,
    ctl,
    declare,
    everything_in_sync,
    leaders,
    wait_until,
)
from tests.support.etcd import ETCD, Etcd

pytest.importorskip("aetcd")
pytestmark = pytest.mark.skipif(ETCD is None, reason="etcd not installed (make etcd-deps)")
WAIT = 15.0


def running(node: BrokerProcess) -> dict[str, bool]:
    listed = api(node, "/api/nodes")
    assert isinstance(listed, list)
    return {n["name"]: n["running"] for n in listed}


def wait_for(node: BrokerProcess, want: dict[str, bool]) -> None:
    deadline = time.monotonic() + WAIT
    while (have := running(node)) != want:
        assert time.monotonic() < deadline, have
        time.sleep(0.2)


def test_every_node_sees_the_others_and_a_dead_one_goes_not_running(
        nodes: list[BrokerProcess]) -> None:
    everyone = {"n1": True, "n2": True, "n3": True}
    for node in nodes:
        wait_for(node, everyone)
    own = api(nodes[1], "/api/nodes/n2")
    assert isinstance(own, dict) and own["name"] == "n2" and "mem_used" in own  # full fields
    nodes[2].kill()  # kill -9: its etcd lease expires (5 s)
    wait_for(nodes[0], {"n1": True, "n2": True, "n3": False})
    out = subprocess.run(
        [sys.executable, "-m", "amqpqctl", "--port", str(nodes[0].management_port),
         "cluster_status"], capture_output=True, text=True, timeout=30,
        cwd=Path(__file__).resolve().parents[1])
    assert out.returncode == 0, out.stderr
    disk = out.stdout.split("Disk Nodes")[1].split("Running Nodes")[0].split()
    run = out.stdout.split("Running Nodes")[1].split("Alarms")[0].split()
    assert (sorted(disk), sorted(run)) == (["n1", "n2", "n3"], ["n1", "n2"])
    refused = ctl(nodes[0], "forget_cluster_node", "n2")  # running: refused, one line
    assert refused.returncode != 0 and "n2 is running" in refused.stderr
    assert ctl(nodes[0], "forget_cluster_node", "n3").returncode == 0  # stopped: forgotten
    wait_for(nodes[1], {"n1": True, "n2": True})
    nodes[2].start()  # back: a member and running again everywhere
    wait_for(nodes[1], {"n1": True, "n2": True, "n3": True})


def test_a_stopped_node_is_not_running_and_rejoins_when_it_resumes(
        nodes: list[BrokerProcess]) -> None:
    everyone = {"n1": True, "n2": True, "n3": True}
    wait_for(nodes[0], everyone)
    os.kill(nodes[1].pid, signal.SIGSTOP)  # a partitioned node: its lease expires
    try:
        wait_for(nodes[0], {"n1": True, "n2": False, "n3": True})
    finally:
        os.kill(nodes[1].pid, signal.SIGCONT)
    wait_for(nodes[2], everyone)  # it noticed its lease was gone and registered again


def test_a_second_node_of_the_same_name_is_refused(etcd: Etcd, nodes: list[BrokerProcess],
                                                     tmp_path: Path) -> None:
    twin = subprocess.run(
        [sys.executable, "-m", "amqp_server", "--port", "0", "--data-dir", str(tmp_path),
         "--no-management", "--no-prometheus", "--node-name", "n1", *etcd.args,
         "--cluster-port", "0"],
        capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[1])
    assert twin.returncode == 1
    assert "a node named n1 is already running" in twin.stderr.strip().splitlines()[-1]


def test_an_unreachable_etcd_is_one_line_and_exit_1(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "amqp_server", "--port", "0", "--data-dir", str(tmp_path),
         "--no-management", "--no-prometheus", "--cluster-etcd",
         f"http://127.0.0.1:{free_port()}"],
        capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[1])
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[-1].startswith("amqpq-server: cannot reach etcd at")


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
    # one epoch per transfer: the drain named each new leader with its run (etcd lease id),
    # so it led the transfer's epoch 2 without taking another itself
    assert [api(n1, f"/api/queues/%2F/{n}")["epoch"] for n in names] == [2] * 4
    # a queue with one member (on n1) is at its minimum quorum: n1 is critical
    declare(n1, "solo", **{"x-quorum-initial-group-size": 1})
    wait_until(lambda: api(n1, "/api/queues/%2F/solo").get("members") == ["n1"], "declared")
    critical = ctl(n1, "check_if_node_is_quorum_critical")
    assert critical.returncode == 69, critical.stdout + critical.stderr
    assert critical.stderr.splitlines() == [
        "queue 'solo' in vhost '/' would lose quorum if node n1 is stopped"]
    late = ctl(n1, "await_online_quorum_plus_one", "-t", "1")
    assert late.returncode == 69
    assert "time is up, no quorum + 1 online replicas came online for at least some " \
           "quorum queues" in late.stderr
    for node in ("n2", "n3"):
        assert ctl(n1, "add_member", "solo", node).returncode == 0
    back = ctl(n1, "await_online_quorum_plus_one", "-t", "30")
    assert back.returncode == 0, back.stderr
    assert back.stdout.strip() == ("Will wait for a quorum + 1 of nodes to be online for all "
                                   "quorum queues for 30 seconds...")
