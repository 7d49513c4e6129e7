"""Shovels against the reference RabbitMQ 3.10.8 (``make reference-rabbitmq``: the shovel
plugins enabled; every test here is skipped when it is not reachable):

* the same shovel definitions created through the HTTP API on RabbitMQ and on amqpq move the
  same messages and show status rows with the same fields;
* an amqpq shovel pulls a RabbitMQ queue into amqpq with on-confirm while amqpq is killed -9
  twice on the way: every message ends up in amqpq (duplicates only of what was in flight).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

from tests.support.reference import REFERENCE_AMQP, ref_api, require_reference
from tests.test_shovel import Node, drain, publish, wait_for

pytestmark = pytest.mark.reference


@pytest.fixture(scope="module", autouse=True)
def reference() -> None:
    require_reference("/api/shovels", "rabbitmq_shovel_management")


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node(tmp_path, "a")
    n.proc.start()
    yield n
    n.proc.close()


def ref_count(queue: str) -> int:
    conn = pika.BlockingConnection(pika.URLParameters(REFERENCE_AMQP))
    try:
        return int(conn.channel().queue_declare(queue, passive=True).method.message_count)
    except pika.exceptions.ChannelClosedByBroker:
        return 0
    finally:
        if conn.is_open:
            conn.close()


def ref_delete_queues(*names: str) -> None:
    for name in names:
        ref_api("DELETE", f"/api/queues/%2F/{name}")


def _running(rows: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    for row in rows:
        if row["name"] == name and row["state"] == "running":
            return row
    return None


@pytest.mark.parametrize("kind", ["queues", "exchanges"])
def test_same_definitions_same_behaviour(node: Node, kind: str) -> None:
    tag = uuid.uuid4().hex[:8]
    src, dst, name = f"shv-src-{tag}", f"shv-dst-{tag}", f"shv-{tag}"
    if kind == "queues":
        value = {"src-uri": "amqp://", "src-queue": src, "dest-uri": "amqp://",
                 "dest-queue": dst, "src-prefetch-count": 50}
    else:
        value = {"src-uri": "amqp://", "src-exchange": "amq.topic", "src-exchange-key": tag,
                 "dest-uri": "amqp://", "dest-exchange": "amq.direct",
                 "dest-exchange-key": dst, "ack-mode": "on-publish"}
    rows = {}
    try:
        for label, api, url, count in (("rabbitmq", ref_api, REFERENCE_AMQP, ref_count),
                                       ("amqpq", node.api, node.url, node.count)):
            conn = pika.BlockingConnection(pika.URLParameters(url))
            ch = conn.channel()
            ch.queue_declare(dst, durable=True)
            ch.queue_bind(dst, "amq.direct", dst)
            conn.close()
            assert api("PUT", f"/api/parameters/shovel/%2F/{name}", {"value": value})[0] == 201
            rows[label] = wait_for(lambda api=api: _running(api("GET", "/api/shovels")[1], name),
                                   what=f"running on {label}")
            if kind == "queues":
                publish(url, src, [b"%d" % i for i in range(100)])
            else:
                conn = pika.BlockingConnection(pika.URLParameters(url))
                ch = conn.channel()
                ch.confirm_delivery()
                for i in range(100):
                    ch.basic_publish("amq.topic", tag, b"%d" % i)
                conn.close()
            wait_for(lambda count=count: count(dst) == 100, what=f"100 moved on {label}")
            assert [b for b, _ in drain(url, dst)] == [b"%d" % i for i in range(100)]
            assert api("DELETE", f"/api/parameters/shovel/%2F/{name}")[0] == 204
        assert set(rows["amqpq"]) == set(rows["rabbitmq"])
        for key in set(rows["amqpq"]) - {"node", "timestamp"}:
            assert rows["amqpq"][key] == rows["rabbitmq"][key], key
    finally:
        ref_api("DELETE", f"/api/parameters/shovel/%2F/{name}")
        ref_delete_queues(src, dst)


@pytest.mark.timeout(400)
def test_rabbitmq_queue_into_amqpq_killed_twice(node: Node) -> None:
    """The migration case: an on-confirm shovel in amqpq empties a RabbitMQ queue into
    amqpq; amqpq is killed -9 twice mid-transfer and restarts with the shovel."""
    tag = uuid.uuid4().hex[:8]
    queue, n = f"shv-mig-{tag}", 30_000
    try:
        publish(REFERENCE_AMQP, queue, [b"%06d" % i for i in range(n)])
        assert node.api("PUT", "/api/parameters/shovel/%2F/migrate", {"value": {
            "src-uri": "amqp://guest:guest@127.0.0.1:5672/%2F", "src-queue": queue,
            "dest-uri": "amqp://", "dest-queue": queue, "reconnect-delay": 1,
            "src-prefetch-count": 500}})[0] == 201
        for threshold in (3_000, 12_000):
            wait_for(lambda threshold=threshold: node.count(queue) > threshold, timeout=60,
                     what=f"more than {threshold} moved")
            node.proc.kill()
            node.proc.start()
        wait_for(lambda: ref_count(queue) == 0 and node.count(queue) >= n, timeout=180,
                 what="every message in amqpq")
        time.sleep(0.5)
        got = [body for body, _ in drain(node.url, queue)]
        assert set(got) == {b"%06d" % i for i in range(n)}
        assert len(got) - n <= 2 * 500  # duplicates: at most the window in flight per kill
    finally:
        ref_delete_queues(queue)
