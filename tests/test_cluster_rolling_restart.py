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

import time
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.cluster import api, cluster_and_etcd, ctl, wait_until
from tests.support.etcd import ETCD
from tests.support.failover import Consumer, Publisher, Roaming

pytest.importorskip("aetcd")
pytestmark = [pytest.mark.skipif(ETCD is None, reason="etcd not installed (make etcd-deps)"),
              pytest.mark.slow]

LEASE = 5.0  # s: the nodes' etcd lease (--cluster-lease default)
QUEUE = "rolling.qq"
PERSISTENT = pika.BasicProperties(delivery_mode=2)


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[list[BrokerProcess]]:
    with cluster_and_etcd(tmp_path) as nodes:
        yield list(nodes.values())


def test_rolling_restart_loses_nothing_and_keeps_the_queue_available(
        cluster: list[BrokerProcess]) -> None:
    n1 = cluster[0]
    api(n1, f"/api/queues/%2F/{QUEUE}", "PUT",
        {"durable": True, "arguments": {"x-queue-type": "quorum"}})
    wait_until(lambda: len(api(n1, f"/api/queues/%2F/{QUEUE}").get("in_sync") or []) == 3,
               "three in-sync replicas")
    # "p-0", "p-1"... persistent, one at a time, 10 ms apart; nacked or unconfirmed: again
    publishing, consuming = Roaming(cluster), Roaming(cluster)
    publisher = Publisher(publishing, QUEUE, "p", PERSISTENT, pace=0.01, nack_pause=0.0,
                          retry_pause=0.0)
    consumer = Consumer(consuming, QUEUE, prefetch=50, retry_pause=0.0)
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
    wait_until(lambda: confirmed <= {m for m, _ in consumer.delivered},
               "every confirmed message delivered", 60.0)
    consumer.stop.set()
    consumer.join(10)
    gap = publisher.longest_gap(began, ended)
    print(f"\nrolling restart: {len(confirmed)} confirmed, {publisher.nacked} nacked and "
          f"sent again, publisher connections {publishing.reconnects}, consumer "
          f"connections {consuming.reconnects}, longest confirm gap {gap:.2f} s, "
          f"{ended - began:.1f} s in all", *steps, sep="\n  ")
    assert gap <= LEASE + 1.0, f"longest confirm gap {gap:.2f} s"
