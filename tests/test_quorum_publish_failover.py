"""Publishing to a quorum queue while its leader's node dies (issue #30, "no nack storm"):
a pika publisher with confirms that never sends a message again (one basic_publish per
message, a nack counted and skipped) sends 6,000 persistent messages to a 3-replica quorum
queue on a 3-node cluster, and the leader's node is killed (-9) after 2,000 of them. Until
etcd's lease names the next leader the queue has none; the publishes of those seconds wait
on the publisher's node (``amqp_server.workers.remote_client``'s parking, up to
``PARK_TIMEOUT``) and are confirmed once the new leader commits them.

Two publishers run at once, one on each surviving node, so one run covers both cases: the
publisher on the node that becomes the new leader (its waiting publishes go into the queue
there) and the one on the node that stays a follower (they are sent to the new leader).
A publisher on the killed node loses its connection and is out of scope.

A pipelining publisher (aio-pika, up to 200 unconfirmed) is the second run: the publishes in
flight to the leader when it dies wait for the next one too.

The runs are ``-m slow`` (about a minute each here); skipped without etcd."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pika
import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.cluster import api, cluster_and_etcd, connect, wait_until
from tests.support.etcd import ETCD

pytest.importorskip("aetcd")
pytestmark = pytest.mark.skipif(ETCD is None, reason="etcd not installed (make etcd-deps)")

QQ = {"x-queue-type": "quorum"}
PERSISTENT = pika.BasicProperties(delivery_mode=2)


@dataclass(eq=False)
class OneShotPublisher(threading.Thread):
    """Publishes ``tag-0`` .. ``tag-{count-1}`` once each, with confirms, through ``node``;
    never sends a message again: a nack is counted, a closed connection ends the run."""

    node: BrokerProcess
    queue: str
    tag: str
    count: int
    confirmed: list[str] = field(default_factory=list)
    nacked: list[str] = field(default_factory=list)
    longest_wait: float = 0.0  # s: the longest a single publish waited for its answer
    error: str | None = None

    def __post_init__(self) -> None:
        threading.Thread.__init__(self, daemon=True)

    def run(self) -> None:
        try:
            conn = connect(self.node)
            ch = conn.channel()
            ch.confirm_delivery()
            for i in range(self.count):
                body = f"{self.tag}-{i}"
                sent = time.monotonic()
                try:
                    ch.basic_publish("", self.queue, body.encode(), PERSISTENT)
                    self.confirmed.append(body)
                except pika.exceptions.NackError:
                    self.nacked.append(body)
                self.longest_wait = max(self.longest_wait, time.monotonic() - sent)
            conn.close()
        except (pika.exceptions.AMQPError, OSError) as exc:
            self.error = repr(exc)


@pytest.fixture()
def lease2_cluster(tmp_path: Path) -> Iterator[dict[str, BrokerProcess]]:
    with cluster_and_etcd(tmp_path, "--cluster-lease", "2") as nodes:
        yield nodes


def declare_led_by_n1(nodes: dict[str, BrokerProcess], queue: str) -> None:
    """Declare durable quorum queue ``queue`` through n1 (the declaring node leads) and wait
    until n2 shows its three replicas in sync."""
    conn = connect(nodes["n1"])
    conn.channel().queue_declare(queue, durable=True, arguments=QQ)
    conn.close()
    wait_until(lambda: len(api(nodes["n2"], f"/api/queues/%2F/{queue}").get("in_sync", []))
               == 3, "three in-sync replicas")


def new_leader(nodes: dict[str, BrokerProcess], queue: str) -> dict[str, Any]:
    """``queue``'s object in n2's management API once it names a leader other than n1
    (killed), within 20 s."""
    return wait_until(lambda: (lambda s: s if s["leader"] not in ("n1", None) else None)(
        api(nodes["n2"], f"/api/queues/%2F/{queue}")), "a new leader", 20.0)


def drain(node: BrokerProcess, queue: str) -> list[str]:
    """Every message left in ``queue``, taken with Basic.Get through ``node``."""
    conn = connect(node)
    ch = conn.channel()
    bodies = []
    while (got := ch.basic_get(queue, auto_ack=True))[0] is not None:
        bodies.append(got[2].decode())
    conn.close()
    return bodies


def publish_through_a_kill(nodes: dict[str, BrokerProcess], count: int, kill_after: int
                           ) -> dict[str, object]:
    """Declare a quorum queue led by n1, start a :class:`OneShotPublisher` on n2 and one on
    n3, kill -9 n1 once one of them had ``kill_after`` confirms; figures and the drained
    queue's check."""
    queue = "storm.qq"
    declare_led_by_n1(nodes, queue)
    pubs = {n: OneShotPublisher(nodes[n], queue, n, count) for n in ("n2", "n3")}
    for p in pubs.values():
        p.start()
    wait_until(lambda: max(len(p.confirmed) for p in pubs.values()) >= kill_after,
               f"{kill_after} confirmed", 120.0)
    killed_at = time.monotonic()
    nodes["n1"].kill()
    state = new_leader(nodes, queue)
    failover = time.monotonic() - killed_at
    for p in pubs.values():
        p.join(300)
    bodies = drain(nodes[state["leader"]], queue)
    figures: dict[str, object] = {"failover_s": round(failover, 2), "leader": state["leader"]}
    for name, p in pubs.items():
        role = "new leader" if name == state["leader"] else "follower"
        mine = [b for b in bodies if b.startswith(name + "-")]
        first = [int(b.rsplit("-", 1)[1]) for b in dict.fromkeys(mine)]
        figures[f"{name} ({role})"] = {
            "confirmed": len(p.confirmed), "nacked": len(p.nacked), "error": p.error,
            "longest_wait_s": round(p.longest_wait, 2),
            "lost": len(set(p.confirmed) - set(mine)), "twice": len(mine) - len(first),
            "lost_seqs": sorted(int(b.rsplit("-", 1)[1]) for b in set(p.confirmed) - set(mine))[:3]
            + sorted(int(b.rsplit("-", 1)[1]) for b in set(p.confirmed) - set(mine))[-3:],
            "nacked_seqs": p.nacked[:3],
            "in_order": first == sorted(first)}
    return figures


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_publisher_that_never_resends_is_confirmed_through_a_leader_kill(
        lease2_cluster: dict[str, BrokerProcess]) -> None:
    """6,000 persistent messages each from n2 and n3, n1 (the leader) killed after 2,000:
    every message is confirmed (the one in flight at the kill too: it waits for the new
    leader like those published after), none is lost, the first copies are in publish order
    (the one in flight may be in the queue twice), and the new leader is known within 3 s of
    the kill at a 2 s lease."""
    figures = publish_through_a_kill(lease2_cluster, 6000, 2000)
    print("\nno nack storm:", figures)
    for name in ("n2", "n3"):
        f = next(v for k, v in figures.items() if k.startswith(name + " "))
        assert f["error"] is None and f["lost"] == 0 and f["in_order"], f  # type: ignore
        assert f["confirmed"] == 6000 and f["nacked"] == 0, f  # type: ignore[index]
    assert figures["failover_s"] < 3.0, figures  # type: ignore[operator]


