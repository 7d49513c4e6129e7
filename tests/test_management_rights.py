"""What the management API tells users about a vhost they cannot access (security #28),
against a real broker process, and the same requests against RabbitMQ 3.10.8 when it answers
on 127.0.0.1:15672 (that half is skipped otherwise).

Users tagged ``management``, ``monitoring`` and ``policymaker``, with permissions in ``/``
only, send every vhost-scoped request (reads, declares, deletes, publish, get, bindings,
policies, limits, parameters, definitions) to a vhost they cannot access and to one that does
not exist, naming objects that exist there and objects that do not. RabbitMQ checks rights
before existence, so the answers about the vhost's objects are the same 401 whether they exist
or not (the vhost itself: 401 when it exists, 404 when it does not, as RabbitMQ answers, and
as AMQP's Connection.Open tells anyway). amqpq must answer the same statuses and error bodies.
Lists and ``/api/overview`` totals leave the vhost out.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pika
import pytest

from tests import test_management_requests
from tests.support.broker_process import BrokerProcess
from tests.test_management_requests import REFERENCE, base_of, call, reference_up

TAGS = ("management", "monitoring", "policymaker")
PUBLISH = {"properties": {}, "routing_key": "k", "payload": "x", "payload_encoding": "string"}
GET = {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"}
POLICY = {"pattern": "^sq$", "definition": {"max-length": 5}}

#: differences unrelated to rights (any user, administrators too): RabbitMQ 3.10.8 lists the
#: bindings of an exchange, queue or pair that does not exist as [] (a missing queue: its
#: default binding), amqpq answers 404
KNOWN = {
    ("nope", "GET", path): (200, 404) for path in (
        "/api/exchanges/V/sx/bindings/source", "/api/exchanges/V/nox/bindings/source",
        "/api/exchanges/V/sx/bindings/destination", "/api/queues/V/sq/bindings",
        "/api/queues/V/nq/bindings", "/api/bindings/V/e/sx/q/sq",
        "/api/bindings/V/e/nox/q/nq", "/api/bindings/V/e/sx/e/amq.direct")}
#: the answers on the inaccessible vhost that are not 401, as RabbitMQ 3.10.8's: consumers
#: are filtered by channel (a user sees its own, monitoring users every one), and monitoring
#: users see every vhost's limits (also in /api/vhost-limits)
NOT_401 = {("management", "GET", "/api/consumers/V"), ("monitoring", "GET", "/api/consumers/V"),
           ("policymaker", "GET", "/api/consumers/V"),
           ("monitoring", "GET", "/api/vhost-limits/V")}
#: (existing object, missing object) pairs whose answers must not differ
PAIRS = [("/api/exchanges/V/sx", "/api/exchanges/V/nox"), ("/api/queues/V/sq", "/api/queues/V/nq"),
         ("/api/bindings/V/e/sx/q/sq/k", "/api/bindings/V/e/sx/q/sq/nokey"),
         ("/api/policies/V/sp", "/api/policies/V/nop"),
         ("/api/operator-policies/V/op", "/api/operator-policies/V/noop")]

# fixtures: the broker of test_management_requests.py and this module, in a row
management_broker, amqpq = test_management_requests.management_broker, test_management_requests.amqpq


def requests(prefix: str) -> list[tuple[str, str, Any]]:
    """Every request, ``V`` standing for the vhost (writes last)."""
    me = f"{prefix}-management"
    reads = ["/api/vhosts/V", "/api/vhosts/V/permissions", "/api/vhosts/V/topic-permissions",
             "/api/vhosts/V/connections", "/api/vhosts/V/channels", "/api/aliveness-test/V",
             "/api/exchanges/V", "/api/exchanges/V/sx", "/api/exchanges/V/nox",
             "/api/exchanges/V/amq.default", "/api/exchanges/V/sx/bindings/source",
             "/api/exchanges/V/nox/bindings/source", "/api/exchanges/V/sx/bindings/destination",
             "/api/queues/V", "/api/queues/V/sq", "/api/queues/V/nq", "/api/queues/V/sq/bindings",
             "/api/queues/V/nq/bindings", "/api/bindings/V", "/api/bindings/V/e/sx/q/sq",
             "/api/bindings/V/e/nox/q/nq", "/api/bindings/V/e/sx/q/sq/k",
             "/api/bindings/V/e/sx/q/sq/nokey", "/api/bindings/V/e/sx/e/amq.direct",
             "/api/policies/V", "/api/policies/V/sp", "/api/policies/V/nop",
             "/api/operator-policies/V", "/api/operator-policies/V/op",
             "/api/operator-policies/V/noop", "/api/consumers/V", "/api/vhost-limits/V",
             "/api/parameters/vhost-limits/V", "/api/parameters/vhost-limits/V/limits",
             "/api/parameters/federation-upstream/V",
             "/api/parameters/federation-upstream/V/nop", "/api/definitions/V",
             f"/api/permissions/V/{me}", f"/api/topic-permissions/V/{me}"]
    return [("GET", p, None) for p in reads] + [
        ("PUT", "/api/exchanges/V/sx", {"type": "direct"}),
        ("PUT", "/api/exchanges/V/nox", {"type": "direct"}),
        ("DELETE", "/api/exchanges/V/sx", None), ("DELETE", "/api/exchanges/V/nox", None),
        ("POST", "/api/exchanges/V/sx/publish", PUBLISH),
        ("POST", "/api/exchanges/V/nox/publish", PUBLISH),
        ("PUT", "/api/queues/V/sq", {"durable": True}), ("PUT", "/api/queues/V/nq", {}),
        ("DELETE", "/api/queues/V/sq", None), ("DELETE", "/api/queues/V/nq", None),
        ("DELETE", "/api/queues/V/sq/contents", None),
        ("DELETE", "/api/queues/V/nq/contents", None),
        ("POST", "/api/queues/V/sq/get", GET), ("POST", "/api/queues/V/nq/get", GET),
        ("POST", "/api/bindings/V/e/sx/q/sq", {"routing_key": "k2"}),
        ("POST", "/api/bindings/V/e/nox/q/nq", {"routing_key": "k2"}),
        ("DELETE", "/api/bindings/V/e/sx/q/sq/k", None),
        ("DELETE", "/api/bindings/V/e/sx/q/sq/nokey", None),
        ("PUT", "/api/policies/V/sp", POLICY), ("DELETE", "/api/policies/V/sp", None),
        ("DELETE", "/api/policies/V/nop", None), ("PUT", "/api/operator-policies/V/op", POLICY),
        ("DELETE", "/api/operator-policies/V/noop", None),
        ("PUT", "/api/vhost-limits/V/max-queues", {"value": 10}),
        ("DELETE", "/api/vhost-limits/V/max-queues", None),
        ("PUT", "/api/parameters/vhost-limits/V/limits", {"value": {"max-queues": 10}}),
        ("DELETE", "/api/parameters/federation-upstream/V/nop", None),
        ("POST", "/api/definitions/V", {}), ("PUT", "/api/vhosts/V", {}),
        ("DELETE", "/api/vhosts/V", None),
        ("PUT", f"/api/permissions/V/{me}", {"configure": ".*", "write": ".*", "read": ".*"})]


class World:
    """A vhost ``<prefix>-secret`` with a queue holding one message, an exchange, a binding,
    a policy, an operator policy and a limit; users ``<prefix>-<tag>`` with permissions in
    ``/`` only. Made (and removed) over the HTTP API as guest."""

    def __init__(self, base: str, amqp_url: str | None = None) -> None:
        self.base = base
        self.prefix = f"rights{uuid.uuid4().hex[:6]}"
        self.secret = f"{self.prefix}-secret"
        self.amqp_url = amqp_url

    def create(self) -> None:
        v = self.secret
        steps: list[tuple[str, str, Any]] = [
            ("PUT", f"/api/vhosts/{v}", {}), ("PUT", f"/api/queues/{v}/sq", {"durable": True}),
            ("PUT", f"/api/exchanges/{v}/sx", {"type": "direct"}),
            ("POST", f"/api/bindings/{v}/e/sx/q/sq", {"routing_key": "k"}),
            ("PUT", f"/api/policies/{v}/sp", POLICY),
            ("PUT", f"/api/operator-policies/{v}/op", POLICY),
            ("PUT", f"/api/vhost-limits/{v}/max-queues", {"value": 10})]
        for tag in TAGS:
            steps += [("PUT", f"/api/users/{self.prefix}-{tag}", {"password": "pw", "tags": tag}),
                      ("PUT", f"/api/permissions/%2F/{self.prefix}-{tag}",
                       {"configure": ".*", "write": ".*", "read": ".*"})]
        for method, path, body in steps:
            status, answer = call(self.base, method, path, body)
            assert status in (200, 201, 204), (path, status, answer)
        if self.amqp_url is not None:  # published over AMQP: counted in message_stats
            conn = pika.BlockingConnection(pika.URLParameters(
                self.amqp_url.replace("%2F", self.secret)))
            conn.channel().basic_publish("sx", "k", b"secret message")
            conn.close()
        else:
            assert call(self.base, "POST", f"/api/exchanges/{v}/sx/publish", PUBLISH)[0] == 200

    def remove(self) -> None:
        call(self.base, "DELETE", f"/api/vhosts/{self.secret}")
        for tag in TAGS:
            call(self.base, "DELETE", f"/api/users/{self.prefix}-{tag}")

    def answers(self) -> dict[tuple[str, str, str, str], tuple[int, Any]]:
        """(tag, "secret"|"nope", method, path with V) -> (status, error body or None)."""
        out = {}
        for tag in TAGS:
            for kind, vhost in (("secret", self.secret), ("nope", f"{self.prefix}-nope")):
                for method, path, body in requests(self.prefix):
                    status, answer = call(self.base, method, path.replace("/V", f"/{vhost}", 1),
                                          body, auth=(f"{self.prefix}-{tag}", "pw"))
                    out[(tag, kind, method, path)] = (status, answer if status >= 400 else None)
        return out


@pytest.fixture(scope="module")
def world(amqpq: BrokerProcess) -> Iterator[World]:
    w = World(base_of(amqpq), amqpq.url)
    w.create()
    yield w
    w.remove()


def _names(rows: Any) -> set[str]:
    return {str(r.get("vhost", r.get("name"))) for r in rows}


def test_nothing_about_an_inaccessible_vhost(world: World) -> None:
    answers = world.answers()
    for (tag, kind, method, path), (status, body) in answers.items():
        if kind != "secret":
            continue
        if (tag, method, path) in NOT_401:
            assert status == 200, (tag, method, path, status, body)
            continue
        assert status == 401, (tag, method, path, status, body)
        assert body in ({"error": "not_authorised", "reason": reason} for reason in (
            "User not authorised to access virtual host", "User not authorised to access object",
            "Not administrator user")), (tag, method, path, body)
    compared = 0
    for tag in TAGS:
        for method in ("GET", "PUT", "DELETE", "POST"):
            for there, missing in PAIRS:
                for suffix in ("", "/bindings/source", "/bindings", "/contents", "/get",
                               "/publish"):
                    a = answers.get((tag, "secret", method, there + suffix))
                    b = answers.get((tag, "secret", method, missing + suffix))
                    if a is not None and b is not None:
                        compared += 1
                        assert a == b, (tag, method, there + suffix, a, b)
    assert compared >= 40  # the pairs are really in the table
    assert call(world.base, "GET", f"/api/consumers/{world.secret}",
                auth=(f"{world.prefix}-management", "pw")) == (200, [])
    # nothing was changed by all those requests
    v = world.secret
    assert call(world.base, "GET", f"/api/queues/{v}/sq")[1]["messages"] == 1
    assert call(world.base, "GET", f"/api/bindings/{v}/e/sx/q/sq/k")[0] == 200
    assert call(world.base, "GET", f"/api/policies/{v}/sp")[0] == 200
    assert call(world.base, "GET", f"/api/vhost-limits/{v}")[1] == [
        {"vhost": v, "value": {"max-queues": 10}}]


def test_lists_and_overview_leave_the_vhost_out(world: World) -> None:
    for tag in TAGS:
        auth = (f"{world.prefix}-{tag}", "pw")
        for path in ("/api/queues", "/api/exchanges", "/api/bindings", "/api/policies",
                     "/api/operator-policies", "/api/parameters"):
            status, rows = call(world.base, "GET", path, auth=auth)
            if status == 401:  # /api/parameters: policymakers only
                assert path == "/api/parameters" and tag != "policymaker"
                continue
            assert world.secret not in _names(rows), (tag, path)
        for path in ("/api/vhosts", "/api/vhost-limits"):  # monitoring users see every vhost
            seen = world.secret in _names(call(world.base, "GET", path, auth=auth)[1])
            assert seen == (tag == "monitoring"), (tag, path)
    # totals: the management user's view counts "/" only (no queue, no message there)
    mine = call(world.base, "GET", "/api/overview", auth=(f"{world.prefix}-management", "pw"))[1]
    exchanges = call(world.base, "GET", "/api/exchanges",
                     auth=(f"{world.prefix}-management", "pw"))[1]
    assert mine["object_totals"] == {"connections": 0, "channels": 0,
                                     "exchanges": len(exchanges), "queues": 0}
    assert (mine["queue_totals"]["messages"], mine["message_stats"]["publish"]) == (0, 0)

    def admin_sees_publish() -> bool:
        return call(world.base, "GET", "/api/overview")[1]["message_stats"]["publish"] >= 1

    deadline = time.monotonic() + 10
    while not admin_sees_publish():
        assert time.monotonic() < deadline, "guest's overview never counted the publish"
        time.sleep(0.05)
    every = call(world.base, "GET", "/api/overview")[1]
    assert every["queue_totals"]["messages"] >= 1 and every["object_totals"]["queues"] >= 1
    monitor = call(world.base, "GET", "/api/overview",
                   auth=(f"{world.prefix}-monitoring", "pw"))[1]
    assert monitor["object_totals"]["queues"] == every["object_totals"]["queues"]


def _normalised(answers: dict[tuple[str, str, str, str], tuple[int, Any]], prefix: str
                ) -> dict[tuple[str, str, str, str], tuple[int, Any]]:
    return {(tag, kind, method, re.sub(re.escape(prefix), "P", path)): answer
            for (tag, kind, method, path), answer in answers.items()}


@pytest.mark.reference
def test_same_answers_as_rabbitmq(amqpq: BrokerProcess) -> None:
    if not reference_up():
        pytest.skip(f"reference RabbitMQ not reachable at {REFERENCE}")
    ours_world, ref_world = World(base_of(amqpq)), World(REFERENCE)
    ours_world.create()
    ref_world.create()
    try:
        ours = _normalised(ours_world.answers(), ours_world.prefix)
        ref = _normalised(ref_world.answers(), ref_world.prefix)
    finally:
        ours_world.remove()
        ref_world.remove()
    differences = []
    for key, expected in ref.items():
        got = ours[key]
        if got == expected:
            continue
        if KNOWN.get((key[1], key[2], key[3])) == (expected[0], got[0]):
            continue
        differences.append(f"{' '.join(key)}: RabbitMQ {expected}, amqpq {got}")
    assert not differences, "\n".join(differences)
