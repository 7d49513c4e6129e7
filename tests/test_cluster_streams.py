"""Replicated streams in a three-node cluster (real etcd, three broker processes, pika):
``x-initial-cluster-size`` replicas, publishes confirmed once every in-sync replica has them,
consumers reading their own node's replica with the same offsets and bodies everywhere,
failover of the leader (kill -9), a stopped follower catching up from its offset
(amqp_server/cluster/stream_group.py). Skipped without etcd (``make etcd-deps``)."""

from __future__ import annotations

import re
import urllib.error
from collections.abc import Iterator

import pika
import pytest

from benchmarks.quorum_bench import publish as publish_fast
from tests.support.broker_process import BrokerProcess
from tests.support.cluster import api, cluster_and_etcd, connect, wait_until
from tests.support.etcd import ETCD

pytest.importorskip("aetcd")
pytestmark = pytest.mark.skipif(ETCD is None, reason="etcd not installed (make etcd-deps)")

STREAM = {"x-queue-type": "stream"}


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[BrokerProcess]]:
    """Three nodes with a 2 s etcd lease (a dead leader's streams fail over after it)."""
    with cluster_and_etcd(tmp_path_factory.mktemp("streams"), "--cluster-lease", "2") as n:
        yield list(n.values())


class Reader:
    """A consumer of stream ``name`` on ``node`` from ``offset`` that stays attached:
    :meth:`until` takes deliveries until it has ``count``."""

    def __init__(self, node: BrokerProcess, name: str, offset: object = "first",
                 **arguments: object) -> None:
        self.conn = connect(node)
        self.ch = self.conn.channel()
        self.ch.basic_qos(prefetch_count=100)
        self.got: list[tuple[int, bytes]] = []
        self.stamps: list[int] = []  # x-stream-timestamp, when asked for
        self.ch.basic_consume(name, self._on_message,
                              arguments={"x-stream-offset": offset, **arguments})

    def _on_message(self, ch: object, method: object, props: pika.BasicProperties,
                    body: bytes) -> None:
        self.got.append((props.headers["x-stream-offset"], body))
        if "x-stream-timestamp" in props.headers:
            self.stamps.append(props.headers["x-stream-timestamp"])
        self.ch.basic_ack(method.delivery_tag)  # type: ignore[attr-defined]

    def until(self, count: int, timeout: float = 15.0) -> list[tuple[int, bytes]]:
        wait_until(lambda: self.conn.process_data_events(0.2) or len(self.got) >= count,
                   f"{count} deliveries (got {len(self.got)})", timeout)
        return self.got


def state(node: BrokerProcess, name: str) -> dict[str, object]:
    return api(node, f"/api/queues/%2F/{name}")  # type: ignore[no-any-return]


def declare(node: BrokerProcess, name: str, **arguments: object) -> None:
    conn = connect(node)
    conn.channel().queue_declare(name, durable=True, arguments={**STREAM, **arguments})
    conn.close()


def publish(node: BrokerProcess, name: str, bodies: list[bytes]) -> None:
    """Publish ``bodies`` through ``node`` with confirms (each one confirmed, or raises),
    once ``node`` has applied the stream's declare (else the publish would be unroutable)."""
    wait_until(lambda: state(node, name), f"{name} declared on {node.url}")
    conn = connect(node)
    ch = conn.channel()
    ch.confirm_delivery()
    for body in bodies:
        ch.basic_publish("", name, body, pika.BasicProperties(delivery_mode=2),
                         mandatory=True)
    conn.close()


def read(node: BrokerProcess, name: str, count: int, offset: object = "first",
         timeout: float = 15.0) -> list[tuple[int, bytes]]:
    """``count`` messages ``(x-stream-offset, body)`` consumed from ``node`` at ``offset``."""
    reader = Reader(node, name, offset)
    try:
        return reader.until(count, timeout)
    finally:
        reader.conn.close()


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
    stamped = [Reader(node, "s.core", **{"x-stream-timestamp-header": True})
               for node in (n1, n3)]  # the leader's chunk times on every replica
    for r in stamped:
        assert r.until(200) == want
        r.conn.close()
    assert len(stamped[0].stamps) == 200 and stamped[0].stamps == stamped[1].stamps
    nxt = Reader(n3, "s.core", "next")  # a follower's "next": what comes after
    publish(n2, "s.core", [b"late"])
    assert nxt.until(1) == [(200, b"late")]
    nxt.conn.close()


