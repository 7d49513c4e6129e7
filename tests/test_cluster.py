"""A three-node cluster on one machine (real etcd, three broker processes): metadata is
cluster-wide and messages cross the node links. Skipped without etcd (``make etcd-deps``)."""

from __future__ import annotations

import socket
import subprocess
import time

import pika
import pytest

from amqp_server.workers.link_codec import Outbox
from tests.support.broker_process import BrokerProcess
from tests.support.cluster import api, cluster_node, connect, ctl, wait_until
from tests.support.cluster_fixtures import on_the_shared_cluster
from tests.support.etcd import ETCD, Etcd

pytest.importorskip("aetcd")
pytestmark = pytest.mark.skipif(ETCD is None, reason="etcd not installed (make etcd-deps)")


# the cluster test_cluster.py and test_cluster_access.py share (tests/support/
# cluster_fixtures.py): every name here is the module's own, no node is stopped
etcd, nodes = on_the_shared_cluster()


def test_topology_declared_on_one_node_is_usable_from_the_others_at_once(
        nodes: list[BrokerProcess]) -> None:
    n1, n2, n3 = (connect(n) for n in nodes)
    try:
        ch1 = n1.channel()
        ch1.exchange_declare("orders", "topic", durable=True)
        ch1.queue_declare("orders.eu", durable=True)
        ch1.queue_bind("orders.eu", "orders", "eu.#")
        for conn in (n2, n3):  # no wait: the declare was answered once etcd had it
            ch = conn.channel()
            ch.exchange_declare("orders", "topic", passive=True)
            assert ch.queue_declare("orders.eu", passive=True).method.message_count == 0
        ch1.queue_delete("orders.eu")
        ch3 = n3.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            ch3.queue_declare("orders.eu", passive=True)
        assert closed.value.reply_code == 404
    finally:
        for conn in (n1, n2, n3):
            conn.close()


def test_a_consumer_on_node_3_gets_what_node_2_publishes_to_a_queue_of_node_1(
        nodes: list[BrokerProcess]) -> None:
    n1, n2, n3 = (connect(n) for n in nodes)
    try:
        n1.channel().queue_declare("work", durable=True)  # lives on node 1
        pub = n2.channel()
        pub.confirm_delivery()
        for i in range(300):
            pub.basic_publish("", "work", f"m{i}".encode(),
                              pika.BasicProperties(delivery_mode=2))  # confirmed: raises if not
        got: list[bytes] = []
        ch3 = n3.channel()
        ch3.basic_qos(prefetch_count=50)
        ch3.basic_consume("work", lambda ch, m, p, b: (got.append(b),
                                                       ch.basic_ack(m.delivery_tag)))
        deadline = time.monotonic() + 15
        while len(got) < 300 and time.monotonic() < deadline:
            n3.process_data_events(0.1)
        assert got == [f"m{i}".encode() for i in range(300)]
        listed = api(nodes[2], "/api/queues/%2F/work")
        assert listed["worker"] == api(nodes[1], "/api/nodes/n1")["index"]
        wait_until(lambda: api(nodes[0], "/api/queues/%2F/work")["messages"] == 0,
                   "acks reach the queue's node")
    finally:
        for conn in (n1, n2, n3):
            conn.close()


def test_a_get_after_a_requeue_sees_the_message_on_the_leader_and_on_another_node(
        nodes: list[BrokerProcess]) -> None:
    """Basic.Nack(requeue) then Basic.Get on one channel gets the message back (with
    x-delivery-count 1), as on RabbitMQ, though the requeue is replicated before the quorum
    queue hands it out again: the get waits for that commit instead of answering GetEmpty.
    Once from a client of the leader's node, once from a client of another node."""
    n1 = connect(nodes[0])
    try:
        n1.channel().queue_declare("requeue.qq", durable=True, arguments={
            "x-queue-type": "quorum", "x-queue-leader-locator": "client-local"})
        for node in nodes[:2]:
            conn = connect(node)
            try:
                ch = conn.channel()
                ch.confirm_delivery()
                ch.basic_publish("", "requeue.qq", b"again",
                                 pika.BasicProperties(delivery_mode=2))
                counts = []
                for _ in range(3):
                    method, props, body = ch.basic_get("requeue.qq")
                    assert method is not None and body == b"again", counts
                    counts.append(props.headers["x-delivery-count"])
                    ch.basic_nack(method.delivery_tag, requeue=True)
                assert counts == [0, 1, 2], counts
                ch.queue_purge("requeue.qq")
            finally:
                conn.close()
        n1.channel().queue_delete("requeue.qq")
    finally:
        n1.close()


