"""The node link as an attacker meets it (security issue #28), against a real node and etcd:
a replayed hello, hub records from a peer, a huge or missing or malformed hello, too many
half-open links, and TLS between nodes (mutual certificates). Skipped without etcd."""

from __future__ import annotations

import os
import re
import select
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

from amqp_server.cluster.link_hello import Dialler, link_mac
from amqp_server.workers.link_codec import CONTROL, Outbox, RecordReader, read_control
from tests.support.broker_process import BrokerProcess
from tests.support.certs import OPENSSL, make_ca, make_leaf
from tests.support.cluster import api, cluster_node, connect, wait_until
from tests.support.etcd import ETCD, running_etcd

pytest.importorskip("aetcd")
pytestmark = pytest.mark.skipif(ETCD is None, reason="etcd not installed (make etcd-deps)")

SECRET = b"issue-28-cluster-secret"
HELLO_TIMEOUT = 1.0  # seconds (AMQPQ_NODE_HELLO_TIMEOUT of the node under attack)
FAKE = 7  # the index the fake peer claims


class Node:
    """n1 under attack: its process, index and cluster port."""

    def __init__(self, proc: BrokerProcess) -> None:
        self.proc = proc
        found = re.search(r"node n1: index (\d+), node links on \S+:(\d+)", self.log())
        assert found is not None, self.log()
        self.index, self.port = int(found[1]), int(found[2])

    def log(self) -> str:
        return self.proc.log_path.read_text()


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    base = tmp_path_factory.mktemp("linksec")
    secret = base / "secret"
    secret.write_text(SECRET.decode() + "\n")
    with running_etcd(base) as etcd, pytest.MonkeyPatch.context() as env:
        env.setenv("AMQPQ_NODE_HELLO_TIMEOUT", str(HELLO_TIMEOUT))
        proc = cluster_node(base, "n1", etcd, "--cluster-secret-file", str(secret)).start()
        try:
            yield Node(proc)
        finally:
            proc.close()


def records(*recs: tuple[Any, ...]) -> bytes:
    box = Outbox()
    for rec in recs:
        box.control(rec)
    return box.take()


def read_record(sock: socket.socket, timeout: float = 5.0) -> tuple[Any, ...] | None:
    """The next control record from ``sock``; None when it closed first."""
    reader = RecordReader()
    sock.settimeout(timeout)
    while True:
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            return None
        if not data:
            return None
        got = reader.feed(data)
        if got:
            assert got[0][0] == CONTROL
            return read_control(got[0][1])


def closed(sock: socket.socket, timeout: float = 5.0) -> bool:
    """True once the node closed ``sock`` (EOF or reset), False after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if select.select([sock], [], [], 0.05)[0]:
            try:
                if sock.recv(65536) == b"":
                    return True
            except OSError:
                return True
    return False


def hello(node: Node) -> tuple[socket.socket, Dialler, tuple[Any, ...]]:
    """A link to ``node`` whose hello got its challenge: (socket, dialler, challenge)."""
    sock = socket.create_connection(("127.0.0.1", node.port), timeout=5)
    dialler = Dialler(SECRET, FAKE, node.index, os.urandom(16).hex())
    sock.sendall(records(dialler.opening()))
    challenge = read_record(sock)
    assert challenge is not None and challenge[0] == "challenge"
    return sock, dialler, challenge


def users(node: Node) -> set[str]:
    return {u["name"] for u in api(node.proc, "/api/users")}


def admin_document(node: Node, name: str) -> dict[str, Any]:
    """n1's own access document (api/definitions) plus administrator ``name``."""
    doc = api(node.proc, "/api/definitions")
    doc["users"].append({"name": name, "password_hash": doc["users"][0]["password_hash"],
                         "hashing_algorithm": "rabbit_password_hashing_sha256",
                         "tags": ["administrator"], "limits": {}})
    doc["permissions"].append({"user": name, "vhost": "/", "configure": ".*",
                               "write": ".*", "read": ".*"})
    doc["queues"], doc["exchanges"], doc["bindings"] = [], [], []
    return doc