def test_failover_and_catch_up(nodes: list[BrokerProcess]) -> None:
    """kill -9 of the leader: a survivor takes over, nothing confirmed is lost, a consumer
    on a surviving node goes on; the killed node comes back and catches up from its offset
    (a stopped follower: the slow test below)."""
    n1, n2, n3 = nodes
    declare(n1, "s.fail", **{"x-initial-cluster-size": 3})
    wait_until(lambda: len(state(n1, "s.fail").get("in_sync", [])) == 3,  # type: ignore[arg-type]
               "three in-sync replicas")
    bodies = [f"f{i}".encode() for i in range(200)]
    want = list(enumerate(bodies))
    reader = Reader(n3, "s.fail")
    publish(n1, "s.fail", bodies[:100])
    assert reader.until(100) == want[:100]
    n1.kill()
    publish(n2, "s.fail", bodies[100:200])  # waits for the next leader, then confirmed
    assert reader.until(200) == want[:200]  # the consumer on n3 went on
    info = state(n2, "s.fail")
    assert info["leader"] in ("n2", "n3") and info["epoch"] == 2
    assert read(n2, "s.fail", 200) == want[:200]
    n1.start()  # the old leader follows the new one from its offset
    wait_until(lambda: "n1" in state(n2, "s.fail").get("in_sync", []),  # type: ignore[operator]
               "n1 back in sync")
    assert read(n1, "s.fail", 200) == want[:200]
    assert "stream 's.fail' in vhost '/': following node" in n1.log_text()
    reader.conn.close()


def test_retention_is_the_leaders_and_the_same_on_every_replica(
        nodes: list[BrokerProcess]) -> None:
    n1, n2, n3 = nodes
    leader = next(n for n in nodes if n.alive())
    declare(leader, "s.retained", **{"x-initial-cluster-size": 3,
                                     "x-stream-max-segment-size-bytes": 2_000,
                                     "x-max-length-bytes": 6_000})
    wait_until(lambda: len(state(leader, "s.retained")["in_sync"]) == 3,  # type: ignore[arg-type]
               "three in-sync replicas")
    publish(n2, "s.retained", [b"r" * 100 for _ in range(200)])  # about 30 KB

    def same_start() -> object:
        seen = {(state(n, "s.retained")["first_offset"], state(n, "s.retained")["last_offset"],
                 state(n, "s.retained")["segments"]) for n in (n1, n2, n3)}
        return len(seen) == 1 and next(iter(seen))[0] > 0 and next(iter(seen))

    first, last, segments = wait_until(same_start, "the same retention on every replica")
    assert last == 199 and segments >= 2
    got = read(n3, "s.retained", 200 - first)
    assert [o for o, _ in got] == list(range(first, 200))


def test_a_node_without_a_replica_publishes_and_reads_through_the_leader(
        nodes: list[BrokerProcess]) -> None:
    n1, n2, n3 = nodes
    declare(n2, "s.two", **{"x-initial-cluster-size": 2})
    wait_until(lambda: len(state(n2, "s.two")["in_sync"]) == 2,  # type: ignore[arg-type]
               "two in-sync replicas")
    info = state(n1, "s.two")
    assert info["leader"] == "n2" and len(info["members"]) == 2  # type: ignore[arg-type]
    outside = next(n for n in nodes if n.data_dir.name not in info["members"])  # type: ignore[operator]
    bodies = [f"t{i}".encode() for i in range(50)]
    publish(outside, "s.two", bodies)
    assert read(outside, "s.two", 50) == list(enumerate(bodies))
    conn = connect(n1)
    conn.channel().queue_delete("s.two")
    conn.close()
    for node in nodes:
        wait_until(lambda node=node: api_status(node, "/api/queues/%2F/s.two") == 404,
                   f"s.two gone on {node.data_dir.name}")
    declare(n3, "s.two", **{"x-initial-cluster-size": 3})  # the name again: a new stream
    wait_until(lambda: len(state(n3, "s.two")["in_sync"]) == 3,  # type: ignore[arg-type]
               "three in-sync replicas")
    publish(n1, "s.two", [b"again"])
    assert read(n2, "s.two", 1) == [(0, b"again")]
    # the node without a replica had a stand-in of a stream: its broker tick (retention of
    # the streams it holds) reached it and went on (it raised and stopped the node's tick)
    assert "tick failed" not in outside.log_text()


