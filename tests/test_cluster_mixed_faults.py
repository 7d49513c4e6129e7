"""The mixed-fault failover loop (issue #30's "Done when"; ``make failover``): a 3-replica
quorum queue on a 3-node cluster with a real etcd, a publisher with confirms and a consumer
with manual acks every round, and one fault per round, chosen by a seeded random generator
(each kind once in every block of four rounds, in a shuffled order):

* ``kill``: kill -9 of the leader's node;
* ``pause``: SIGSTOP of a follower until the leader drops it from the in-sync replicas,
  SIGCONT, and a kill -9 of the leader once the follower is back in sync (a follower let
  back in too early would lose confirmed messages here);
* ``cut``: the node links between the leader and a follower cut with ``ss -K`` (the
  publisher is on that follower), then a kill -9 of the leader 0–1.5 s later;
* ``etcd``: etcd stopped and started again (leases, watches and tokens of every node).

Every killed node is restarted and the next round starts once all three replicas are in sync.
Checked at the end: nothing confirmed lost, nothing acked ≥ 1 s before a fault delivered again
(flagged redelivered), each publisher's confirmed messages first delivered in publish order.
Printed: each round's figures and, per fault kind, the time from the kill to a new leader
(``etcd``: the longest pause in the confirms), nacks and duplicates.

Environment: ``AMQPQ_FAILOVER_ROUNDS`` (default 20; ``make failover ROUNDS=100``),
``AMQPQ_FAILOVER_SEED`` (default: random, printed), ``AMQPQ_FAILOVER_LEASE`` (the nodes'
``--cluster-lease``, default 2). ``-m slow``: on demand only. Skipped without etcd."""

from __future__ import annotations

import json
import os
import random
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.cluster import cluster_node, connect, wait_until
from tests.support.etcd import ETCD, Etcd, running_etcd
from tests.support.failover import (
    Consumer,
    Publisher,
    check_history,
    cut_link,
    leader_of,
    pause,
    queue_state,
    resume,
)

pytest.importorskip("aetcd")
pytestmark = pytest.mark.skipif(ETCD is None, reason="etcd not installed (make etcd-deps)")

QUEUE = "mixed.qq"
KINDS = ("kill", "pause", "cut", "etcd")
ROUNDS = int(os.environ.get("AMQPQ_FAILOVER_ROUNDS", "20"))
LEASE = os.environ.get("AMQPQ_FAILOVER_LEASE", "2")


@pytest.fixture()
def mixed_cluster(tmp_path: Path) -> Iterator[tuple[Etcd, dict[str, BrokerProcess]]]:
    with running_etcd(tmp_path) as etcd:
        nodes = {name: cluster_node(tmp_path, name, etcd, "--cluster-lease", LEASE)
                 for name in ("n1", "n2", "n3")}
        try:
            for node in nodes.values():
                node.start()
            yield etcd, nodes
        finally:
            for node in nodes.values():
                if node.alive():
                    try:
                        resume(node)
                    except OSError:
                        pass
                node.close()


