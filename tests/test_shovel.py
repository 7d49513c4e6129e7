"""Dynamic shovels on real broker processes: a shovel between two queues of one broker, from
one amqpq broker to another with the destination killed -9 mid-transfer (on-confirm: every
message arrives), ``src-delete-after``, the status rows of ``/api/shovels`` (password
masked, ``reason`` when the source cannot be reached), restart, definitions round trip and
the ``amqpqctl`` commands. Validation texts: tests/test_shovel_params.py.

Source: https://www.rabbitmq.com/docs/shovel-dynamic; status fields as RabbitMQ 3.10.8 with
rabbitmq_shovel_management serves them (checked with curl).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiormq
import pika
import pytest

from tests.support.broker_process import BrokerProcess, broker_env, free_port
from tests.support.certs import make_ca, make_leaf
from tests.support.http import http


class Node:
    """A broker process with its management port."""

    def __init__(self, tmp: Path, name: str) -> None:
        self.http = free_port()
        self.proc = BrokerProcess(tmp / name, tmp / f"{name}.log", management=self.http,
                                  log_level="info")

    def api(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """(status, decoded JSON body or None)."""
        return http(f"http://127.0.0.1:{self.http}", method, path, body)

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.proc.port}/%2F"

    def count(self, queue: str) -> int:
        """Messages in ``queue`` as a passive declare sees them (0 when it does not exist)."""
        conn = pika.BlockingConnection(pika.URLParameters(self.url))
        try:
            return int(conn.channel().queue_declare(queue, passive=True).method.message_count)
        except pika.exceptions.ChannelClosedByBroker:
            return 0
        finally:
            if conn.is_open:
                conn.close()

    def shovels(self) -> list[dict[str, Any]]:
        status, rows = self.api("GET", "/api/shovels")
        assert status == 200
        return list(rows)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node(tmp_path, "a")
    n.proc.start()
    yield n
    n.proc.close()


def wait_for(check: Callable[[], Any], timeout: float = 30.0, what: str = "condition",
             describe: Callable[[], str] = lambda: "") -> Any:
    """Poll ``check`` every 0.1 s until it gives a true value (returned)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what} (last: {value!r}; "
                                 f"{describe()})")
        time.sleep(0.1)


def publish(url: str, queue: str, bodies: list[bytes], durable: bool = True) -> None:
    """Declare ``queue`` and publish ``bodies`` to it persistent, confirms pipelined
    (aiormq; pika's blocking confirms take a round trip each)."""

    async def run() -> None:
        conn = await aiormq.connect(url)
        try:
            ch = await conn.channel()
            await ch.queue_declare(queue, durable=durable)
            props = aiormq.spec.Basic.Properties(delivery_mode=2, headers={"h": 1})
            for start in range(0, len(bodies), 1000):
                await asyncio.gather(*(ch.basic_publish(body, routing_key=queue,
                                                        properties=props)
                                       for body in bodies[start:start + 1000]))
        finally:
            await conn.close()

    asyncio.run(run())