def test_users_and_vhosts_made_on_one_node_work_on_every_node(
        nodes: list[BrokerProcess]) -> None:
    api(nodes[0], "/api/vhosts/store", "PUT", {})
    api(nodes[0], "/api/users/alice", "PUT", {"password": "s3cret", "tags": ""})
    api(nodes[0], "/api/permissions/store/alice", "PUT",
        {"configure": ".*", "write": ".*", "read": ".*"})

    def alice_on(node: BrokerProcess) -> bool:
        conn = pika.BlockingConnection(pika.ConnectionParameters(
            "127.0.0.1", node.port, "store", pika.PlainCredentials("alice", "s3cret")))
        conn.channel().queue_declare("", exclusive=True)
        conn.close()
        return True

    for node in nodes:
        wait_until(lambda node=node: alice_on(node), f"alice logs in on {node.port}")


def test_a_node_link_without_the_cluster_secret_is_closed(nodes: list[BrokerProcess]) -> None:
    port = int(api(nodes[1], "/api/nodes/n1")["cluster_port"])
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    box = Outbox()
    box.control(("hello", 1, "nonce", "0" * 64))
    sock.sendall(box.take())
    sock.settimeout(5)
    assert sock.recv(100) == b""  # closed by the node (logged), nothing else happened
    sock.close()
    assert all(n.alive for n in nodes)


def test_cluster_status_lists_quorum_queues_with_leader_and_replicas(
        nodes: list[BrokerProcess]) -> None:
    conn = connect(nodes[1])  # declared on n2: n2 leads
    conn.channel().queue_declare("status.qq", durable=True,
                                 arguments={"x-queue-type": "quorum"})
    conn.close()
    wait_until(lambda: len(api(nodes[0], "/api/queues/%2F/status.qq")["in_sync"]) == 3,
               "three in-sync replicas")
    out = ctl(nodes[0], "cluster_status")
    assert out.returncode == 0, out.stderr
    row = next(line.split("\t") for line in out.stdout.splitlines() if "status.qq" in line)
    assert row[:3] == ["/", "status.qq", "n2"] and row[5] == "1"
    assert sorted(row[3].split(",")) == sorted(row[4].split(",")) == ["n1", "n2", "n3"]
    led = api(nodes[1], "/api/queues/%2F/status.qq")  # the leader knows each follower's lag
    assert set(led["replica_lag"]) == {"n1", "n3"}
    for node in nodes:  # replica logs are private to the broker's user, as all its files
        assert list((node.data_dir / "quorum").glob("*.log")), node.data_dir
        for path in [node.data_dir, *node.data_dir.rglob("*")]:
            assert not path.stat().st_mode & 0o077, f"{path} {path.stat().st_mode:o}"


