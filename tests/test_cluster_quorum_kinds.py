"""Quorum queues with message groups (``x-group-by``) and queue-level deduplication
(``x-message-deduplication``) in a three-node cluster (real etcd, three broker processes):
the leader's copy of the queue follows the same rules as a single node's
(queue_store/grouped_queue.py, queue_store/dedup_queue.py), whichever node the publishers and
consumers are connected to, and a new leader after a failover still knows the keys of the
messages it holds. Skipped without etcd (``make etcd-deps``)."""

from __future__ import annotations

import random
import time
from collections import defaultdict

import pika
import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.cluster import api, connect, wait_until
from tests.support.etcd import ETCD

pytest.importorskip("aetcd")
pytestmark = pytest.mark.skipif(ETCD is None, reason="etcd not installed (make etcd-deps)")

QQ = {"x-queue-type": "quorum"}
DEDUP = {**QQ, "x-message-deduplication": True}
DEDUP_HEADER = "x-deduplication-header"


def queue_state(node: BrokerProcess, name: str) -> dict[str, object]:
    return api(node, f"/api/queues/%2F/{name}")  # type: ignore[no-any-return]


def declare(node: BrokerProcess, name: str, arguments: dict[str, object]) -> None:
    """Declare quorum queue ``name`` through ``node`` (it leads it) and wait until its three
    replicas are in sync."""
    conn = connect(node)
    conn.channel().queue_declare(name, durable=True, arguments=arguments)
    conn.close()
    wait_until(lambda: len(queue_state(node, name).get("in_sync", [])) == 3,  # type: ignore[arg-type]
               f"{name}: three in-sync replicas")


def keyed(key: str) -> pika.BasicProperties:
    return pika.BasicProperties(headers={DEDUP_HEADER: key}, delivery_mode=2)


def get_all(ch: pika.adapters.blocking_connection.BlockingChannel, queue: str,
            quiet: float = 1.0) -> list[tuple[int, bytes]]:
    """Basic.Get (manual ack) until the queue has answered Get-Empty for ``quiet`` seconds:
    the (delivery tag, body) of every message got, none acked."""
    got: list[tuple[int, bytes]] = []
    empty_since = None
    while True:
        method, _props, body = ch.basic_get(queue)
        if method is not None:
            got.append((method.delivery_tag, body))
            empty_since = None
            continue
        now = time.monotonic()
        if empty_since is None:
            empty_since = now
        elif now - empty_since >= quiet:
            return got
        time.sleep(0.05)


def test_a_deduplicating_quorum_queue_drops_duplicates_published_on_other_nodes(
        nodes: list[BrokerProcess]) -> None:
    n1, n2, n3 = nodes
    declare(n1, "dedup.qq", DEDUP)  # led by n1
    pub2, pub3, cons = connect(n2), connect(n3), connect(n3)
    try:
        ch2, ch3 = pub2.channel(), pub3.channel()
        ch2.confirm_delivery()
        ch3.confirm_delivery()
        # confirmed: basic_publish raises NackError / UnroutableError otherwise
        ch2.basic_publish("", "dedup.qq", b"a-1", keyed("a"), mandatory=True)
        ch2.basic_publish("", "dedup.qq", b"a-2", keyed("a"), mandatory=True)
        ch3.basic_publish("", "dedup.qq", b"a-3", keyed("a"), mandatory=True)
        ch3.basic_publish("", "dedup.qq", b"b-1", keyed("b"), mandatory=True)

        cch = cons.channel()
        got = get_all(cch, "dedup.qq")
        assert [body for _, body in got] == [b"a-1", b"b-1"], \
            "the duplicates of key 'a' should have been dropped"
        assert queue_state(n1, "dedup.qq")["messages"] == 2

        # the key is forgotten once its message leaves: the same key gets in again
        cch.basic_ack(got[0][0])
        wait_until(lambda: queue_state(n1, "dedup.qq")["messages"] == 1, "a-1 acked")
        ch2.basic_publish("", "dedup.qq", b"a-4", keyed("a"), mandatory=True)
        assert [body for _, body in get_all(cch, "dedup.qq")] == [b"a-4"]
        ch3.basic_publish("", "dedup.qq", b"a-5", keyed("a"), mandatory=True)  # a-4 held
        assert get_all(cch, "dedup.qq", quiet=0.5) == []
        assert queue_state(n1, "dedup.qq")["messages"] == 2  # b-1 and a-4, unacked
    finally:
        for conn in (pub2, pub3, cons):
            conn.close()