def drain(url: str, queue: str) -> list[tuple[bytes, Any]]:
    """Every message of ``queue`` (body, properties), taken with basic.get."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    got = []
    while True:
        method, props, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            break
        got.append((body, props))
    conn.close()
    return got


def put_shovel(node: Node, name: str, value: dict[str, Any], vhost: str = "/") -> int:
    status, _ = node.api("PUT", f"/api/parameters/shovel/{quote(vhost, safe='')}/{name}",
                         {"value": value})
    return status


def test_shovel_between_two_queues_of_one_broker(node: Node) -> None:
    bodies = [f"m{i}".encode() for i in range(500)]
    publish(node.url, "src", bodies)
    assert put_shovel(node, "s1", {"src-uri": "amqp://", "src-queue": "src",
                                   "dest-uri": "amqp://", "dest-queue": "dst",
                                   "dest-add-forward-headers": True,
                                   "dest-add-timestamp-header": True}) == 201
    wait_for(lambda: node.count("dst") == 500 and node.count("src") == 0, what="500 moved")
    got = drain(node.url, "dst")
    assert [b for b, _ in got] == bodies  # in order
    headers = got[0][1].headers
    assert headers["h"] == 1 and isinstance(headers["x-shovelled-timestamp"], int)
    forward = headers["x-shovelled"][0]
    # RabbitMQ 3.10.8's keys (pamqp writes a table's keys sorted, RabbitMQ in this order)
    assert set(forward) == {"shovelled-by", "shovel-type", "shovel-name", "shovel-vhost",
                            "src-uri", "dest-uri", "src-queue", "dest-queue"}
    assert forward["shovel-name"] == "s1" and forward["shovel-type"] == "dynamic"
    assert forward["src-queue"] == "src" and forward["dest-queue"] == "dst"
    assert forward["src-uri"] == "amqp://" and forward["shovel-vhost"] == "/"
    assert got[0][1].delivery_mode == 2
    # a second PUT replaces it (204), the shovel goes on with the new value
    assert put_shovel(node, "s1", {"src-uri": "amqp://", "src-queue": "src",
                                   "dest-uri": "amqp://", "dest-queue": "dst2"}) == 204
    wait_for(lambda: any(r.get("dest_queue") == "dst2" for r in node.shovels()),
             what="the new value running")
    publish(node.url, "src", [b"late"])
    wait_for(lambda: node.count("dst2") == 1, what="the late message in dst2")
    assert node.api("DELETE", "/api/parameters/shovel/%2F/s1")[0] == 204
    wait_for(lambda: node.shovels() == [], what="no shovel left")
    assert node.api("DELETE", "/api/parameters/shovel/%2F/s1")[0] == 404


def test_status_fields_masked_uri_and_restart(node: Node) -> None:
    assert put_shovel(node, "st", {"src-uri": f"amqp://guest:guest@127.0.0.1:{node.proc.port}",
                                   "src-exchange": "amq.topic", "src-exchange-key": "a.#",
                                   "dest-uri": "amqp://", "dest-exchange": "amq.direct",
                                   "dest-exchange-key": "k"}) == 201
    row = wait_for(lambda: [r for r in node.shovels() if r["state"] == "running"],
                   what="running")[0]
    assert row["name"] == "st" and row["vhost"] == "/" and row["type"] == "dynamic"
    assert row["src_uri"] == f"amqp://127.0.0.1:{node.proc.port}"  # no credentials
    assert row["dest_uri"] == "amqp://" and row["src_protocol"] == "amqp091"
    assert row["dest_protocol"] == "amqp091"
    assert (row["src_exchange"], row["src_exchange_key"]) == ("amq.topic", "a.#")
    assert (row["dest_exchange"], row["dest_exchange_key"]) == ("amq.direct", "k")
    assert "src_queue" not in row and "reason" not in row and row["node"]
    assert time.strptime(row["timestamp"], "%Y-%m-%d %H:%M:%S")
    status, one = node.api("GET", "/api/shovels/vhost/%2F/st")
    assert status == 200 and one["name"] == "st"
    assert node.api("GET", "/api/shovels/%2F")[1][0]["name"] == "st"
    assert node.api("GET", "/api/shovels/vhost/%2F/nope")[0] == 404
    assert node.api("DELETE", "/api/shovels/vhost/%2F/nope/restart")[0] == 404
    # routed through amq.topic -> shovel -> amq.direct "k" -> q
    conn = pika.BlockingConnection(pika.URLParameters(node.url))
    ch = conn.channel()
    ch.queue_declare("q")
    ch.queue_bind("q", "amq.direct", "k")
    ch.basic_publish("amq.topic", "a.b", b"x")
    ch.basic_publish("amq.topic", "b.b", b"not matched")
    conn.close()
    wait_for(lambda: node.count("q") == 1, what="the routed message")
    assert node.api("DELETE", "/api/shovels/vhost/%2F/st/restart")[0] == 204
    wait_for(lambda: [r for r in node.shovels() if r["state"] == "running"],
             what="running again")


def test_unreachable_source_is_a_status_with_a_reason(node: Node) -> None:
    dead = free_port()
    assert put_shovel(node, "bad", {"src-uri": f"amqp://u:secretpw@127.0.0.1:{dead}",
                                    "src-queue": "a", "dest-uri": "amqp://",
                                    "dest-queue": "b", "reconnect-delay": 1}) == 201
    row = wait_for(lambda: [r for r in node.shovels() if r["state"] == "terminated"],
                   what="terminated")[0]
    assert "could not connect to source" in row["reason"]
    assert "secretpw" not in json.dumps(node.shovels())
    assert "secretpw" not in node.proc.log_text()
    # after reconnect-delay it tries again (starting), and stays a status, never a crash
    wait_for(lambda: node.proc.log_text().count("could not connect to source") >= 2,
             what="a second attempt")
    assert node.api("GET", "/api/overview")[0] == 200


def test_delete_after_queue_length(node: Node) -> None:
    publish(node.url, "src", [b"%d" % i for i in range(50)])
    assert put_shovel(node, "once", {"src-uri": "amqp://", "src-queue": "src",
                                     "dest-uri": "amqp://", "dest-queue": "dst",
                                     "src-delete-after": "queue-length"}) == 201
    wait_for(lambda: node.api("GET", "/api/parameters/shovel/%2F/once")[0] == 404,
             what="the shovel deleted itself")
    assert node.count("dst") == 50
    publish(node.url, "src", [b"after"])
    time.sleep(0.5)  # nothing may move it any more: give a stray shovel the chance to
    assert node.count("src") == 1 and node.shovels() == []


def test_delete_after_number_and_no_ack(node: Node) -> None:
    publish(node.url, "src", [b"%d" % i for i in range(30)])
    assert put_shovel(node, "ten", {"src-uri": "amqp://", "src-queue": "src",
                                    "dest-uri": "amqp://", "dest-queue": "dst",
                                    "src-delete-after": 10, "ack-mode": "on-publish",
                                    "src-prefetch-count": 4}) == 201
    wait_for(lambda: node.api("GET", "/api/parameters/shovel/%2F/ten")[0] == 404,
             what="the shovel deleted itself")
    wait_for(lambda: node.count("src") == 20, what="20 left (prefetched ones requeued)",
             timeout=10, describe=lambda: f"src {node.count('src')} dst {node.count('dst')}")
    assert node.count("dst") == 10
    assert put_shovel(node, "na", {"src-uri": "amqp://", "src-queue": "src",
                                   "dest-uri": "amqp://", "dest-queue": "dst",
                                   "ack-mode": "no-ack"}) == 201
    wait_for(lambda: node.count("dst") == 30, what="the rest moved with no-ack")


def test_definitions_round_trip_and_restart(node: Node, tmp_path: Path) -> None:
    value = {"src-uri": "amqp://", "src-queue": "src", "dest-uri": "amqp://",
             "dest-queue": "dst", "ack-mode": "on-confirm", "reconnect-delay": 2}
    assert put_shovel(node, "kept", value) == 201
    status, doc = node.api("GET", "/api/definitions")
    assert status == 200
    params = [p for p in doc["parameters"] if p["component"] == "shovel"]
    assert params == [{"value": value, "vhost": "/", "component": "shovel", "name": "kept"}]
    # another broker imports it and runs it
    other = Node(tmp_path, "b")
    other.proc.start()
    try:
        assert other.api("POST", "/api/definitions", doc)[0] in (200, 201, 204)
        wait_for(lambda: [r for r in other.shovels() if r["state"] == "running"],
                 what="the imported shovel running")
        publish(other.url, "src", [b"x"])
        wait_for(lambda: other.count("dst") == 1, what="moved on the importing broker")
    finally:
        other.proc.close()
    # a restart starts it from the stored parameter
    node.proc.restart()
    wait_for(lambda: [r for r in node.shovels() if r["state"] == "running"],
             what="running after a restart")
    publish(node.url, "src", [b"y"])
    wait_for(lambda: node.count("dst") == 1, what="moved after the restart")


MOVED = 10_000  # messages the kill and cut tests move
WINDOW = 500  # their src-prefetch-count: the most a reconnect can deliver twice


@contextmanager
def two_brokers(tmp_path: Path) -> Iterator[tuple[Node, Node]]:
    """Two running amqpq brokers, the first (source) holding :data:`MOVED` messages in
    ``orders``; both closed at the end."""
    src, dest = Node(tmp_path, "src"), Node(tmp_path, "dest")
    src.proc.start()
    dest.proc.start()
    try:
        publish(src.url, "orders", [b"%06d" % i for i in range(MOVED)])
        yield src, dest
    finally:
        src.proc.close()
        dest.proc.close()


def orders_shovel(src_uri: str, dest_uri: str) -> dict[str, Any]:
    """A shovel of ``orders`` to ``orders``, reconnecting after 1 s, :data:`WINDOW` in flight."""
    return {"src-uri": src_uri, "src-queue": "orders", "dest-uri": dest_uri,
            "dest-queue": "orders", "reconnect-delay": 1, "src-prefetch-count": WINDOW}


def assert_every_message_moved(src: Node, dest: Node, most_duplicates: int) -> None:
    """Wait until the source is empty and the destination has every message, then check
    that each arrived and at most ``most_duplicates`` twice."""
    wait_for(lambda: src.count("orders") == 0 and dest.count("orders") >= MOVED,
             timeout=120, what="every message moved")
    got = [body for body, _ in drain(dest.url, "orders")]
    assert set(got) == {b"%06d" % i for i in range(MOVED)}
    assert len(got) - MOVED <= most_duplicates


@pytest.mark.timeout(300)
def test_on_confirm_destination_killed_mid_transfer(tmp_path: Path) -> None:
    """From one amqpq broker to another, on-confirm: the destination is killed -9 while
    messages move and started again; every message ends in the destination queue (some
    twice at most), none is left behind or lost."""
    with two_brokers(tmp_path) as (src, dest):
        dest_uri = f"amqp://guest:guest@127.0.0.1:{dest.proc.port}/%2F"
        assert put_shovel(src, "move", orders_shovel("amqp://", dest_uri)) == 201
        wait_for(lambda: dest.count("orders") > 2000, what="the transfer under way")
        dest.proc.kill()
        dest.proc.start()  # same port, same data dir
        # duplicates: at most the unconfirmed window
        assert_every_message_moved(src, dest, most_duplicates=WINDOW)
        row = wait_for(lambda: [r for r in src.shovels() if r["state"] == "running"],
                       what="running again")[0]
        assert row["dest_uri"] == f"amqp://127.0.0.1:{dest.proc.port}/%2F"
        assert "reconnecting" in src.proc.log_text()


def ctl(node: Node, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "amqpqctl", "--port", str(node.http),
                           *args], capture_output=True, text=True, env=broker_env(),
                          timeout=30)


def test_cli(node: Node) -> None:
    value = json.dumps({"src-uri": "amqp://", "src-queue": "src", "dest-uri": "amqp://",
                        "dest-queue": "dst"})
    res = ctl(node, "set_parameter", "shovel", "c1", value)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith('Setting runtime parameter "c1" for component "shovel"')
    wait_for(lambda: [r for r in node.shovels() if r["state"] == "running"], what="running")
    res = ctl(node, "shovel_status")
    lines = res.stdout.splitlines()
    assert lines[0].startswith("Shovel status on node ")
    assert lines[1].split("\t") == ["destination", "last_changed", "name", "source", "state",
                                    "termination_reason", "type", "vhost"]
    cells = lines[2].split("\t")
    assert cells[0] == "amqp://" and cells[2] == "c1" and cells[4] == "running"
    assert cells[6:] == ["dynamic", "/"]
    rows = json.loads(ctl(node, "shovel_status", "--formatter", "json").stdout)
    assert rows[0]["source_queue"] == "src" and rows[0]["destination_queue"] == "dst"
    listed = ctl(node, "list_parameters").stdout.splitlines()
    assert listed[1:] == ["component\tname\tvalue",
                          f"shovel\tc1\t{json.dumps(json.loads(value), separators=(',', ':'))}"]
    res = ctl(node, "restart_shovel", "c1")
    assert res.returncode == 0 and res.stdout.startswith("Restarting dynamic Shovel c1 in "
                                                         "virtual host / on node ")
    bad = ctl(node, "set_parameter", "shovel", "c2", '{"src-uri": "amqp://"}')
    assert bad.returncode == 1 and "Must specify 'src-exchange' or 'src-queue'" in bad.stderr
    res = ctl(node, "delete_shovel", "c1")
    assert res.returncode == 0 and res.stdout == "Deleting shovel c1 in vhost /\n"
    missing = ctl(node, "delete_shovel", "c1")
    assert missing.returncode == 1
    assert "shovel 'c1' in vhost '/' does not exist" in missing.stderr
    assert ctl(node, "restart_shovel", "c1").returncode == 1
    wait_for(lambda: node.shovels() == [], what="deleted")


def test_workers_run_each_shovel_once(tmp_path: Path) -> None:
    """With --workers 2 worker 0 runs the shovels: one status row, every message once."""
    n = Node(tmp_path, "w")
    n.proc = BrokerProcess(tmp_path / "w", tmp_path / "w.log", management=n.http,
                           log_level="info", args=("--workers", "2"))
    n.proc.start()
    try:
        assert put_shovel(n, "w1", {"src-uri": "amqp://", "src-exchange": "amq.fanout",
                                    "dest-uri": "amqp://", "dest-queue": "dst"}) == 201
        wait_for(lambda: [r for r in n.shovels() if r["state"] == "running"], what="running")
        assert len(n.shovels()) == 1
        conn = pika.BlockingConnection(pika.URLParameters(n.url))
        ch = conn.channel()
        ch.confirm_delivery()
        for i in range(200):
            ch.basic_publish("amq.fanout", "", b"%d" % i)
        conn.close()
        wait_for(lambda: n.count("dst") >= 200, what="200 moved")
        time.sleep(0.5)  # a second shovel (another worker) would add copies by now
        assert sorted(b for b, _ in drain(n.url, "dst")) == sorted(b"%d" % i
                                                                  for i in range(200))
    finally:
        n.proc.close()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")
def test_amqps_destination_with_rabbitmq_uri_parameters(tmp_path: Path) -> None:
    """``amqps://`` with RabbitMQ's query parameters (cacertfile, heartbeat): the
    destination's certificate is verified against that CA."""
    certs = tmp_path / "certs"
    ca = make_ca(certs)
    cert, key = make_leaf(certs, "server", "127.0.0.1")
    n = Node(tmp_path, "t")
    n.proc = BrokerProcess(tmp_path / "t", tmp_path / "t.log", management=n.http,
                           log_level="info", args=("--ssl-port", "0", "--ssl-cert", str(cert),
                                                   "--ssl-key", str(key)))
    n.proc.start()
    try:
        publish(n.url, "src", [b"over tls"])
        dest = (f"amqps://guest:guest@127.0.0.1:{n.proc.tls_port}/%2F?"
                f"cacertfile={quote(str(ca), safe='')}&heartbeat=10")
        assert put_shovel(n, "tls", {"src-uri": "amqp://", "src-queue": "src",
                                     "dest-uri": dest, "dest-queue": "dst"}) == 201
        wait_for(lambda: n.count("dst") == 1, what="moved over TLS")
        row = n.shovels()[0]
        assert row["dest_uri"].startswith(f"amqps://127.0.0.1:{n.proc.tls_port}/%2F?")
        # a CA that did not sign the broker's certificate: refused, a status with a reason
        other = make_ca(tmp_path / "other")
        bad = dest.replace(quote(str(ca), safe=""), quote(str(other), safe=""))
        assert put_shovel(n, "tls", {"src-uri": "amqp://", "src-queue": "src",
                                     "dest-uri": bad, "dest-queue": "dst",
                                     "reconnect-delay": 1}) == 204
        row = wait_for(lambda: [r for r in n.shovels() if r["state"] == "terminated"],
                       what="refused certificate")[0]
        assert "could not connect to destination" in row["reason"]
    finally:
        n.proc.close()