def test_members_are_added_and_removed_and_the_messages_follow(
        nodes: list[BrokerProcess]) -> None:
    conn = connect(nodes[0])
    ch = conn.channel()
    ch.queue_declare("grow.qq", durable=True, arguments={
        "x-queue-type": "quorum", "x-quorum-initial-group-size": 1})
    ch.confirm_delivery()
    for i in range(100):
        ch.basic_publish("", "grow.qq", f"m{i}".encode())
    conn.close()

    def replicas(key: str) -> list[str]:
        return sorted(api(nodes[2], "/api/queues/%2F/grow.qq")[key])

    assert replicas("members") == ["n1"]
    assert ctl(nodes[1], "grow", "n2", "all", "--queue-pattern", r"^grow\.qq$").returncode == 0
    wait_until(lambda: replicas("in_sync") == ["n1", "n2"], "n2 in sync after grow")
    assert ctl(nodes[1], "add_member", "grow.qq", "n3").returncode == 0
    wait_until(lambda: replicas("in_sync") == ["n1", "n2", "n3"], "n3 in sync")
    again = ctl(nodes[1], "add_member", "grow.qq", "n3")
    assert again.returncode != 0 and "already a member" in again.stderr
    assert ctl(nodes[1], "delete_member", "grow.qq", "n1").returncode == 0  # the leader
    wait_until(lambda: replicas("members") == ["n2", "n3"]
               and api(nodes[2], "/api/queues/%2F/grow.qq")["leader"] in ("n2", "n3"),
               "the leader handed over")
    shrunk = ctl(nodes[0], "shrink", "n2")
    assert shrunk.returncode == 0 and "grow.qq\tok" in shrunk.stdout
    wait_until(lambda: replicas("members") == ["n3"], "only n3 left")
    last = ctl(nodes[0], "delete_member", "grow.qq", "n3")
    assert last.returncode != 0 and "only one member" in last.stderr
    conn = connect(nodes[1])
    ch = conn.channel()
    got = [ch.basic_get("grow.qq", auto_ack=True)[2] for _ in range(100)]
    assert got == [f"m{i}".encode() for i in range(100)]
    assert ch.basic_get("grow.qq", auto_ack=True)[0] is None
    conn.close()


def test_a_broken_node_link_is_opened_again(nodes: list[BrokerProcess]) -> None:
    conn = connect(nodes[0])
    conn.channel().queue_declare("relink", durable=True)  # lives on n1
    conn.close()
    port = int(api(nodes[1], "/api/nodes/n1")["cluster_port"])
    cut = subprocess.run(["ss", "-K", "dst", "127.0.0.1", "dport", "=", f":{port}"],
                         capture_output=True, text=True)
    if cut.returncode != 0:
        pytest.skip(f"ss -K cannot close sockets here: {cut.stderr.strip()}")
    pub = connect(nodes[1])
    ch = pub.channel()
    ch.confirm_delivery()

    def published() -> bool:
        ch.basic_publish("", "relink", b"after", pika.BasicProperties(delivery_mode=2))
        return True

    wait_until(published, "a confirm through the link opened again")
    assert "opening it again" in nodes[1].log_path.read_text()
    pub.close()
    assert api(nodes[0], "/api/queues/%2F/relink")["messages"] >= 1


def test_every_nodes_resources_show_on_any_node(nodes: list[BrokerProcess]) -> None:
    """``/api/nodes`` on n1 lists n2 and n3 with their own memory, disk, file descriptors
    and uptime (sent over the node link once a second), as RabbitMQ's does for every node
    (the web UI's Nodes table read '/' and '0m 0s' for them before)."""
    fields = ("mem_used", "mem_limit", "disk_free", "disk_free_limit", "fd_used", "fd_total",
              "uptime")

    def others() -> list[dict[str, object]] | None:
        listed = {n["name"]: n for n in api(nodes[0], "/api/nodes")}
        items = [listed.get(name) for name in ("n2", "n3")]
        if all(item is not None and all(f in item for f in fields) for item in items):
            return items  # type: ignore[return-value]
        return None

    items = wait_until(others, "n2's and n3's figures on n1")
    own = {n: api(node, f"/api/nodes/{n}") for n, node in (("n2", nodes[1]), ("n3", nodes[2]))}
    for item in items:
        assert all(isinstance(item[f], int) and item[f] > 0 for f in fields), item
        assert item["os_pid"] == own[item["name"]]["os_pid"]  # that node's process, not n1's
    assert items[0]["os_pid"] != items[1]["os_pid"]


def test_cluster_status_shows_another_nodes_memory_alarm(
        etcd: Etcd, nodes: list[BrokerProcess], tmp_path_factory: pytest.TempPathFactory) -> None:
    low = cluster_node(tmp_path_factory.mktemp("alarm"), "n4", etcd,
                       "--vm-memory-high-watermark", "1000")  # bytes: in alarm at once
    low.start()
    try:
        def alarms() -> list[str]:
            out = ctl(nodes[0], "cluster_status")
            assert out.returncode == 0, out.stderr
            return out.stdout.split("Alarms")[1].split("Quorum queues")[0].split("\n")

        wait_until(lambda: "Memory alarm on node n4" in alarms(), "n4's alarm on n1")
        assert not any("on node n1" in line for line in alarms())
    finally:
        low.close()