class Recorder:
    """A manual-ack consumer (prefetch ``prefetch``) of ``queue`` through ``node``: records
    the (gid, seq) of each delivery and its delivery tag; acks only when told."""

    def __init__(self, node: BrokerProcess, queue: str, prefetch: int) -> None:
        self.conn = connect(node)
        self.ch = self.conn.channel()
        self.ch.basic_qos(prefetch_count=prefetch)
        self.got: list[tuple[str, int]] = []
        self.tags: list[int] = []
        self.ch.basic_consume(queue, self._on_message)

    def _on_message(self, _ch: object, method: object, props: pika.BasicProperties,
                    body: bytes) -> None:
        gid = props.headers["gid"]
        gid = gid.decode() if isinstance(gid, bytes) else str(gid)
        self.got.append((gid, int(body.decode().rsplit("-", 1)[1])))
        self.tags.append(method.delivery_tag)  # type: ignore[attr-defined]

    def keys(self, since: int = 0) -> set[str]:
        return {gid for gid, _ in self.got[since:]}

    def ack_all(self) -> None:
        self.ch.basic_ack(self.tags[-1], multiple=True)


def pump(recorders: list[Recorder], until: int, what: str, timeout: float = 15.0) -> None:
    """Process both consumers' deliveries until they have ``until`` messages in all."""
    deadline = time.monotonic() + timeout
    while sum(len(r.got) for r in recorders) < until:
        assert time.monotonic() < deadline, \
            f"{what}: {sum(len(r.got) for r in recorders)} of {until} delivered"
        for r in recorders:
            r.conn.process_data_events(0.02)


def assert_per_key_order(recorders: list[Recorder]) -> None:
    for r in recorders:
        per_key: dict[str, list[int]] = defaultdict(list)
        for gid, seq in r.got:
            per_key[gid].append(seq)
        for gid, seqs in per_key.items():
            assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), \
                f"key {gid} out of order: {seqs}"


def test_a_grouped_quorum_queue_gives_each_key_to_one_consumer_at_a_time(
        nodes: list[BrokerProcess]) -> None:
    n1, n2, n3 = nodes
    queue = "groups.qq"
    declare(n1, queue, {**QQ, "x-group-by": "header:gid"})  # led by n1
    keys = [f"g{i}" for i in range(5)]
    c2, c3 = Recorder(n2, queue, 100), Recorder(n3, queue, 100)
    recorders = [c2, c3]
    pub = connect(n1)
    try:
        wait_until(lambda: queue_state(n1, queue).get("consumers") == 2, "both consumers")
        ch = pub.channel()
        ch.confirm_delivery()

        sent: dict[str, int] = defaultdict(int)

        def publish(rng: random.Random) -> None:
            """Six messages of each key, the keys in a random order (a fixed seed): no
            round-robin of the consumers keeps a key on one of them by chance."""
            order = [gid for gid in keys for _ in range(6)]
            rng.shuffle(order)
            for gid in order:
                ch.basic_publish("", queue, f"{gid}-{sent[gid]}".encode(),
                                 pika.BasicProperties(headers={"gid": gid}), mandatory=True)
                sent[gid] += 1

        # round 1: nothing is acked, so every key stays with the consumer that took it first
        rng = random.Random(29)
        publish(rng)
        pump(recorders, 30, "round 1")
        assert c2.keys().isdisjoint(c3.keys()), \
            f"a key went to both consumers: {sorted(c2.keys() & c3.keys())}"
        assert c2.keys() and c3.keys(), "the free keys are shared among the consumers"
        assert_per_key_order(recorders)

        # round 2: n2's consumer settles its keys, n3's keeps holding its own: the new
        # messages of n3's keys go to n3 only; n2's keys are free for either consumer
        held_by_c3 = c3.keys()
        c2_before, c3_before = len(c2.got), len(c3.got)
        c2.ack_all()
        c2.conn.process_data_events(0.1)
        publish(rng)
        pump(recorders, 60, "round 2")
        stolen = c2.keys(c2_before) & held_by_c3
        assert not stolen, f"n2's consumer got keys n3's consumer holds: {sorted(stolen)}"
        assert c3.keys(c3_before) >= held_by_c3  # the holder got the next ones of its keys
        assert_per_key_order(recorders)
        for gid in keys:  # each message once
            seqs = sorted(seq for r in recorders for g, seq in r.got if g == gid)
            assert seqs == list(range(12)), (gid, seqs)
    finally:
        for conn in (pub, c2.conn, c3.conn):
            conn.close()