def test_a_replayed_proof_is_refused_and_its_records_are_not_applied(node: Node) -> None:
    first, dialler, challenge = hello(node)
    # the node proved the secret too (mutual): its MAC names both nodes and both nonces
    assert challenge[2] == link_mac(SECRET, "accept", FAKE, node.index, dialler.nonce,
                                    challenge[1])
    proof = dialler.answer(challenge)  # a valid answer to this link's challenge only
    second = socket.create_connection(("127.0.0.1", node.port), timeout=5)
    second.sendall(records(dialler.opening()))  # the same hello, replayed
    again = read_record(second)
    assert again is not None and again[1] != challenge[1]  # a fresh challenge
    second.sendall(records(proof, ("apply", -1, 0, ("access", admin_document(node, "eve")))))
    assert closed(second)
    wait_until(lambda: "link from 127.0.0.1" in node.log() and
               f"refused: node {FAKE} did not prove the cluster secret" in node.log(),
               "the refusal logged")
    first.close()
    second.close()
    assert "eve" not in users(node)
    assert proof[1] not in node.log() and dialler.nonce not in node.log()
    assert SECRET.decode() not in node.log()


def test_a_hub_record_from_a_peer_is_ignored_and_logged_once(node: Node) -> None:
    sock, dialler, challenge = hello(node)  # a peer that knows the secret
    doc = admin_document(node, "mallory")
    sock.sendall(records(dialler.answer(challenge),
                         ("apply", -1, 0, ("access", doc)),
                         ("apply", FAKE, 1, ("access", doc)),
                         ("peer_up", FAKE), ("synced",)))
    wait_until(lambda: "'apply' record from peer 7 ignored" in node.log(),
               "the dropped record logged")
    assert not closed(sock, 0.3)  # the link itself is a peer's: it stays
    sock.close()
    assert "mallory" not in users(node)
    assert node.log().count("record from peer 7 ignored") == 1  # once per peer
    conn = connect(node.proc)  # the node is fine
    conn.channel().queue_declare("after-mallory")
    conn.close()


def test_a_64_mib_record_before_the_hello_closes_the_link_at_once(node: Node) -> None:
    sock = socket.create_connection(("127.0.0.1", node.port), timeout=5)
    sent = 0
    sock.sendall((64 << 20).to_bytes(4, "big") + bytes([CONTROL]))
    while not closed(sock, 0.1):
        assert sent < 64 * 1024, "the node is still reading a 64 MiB hello"
        try:
            sock.sendall(b"\0" * 4096)
        except OSError:  # reset by the node
            break
        sent += 4096
    sock.close()
    wait_until(lambda: "record length 67108864 out of range (at most 4096)" in node.log(),
               "the refusal logged")
    conn = connect(node.proc)  # still serving AMQP
    ch = conn.channel()
    ch.queue_declare("after-big", exclusive=True)
    ch.basic_publish("", "after-big", b"ok")
    assert ch.basic_get("after-big", auto_ack=True)[2] == b"ok"
    conn.close()


def test_a_silent_peer_is_closed_after_the_hello_timeout(node: Node) -> None:
    sock = socket.create_connection(("127.0.0.1", node.port), timeout=5)
    t0 = time.monotonic()
    assert closed(sock, 10 * HELLO_TIMEOUT)
    assert HELLO_TIMEOUT * 0.9 <= time.monotonic() - t0 < 5 * HELLO_TIMEOUT
    sock.close()
    wait_until(lambda: f"no hello within {HELLO_TIMEOUT:.1f} s" in node.log(),
               "the timeout logged")


