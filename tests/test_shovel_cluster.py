"""Shovels and federation links in a three-node cluster (a real etcd; skipped without it,
``make etcd-deps``): every node sees the parameter (or policy), exactly one node runs the
shovel (or link), and when that node is killed -9 another one starts it (after the dead
node's etcd lease expires) and moves messages again (into a quorum queue, which outlives
any one node). One cluster start for both tests: each first restarts a node an earlier
test killed.
"""

from __future__ import annotations

import time

import pika
import pytest

from tests.support.broker_process import BrokerProcess, broker_fixture
from tests.support.cluster import api, connect, wait_until

upstream = broker_fixture(scope="module", name="upstream")


def _all_running(nodes: list[BrokerProcess]) -> None:
    """Start again a node an earlier test killed; wait until every node sees three
    running (so that they agree on which one runs a link)."""
    for node in nodes:
        if not node.alive():
            node.start()
    for node in nodes:
        wait_until(lambda node=node: sum(1 for n in api(node, "/api/nodes")
                                         if n.get("running")) == 3, "three running nodes")


def _name(node: BrokerProcess) -> str:
    return node.args[node.args.index("--node-name") + 1]


def _owners(nodes: list[BrokerProcess]) -> list[str]:
    """Names of the live nodes whose /api/shovels lists a running shovel."""
    out = []
    for node in nodes:
        if node.alive():
            rows = api(node, "/api/shovels")
            out += [r["node"] for r in rows if r["state"] == "running"]
    return out


@pytest.mark.timeout(180)
def test_one_node_runs_it_and_another_takes_over(nodes: list[BrokerProcess]) -> None:
    _all_running(nodes)
    conn = connect(nodes[0])  # a quorum queue: it outlives the node it was declared on
    conn.channel().queue_declare("shovelled", durable=True,
                                 arguments={"x-queue-type": "quorum"})
    conn.close()
    value = {"src-uri": "amqp://", "src-exchange": "amq.fanout", "dest-uri": "amqp://",
             "dest-queue": "shovelled"}
    api(nodes[0], "/api/parameters/shovel/%2F/c1", "PUT", {"value": value})
    for node in nodes:
        wait_until(lambda node=node: api(node, "/api/parameters/shovel/%2F/c1"),
                   "the parameter on every node")
    owner = wait_until(lambda: _owners(nodes), "a node running the shovel")
    assert len(owner) == 1  # and only one
    time.sleep(2)
    assert _owners(nodes) == owner  # still only that one
    by_name = {n.args[n.args.index("--node-name") + 1]: n for n in nodes}
    first = by_name[owner[0]]
    first.kill()
    alive = [n for n in nodes if n is not first]
    # while the survivors learn of the death their views may differ for a moment: wait
    # until one of them runs it, then check that it stays the only one
    second = wait_until(lambda: len(_owners(alive)) == 1 and _owners(alive),
                        "another node running it", timeout=60)
    time.sleep(2)
    assert _owners(alive) == second and second[0] != owner[0]
    other = by_name[second[0]]

    def published() -> bool:  # nacked while the quorum queue fails over: again
        c = connect(other)
        try:
            ch = c.channel()
            ch.confirm_delivery()
            ch.basic_publish("amq.fanout", "", b"after the move")
            return True
        except pika.exceptions.NackError:
            return False
        finally:
            if c.is_open:
                c.close()

    wait_until(published, "a publish confirmed", timeout=30)

    def moved() -> bool:
        c = connect(other)
        try:
            count = c.channel().queue_declare("shovelled", passive=True).method.message_count
            return count >= 1
        finally:
            c.close()

    wait_until(moved, "a message moved by the new owner", timeout=30)


def _link_owners(nodes: list[BrokerProcess]) -> list[str]:
    """Names of the live nodes whose /api/federation-links lists a running link."""
    out = []
    for node in nodes:
        if node.alive():
            rows = api(node, "/api/federation-links")
            out += [r["node"] for r in rows if r["status"] == "running"]
    return out


def _publish_upstream(upstream: BrokerProcess, body: bytes) -> None:
    c = connect(upstream)
    try:
        ch = c.channel()
        ch.confirm_delivery()
        ch.basic_publish("fed.x", "", body)
    finally:
        c.close()


def _count(node: BrokerProcess, queue: str) -> int:
    c = connect(node)
    try:
        return int(c.channel().queue_declare(queue, passive=True).method.message_count)
    finally:
        if c.is_open:
            c.close()


@pytest.mark.timeout(180)
def test_one_node_runs_a_federation_link_and_another_takes_over(
        nodes: list[BrokerProcess], upstream: BrokerProcess) -> None:
    _all_running(nodes)
    up = connect(upstream)
    up.channel().exchange_declare("fed.x", "fanout", durable=True)
    up.close()
    conn = connect(nodes[0])  # the federated exchange, into a quorum queue
    ch = conn.channel()
    ch.exchange_declare("fed.x", "fanout", durable=True)
    ch.queue_declare("federated", durable=True, arguments={"x-queue-type": "quorum"})
    ch.queue_bind("federated", "fed.x")
    conn.close()
    api(nodes[0], "/api/parameters/federation-upstream/%2F/single", "PUT",
        {"value": {"uri": upstream.url, "reconnect-delay": 1}})
    api(nodes[0], "/api/policies/%2F/federate-fed", "PUT",
        {"pattern": "^fed\\.x$", "definition": {"federation-upstream": "single"},
         "apply-to": "exchanges", "priority": 1})
    for node in nodes:
        wait_until(lambda node=node: api(node, "/api/policies/%2F/federate-fed"),
                   "the policy on every node")
    owner = wait_until(lambda: _link_owners(nodes), "a node running the link")
    assert len(owner) == 1  # and only one
    _publish_upstream(upstream, b"before the move")
    wait_until(lambda: _count(nodes[0], "federated") >= 1, "a message federated")
    time.sleep(1)
    assert _link_owners(nodes) == owner  # still only that one
    by_name = {_name(n): n for n in nodes}
    first = by_name[owner[0]]
    first.kill()
    alive = [n for n in nodes if n is not first]
    # published before another node runs the link: it waits in the upstream queue, which
    # the next owner takes from (the queue is named for the cluster, not the node)
    _publish_upstream(upstream, b"during the move")
    second = wait_until(lambda: len(_link_owners(alive)) == 1 and _link_owners(alive),
                        "another node running the link", timeout=60)
    assert second[0] != owner[0]
    other = by_name[second[0]]
    _publish_upstream(upstream, b"after the move")

    def moved() -> bool:  # the quorum queue may still be failing over: a passive declare
        return _count(other, "federated") == 3  # fails until it has a leader again

    wait_until(moved, "a message federated by the new owner", timeout=30)
    time.sleep(1)
    assert _link_owners(alive) == second  # still only that one