def test_a_message_a_full_queue_refuses_at_commit_gives_its_key_back(
        nodes: list[BrokerProcess]) -> None:
    """A full ``reject-publish`` deduplicating quorum queue nacks a new key when the message
    is committed; that key was not taken, so the same message gets in once there is room
    (it would be dropped as a duplicate of nothing if the key stayed held)."""
    n1, n2, _ = nodes
    declare(n1, "dedup.full", {**DEDUP, "x-max-length": 1, "x-overflow": "reject-publish"})
    pub, cons = connect(n2), connect(n2)
    try:
        ch = pub.channel()
        ch.confirm_delivery()
        ch.basic_publish("", "dedup.full", b"a-1", keyed("a"), mandatory=True)
        with pytest.raises(pika.exceptions.NackError):
            ch.basic_publish("", "dedup.full", b"b-1", keyed("b"), mandatory=True)
        ch = pub.channel()  # pika's channel is unusable after a NackError
        ch.confirm_delivery()
        cch = cons.channel()
        got = get_all(cch, "dedup.full", quiet=0.5)
        assert [body for _, body in got] == [b"a-1"]
        cch.basic_ack(got[0][0])
        wait_until(lambda: queue_state(n1, "dedup.full")["messages"] == 0, "a-1 acked")
        ch.basic_publish("", "dedup.full", b"b-2", keyed("b"), mandatory=True)
        assert [body for _, body in get_all(cch, "dedup.full", quiet=0.5)] == [b"b-2"]
    finally:
        for conn in (pub, cons):
            conn.close()


def test_a_new_leader_still_knows_the_keys_of_the_messages_it_holds(
        nodes: list[BrokerProcess]) -> None:
    """Runs last: it kills the queue's leader node (n1)."""
    n1, n2, n3 = nodes
    queue = "dedup.fo.qq"
    declare(n1, queue, DEDUP)  # led by n1
    conn = connect(n2)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.basic_publish("", queue, b"a-1", keyed("a"), mandatory=True)
    ch.basic_publish("", queue, b"b-1", keyed("b"), mandatory=True)
    conn.close()
    epoch = int(queue_state(n2, queue)["epoch"])  # type: ignore[call-overload]
    wait_until(lambda: len(queue_state(n1, queue)["in_sync"]) == 3,  # type: ignore[arg-type]
               "both messages on every replica")
    n1.kill()
    state = wait_until(lambda: (lambda s: s if int(s["epoch"]) > epoch  # type: ignore[call-overload]
                                and s["leader"] in ("n2", "n3") else None)(
        queue_state(n2, queue)), "a new leader", 20.0)
    leader = n2 if state["leader"] == "n2" else n3

    def publish_confirmed(body: bytes, key: str) -> None:
        deadline = time.monotonic() + 15
        while True:
            try:
                c = connect(leader)
                try:
                    pch = c.channel()
                    pch.confirm_delivery()
                    pch.basic_publish("", queue, body, keyed(key), mandatory=True)
                    return
                finally:
                    if c.is_open:
                        c.close()
            except (pika.exceptions.AMQPError, OSError):
                assert time.monotonic() < deadline, f"{body!r} never confirmed"
                time.sleep(0.2)

    publish_confirmed(b"a-2", "a")  # a-1 is still in the queue: dropped
    publish_confirmed(b"c-1", "c")  # a new key: kept
    cons = connect(leader)
    try:
        got = get_all(cons.channel(), queue)
        assert sorted(body for _, body in got) == [b"a-1", b"b-1", b"c-1"]
    finally:
        cons.close()
