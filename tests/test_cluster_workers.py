"""A cluster of nodes of several worker processes (``--workers 2 --node-name ...``), with
real processes and etcd (issue #31 item 1; design: :mod:`amqp_server.cluster.node`).

Three nodes of two workers each: every node is listed once with its two workers (their own
pids and figures; ``/api/workers`` each under its node), a worker killed alone comes back
under its node, a classic queue declared through one node is published to and consumed from
the others (connections land on either worker), a drain reaches both workers of the node,
a quorum queue's replicas are on three distinct nodes (never two workers of one node), and
a kill -9 of its leader's node (the supervisor: its workers die with it) hands the queue to
another node with every confirmed message. Six broker processes start for it (30 s to a
few minutes on the shared 2-core machine, as loaded), so it is ``slow``:
``make cluster-workers`` runs it. Skipped without etcd (``make etcd-deps``).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pika
import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.cluster import QQ, api, cluster_and_etcd, connect, wait_until
from tests.support.etcd import ETCD

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(ETCD is None, reason="etcd not installed (make etcd-deps)")]


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, BrokerProcess]]:
    with cluster_and_etcd(tmp_path_factory.mktemp("cw"), "--cluster-lease", "2",
                          workers=2) as started:
        yield started


def _two_workers_each(node: BrokerProcess) -> bool:
    listed = api(node, "/api/nodes")
    return sorted(n["name"] for n in listed) == ["n1", "n2", "n3"] and all(
        n["running"] and [w["running"] for w in n.get("workers") or []] == [True, True]
        for n in listed)


def test_each_node_is_listed_once_with_its_two_workers(nodes: dict[str, BrokerProcess]
                                                       ) -> None:
    for node in nodes.values():
        wait_until(lambda node=node: _two_workers_each(node), f"{node} lists 3 x 2 workers")

    def figures_per_worker() -> bool:  # each worker's pid and clients, the node's sums
        listed = api(nodes["n1"], "/api/nodes")
        return all(len({w.get("pid") for w in n["workers"]} - {None}) == 2
                   and n.get("mem_used", 0) > 0
                   and n.get("connections") == sum(w.get("connections", 0)
                                                   for w in n["workers"])
                   for n in listed)

    wait_until(figures_per_worker, "every node's two workers with their own pid and figures")
    # /api/workers lists every member of the cluster, each under its node
    wait_until(lambda: sorted((w.get("node_name"), w.get("worker"))
                              for w in api(nodes["n1"], "/api/workers") if w["up"])
               == [(n, i) for n in ("n1", "n2", "n3") for i in (0, 1)],
               "/api/workers: two workers under each node")


def test_a_worker_killed_is_restarted_and_rejoins_under_its_node(
        nodes: dict[str, BrokerProcess]) -> None:
    """kill -9 of worker 1 of n3 (not the node): its supervisor starts it again, it waits for
    its old registration's lease to expire, records its own death and registers again, and
    n3 is listed with two running workers, the new one with a new pid."""
    def n3_workers() -> list[dict[str, object]]:
        return next(n for n in api(nodes["n1"], "/api/nodes") if n["name"] == "n3")["workers"]

    old = wait_until(lambda: next((w.get("pid") for w in n3_workers() if w["worker"] == 1),
                                  None), "n3's worker 1 and its pid")
    os.kill(int(old), signal.SIGKILL)
    wait_until(lambda: [w["running"] for w in n3_workers()] == [True, True]
               and next(w.get("pid") for w in n3_workers() if w["worker"] == 1)
               not in (None, old), "n3's worker 1 back with a new pid", timeout=90)
    wait_until(lambda: _two_workers_each(nodes["n3"]), "n3 lists 3 x 2 workers again")


def test_a_classic_queue_is_used_from_every_worker_of_every_node(
        nodes: dict[str, BrokerProcess]) -> None:
    # four connections to each node: the supervisor hands them to its workers in turn
    conns = [connect(node) for node in nodes.values() for _ in range(4)]
    try:
        channels = [c.channel() for c in conns]
        channels[0].queue_declare("cw.classic", durable=True)
        for i, ch in enumerate(channels):
            ch.confirm_delivery()
            ch.basic_publish("", "cw.classic", f"m{i}".encode())
        q = wait_until(lambda: (lambda q: q if q.get("messages") == len(channels) else None)(
            api(nodes["n2"], "/api/queues/%2F/cw.classic")), "every publish counted")
        assert q["node"] == "n1"  # declared through n1: lives on one of n1's workers
        got = []
        for ch in reversed(channels):  # gets from every worker of every node
            method, _, body = ch.basic_get("cw.classic", auto_ack=True)
            assert method is not None
            got.append(body)
        assert sorted(got) == sorted(f"m{i}".encode() for i in range(len(channels)))
        channels[-1].queue_delete("cw.classic")
    finally:
        for c in conns:
            c.close()


def _closed(conn: pika.BlockingConnection) -> bool:
    try:
        conn.process_data_events(0)
    except Exception:  # closed by the broker (320 CONNECTION_FORCED)
        return True
    return conn.is_closed


def _refused(node: BrokerProcess) -> bool:
    try:
        connect(node).close()
    except Exception:  # pika's AMQPConnectionError: nothing listens
        return True
    return False


def test_drain_moves_every_worker_s_leaders_off_and_closes_the_node_s_port(
        nodes: dict[str, BrokerProcess]) -> None:
    """``POST /api/maintenance/drain`` on n2 (its worker 0 answers): both of n2's workers
    hand their quorum queue leaders over and close their clients, the supervisor stops
    listening; ``revive`` opens it again."""
    n2 = nodes["n2"]
    conns = [connect(n2) for _ in range(4)]  # on both of n2's workers, in turn
    for i, conn in enumerate(conns):  # client-local: each led by its connection's worker
        conn.channel().queue_declare(f"cw.drain.{i}", durable=True, arguments=QQ)
    names = [f"cw.drain.{i}" for i in range(4)]
    wait_until(lambda: all(len(api(n2, f"/api/queues/%2F/{n}").get("in_sync") or []) == 3
                           for n in names), "four queues in sync")
    assert {api(n2, f"/api/queues/%2F/{n}")["leader"] for n in names} == {"n2"}
    api(n2, "/api/maintenance/drain", "POST", {})
    wait_until(lambda: all(_closed(conn) for conn in conns), "n2's clients closed (both workers)")
    wait_until(lambda: all(api(nodes["n1"], f"/api/queues/%2F/{n}")["leader"] != "n2"
                           for n in names), "every leader moved off n2 (both workers)")
    wait_until(lambda: _refused(n2), "n2's AMQP port closed")
    api(n2, "/api/maintenance/revive", "POST", {})
    wait_until(lambda: not _refused(n2), "n2 listening again")
    conn = connect(nodes["n1"])
    for n in names:
        conn.channel().queue_delete(n)
    conn.close()


def test_quorum_replicas_are_on_distinct_nodes_and_a_node_kill_fails_over(
        nodes: dict[str, BrokerProcess]) -> None:
    conn = connect(nodes["n1"])
    ch = conn.channel()
    ch.queue_declare("cw.qq", durable=True, arguments=QQ)
    q = wait_until(lambda: (lambda q: q if len(q.get("in_sync") or []) == 3 else None)(
        api(nodes["n2"], "/api/queues/%2F/cw.qq")), "three replicas in sync")
    assert sorted(q["members"]) == ["n1", "n2", "n3"]  # one per node, never two workers of one
    ch.confirm_delivery()
    for i in range(20):
        ch.basic_publish("", "cw.qq", f"q{i}".encode())
    conn.close()
    leader = q["leader"]
    nodes[leader].kill()  # kill -9 of the supervisor: its two workers die with it
    other = next(n for name, n in nodes.items() if name != leader)
    wait_until(lambda: api(other, "/api/queues/%2F/cw.qq").get("leader") not in (None, leader),
               "a new leader on another node", timeout=30)
    conn = connect(other)
    ch = conn.channel()
    got = []
    while len(got) < 20:
        method, _, body = wait_until(lambda: (lambda r: r if r[0] is not None else None)(
            ch.basic_get("cw.qq", auto_ack=True)), "a message from the new leader")
        got.append(body)
    assert sorted(got) == sorted(f"q{i}".encode() for i in range(20))
    conn.close()
    nodes[leader].start()  # the node comes back with its two workers
    wait_until(lambda: _two_workers_each(other), "the node back with both workers", timeout=30)