@pytest.mark.timeout(300)
def test_on_confirm_source_killed_mid_transfer(tmp_path: Path) -> None:
    """The shovel runs in the destination and pulls from another amqpq broker, which is
    killed -9 while messages move and started again: every message arrives (what the source
    had delivered but not seen acked comes again, flagged redelivered there)."""
    with two_brokers(tmp_path) as (src, dest):
        assert put_shovel(dest, "pull", orders_shovel(src.url, "amqp://")) == 201
        wait_for(lambda: dest.count("orders") > 2000, what="the transfer under way")
        src.proc.kill()
        row = wait_for(lambda: [r for r in dest.shovels() if r["state"] == "terminated"],
                       what="terminated while the source is down")[0]
        assert row["reason"]
        src.proc.start()  # same port, same data dir
        assert_every_message_moved(src, dest, most_duplicates=WINDOW)


def _cut(port: int) -> None:
    """Abort every TCP connection to ``port`` on loopback (``ss -K``): the client sockets
    fail with ECONNABORTED, as when the network between two brokers is cut."""
    subprocess.run(["ss", "-K", "dst", "127.0.0.1", "dport", "=", f":{port}"],
                   capture_output=True, check=False, timeout=10)


@pytest.mark.timeout(300)
@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2)")
def test_on_confirm_connections_cut(tmp_path: Path) -> None:
    """The shovel's connections are cut (``ss -K``) mid-transfer, to the destination twice
    and to the source once: it reconnects by itself, logs it, and every message arrives."""
    with two_brokers(tmp_path) as (src, dest):
        dest_uri = f"amqp://guest:guest@127.0.0.1:{dest.proc.port}/%2F"
        assert put_shovel(src, "cut", orders_shovel("amqp://", dest_uri)) == 201
        for port, after in ((dest.proc.port, 1500), (dest.proc.port, 4000),
                            (src.proc.port, 6500)):
            wait_for(lambda after=after: dest.count("orders") > after, timeout=60,
                     what=f"more than {after} moved")
            _cut(port)
        assert_every_message_moved(src, dest, most_duplicates=3 * WINDOW)
        assert src.proc.log_text().count("reconnecting in 1 s") >= 2


