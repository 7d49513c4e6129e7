"""Replicated streams in a three-node cluster (real etcd, three broker processes, pika):
``x-initial-cluster-size`` replicas, publishes confirmed once every in-sync replica has them,
consumers reading their own node's replica with the same offsets and bodies everywhere,
failover of the leader (kill -9), a stopped follower catching up from its offset
(amqp_server/cluster/stream_group.py). Skipped without etcd (``make etcd-deps``)."""

from __future__ import annotations

import pika
import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.cluster import api, connect, wait_until
from tests.support.etcd import ETCD

pytest.importorskip("aetcd")
pytestmark = pytest.mark.skipif(ETCD is None, reason="etcd not installed (make etcd-deps)")

STREAM = {"x-queue-type": "stream"}


def state(node: BrokerProcess, name: str) -> dict[str, object]:
    return api(node, f"/api/queues/%2F/{name}")  # type: ignore[no-any-return]


def declare(node: BrokerProcess, name: str, **arguments: object) -> None:
    conn = connect(node)
    conn.channel().queue_declare(name, durable=True, arguments={**STREAM, **arguments})
    conn.close()


def publish(node: BrokerProcess, name: str, bodies: list[bytes]) -> None:
    """Publish ``bodies`` through ``node`` with confirms (each one confirmed, or raises)."""
    conn = connect(node)
    ch = conn.channel()
    ch.confirm_delivery()
    for body in bodies:
        ch.basic_publish("", name, body, pika.BasicProperties(delivery_mode=2),
                         mandatory=True)
    conn.close()


def read(node: BrokerProcess, name: str, count: int, offset: object = "first"
         ) -> list[tuple[int, bytes]]:
    """``count`` messages ``(x-stream-offset, body)`` consumed from ``node`` at ``offset``."""
    conn = connect(node)
    ch = conn.channel()
    ch.basic_qos(prefetch_count=100)
    got: list[tuple[int, bytes]] = []

    def on_message(ch: object, method: object, props: pika.BasicProperties,
                   body: bytes) -> None:
        got.append((props.headers["x-stream-offset"], body))
        conn_ch.basic_ack(method.delivery_tag)  # type: ignore[attr-defined]

    conn_ch = ch
    ch.basic_consume(name, on_message, arguments={"x-stream-offset": offset})
    try:
        wait_until(lambda: conn.process_data_events(0.2) or len(got) >= count,
                   f"{count} messages from {name} on {node.url}")
    except AssertionError:
        st = state(node, name)
        raise AssertionError(f"got {len(got)}: {got[:3]}...{got[-3:]}; {st['last_offset']} "
                             f"{st.get('replica_lag')} {st['consumer_details']}") from None
    conn.close()
    return got


def test_a_stream_is_replicated_and_read_on_every_node(nodes: list[BrokerProcess]) -> None:
    n1, n2, n3 = nodes
    declare(n1, "s.core", **{"x-initial-cluster-size": 3})
    wait_until(lambda: len(state(n1, "s.core").get("in_sync", [])) == 3,  # type: ignore[arg-type]
               "three in-sync replicas")
    info = state(n2, "s.core")
    assert info["type"] == "stream"
    assert info["leader"] == "n1"
    assert sorted(info["members"]) == ["n1", "n2", "n3"]  # type: ignore[arg-type]
    bodies = [f"m{i}".encode() for i in range(200)]
    publish(n1, "s.core", bodies[:100])
    publish(n2, "s.core", bodies[100:])  # a follower's publishes go to the leader
    want = list(enumerate(bodies))
    for node in (n1, n2, n3):
        assert read(node, "s.core", 200) == want
    assert read(n3, "s.core", 50, 150) == want[150:]
