"""Federation between two amqpq broker processes (one module-scoped pair: ``up`` is the
upstream, ``down`` federates from it): a federated exchange (the upstream's exchange and
queue, bindings kept in step, ``x-received-from``, a loop of two links that does not echo),
a federated queue (moves messages only while a downstream consumer waits), the status rows of
``/api/federation-links`` (``econnrefused`` for an upstream that is down, no row for a missing
upstream), validation texts, the definitions round trip and ``amqpqctl federation_status``;
on demand (``-m slow``), the upstream killed -9 mid-transfer and the link's connections cut
with ``ss -K``: nothing lost, the link says so and reconnects.

Source: https://www.rabbitmq.com/docs/federation, /docs/federated-exchanges,
/docs/federated-queues; texts and status fields as RabbitMQ 3.10.8 with
rabbitmq_federation_management answers them (checked with curl).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import aiormq
import pika
import pytest

from tests.support.broker_process import broker_env
from tests.test_shovel import Node, drain, wait_for


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Node, Node]]:
    tmp = tmp_path_factory.mktemp("federation")
    up, down = Node(tmp, "up"), Node(tmp, "down")
    up.proc.start()
    down.proc.start()
    yield up, down
    down.proc.close()
    up.proc.close()


def links(node: Node, **match: Any) -> list[dict[str, Any]]:
    status, rows = node.api("GET", "/api/federation-links")
    assert status == 200
    return [r for r in rows if all(r.get(k) == v for k, v in match.items())]


def set_upstream(node: Node, name: str, value: dict[str, Any]) -> None:
    status, body = node.api("PUT", f"/api/parameters/federation-upstream/%2F/{name}",
                            {"value": value})
    assert status in (201, 204), body


def set_policy(node: Node, name: str, pattern: str, definition: dict[str, Any],
               apply_to: str = "all") -> None:
    status, body = node.api("PUT", f"/api/policies/%2F/{name}",
                            {"pattern": pattern, "definition": definition,
                             "apply-to": apply_to, "priority": 1})
    assert status in (201, 204), body


def channel(node: Node) -> tuple[pika.BlockingConnection, Any]:
    conn = pika.BlockingConnection(pika.URLParameters(node.url))
    return conn, conn.channel()


def wait_running(node: Node, **match: Any) -> dict[str, Any]:
    return wait_for(lambda: next((r for r in links(node, **match) if r["status"] == "running"),
                                 None), what=f"running link {match}",
                    describe=lambda: repr(links(node)))


def test_federated_exchange(pair: tuple[Node, Node]) -> None:
    up, down = pair
    tag = uuid.uuid4().hex[:6]
    x, q = f"fx-{tag}", f"fxq-{tag}"
    set_upstream(down, f"u-{tag}", {"uri": up.url, "ack-mode": "on-confirm"})
    conn, ch = channel(down)
    ch.exchange_declare(x, "topic", durable=True)
    ch.queue_declare(q, durable=True)
    ch.queue_bind(q, x, "a.*")
    set_policy(down, f"fed-{tag}", f"^{x}$", {"federation-upstream-set": "all"},
               apply_to="exchanges")
    row = wait_running(down, exchange=x, upstream=f"u-{tag}")
    assert list(row) == ["node", "exchange", "upstream_exchange", "type", "vhost", "upstream",
                         "id", "status", "local_connection", "uri", "timestamp"]
    # the link's connection to this broker, as /api/connections names it
    _, conns = down.api("GET", "/api/connections")
    assert row["local_connection"] in {c["name"] for c in conns}
    assert (row["type"], row["upstream_exchange"], row["vhost"]) == ("exchange", x, "/")
    assert row["uri"] == f"amqp://127.0.0.1:{up.proc.port}/%2F"  # no credentials

    # the upstream has the exchange, the queue and the bindings RabbitMQ's link makes
    status, queues = up.api("GET", "/api/queues/%2F")
    fq = [r for r in queues if r["name"].startswith(f"federation: {x} -> ")]
    assert len(fq) == 1 and fq[0]["durable"] and fq[0]["arguments"] == {
        "x-internal-purpose": "federation"}

    def upstream_keys() -> set[str]:
        _, rows = up.api("GET", f"/api/exchanges/%2F/{quote(x, safe='')}/bindings/source")
        return {r["routing_key"] for r in rows}

    wait_for(lambda: upstream_keys() == {"a.*"}, what="upstream binding a.*",
             describe=lambda: repr(upstream_keys()))
    uconn, uch = channel(up)
    uch.confirm_delivery()
    uch.basic_publish(x, "a.b", b"one", pika.BasicProperties(delivery_mode=2))
    uch.basic_publish(x, "c.d", b"not bound", pika.BasicProperties(delivery_mode=2))
    got = wait_for(lambda: drain(down.url, q), what="federated message")
    assert [b for b, _ in got] == [b"one"]
    entry = got[0][1].headers["x-received-from"][0]
    assert entry["uri"] == f"amqp://127.0.0.1:{up.proc.port}/%2F"
    assert (entry["exchange"], entry["redelivered"], entry["vhost"]) == (x, False, "/")
    assert entry["cluster-name"].startswith("amqpq@")

    # a new local binding reaches the upstream; a removed one leaves it
    ch.queue_bind(q, x, "c.*")
    wait_for(lambda: upstream_keys() == {"a.*", "c.*"}, what="upstream binding c.*",
             describe=lambda: repr(upstream_keys()))
    uch.basic_publish(x, "c.d", b"two", pika.BasicProperties(delivery_mode=2))
    assert [b for b, _ in wait_for(lambda: drain(down.url, q), what="c.d")] == [b"two"]
    ch.queue_unbind(q, x, "a.*")
    wait_for(lambda: upstream_keys() == {"c.*"}, what="upstream unbinding a.*",
             describe=lambda: repr(upstream_keys()))

    # a loop (the upstream federates the same exchange from the downstream): max-hops 1
    # and the cycle check keep a message from coming back
    uq = f"uq-{tag}"
    uch.queue_declare(uq, durable=True)
    uch.queue_bind(uq, x, "c.*")
    set_upstream(up, f"back-{tag}", {"uri": down.url})
    set_policy(up, f"fed-{tag}", f"^{x}$", {"federation-upstream": f"back-{tag}"})
    wait_running(up, exchange=x)
    wait_for(lambda: upstream_keys() == {"c.*"}, what="bindings")
    uch.basic_publish(x, "c.1", b"from-up", pika.BasicProperties(delivery_mode=2))
    ch.confirm_delivery()
    ch.basic_publish(x, "c.2", b"from-down", pika.BasicProperties(delivery_mode=2))
    got_down = wait_for(lambda: len(_peek(down, q)) >= 2 and _peek(down, q), what="down")
    got_up = wait_for(lambda: len(_peek(up, uq)) >= 2 and _peek(up, uq), what="up")
    # a third marker each way, after which an echo would have arrived
    uch.basic_publish(x, "c.3", b"marker-up", pika.BasicProperties(delivery_mode=2))
    ch.basic_publish(x, "c.4", b"marker-down", pika.BasicProperties(delivery_mode=2))
    got_down = wait_for(lambda: len(_peek(down, q)) >= 4 and _peek(down, q), what="down 4")
    got_up = wait_for(lambda: len(_peek(up, uq)) >= 4 and _peek(up, uq), what="up 4")
    assert sorted(got_down) == sorted(got_up) == sorted(
        [b"from-up", b"from-down", b"marker-up", b"marker-down"])
    conn.close()
    uconn.close()
    for node in (up, down):
        node.api("DELETE", f"/api/policies/%2F/fed-{tag}")
    wait_for(lambda: not links(down, exchange=x) and not links(up, exchange=x),
             what="links gone with their policies")

    def leftovers(node: Node) -> list[str]:  # as RabbitMQ 3.10.8, a link stopped for good
        _, qs = node.api("GET", "/api/queues/%2F")  # deletes its upstream queue and exchange
        _, xs = node.api("GET", "/api/exchanges/%2F")
        return [r["name"] for r in qs + xs if r["name"].startswith(f"federation: {x} ")]

    wait_for(lambda: not leftovers(up) and not leftovers(down), what="upstream cleanup",
             describe=lambda: repr(leftovers(up) + leftovers(down)))


def _peek(node: Node, queue: str) -> list[bytes]:
    """The bodies in ``queue``, left there (got and requeued)."""
    conn, ch = channel(node)
    bodies = []
    while True:
        method, _, body = ch.basic_get(queue)
        if method is None:
            break
        bodies.append(body)
    conn.close()  # unacked: requeued
    return bodies


def test_federated_queue_moves_only_to_waiting_consumers(pair: tuple[Node, Node]) -> None:
    up, down = pair
    tag = uuid.uuid4().hex[:6]
    q = f"fq-{tag}"
    uconn, uch = channel(up)
    uch.queue_declare(q, durable=True)
    uch.confirm_delivery()
    for i in range(20):
        uch.basic_publish("", q, f"m{i}".encode(), pika.BasicProperties(delivery_mode=2))
    set_upstream(down, f"qu-{tag}", {"uri": up.url, "prefetch-count": 5})
    conn, ch = channel(down)
    ch.queue_declare(q, durable=True)
    set_policy(down, f"fq-{tag}", f"^{q}$", {"federation-upstream": f"qu-{tag}"},
               apply_to="queues")
    row = wait_running(down, queue=q)
    assert list(row) == ["node", "queue", "upstream_queue", "consumer_tag", "type", "vhost",
                         "upstream", "id", "status", "local_connection", "uri", "timestamp"]
    assert row["consumer_tag"] == f"qu-{tag}".join(["federation-link-", ""])
    assert up.count(q) == 20 and down.count(q) == 0  # no consumer here: nothing moves

    got: list[bytes] = []

    def on_message(c: Any, method: Any, props: Any, body: bytes) -> None:
        got.append(body)
        entry = props.headers["x-received-from"][0]
        assert entry["queue"] == q and entry["visit-count"] == 1
        c.basic_ack(method.delivery_tag)

    ch.basic_qos(prefetch_count=2)
    ch.basic_consume(q, on_message)
    deadline_check = lambda: (conn.process_data_events(0.1), len(got) >= 20)[1]  # noqa: E731
    wait_for(deadline_check, what="20 messages consumed", describe=lambda: f"{len(got)}")
    assert sorted(got) == sorted(f"m{i}".encode() for i in range(20))
    assert up.count(q) == 0
    conn.close()
    uconn.close()
    down.api("DELETE", f"/api/policies/%2F/fq-{tag}")


def test_status_errors_validation_definitions_and_cli(pair: tuple[Node, Node]) -> None:
    _, down = pair
    tag = uuid.uuid4().hex[:6]
    status, body = down.api("PUT", "/api/parameters/federation-upstream/%2F/bad",
                            {"value": {"uri": "foo://x", "max-hops": "a", "bogus": 1}})
    assert (status, body["reason"]) == (400, (
        "Validation failed\n\nUnrecognised terms [{&lt;&lt;\"bogus\"&gt;&gt;,1}] in bad\n"
        "max-hops should be a number, actually was &lt;&lt;\"a\"&gt;&gt;\n"
        "\"foo://x\" not a valid URI: {{unexpected_uri_scheme,\"foo\"},\"foo://x\"}\n"))
    status, body = down.api("PUT", "/api/parameters/federation-upstream-set/%2F/s",
                            {"value": [{"max-hops": 2}]})
    assert (status, body["reason"]) == (400, "Validation failed\n\nKey \"upstream\" not "
                                             "found in s\n")
    x_dead, x_missing = f"dead-{tag}", f"missing-{tag}"
    set_upstream(down, f"dead-{tag}", {"uri": "amqp://guest:secret@127.0.0.1:1",
                                       "reconnect-delay": 1})
    conn, ch = channel(down)
    ch.exchange_declare(x_dead, "fanout")
    ch.exchange_declare(x_missing, "fanout")
    set_policy(down, f"d-{tag}", f"^{x_dead}$", {"federation-upstream": f"dead-{tag}"})
    set_policy(down, f"m-{tag}", f"^{x_missing}$", {"federation-upstream": "nosuch"})
    row = wait_for(lambda: next((r for r in links(down, exchange=x_dead)
                                 if r["status"] == "error"), None), what="error row")
    assert row["error"] == "econnrefused" and row["uri"] == "amqp://127.0.0.1:1"
    assert not links(down, exchange=x_missing)  # as RabbitMQ: no link, a logged warning
    assert f"Federation exchange '{x_missing}' in vhost '/': no upstream 'nosuch'" \
        in down.proc.log_text()
    assert "secret" not in down.proc.log_text()

    status, doc = down.api("GET", "/api/definitions")
    assert {"vhost": "/", "component": "federation-upstream", "name": f"dead-{tag}",
            "value": {"uri": "amqp://guest:secret@127.0.0.1:1", "reconnect-delay": 1}} \
        in doc["parameters"]
    assert any(p["definition"] == {"federation-upstream": f"dead-{tag}"}
               for p in doc["policies"])
    # an import is validated as a PUT is (RabbitMQ 3.10.8's reason, with where), and an
    # upstream set imported is kept
    status, body = down.api("POST", "/api/definitions", {"parameters": [
        {"vhost": "/", "component": "federation-upstream", "name": "bad-imp",
         "value": {"uri": "foo://x"}}]})
    assert (status, body["reason"]) == (400, (
        'Validation failed\n\n"foo://x" not a valid URI: {{unexpected_uri_scheme,"foo"},'
        '"foo://x"}\n (//federation-upstream/bad-imp)'))
    status, _ = down.api("POST", "/api/definitions", {"parameters": [
        {"vhost": "/", "component": "federation-upstream-set", "name": f"set-{tag}",
         "value": [{"upstream": f"dead-{tag}", "max-hops": 2}]}]})
    assert status == 204
    status, row = down.api("GET", f"/api/parameters/federation-upstream-set/%2F/set-{tag}")
    assert (status, row["value"]) == (200, [{"upstream": f"dead-{tag}", "max-hops": 2}])
    assert down.api("DELETE", f"/api/parameters/federation-upstream-set/%2F/set-{tag}")[0] == 204

    out = subprocess.run(
        [sys.executable, "-m", "amqpqctl", "--port", str(down.http), "federation_status",
         "--formatter", "json"], capture_output=True, text=True, env=broker_env(), timeout=60)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    mine = [r for r in rows if r.get("exchange") == x_dead]
    assert mine and mine[0]["status"] == "error" and mine[0]["upstream"] == f"dead-{tag}"
    out = subprocess.run(
        [sys.executable, "-m", "amqpqctl", "--port", str(down.http), "restart_federation_link",
         mine[0]["id"]], capture_output=True, text=True, env=broker_env(), timeout=60)
    assert out.returncode == 0, out.stderr
    conn.close()
    for p in (f"d-{tag}", f"m-{tag}"):
        down.api("DELETE", f"/api/policies/%2F/{p}")
    assert down.api("DELETE", f"/api/parameters/federation-upstream/%2F/dead-{tag}")[0] == 204


def _publish_to_exchange(url: str, exchange: str, key: str, bodies: list[bytes]) -> None:
    """Persistent publishes to ``exchange``, confirms pipelined (aiormq)."""

    async def run() -> None:
        conn = await aiormq.connect(url)
        try:
            ch = await conn.channel()
            props = aiormq.spec.Basic.Properties(delivery_mode=2)
            for start in range(0, len(bodies), 500):
                await asyncio.gather(*(ch.basic_publish(b, exchange=exchange, routing_key=key,
                                                        properties=props)
                                       for b in bodies[start:start + 500]))
        finally:
            await conn.close()

    asyncio.run(run())


@pytest.mark.slow  # ~9 s with the upstream's restart (-m slow); the link's kill tests are
# tests/test_shovel.py's, in the default run
def test_upstream_killed_mid_transfer_loses_nothing(pair: tuple[Node, Node]) -> None:
    """on-confirm: the upstream amqpq is killed -9 while the link moves messages; the link
    says so (status ``error``, a log line), reconnects by itself once the upstream is back,
    and every message arrives (duplicates only of what was in flight). Last in the module:
    it restarts the shared upstream."""
    up, down = pair
    tag = uuid.uuid4().hex[:6]
    try:
        x, q, n = f"orders-{tag}", f"orders.site-b-{tag}", 1000
        set_upstream(down, f"site-a-{tag}", {"uri": up.url, "reconnect-delay": 1,
                                      "prefetch-count": 200})
        conn, ch = channel(down)
        ch.exchange_declare(x, "direct", durable=True)
        ch.queue_declare(q, durable=True)
        ch.queue_bind(q, x, "new")
        conn.close()
        set_policy(down, f"fed-{tag}", f"^{x}$", {"federation-upstream": f"site-a-{tag}"})
        wait_running(down, exchange=x)
        uconn, uch = channel(up)  # the link has bound the upstream exchange
        uch.exchange_declare(x, "direct", durable=True, passive=True)
        uconn.close()
        wait_for(lambda: any(r["routing_key"] == "new" for r in up.api(
            "GET", f"/api/exchanges/%2F/{x}/bindings/source")[1]), what="upstream binding")
        bodies = [f"order-{i}".encode() for i in range(n)]
        _publish_to_exchange(up.url, x, "new", bodies)  # confirmed: in the upstream queue
        wait_for(lambda: down.count(q) > 0, timeout=60, what="transfer started")
        up.proc.kill()
        row = wait_for(lambda: next((r for r in links(down, exchange=x)
                                     if r["status"] == "error"), None), what="error row")
        assert row["upstream"] == f"site-a-{tag}" and row["error"]
        up.proc.start()
        wait_running(down, exchange=x)
        got: list[bytes] = []

        def everything() -> bool:
            got.extend(m for m, _ in drain(down.url, q))
            return set(got) >= set(bodies)

        wait_for(everything, timeout=120, what=f"all {n} messages",
                 describe=lambda: f"{len(set(got))} distinct")
        assert set(got) == set(bodies) and len(got) - n <= 200  # duplicates: the window
        log = down.proc.log_text()
        what = f"Federation link for exchange '{x}' in vhost '/' (upstream: site-a-{tag}"
        assert f"{what}, amqp://127.0.0.1:{up.proc.port}/%2F) failed: " in log
        assert "reconnecting in 1 s" in log
        assert log.count(f"{what}, amqp://127.0.0.1:{up.proc.port}/%2F) is running") >= 2
    finally:
        if not up.proc.alive():
            up.proc.start()
        down.api("DELETE", f"/api/policies/%2F/fed-{tag}")


@pytest.mark.slow  # on demand, as the kill test
@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2)")
def test_connections_cut_mid_transfer_lose_nothing(pair: tuple[Node, Node]) -> None:
    """The link's connections are cut (``ss -K``) mid-transfer, to the upstream twice and to
    the downstream once: it reconnects by itself and every message arrives (on-confirm)."""
    up, down = pair
    tag = uuid.uuid4().hex[:6]
    x, q, n = f"cut-{tag}", f"cut.q-{tag}", 6000
    set_upstream(down, f"cut-{tag}", {"uri": up.url, "reconnect-delay": 1,
                                      "prefetch-count": 200})
    conn, ch = channel(down)
    ch.exchange_declare(x, "direct", durable=True)
    ch.queue_declare(q, durable=True)
    ch.queue_bind(q, x, "k")
    conn.close()
    set_policy(down, f"cut-{tag}", f"^{x}$", {"federation-upstream": f"cut-{tag}"})
    wait_running(down, exchange=x)
    wait_for(lambda: any(r["routing_key"] == "k" for r in up.api(
        "GET", f"/api/exchanges/%2F/{x}/bindings/source")[1]), what="upstream binding")
    bodies = [f"c-{i}".encode() for i in range(n)]

    def publish() -> None:  # pika (one confirm at a time): spread over the cuts
        pconn, pch = channel(up)
        pch.confirm_delivery()
        for body in bodies:
            pch.basic_publish(x, "k", body, pika.BasicProperties(delivery_mode=2))
        pconn.close()

    def cut(node: Node) -> None:
        """Abort the link's connection to ``node`` only (aiormq's; the test's are pika's)."""
        _, conns = node.api("GET", "/api/connections")
        for c in conns:
            if "aiormq" in str(c.get("client_properties", {}).get("product", "")).lower():
                subprocess.run(["ss", "-K", "dst", "127.0.0.1", "dport", "=",
                                f":{node.proc.port}", "sport", "=", f":{c['peer_port']}"],
                               capture_output=True, check=False, timeout=10)

    publisher = threading.Thread(target=publish)
    publisher.start()  # the cuts land while messages are still being published and moved
    got: list[bytes] = []

    def taken() -> int:
        got.extend(m for m, _ in drain(down.url, q))
        return len(set(got))

    try:
        for node, after in ((up, 500), (up, 2500), (down, 4500)):
            wait_for(lambda after=after: down.count(q) > after, timeout=60,
                     what=f"more than {after} moved")
            cut(node)
            wait_for(lambda: links(down, exchange=x, status="running"), what="running again")
        publisher.join(timeout=120)
        wait_for(lambda: taken() >= n, timeout=120, what=f"all {n} messages",
                 describe=lambda: f"{len(set(got))} distinct")
        assert set(got) == set(bodies) and len(got) - n <= 3 * 200
        what = f"Federation link for exchange '{x}' in vhost '/' (upstream: cut-{tag}"
        assert down.proc.log_text().count(f"{what}, amqp://127.0.0.1:{up.proc.port}/%2F) "
                                          "failed:") >= 2  # each failure logged
    finally:
        down.api("DELETE", f"/api/policies/%2F/cut-{tag}")