def test_uri_list_fails_over_to_the_next(node: Node) -> None:
    """With a list of source URIs, a dead first one is skipped after reconnect-delay and
    the status names the URI connected to."""
    dead = f"amqp://guest:guest@127.0.0.1:{free_port()}"
    live = f"amqp://guest:guest@127.0.0.1:{node.proc.port}"
    assert put_shovel(node, "list", {"src-uri": [dead, live], "src-queue": "src",
                                     "dest-uri": "amqp://", "dest-queue": "dst",
                                     "reconnect-delay": 0.5}) == 201
    row = wait_for(lambda: [r for r in node.shovels() if r["state"] == "running"],
                   what="running through the second URI")[0]
    assert row["src_uri"] == f"amqp://127.0.0.1:{node.proc.port}"
    publish(node.url, "src", [b"x"])
    wait_for(lambda: node.count("dst") == 1, what="moved")


def test_source_queue_deleted_restarts_the_shovel(node: Node) -> None:
    """The broker cancels the shovel's consumer when its source queue is deleted: the shovel
    stops with that reason and starts again after reconnect-delay (declaring the queue)."""
    assert put_shovel(node, "del", {"src-uri": "amqp://", "src-queue": "src",
                                    "dest-uri": "amqp://", "dest-queue": "dst",
                                    "reconnect-delay": 1}) == 201
    wait_for(lambda: [r for r in node.shovels() if r["state"] == "running"], what="running")
    assert node.api("DELETE", "/api/queues/%2F/src")[0] == 204
    wait_for(lambda: "consumer cancelled by the source broker" in node.proc.log_text(),
             what="the cancel noticed")
    wait_for(lambda: node.count("src") == 0 and [r for r in node.shovels()
                                                 if r["state"] == "running"],
             what="running again")
    publish(node.url, "src", [b"again"])
    wait_for(lambda: node.count("dst") == 1, what="moved from the new queue")