def test_a_replica_removed_and_added_again(nodes: list[BrokerProcess]) -> None:
    """``delete_member`` then ``add_member`` (amqpq's quorum replica endpoints, which take a
    stream too): the removed node reads through the leader, then its new replica copies
    the log from the leader's first offset and serves its consumers again."""
    n1, n2, n3 = nodes
    declare(n1, "s.members", **{"x-initial-cluster-size": 3})
    wait_until(lambda: len(state(n1, "s.members")["in_sync"]) == 3,  # type: ignore[arg-type]
               "three in-sync replicas")
    bodies = [f"m{i}".encode() for i in range(30)]
    publish(n1, "s.members", bodies[:10])
    path = "/api/queues/quorum/%2F/s.members/replicas"
    api(n1, f"{path}/delete", "DELETE", {"node": "n3"})
    wait_until(lambda: state(n3, "s.members")["members"] == ["n1", "n2"], "n3 removed")
    publish(n3, "s.members", bodies[10:20])
    assert read(n3, "s.members", 20) == list(enumerate(bodies[:20]))  # through the leader
    api(n1, f"{path}/add", "POST", {"node": "n3"})
    wait_until(lambda: len(state(n1, "s.members")["in_sync"]) == 3,  # type: ignore[arg-type]
               "n3 in sync again")
    publish(n2, "s.members", bodies[20:])
    wait_until(lambda: state(n3, "s.members").get("last_offset") == 29, "n3's own replica")
    assert read(n3, "s.members", 30) == list(enumerate(bodies))


def test_leaders_moved_by_rebalance_keep_the_log(nodes: list[BrokerProcess]) -> None:
    """``rebalance`` (a leader transfer: etcd names an in-sync member, epoch + 1) moves
    streams' leaders off n1; their offsets go on from the same log on every replica."""
    n1, n2, n3 = nodes
    names = [f"s.bal.{i}" for i in range(3)]
    for name in names:
        declare(n1, name, **{"x-initial-cluster-size": 3})
        wait_until(lambda name=name: len(state(n1, name)["in_sync"]) == 3,  # type: ignore[arg-type]
                   f"{name}: three in-sync replicas")
        publish(n1, name, [b"before"])
    api(n1, "/api/rebalance/queues", "POST", {"queue_pattern": r"^s\.bal\."})
    leaders = {name: state(n2, name)["leader"] for name in names}
    assert len(set(leaders.values())) > 1, leaders  # not all on n1 any more
    for name in names:
        wait_until(lambda name=name: len(state(n2, name)["in_sync"]) == 3,  # type: ignore[arg-type]
                   f"{name}: the old leader in sync again")
        publish(n1, name, [b"after"])
        for node in (n1, n2, n3):
            assert read(node, name, 2) == [(0, b"before"), (1, b"after")]


def api_status(node: BrokerProcess, path: str) -> int:
    try:
        api(node, path)
    except urllib.error.HTTPError as exc:
        return exc.code
    return 200


FROM_FILE = re.compile(r"node (\d+) fetches from offset (\d+), below the entries kept in RAM "
                       r"\(from offset (\d+)\): entries sent from the log file")
CAUGHT_UP = re.compile(r"node (\d+) caught up from the log file, offset (\d+) to (\d+) in "
                       r"[\d.]+ s")


@pytest.mark.slow
def test_a_follower_catches_up_from_the_leaders_stream_log(nodes: list[BrokerProcess]) -> None:
    """A follower stopped while the leader took 40,000 messages (past the entries its
    Replica keeps in RAM) restarts, says from which offset it follows, and fetches the
    rest from there, read from the leader's segments."""
    n1, n2, n3 = nodes
    declare(n1, "s.deep", **{"x-initial-cluster-size": 3})
    wait_until(lambda: len(state(n1, "s.deep").get("in_sync", [])) == 3,  # type: ignore[arg-type]
               "three in-sync replicas")
    publish_fast(n1.port, "s.deep", 2_000, 500)
    n3.stop()
    wait_until(lambda: len(state(n1, "s.deep").get("in_sync", [])) == 2,  # type: ignore[arg-type]
               "n3 out of sync")
    publish_fast(n1.port, "s.deep", 40_000, 1_000)
    n3.start()
    wait_until(lambda: len(state(n1, "s.deep").get("in_sync", [])) == 3,  # type: ignore[arg-type]
               "n3 back in sync", 120)
    found = FROM_FILE.search(n1.log_text())
    assert found is not None and int(found.group(2)) >= 2_000
    assert re.search(r"stream 's.deep' in vhost '/': following node 0 \(epoch \d+\) from offset "
                     r"2000 ", n3.log_text()), n3.log_text()[-2000:]
    caught = wait_until(lambda: CAUGHT_UP.search(n1.log_text()), "the caught-up line")
    print(found.group(0), caught.group(0), sep="\n")  # the figures (-s)
    assert state(n3, "s.deep")["last_offset"] == 41_999
    got = read(n3, "s.deep", 42_000, timeout=120)
    assert [o for o, _ in got] == list(range(42_000))
