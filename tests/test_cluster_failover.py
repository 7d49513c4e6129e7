"""Replicated quorum queues in a three-node cluster (real etcd, three broker processes):
the failover loop (kill -9 of the leader's node, round after round), a node that rejoins and
catches up, and a partition (SIGSTOP) after which the old leader commits nothing.

The loop runs :data:`ROUNDS` rounds by default (3, part of ``make test``) and 20 with
``pytest -m slow tests/test_cluster_failover.py`` (``make failover``). Skipped without etcd."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.cluster import cluster_and_etcd, connect, wait_until
from tests.support.etcd import ETCD
from tests.support.failover import (
    Consumer,
    Publisher,
    check_history,
    leader_of,
    queue_state,
)

pytest.importorskip("aetcd")
pytestmark = pytest.mark.skipif(ETCD is None, reason="etcd not installed (make etcd-deps)")

QQ = {"x-queue-type": "quorum"}


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[dict[str, BrokerProcess]]:
    with cluster_and_etcd(tmp_path) as nodes:
        yield nodes


def run_rounds(nodes: dict[str, BrokerProcess], rounds: int) -> list[dict[str, float]]:
    queue = "orders.qq"
    first = connect(nodes["n1"])
    first.channel().queue_declare(queue, durable=True, arguments=QQ)
    first.close()
    wait_until(lambda: len(queue_state(nodes["n2"], queue).get("in_sync", [])) == 3,
               "three in-sync replicas")
    publishers: list[Publisher] = []
    kills: list[float] = []
    report = []
    consumer: Consumer | None = None
    for r in range(rounds):
        leader, epoch = leader_of(nodes, queue)
        others = [n for n in nodes if n != leader]
        publisher = Publisher(nodes[others[0]], queue, f"r{r}")
        publishers.append(publisher)
        if consumer is not None:
            consumer.stop.set()
            consumer.join(10)
        consumer = Consumer(nodes[others[1]], queue)
        consumers_history.append(consumer)
        publisher.start()
        consumer.start()
        time.sleep(1.0)
        killed_at = time.monotonic()
        kills.append(killed_at)
        nodes[leader].kill()
        new_leader, new_epoch = wait_until(
            lambda e=epoch, n=nodes[others[0]]: (lambda s: (s["leader"], s["epoch"])
                                                if s["epoch"] > e else None)(
                queue_state(n, queue)), f"round {r}: a new leader", 10.0)
        failover = time.monotonic() - killed_at
        time.sleep(1.0)  # traffic through the new leader
        publisher.stop.set()
        publisher.join(30)
        nodes[leader].start()  # rejoins, catches up, in sync again
        caught_up_from = time.monotonic()
        wait_until(lambda n=nodes[new_leader]: len(queue_state(n, queue)["in_sync"]) == 3,
                   f"round {r}: {leader} back in sync", 30.0)
        report.append({"round": r, "failover_s": round(failover, 2),
                       "catch_up_s": round(time.monotonic() - caught_up_from, 2),
                       "confirmed": len(publisher.confirmed), "nacked": publisher.nacked,
                       "epoch": new_epoch, "killed": leader, "new_leader": new_leader})
    assert consumer is not None
    # drain what is left, then check every round's messages
    consumer.stop.set()
    consumer.join(10)
    leader, _ = leader_of(nodes, queue)
    drain = Consumer(nodes[leader], queue)
    drain.start()
    confirmed = [m for p in publishers for m in p.confirmed]
    seen = lambda: {m for c in [*consumers_history, drain] for m, _ in c.delivered}  # noqa: E731
    wait_until(lambda: set(confirmed) <= seen(), "every confirmed message delivered", 30.0)
    wait_until(lambda: queue_state(nodes[leader], queue)["messages"] == 0, "queue drained")
    drain.stop.set()
    drain.join(10)
    verdict = check_history([*consumers_history, drain], publishers, kills)
    assert verdict.ok, verdict
    return report


consumers_history: list[Consumer] = []


def test_failover_loop_loses_nothing_confirmed(cluster: dict[str, BrokerProcess]) -> None:
    consumers_history.clear()
    report = run_rounds(cluster, int(os.environ.get("AMQPQ_FAILOVER_ROUNDS", "3")))
    print("\nfailover rounds:", *report, sep="\n  ")
    assert all(r["failover_s"] < 10 for r in report)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_failover_loop_20_rounds(cluster: dict[str, BrokerProcess]) -> None:
    consumers_history.clear()
    report = run_rounds(cluster, 20)
    print("\nfailover rounds:", *report, sep="\n  ")
    assert all(r["failover_s"] < 10 for r in report)


def test_a_partitioned_leader_commits_nothing_and_follows_when_it_resumes(
        cluster: dict[str, BrokerProcess]) -> None:
    queue = "part.qq"
    conn = connect(cluster["n1"])  # the declaring node leads
    conn.channel().queue_declare(queue, durable=True, arguments=QQ)
    wait_until(lambda: len(queue_state(cluster["n2"], queue).get("in_sync", [])) == 3,
               "three in-sync replicas")
    stale = conn.channel()
    stale.confirm_delivery()
    stale.basic_publish("", queue, b"before", mandatory=True)
    os.kill(cluster["n1"].pid, signal.SIGSTOP)  # n1's lease expires: n2 or n3 takes over
    try:
        state = wait_until(lambda: (lambda s: s if s["epoch"] > 1 else None)(
            queue_state(cluster["n2"], queue)), "a new leader while n1 is stopped", 15.0)
        assert state["leader"] in ("n2", "n3")
        majority = connect(cluster["n2"])  # the majority side keeps confirming
        ch = majority.channel()
        ch.confirm_delivery()
        for i in range(50):
            ch.basic_publish("", queue, f"during-{i}".encode(), mandatory=True)
        # a publish sent to the stopped old leader waits in its socket
        sender = threading.Thread(target=_publish_quietly, args=(stale,), daemon=True)
        sender.start()
        time.sleep(0.5)
    finally:
        os.kill(cluster["n1"].pid, signal.SIGCONT)
    sender.join(20)
    wait_until(lambda: queue_state(cluster["n1"], queue)["leader"] != "n1",
               "n1 follows the new leader")
    assert "no longer the leader here" in cluster["n1"].log_path.read_text()
    wait_until(lambda: len(queue_state(cluster["n2"], queue)["in_sync"]) == 3,
               "n1 back in sync")
    bodies = []
    while (got := ch.basic_get(queue, auto_ack=True))[0] is not None:
        bodies.append(got[2])
    assert bodies[0] == b"before" and bodies[1:51] == [f"during-{i}".encode() for i in range(50)]
    # the publish the old leader read after it resumed: confirmed only if the new leader
    # has it (it was forwarded there), else nacked or its connection closed, and absent
    assert (b"stale" in bodies) == _results["stale-confirmed"]
    majority.close()


_results: dict[str, bool] = {}


def _publish_quietly(ch: pika.adapters.blocking_connection.BlockingChannel) -> None:
    try:
        ch.basic_publish("", "part.qq", b"stale", mandatory=True)
        _results["stale-confirmed"] = True
    except (pika.exceptions.AMQPError, OSError):
        _results["stale-confirmed"] = False


def test_delivery_counts_survive_a_failover_and_the_limit_dead_letters(
        cluster: dict[str, BrokerProcess]) -> None:
    keeper = connect(cluster["n3"])  # the dead-letter queue lives on n3, which stays up
    keeper.channel().queue_declare("dead", durable=True)
    keeper.close()
    conn = connect(cluster["n1"])  # n1 leads
    ch = conn.channel()
    ch.queue_declare("limited.qq", durable=True, arguments={
        **QQ, "x-delivery-limit": 2, "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": "dead"})
    wait_until(lambda: len(queue_state(cluster["n2"], "limited.qq")["in_sync"]) == 3,
               "three in-sync replicas")
    ch.confirm_delivery()
    ch.basic_publish("", "limited.qq", b"poison")
    conn.close()
    consumer = connect(cluster["n2"])
    cch = consumer.channel()
    counts = []
    for _ in range(2):  # delivered, returned: twice
        method, props, _ = wait_until(lambda: (lambda g: g if g[0] else None)(
            cch.basic_get("limited.qq")), "a delivery")
        counts.append((props.headers or {}).get("x-delivery-count", 0))
        cch.basic_nack(method.delivery_tag, requeue=True)
    consumer.close()
    time.sleep(0.5)  # the returns reach the followers
    cluster["n1"].kill()
    wait_until(lambda: queue_state(cluster["n3"], "limited.qq")["leader"] != "n1",
               "a new leader", 15.0)
    consumer = connect(cluster["n3"])
    cch = consumer.channel()
    method, props, _ = wait_until(lambda: (lambda g: g if g[0] else None)(
        cch.basic_get("limited.qq")), "the delivery after the failover")
    counts.append(props.headers.get("x-delivery-count"))
    assert method.redelivered
    cch.basic_nack(method.delivery_tag, requeue=True)  # the third return: past the limit
    dead = wait_until(lambda: cch.basic_get("dead", auto_ack=True)[2], "dead-lettered")
    assert (counts, dead) == ([0, 1, 2], b"poison")
    assert cch.basic_get("limited.qq")[0] is None
    consumer.close()


def test_publishes_wait_for_the_next_leader_instead_of_being_nacked(
        cluster: dict[str, BrokerProcess]) -> None:
    """While a quorum queue has no leader (kill -9 until etcd's lease names the next),
    publishes with confirms through another node wait and are confirmed by the new leader,
    the one in flight at the kill too: none is nacked (before: every publish of the
    leaderless seconds was nacked at once, dozens here). Every confirmed message is
    delivered."""
    queue = "waits.qq"
    conn = connect(cluster["n1"])
    conn.channel().queue_declare(queue, durable=True, arguments=QQ)  # n1 leads
    conn.close()
    wait_until(lambda: len(queue_state(cluster["n2"], queue).get("in_sync", [])) == 3,
               "three in-sync replicas")
    publisher = Publisher(cluster["n2"], queue, "w")
    publisher.start()
    wait_until(lambda: len(publisher.confirmed) >= 20, "publishing")
    cluster["n1"].kill()
    before = len(publisher.confirmed)
    wait_until(lambda: queue_state(cluster["n2"], queue)["leader"] != "n1", "a new leader",
               20.0)
    wait_until(lambda: len(publisher.confirmed) >= before + 20, "publishing to it", 20.0)
    publisher.stop.set()
    publisher.join(30)
    assert publisher.nacked == 0, publisher.nacked
    drain = Consumer(cluster["n3"], queue)
    drain.start()
    try:
        wait_until(lambda: set(publisher.confirmed) <= {m for m, _ in drain.delivered},
                   "every confirmed message delivered", 30.0)
    finally:
        drain.stop.set()
        drain.join(10)


def test_a_shorter_lease_fails_over_sooner(tmp_path: Path) -> None:
    """``--cluster-lease 2`` (``cluster_formation.etcd.node_ttl``): a dead leader's quorum
    queue has a new leader about 2 s after the kill instead of 5 (asserted below 4 s, which
    the default lease cannot meet; the figure is in the log line)."""
    with cluster_and_etcd(tmp_path, "--cluster-lease", "2") as nodes:
        conn = connect(nodes["n1"])
        conn.channel().queue_declare("lease.qq", durable=True, arguments=QQ)
        conn.close()
        wait_until(lambda: len(queue_state(nodes["n2"], "lease.qq").get("in_sync", []))
                   == 3, "three in-sync replicas")
        killed_at = time.monotonic()
        nodes["n1"].kill()
        wait_until(lambda: queue_state(nodes["n2"], "lease.qq")["leader"] != "n1",
                   "a new leader", 10.0)
        failover = time.monotonic() - killed_at
        print(f"failover with a 2 s lease: {failover:.2f} s")
        assert failover < 4.0, failover