async def _pipelined(port: int, queue: str, count: int, window: int, confirmed: list[int],
                     nacked: list[int]) -> None:
    """Publish ``p-0`` .. ``p-{count-1}`` on one channel with confirms, up to ``window``
    unconfirmed at a time (aio-pika); never sends one again."""
    import aio_pika

    conn = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{port}/")
    try:
        ch = await conn.channel(publisher_confirms=True)
        room = asyncio.Semaphore(window)

        async def one(i: int) -> None:
            try:
                await ch.default_exchange.publish(
                    aio_pika.Message(f"p-{i}".encode(), delivery_mode=2), routing_key=queue)
                confirmed.append(i)
            except aio_pika.exceptions.DeliveryError:
                nacked.append(i)
            finally:
                room.release()

        tasks = []
        for i in range(count):
            await room.acquire()
            tasks.append(asyncio.ensure_future(one(i)))
        await asyncio.gather(*tasks)
    finally:
        await conn.close()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_pipelining_publisher_is_confirmed_through_a_leader_kill(
        lease2_cluster: dict[str, BrokerProcess]) -> None:
    """6,000 persistent messages from n2 with up to 200 unconfirmed at a time, n1 (the
    leader) killed after 2,000 confirms: none nacked (those in flight to n1 wait for the
    next leader with the later ones), none lost, the first copies in publish order; those
    n1 had committed before it died may be in the queue twice (at most the window)."""
    nodes = lease2_cluster
    queue = "pipelined.qq"
    declare_led_by_n1(nodes, queue)
    confirmed: list[int] = []
    nacked: list[int] = []
    runner = threading.Thread(target=lambda: asyncio.run(
        _pipelined(nodes["n2"].port, queue, 6000, 200, confirmed, nacked)), daemon=True)
    runner.start()
    wait_until(lambda: len(confirmed) >= 2000, "2,000 confirmed", 120.0)
    nodes["n1"].kill()
    at_kill = len(confirmed)
    runner.join(300)
    state = new_leader(nodes, queue)
    bodies = drain(nodes[state["leader"]], queue)
    first = [int(b.split("-")[1]) for b in dict.fromkeys(bodies)]
    figures = {"at_kill": at_kill, "confirmed": len(confirmed), "nacked": len(nacked),
               "lost": len(set(confirmed) - set(first)), "twice": len(bodies) - len(first),
               "in_order": first == sorted(first)}
    print("\npipelined:", figures)
    assert figures == {"at_kill": at_kill, "confirmed": 6000, "nacked": 0, "lost": 0,
                       "in_order": True, "twice": figures["twice"]}, figures
    assert at_kill < 6000 and figures["twice"] <= 200, figures