@pytest.mark.parametrize("garbage", [
    (1).to_bytes(4, "big") + bytes([CONTROL]) + b"",  # length 1: an empty control record
    (9).to_bytes(4, "big") + bytes([CONTROL]) + b"not json",
    records(("hello", "x", [], None)),
    records(("hello", FAKE, 1 << 40, "0" * 32)),
    (5).to_bytes(4, "big") + b"\x01abcd",  # a PUBLISH before any hello
])
def test_a_malformed_hello_is_one_log_line_and_no_traceback(node: Node,
                                                            garbage: bytes) -> None:
    before = node.log().count("refused:")
    sock = socket.create_connection(("127.0.0.1", node.port), timeout=5)
    sock.sendall(garbage)
    assert closed(sock)
    sock.close()
    wait_until(lambda: node.log().count("refused:") == before + 1, "one refusal line")
    assert "Traceback" not in node.log()


def test_links_that_never_say_hello_are_capped(node: Node) -> None:
    socks = [socket.create_connection(("127.0.0.1", node.port), timeout=5) for _ in range(70)]
    try:
        wait_until(lambda: "64 node links have not completed their hello" in node.log(),
                   "the cap reached and logged")
    finally:
        for sock in socks:
            sock.close()


# ---- TLS -------------------------------------------------------------------------------

@pytest.mark.skipif(OPENSSL is None, reason="no openssl command")
def test_nodes_link_over_mutual_tls_and_refuse_others(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    ca = make_ca(certs)
    node_cert, node_key = make_leaf(certs, "node", "amqpq-node")
    make_ca(certs, "other")
    rogue_cert, rogue_key = make_leaf(certs, "rogue", "amqpq-node", ca="other")

    def tls(cert: Path, key: Path) -> tuple[str, ...]:
        return ("--cluster-tls-cert", str(cert), "--cluster-tls-key", str(key),
                "--cluster-tls-cacert", str(ca))

    with running_etcd(tmp_path) as etcd:
        nodes = [cluster_node(tmp_path, name, etcd, *tls(node_cert, node_key))
                 for name in ("n1", "n2")]
        rogue = cluster_node(tmp_path, "n3", etcd, *tls(rogue_cert, rogue_key))
        try:
            for n in nodes:
                n.start()
            c1, c2 = connect(nodes[0]), connect(nodes[1])
            c1.channel().queue_declare("tls.q", durable=True)  # lives on n1
            pub = c2.channel()
            pub.queue_declare("tls.q", passive=True)  # n2 caught up with etcd
            pub.confirm_delivery()
            for i in range(50):  # n2 -> n1 over TLS, confirmed
                pub.basic_publish("", "tls.q", f"m{i}".encode(),
                                  pika.BasicProperties(delivery_mode=2))
            got = [pub.basic_get("tls.q", auto_ack=True)[2] for _ in range(50)]
            assert got == [f"m{i}".encode() for i in range(50)]  # n1 -> n2 over TLS
            c1.close()
            c2.close()

            port = Node(nodes[0]).port
            plain = socket.create_connection(("127.0.0.1", port), timeout=5)
            plain.sendall(records(("hello", FAKE, 0, "0" * 32)))
            plain.settimeout(5)
            try:
                answer = plain.recv(4096)
            except ConnectionResetError:
                answer = b""
            assert answer == b"" or answer[0] == 0x15  # at most a TLS alert, no challenge
            plain.close()

            context = ssl.create_default_context(cafile=str(ca))
            context.check_hostname = False  # a TLS client without a certificate
            with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
                try:
                    with context.wrap_socket(raw) as wrapped:
                        wrapped.sendall(records(("hello", FAKE, 0, "0" * 32)))
                        answer = wrapped.recv(4096)
                except OSError:  # ssl.SSLError: certificate required
                    answer = b""
                assert answer == b""

            rogue.start()  # a certificate from another CA: no link either way
            # (it trusts the cluster's CA, so it sees its own links closed by n1 and n2)
            wait_until(lambda: "cannot link to worker 0" in rogue.log_path.read_text(),
                       "the rogue node's links refused")
            wait_until(lambda: "certificate verify failed" in nodes[0].log_path.read_text(),
                       "n1 refuses to link to the rogue node")
        finally:
            for n in [*nodes, rogue]:
                n.close()
