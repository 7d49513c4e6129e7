"""A rolling restart of a three-node cluster under load (#31 item 5): each node in turn is
drained (``amqpqctl drain``: quorum queue leaders moved off, client listener and connections
closed), stopped (SIGTERM), started, waited for (``amqpqctl await_online_quorum_plus_one``)
and revived, while a publisher with confirms and a consumer with manual acks run against a
quorum queue through clients that reconnect to the other nodes. Nothing confirmed is lost,
and the queue stays available: no gap between two confirms longer than the etcd lease plus
a second.

About a minute of three brokers restarting: ``-m slow`` (``make rolling-restart``); the
figures (longest confirm gap, nacks, reconnections) are printed with ``-s``. Skipped
without etcd."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pika
import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.cluster import api, cluster_node, ctl, wait_until
from tests.support.etcd import ETCD, running_etcd

pytest.importorskip("aetcd")
pytestmark = [pytest.mark.skipif(ETCD is None, reason="etcd not installed (make etcd-deps)"),
              pytest.mark.slow]

LEASE = 5.0  # s: the nodes' etcd lease (--cluster-lease default)
QUEUE = "rolling.qq"


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[list[BrokerProcess]]:
    with running_etcd(tmp_path) as etcd:
        nodes = [cluster_node(tmp_path, name, etcd) for name in ("n1", "n2", "n3")]
        try:
            for node in nodes:
                node.start()
            yield nodes
        finally:
            for node in nodes:
                node.close()


class Roaming:
    """A blocking pika connection to the first node of ``nodes`` that accepts one,
    starting after the node used last (a client's list of cluster addresses)."""

    def __init__(self, nodes: list[BrokerProcess]) -> None:
        self.nodes = nodes
        self.at = -1
        self.reconnects = 0

    def connect(self) -> pika.BlockingConnection:
        while True:
            for _ in self.nodes:
                self.at = (self.at + 1) % len(self.nodes)
                node = self.nodes[self.at]
                try:
                    conn = pika.BlockingConnection(pika.ConnectionParameters(
                        "127.0.0.1", node.port, heartbeat=0, connection_attempts=1,
                        socket_timeout=2, blocked_connection_timeout=30))
                except (pika.exceptions.AMQPError, OSError):
                    continue
                self.reconnects += 1
                return conn
            time.sleep(0.2)


@dataclass(eq=False)
class Publisher(threading.Thread):
    """Publishes ``p-0``, ``p-1``... one at a time with confirms; a nacked message, or one
    whose connection closed before its confirm, is sent again until confirmed."""

    roaming: Roaming
    confirmed: list[str] = field(default_factory=list)
    confirm_times: list[float] = field(default_factory=list)
    nacked: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        threading.Thread.__init__(self, daemon=True)

    def run(self) -> None:
        seq = 0
        conn = None
        while not self.stop.is_set():
            try:
                if conn is None:
                    conn = self.roaming.connect()
                    ch = conn.channel()
                    ch.confirm_delivery()
                body = f"p-{seq}"
                ch.basic_publish("", QUEUE, body.encode(), mandatory=True,
                                 properties=pika.BasicProperties(delivery_mode=2))
                self.confirmed.append(body)
                self.confirm_times.append(time.monotonic())
                seq += 1
                time.sleep(0.01)
            except pika.exceptions.NackError:
                self.nacked += 1
            except (pika.exceptions.AMQPError, OSError):
                conn = None
        if conn is not None and conn.is_open:
            conn.close()

    def longest_gap(self, since: float, until: float) -> float:
        times = [since, *(t for t in self.confirm_times if since <= t <= until), until]
        return max(b - a for a, b in zip(times, times[1:], strict=False))


@dataclass(eq=False)
class Consumer(threading.Thread):
    """Consumes the queue with manual acks, subscribing again after a consumer-cancel
    notification, and reconnecting to another node when its connection closes."""

    roaming: Roaming
    delivered: set[str] = field(default_factory=set)
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        threading.Thread.__init__(self, daemon=True)

    def run(self) -> None:
        conn = None
        while not self.stop.is_set():
            try:
                if conn is None:
                    conn = self.roaming.connect()
                    ch = conn.channel()
                    ch.basic_qos(prefetch_count=50)
                if not ch.consumer_tags:
                    ch.basic_consume(QUEUE, self._got)
                conn.process_data_events(0.05)
            except (pika.exceptions.AMQPError, OSError):
                conn = None
        if conn is not None and conn.is_open:
            conn.close()

    def _got(self, ch: object, method: object, _props: object, body: bytes) -> None:
        self.delivered.add(body.decode())
        ch.basic_ack(method.delivery_tag)  # type: ignore[attr-defined]


def test_rolling_restart_loses_nothing_and_keeps_the_queue_available(
        cluster: list[BrokerProcess]) -> None:
    n1 = cluster[0]
    api(n1, f"/api/queues/%2F/{QUEUE}", "PUT",
        {"durable": True, "arguments": {"x-queue-type": "quorum"}})
    wait_until(lambda: len(api(n1, f"/api/queues/%2F/{QUEUE}").get("in_sync") or []) == 3,
               "three in-sync replicas")
    publisher, consumer = Publisher(Roaming(cluster)), Consumer(Roaming(cluster))
    publisher.start()
    consumer.start()
    wait_until(lambda: len(publisher.confirmed) > 50, "publishing")
    began = time.monotonic()
    steps = []
    for i, node in enumerate(cluster):
        name, t0 = f"n{i + 1}", time.monotonic()
        drained = ctl(node, "drain")
        assert drained.returncode == 0, drained.stderr
        leaders = {api(other, f"/api/queues/%2F/{QUEUE}")["leader"]
                   for other in cluster if other is not node}
        node.close()  # SIGTERM
        node.start()
        ready = ctl(node, "await_online_quorum_plus_one", "-t", "60")
        assert ready.returncode == 0, ready.stdout + ready.stderr
        revived = ctl(node, "revive")
        assert revived.returncode == 0, revived.stderr
        assert name not in leaders, leaders  # the drained node led nothing any more
        steps.append({"node": name, "leader_after_drain": sorted(leaders),
                      "seconds": round(time.monotonic() - t0, 1),
                      "confirmed": len(publisher.confirmed)})
    ended = time.monotonic()
    wait_until(lambda: len(publisher.confirmed) > steps[-1]["confirmed"] + 20,
               "publishing after the last revive")
    publisher.stop.set()
    publisher.join(30)
    confirmed = set(publisher.confirmed)
    wait_until(lambda: confirmed <= consumer.delivered, "every confirmed message delivered",
               60.0)
    consumer.stop.set()
    consumer.join(10)
    gap = publisher.longest_gap(began, ended)
    print(f"\nrolling restart: {len(confirmed)} confirmed, {publisher.nacked} nacked and "
          f"sent again, publisher connections {publisher.roaming.reconnects}, consumer "
          f"connections {consumer.roaming.reconnects}, longest confirm gap {gap:.2f} s, "
          f"{ended - began:.1f} s in all", *steps, sep="\n  ")
    assert gap <= LEASE + 1.0, f"longest confirm gap {gap:.2f} s"
