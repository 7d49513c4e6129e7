"""Federation against the reference RabbitMQ 3.10.8 (``make reference-rabbitmq``: the
federation plugins enabled; every test here is skipped when it is not reachable):

* a federated exchange from RabbitMQ to amqpq (amqpq's link declares RabbitMQ's upstream
  queue and ``x-federation-upstream`` exchange) and from amqpq to RabbitMQ (RabbitMQ's link
  declares them on amqpq);
* a federated queue both ways (a downstream consumer gets the upstream queue's messages);
* the same upstream and policy definitions created through the HTTP API on RabbitMQ and on
  amqpq behave the same: the same validation texts, the messages arrive at both, and
  ``/api/federation-links`` rows with the same fields and values (running, and ``error``
  ``econnrefused`` for an upstream that is down).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlsplit

import pika
import pytest

from tests.support.reference import REFERENCE_AMQP, ref_api, require_reference
from tests.test_shovel import Node, drain, wait_for

pytestmark = pytest.mark.reference


@pytest.fixture(scope="module", autouse=True)
def reference() -> None:
    require_reference("/api/federation-links", "rabbitmq_federation_management")


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    n = Node(tmp_path_factory.mktemp("fedref"), "a")
    n.proc.start()
    yield n
    n.proc.close()


class Broker:
    """One side (RabbitMQ or amqpq) through its HTTP API and AMQP URL."""

    def __init__(self, api: Any, url: str) -> None:
        self.api, self.url = api, url

    def put(self, path: str, body: Any) -> None:
        status, reply = self.api("PUT", path, body)
        assert status in (201, 204), (path, reply)

    def links(self, **match: Any) -> list[dict[str, Any]]:
        status, rows = self.api("GET", "/api/federation-links")
        assert status == 200
        return [r for r in rows if all(r.get(k) == v for k, v in match.items())]

    def link(self, status: str, **match: Any) -> dict[str, Any]:
        return wait_for(lambda: next((r for r in self.links(**match)
                                      if r["status"] == status), None),
                        what=f"{status} link {match}", describe=lambda: repr(self.links()))

    def setup_downstream(self, tag: str, upstream_uri: str, exchange: str, queue: str,
                         upstream_exchange: str | None = None) -> None:
        value: dict[str, Any] = {"uri": upstream_uri}
        if upstream_exchange:
            value["exchange"] = upstream_exchange
        self.put(f"/api/parameters/federation-upstream/%2F/up-{tag}", {"value": value})
        self.put(f"/api/exchanges/%2F/{exchange}", {"type": "topic", "durable": True})
        self.put(f"/api/queues/%2F/{queue}", {"durable": True})
        status, reply = self.api("POST", f"/api/bindings/%2F/e/{exchange}/q/{queue}",
                                 {"routing_key": "k.*"})
        assert status == 201, reply
        self.put(f"/api/policies/%2F/fed-{tag}", {
            "pattern": f"^{exchange}$", "definition": {"federation-upstream": f"up-{tag}"},
            "apply-to": "exchanges", "priority": 7})

    def publish(self, exchange: str, key: str, body: str) -> None:
        conn = pika.BlockingConnection(pika.URLParameters(self.url))
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish(exchange, key, body.encode(), pika.BasicProperties(delivery_mode=2))
        conn.close()

    def take(self, queue: str) -> list[tuple[bytes, Any]]:
        return drain(self.url, queue)

    def cleanup(self, tag: str) -> None:
        self.api("DELETE", f"/api/policies/%2F/fed-{tag}")
        self.api("DELETE", f"/api/parameters/federation-upstream/%2F/up-{tag}")
        self.api("DELETE", f"/api/parameters/federation-upstream/%2F/dead-{tag}")
        _, queues = self.api("GET", "/api/queues/%2F")
        for q in queues or []:
            if tag in q["name"]:
                self.api("DELETE", f"/api/queues/%2F/{quote(q['name'], safe='')}")
        _, exchanges = self.api("GET", "/api/exchanges/%2F")
        for x in exchanges or []:
            if tag in x["name"]:
                self.api("DELETE", f"/api/exchanges/%2F/{quote(x['name'], safe='')}")


@pytest.fixture
def rabbit() -> Broker:
    return Broker(ref_api, REFERENCE_AMQP)


@pytest.fixture
def amqpq(node: Node) -> Broker:
    return Broker(node.api, node.url)


def upstream_uri(url: str) -> str:
    return url.rsplit("/", 1)[0]  # amqp://guest:guest@host:port (vhost "/" by default)


def test_federated_exchange_from_rabbitmq_to_amqpq(rabbit: Broker, amqpq: Broker) -> None:
    tag = uuid.uuid4().hex[:8]
    x, q = f"fx-{tag}", f"fq-{tag}"
    try:
        rabbit.put(f"/api/exchanges/%2F/{x}", {"type": "topic", "durable": True})
        amqpq.setup_downstream(tag, upstream_uri(REFERENCE_AMQP), x, q)
        amqpq.link("running", exchange=x)
        # RabbitMQ has the queue and the internal exchange amqpq's link declared
        wait_for(lambda: any(b["destination"].startswith(f"federation: {x} -> ")
                             and b["routing_key"] == "k.*"
                             for b in ref_api("GET", f"/api/exchanges/%2F/{x}/bindings/"
                                                     "source")[1]),
                 what="binding k.* on RabbitMQ")
        rabbit.publish(x, "k.1", "from rabbit")
        rabbit.publish(x, "other", "not bound")
        got = wait_for(lambda: amqpq.take(q), what="message in amqpq")
        assert [b for b, _ in got] == [b"from rabbit"]
        entry = got[0][1].headers["x-received-from"][0]
        assert entry["cluster-name"] == "rabbit@" + entry["cluster-name"].split("@")[1]
        assert entry["uri"] == "amqp://127.0.0.1:5672" and entry["vhost"] == "/"
    finally:
        amqpq.cleanup(tag)
        rabbit.cleanup(tag)


def test_federated_exchange_from_amqpq_to_rabbitmq(rabbit: Broker, amqpq: Broker) -> None:
    tag = uuid.uuid4().hex[:8]
    x, q = f"fx-{tag}", f"fq-{tag}"
    try:
        amqpq.put(f"/api/exchanges/%2F/{x}", {"type": "topic", "durable": True})
        rabbit.setup_downstream(tag, upstream_uri(amqpq.url), x, q)
        rabbit.link("running", exchange=x)
        # amqpq has what RabbitMQ's link declared: the x-federation-upstream exchange
        status, exchanges = amqpq.api("GET", "/api/exchanges/%2F")
        internal = [e for e in exchanges if e["name"].startswith(f"federation: {x} -> ")]
        assert len(internal) == 1 and internal[0]["type"] == "x-federation-upstream"
        assert internal[0]["internal"] and internal[0]["arguments"]["x-max-hops"] == 1
        wait_for(lambda: any(b["routing_key"] == "k.*" for b in amqpq.api(
            "GET", f"/api/exchanges/%2F/{x}/bindings/source")[1]), what="binding on amqpq")
        amqpq.publish(x, "k.1", "from amqpq")
        amqpq.publish(x, "other", "not bound")
        got = wait_for(lambda: rabbit.take(q), what="message in RabbitMQ")
        assert [b for b, _ in got] == [b"from amqpq"]
        entry = got[0][1].headers["x-received-from"][0]
        assert entry["cluster-name"].startswith("amqpq@")  # amqpq's server properties
    finally:
        rabbit.cleanup(tag)
        amqpq.cleanup(tag)


def test_same_definitions_same_behaviour(rabbit: Broker, amqpq: Broker) -> None:
    """The same PUTs on both brokers; both federate the same amqpq exchange."""
    tag = uuid.uuid4().hex[:8]
    src, x, q = f"src-{tag}", f"fx-{tag}", f"fq-{tag}"
    bad = {"value": {"uri": "foo://x", "max-hops": "a", "bogus": 1}}
    answers = [b.api("PUT", f"/api/parameters/federation-upstream/%2F/bad-{tag}", bad)
               for b in (rabbit, amqpq)]
    assert answers[0] == answers[1] and answers[0][0] == 400
    bad_policy = {"pattern": "^x$", "definition": {"federation-upstream": "a",
                                                    "federation-upstream-set": "b"}}
    answers = [b.api("PUT", f"/api/policies/%2F/bad-{tag}", bad_policy) for b in (rabbit, amqpq)]
    assert answers[0] == answers[1] and answers[0][0] == 400
    try:
        amqpq.put(f"/api/exchanges/%2F/{src}", {"type": "topic", "durable": True})
        for b in (rabbit, amqpq):
            b.setup_downstream(tag, upstream_uri(amqpq.url), x, q, upstream_exchange=src)
        rows = [b.link("running", exchange=x) for b in (rabbit, amqpq)]
        ignore = {"local_channel", "node", "id", "timestamp", "local_connection"}
        assert [k for k in rows[0] if k != "local_channel"] == list(rows[1])  # same order
        assert rows[1]["local_connection"].endswith(f" -> 127.0.0.1:{urlsplit(amqpq.url).port}")
        assert {k: v for k, v in rows[0].items() if k not in ignore} == \
            {k: v for k, v in rows[1].items() if k not in ignore}
        assert rows[1]["upstream_exchange"] == src
        wait_for(lambda: sum(r["routing_key"] == "k.*" for r in amqpq.api(  # both links'
            "GET", f"/api/exchanges/%2F/{src}/bindings/source")[1]) == 2,
            what="two upstream bindings")
        amqpq.publish(src, "k.x", "to both")
        for b in (rabbit, amqpq):
            got = wait_for(lambda b=b: b.take(q), what="message")
            assert [m for m, _ in got] == [b"to both"]

        # an upstream that is down: the same error row on both
        for b in (rabbit, amqpq):
            b.put(f"/api/parameters/federation-upstream/%2F/dead-{tag}",
                  {"value": {"uri": "amqp://guest:guest@127.0.0.1:1"}})
            b.put(f"/api/policies/%2F/fed-{tag}", {
                "pattern": f"^{x}$", "definition": {"federation-upstream": f"dead-{tag}"},
                "apply-to": "exchanges", "priority": 7})
        rows = [b.link("error", exchange=x) for b in (rabbit, amqpq)]
        assert {k: v for k, v in rows[0].items() if k not in ignore} == \
            {k: v for k, v in rows[1].items() if k not in ignore}
        assert rows[1]["error"] == "econnrefused"
    finally:
        for b in (rabbit, amqpq):
            b.cleanup(tag)


@pytest.mark.parametrize("direction", ["rabbitmq-to-amqpq", "amqpq-to-rabbitmq"])
def test_federated_queue_both_ways(rabbit: Broker, amqpq: Broker, direction: str) -> None:
    """A federated queue takes the upstream queue's messages once a consumer waits on the
    downstream (RabbitMQ's link on amqpq's queue, or amqpq's on RabbitMQ's)."""
    tag = uuid.uuid4().hex[:8]
    q = f"fq-{tag}"
    up, down = (rabbit, amqpq) if direction == "rabbitmq-to-amqpq" else (amqpq, rabbit)
    try:
        up.put(f"/api/queues/%2F/{q}", {"durable": True})
        for i in range(5):
            up.publish("", q, f"m{i}")
        down.put(f"/api/parameters/federation-upstream/%2F/up-{tag}",
                 {"value": {"uri": upstream_uri(up.url)}})
        down.put(f"/api/queues/%2F/{q}", {"durable": True})
        down.put(f"/api/policies/%2F/fed-{tag}", {
            "pattern": f"^{q}$", "definition": {"federation-upstream": f"up-{tag}"},
            "apply-to": "queues", "priority": 7})
        row = down.link("running", queue=q)
        assert (row["type"], row["upstream_queue"], row["consumer_tag"]) == (
            "queue", q, f"federation-link-up-{tag}")
        conn = pika.BlockingConnection(pika.URLParameters(down.url))
        ch = conn.channel()
        got: list[bytes] = []
        ch.basic_consume(q, lambda c, m, p, b: (got.append(b), c.basic_ack(m.delivery_tag)))
        wait_for(lambda: (conn.process_data_events(0.1), len(got) >= 5)[1],
                 what="5 messages at the downstream consumer", describe=lambda: repr(got))
        conn.close()
        assert sorted(got) == [f"m{i}".encode() for i in range(5)]
    finally:
        down.cleanup(tag)
        up.cleanup(tag)