class Loop:
    """One run of the loop: the cluster, the traffic of every round, the fault times."""

    def __init__(self, etcd: Etcd, nodes: dict[str, BrokerProcess], seed: int) -> None:
        self.etcd, self.nodes, self.rng = etcd, nodes, random.Random(seed)
        self.publishers: list[Publisher] = []
        self.consumers: list[Consumer] = []
        self.faults: list[float] = []
        self.rows: list[dict[str, object]] = []

    def fault(self) -> float:
        now = time.monotonic()
        self.faults.append(now)
        return now

    def in_sync(self, via: str) -> list[str]:
        return list(queue_state(self.nodes[via], QUEUE).get("in_sync", []))  # type: ignore

    def kill_leader(self, leader: str, watcher: str) -> float:
        """kill -9 ``leader``'s node; seconds until ``watcher`` sees another leader."""
        epoch = int(queue_state(self.nodes[watcher], QUEUE)["epoch"])  # type: ignore
        killed_at = self.fault()
        self.nodes[leader].kill()
        wait_until(lambda: (lambda s: s["leader"] not in (leader, None)
                            and int(s["epoch"]) > epoch)(  # type: ignore[call-overload]
            queue_state(self.nodes[watcher], QUEUE)), f"a leader after {leader}'s kill", 30.0)
        return time.monotonic() - killed_at

    def round(self, r: int, kind: str) -> dict[str, object]:
        leader, _ = leader_of(self.nodes, QUEUE)
        target, calm = self.rng.sample([n for n in self.nodes if n != leader], 2)
        pub_on, con_on = {"kill": (target, calm), "pause": (calm, calm),
                          "cut": (target, calm), "etcd": (target, calm)}[kind]
        publisher = Publisher(self.nodes[pub_on], QUEUE, f"r{r}")
        consumer = Consumer(self.nodes[con_on], QUEUE)
        self.publishers.append(publisher)
        self.consumers.append(consumer)
        publisher.start()
        consumer.start()
        wait_until(lambda: len(publisher.confirmed) >= 20, f"round {r}: publishing", 30.0)
        time.sleep(self.rng.uniform(0.3, 1.0))
        row: dict[str, object] = {"round": r, "fault": kind, "leader": leader}
        first_fault = time.monotonic()
        killed = None
        if kind == "kill":
            row["failover_s"] = self.kill_leader(leader, calm)
            killed = leader
        elif kind == "pause":
            self.fault()
            pause(self.nodes[target])
            try:
                wait_until(lambda: target not in self.in_sync(leader),
                           f"round {r}: {target} out of the ISR", 30.0)
                row["isr_shrink_s"] = time.monotonic() - first_fault
                time.sleep(self.rng.uniform(0.0, 1.0))
            finally:
                resume(self.nodes[target])
            resumed = time.monotonic()
            wait_until(lambda: len(self.in_sync(leader)) == 3,
                       f"round {r}: {target} back in sync", 30.0)
            row["rejoin_s"] = time.monotonic() - resumed
            row["failover_s"] = self.kill_leader(leader, calm)
            killed = leader
        elif kind == "cut":
            self.fault()
            row["cut_sockets"] = cut_link(self.nodes[leader], self.nodes[target])
            time.sleep(self.rng.uniform(0.0, 1.5))
            row["failover_s"] = self.kill_leader(leader, calm)
            killed = leader
        else:
            self.fault()
            self.etcd.restart()
            row["etcd_down_s"] = time.monotonic() - first_fault
            before = len(publisher.confirmed)
            wait_until(lambda: len(publisher.confirmed) >= before + 20,
                       f"round {r}: confirms after etcd's restart", 30.0)
            row["leader_after"] = leader_of(self.nodes, QUEUE)[0]
        time.sleep(1.0)  # traffic after the fault
        publisher.stop.set()
        publisher.join(60)
        consumer.stop.set()
        consumer.join(30)
        row["pause_s"] = publisher.longest_pause(first_fault)
        if killed is not None:
            self.nodes[killed].start()
        restarted = time.monotonic()
        wait_until(lambda: len(self.in_sync(leader_of(self.nodes, QUEUE)[0])) == 3,
                   f"round {r}: three in-sync replicas again", 60.0)
        row["back_in_sync_s"] = time.monotonic() - restarted
        row.update(confirmed=len(publisher.confirmed), nacked=publisher.nacked)
        return {k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()}

    def run(self, rounds: int) -> None:
        conn = connect(self.nodes["n1"])
        conn.channel().queue_declare(QUEUE, durable=True, arguments={"x-queue-type": "quorum"})
        conn.close()
        wait_until(lambda: len(self.in_sync("n2")) == 3, "three in-sync replicas")
        order: list[str] = []
        for r in range(rounds):
            if not order:
                order = self.rng.sample(KINDS, len(KINDS))
            row = self.round(r, order.pop())
            print(json.dumps(row), flush=True)
            self.rows.append(row)

    def drain(self) -> None:
        """Consume what is left through the leader until the queue is empty."""
        leader, _ = leader_of(self.nodes, QUEUE)
        last = Consumer(self.nodes[leader], QUEUE)
        self.consumers.append(last)
        last.start()
        confirmed = {m for p in self.publishers for m in p.confirmed}
        seen = lambda: {m for c in self.consumers for m, _ in c.delivered}  # noqa: E731
        try:
            try:
                wait_until(lambda: confirmed <= seen(), "every confirmed message delivered",
                           60.0)
            except AssertionError:
                return  # lost: check_history names them
            wait_until(lambda: queue_state(self.nodes[leader], QUEUE)["messages"] == 0,
                       "queue drained", 30.0)
        finally:
            last.stop.set()
            last.join(30)

    def summary(self) -> dict[str, dict[str, object]]:
        """Per fault kind: rounds; min/median/max seconds from the kill to a new leader
        (``failover_s``) and of the publisher's longest pause between confirms from the
        round's first fault on (``pause_s``); confirmed; nacked."""
        out: dict[str, dict[str, object]] = {}
        for kind in KINDS:
            rows = [r for r in self.rows if r["fault"] == kind]
            if not rows:
                continue
            out[kind] = {"rounds": len(rows)}
            for key in ("failover_s", "pause_s"):
                times = sorted(float(r[key]) for r in rows if key in r)  # type: ignore
                if times:
                    out[kind][key] = (times[0], round(statistics.median(times), 2),
                                      times[-1])
            out[kind]["confirmed"] = sum(int(r["confirmed"]) for r in rows)  # type: ignore
            out[kind]["nacked"] = sum(int(r["nacked"]) for r in rows)  # type: ignore
        return out


@pytest.mark.slow
@pytest.mark.timeout(0)
def test_mixed_fault_loop_loses_nothing_confirmed(
        mixed_cluster: tuple[Etcd, dict[str, BrokerProcess]], tmp_path: Path) -> None:
    seed = int(os.environ.get("AMQPQ_FAILOVER_SEED") or random.randrange(1 << 32))
    print(f"\nmixed-fault loop: seed {seed}, {ROUNDS} rounds, lease {LEASE} s, logs in "
          f"{tmp_path}", flush=True)
    loop = Loop(*mixed_cluster, seed)
    try:
        loop.run(ROUNDS)
        loop.drain()
    finally:
        (tmp_path / "rounds.json").write_text(json.dumps(loop.rows, indent=1))
    verdict = check_history(loop.consumers, loop.publishers, loop.faults)
    summary = loop.summary()
    print("per fault kind:", json.dumps(summary), f"duplicates: {verdict.duplicates}",
          sep="\n  ")
    rounds_of = {f"r{row['round']}": row["fault"] for row in loop.rows}
    assert verdict.ok, {"seed": seed, "lost": verdict.lost[:10],
                        "lost_in_rounds": sorted({(m.split("-")[0], rounds_of.get(
                            m.split("-")[0])) for m in verdict.lost}),
                        "acked_came_back": verdict.acked_came_back[:10],
                        "out_of_order": verdict.out_of_order, "logs": str(tmp_path)}
    assert all(float(r.get("failover_s", 0)) < 10 for r in loop.rows)  # type: ignore
