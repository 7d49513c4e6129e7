"""Shovels in a three-node cluster (a real etcd; skipped without it, ``make etcd-deps``):
every node sees the parameter, exactly one node runs the shovel, and when that node is
killed -9 another one starts it (after the dead node's etcd lease expires) and moves
messages again (into a quorum queue, which outlives any one node).
"""

from __future__ import annotations

import time

import pika
import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.cluster import api, connect, wait_until


def _owners(nodes: list[BrokerProcess]) -> list[str]:
    """Names of the live nodes whose /api/shovels lists a running shovel."""
    out = []
    for node in nodes:
        if node.alive:
            rows = api(node, "/api/shovels")
            out += [r["node"] for r in rows if r["state"] == "running"]
    return out


@pytest.mark.timeout(180)
def test_one_node_runs_it_and_another_takes_over(nodes: list[BrokerProcess]) -> None:
    for node in nodes:  # every node sees the three running (so they agree on the owner)
        wait_until(lambda node=node: sum(1 for n in api(node, "/api/nodes")
                                         if n.get("running")) == 3, "three running nodes")
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
