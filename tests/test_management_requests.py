"""Request bodies the management API refuses, against a real broker process (security #28):

* cross-site POSTs: a ``Content-Type`` an HTML form or a no-cors ``fetch`` can send
  (``text/plain``, ``application/x-www-form-urlencoded``, ``multipart/form-data``, or none)
  is 415 on every POST, before anything changes; PUT and DELETE take any type, as RabbitMQ's;
* nesting: publish ``headers`` and declare ``arguments`` nest 64 levels at most (AMQP's
  limit, 400 beyond), and no body, however deep, reaches a recursion error;
* a failed access change (``--workers N``'s access document) logs which entry failed and why, never the
  document with its password hashes.

RabbitMQ 3.10.8 answers the definitions POST 415 too (checked when the reference answers on
127.0.0.1:15672); it takes any type on publish, get and bindings, where amqpq is stricter.
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import os
import time
import urllib.parse
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from broker.access_sync import access_document, apply_access
from broker.broker import Broker
from broker.config import BrokerConfig
from tests.support.broker_process import BrokerProcess, free_port
from tests.support.shared_fixtures import shared_broker

REFERENCE = os.environ.get("AMQPQ_REFERENCE_HTTP", "http://127.0.0.1:15672")
JSON = "application/json"
#: what a cross-site form (or an untyped no-cors fetch body: None) can send
FORM_TYPES = ("text/plain", "Text/Plain; charset=UTF-8", "application/x-www-form-urlencoded",
              "multipart/form-data; boundary=xyz", None)

#: one broker for this module and test_management_rights.py (run one after the other)
management_broker = shared_broker("management_broker", management=free_port(), log_level="info")


@pytest.fixture(scope="module")
def amqpq(management_broker: BrokerProcess) -> BrokerProcess:
    """The broker of this module and test_management_rights.py (``management_broker``)."""
    return management_broker


def call(base: str, method: str, path: str, body: Any = None, *,
         auth: tuple[str, str] = ("guest", "guest"), content_type: str | None = JSON,
         raw: bytes | None = None) -> tuple[int, Any]:
    """``(status, decoded JSON or None)`` of one request; ``body`` sent as JSON (or ``raw``)
    with ``content_type`` (None: no Content-Type header at all, which urllib cannot do)."""
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    headers = {"Authorization": "Basic " + base64.b64encode(
        f"{auth[0]}:{auth[1]}".encode()).decode()}
    if content_type is not None:
        headers["Content-Type"] = content_type
    url = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=10)
    try:
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        status, text = resp.status, resp.read()
    finally:
        conn.close()
    return status, json.loads(text) if text else None


def base_of(broker: BrokerProcess) -> str:
    return f"http://127.0.0.1:{broker.management_port}"


def reference_up() -> bool:
    try:
        status, body = call(REFERENCE, "GET", "/api/overview")
    except OSError:
        return False
    return status == 200 and isinstance(body, dict) and body.get("product_name") == "RabbitMQ"


def wait_for(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


# ---- cross-site POSTs ----------------------------------------------------------------------


def _multipart(doc: dict[str, Any]) -> bytes:
    return (b"--xyz\r\nContent-Disposition: form-data; name=\"file\"; filename=\"d.json\"\r\n"
            b"Content-Type: application/json\r\n\r\n" + json.dumps(doc).encode()
            + b"\r\n--xyz--\r\n")


def test_cross_site_posts_are_415_and_change_nothing(amqpq: BrokerProcess) -> None:
    base = base_of(amqpq)
    q, user = f"csrf-{uuid.uuid4().hex[:6]}", f"evil-{uuid.uuid4().hex[:6]}"
    assert call(base, "PUT", f"/api/queues/%2F/{q}", {})[0] == 201
    assert call(base, "PUT", "/api/exchanges/%2F/csrf-x", {"type": "fanout"})[0] == 201
    publish = {"properties": {}, "routing_key": q, "payload": "keep",
               "payload_encoding": "string"}
    assert call(base, "POST", "/api/exchanges/%2F/amq.default/publish", publish)[1] == \
        {"routed": True}
    attacks = [  # each would change something if it ran
        ("/api/definitions", {"users": [{"name": user, "password": "pw",
                                         "tags": "administrator"}]}),
        ("/api/exchanges/%2F/amq.default/publish", publish),
        ("/api/bindings/%2F/e/csrf-x/q/" + q, {"routing_key": "k"}),
        (f"/api/queues/%2F/{q}/get", {"count": 1, "ackmode": "ack_requeue_false",
                                      "encoding": "auto"}),
        ("/api/users/bulk-delete", {"users": ["guest"]}),
    ]
    for path, body in attacks:
        for content_type in FORM_TYPES:
            raw = _multipart(body) if content_type and "multipart" in content_type else None
            status, answer = call(base, "POST", path, body, content_type=content_type, raw=raw)
            assert status == 415, (path, content_type, status, answer)
            assert answer["error"] == "unsupported_media_type", answer
            assert "application/json" in answer["reason"]
    # nothing happened: no user, one message, no binding, guest still there
    assert call(base, "GET", f"/api/users/{user}")[0] == 404
    assert call(base, "GET", "/api/users/guest")[0] == 200
    assert call(base, "GET", f"/api/queues/%2F/{q}")[1]["messages"] == 1
    assert call(base, "GET", f"/api/bindings/%2F/e/csrf-x/q/{q}")[1] == []
    # credentials are checked first (401), as RabbitMQ does
    assert call(base, "POST", "/api/definitions", {}, auth=("guest", "wrong"),
                content_type="text/plain")[0] == 401
    # JSON is taken; PUT and DELETE take any type (no cross-site PUT without a preflight)
    assert call(base, "POST", f"/api/bindings/%2F/e/csrf-x/q/{q}", {"routing_key": "k"},
                content_type="application/json; charset=utf-8")[0] == 201
    assert call(base, "PUT", f"/api/queues/%2F/{q}-2", {},
                content_type="application/x-www-form-urlencoded")[0] == 201
    assert call(base, "DELETE", f"/api/queues/%2F/{q}-2", content_type="text/plain")[0] == 204
    for path in (f"/api/queues/%2F/{q}", "/api/exchanges/%2F/csrf-x"):
        assert call(base, "DELETE", path)[0] == 204


def test_definitions_take_json_only(amqpq: BrokerProcess) -> None:
    """``/api/definitions`` answers 415 to any other type, as RabbitMQ 3.10.8 does."""
    base = base_of(amqpq)
    doc = {"vhosts": [{"name": f"defs-{uuid.uuid4().hex[:6]}"}]}
    status, _ = call(base, "POST", "/api/definitions", doc,
                     content_type="application/octet-stream")
    assert status == 415
    assert call(base, "GET", f"/api/vhosts/{doc['vhosts'][0]['name']}")[0] == 404
    assert call(base, "POST", "/api/definitions", doc)[0] == 204
    assert call(base, "DELETE", f"/api/vhosts/{doc['vhosts'][0]['name']}")[0] == 204


@pytest.mark.reference
def test_reference_refuses_a_text_plain_definitions_post() -> None:
    if not reference_up():
        pytest.skip(f"reference RabbitMQ not reachable at {REFERENCE}")
    user = f"amqpq-csrf-{uuid.uuid4().hex[:6]}"
    doc = {"users": [{"name": user, "password": "pw", "tags": "administrator"}]}
    try:
        for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
            assert call(REFERENCE, "POST", "/api/definitions", doc,
                        content_type=content_type)[0] == 415
        assert call(REFERENCE, "GET", f"/api/users/{user}")[0] == 404
    finally:
        call(REFERENCE, "DELETE", f"/api/users/{user}")


# ---- nesting -------------------------------------------------------------------------------


def nested(levels: int) -> dict[str, Any]:
    """A table with ``levels`` tables nested inside it ({"a": {"a": ... {}}})."""
    value: dict[str, Any] = {}
    for _ in range(levels):
        value = {"a": value}
    return value


def test_nesting_is_limited_as_over_amqp(amqpq: BrokerProcess) -> None:
    base = base_of(amqpq)
    q = f"deep-{uuid.uuid4().hex[:6]}"
    assert call(base, "PUT", f"/api/queues/%2F/{q}", {})[0] == 201
    pub = "/api/exchanges/%2F/amq.default/publish"

    def publish(headers: Any) -> tuple[int, Any]:
        return call(base, "POST", pub, {"properties": {"headers": headers}, "routing_key": q,
                                        "payload": "x", "payload_encoding": "string"})

    assert publish(nested(64)) == (200, {"routed": True})  # AMQP's limit: taken
    got = call(base, "POST", f"/api/queues/%2F/{q}/get",
               {"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"})[1]
    assert got[0]["properties"]["headers"] == nested(64)
    assert publish(nested(65)) == (400, {
        "error": "bad_request", "reason": "headers nested deeper than 64 levels"})
    assert publish({"a": [nested(63)]})[0] == 400  # an array is a level too
    # deeper still, the body itself is refused before anything converts it
    deep_body = {"error": "bad_request", "reason": "request body nested deeper than 72 levels"}
    assert publish(nested(100)) == (400, deep_body)  # was accepted
    assert publish(nested(400)) == (400, deep_body)  # was a 500 (RecursionError)
    raw = b'{"a":' * 100_000 + b"{}" + b"}" * 100_000  # deeper than json's own limit
    assert call(base, "POST", pub, raw=raw) == (400, deep_body)
    assert call(base, "PUT", "/api/queues/%2F/deep-args", raw=raw) == (400, deep_body)
    for path in ("/api/queues/%2F/deep-args", "/api/exchanges/%2F/deep-args"):
        assert call(base, "PUT", path, {"arguments": nested(65)}) == (400, {
            "error": "bad_request", "reason": "arguments nested deeper than 64 levels"})
        assert call(base, "GET", path)[0] == 404
    assert call(base, "POST", f"/api/bindings/%2F/e/amq.direct/q/{q}",
                {"routing_key": "k", "arguments": nested(65)})[0] == 400
    assert call(base, "POST", "/api/definitions", {"queues": [{
        "name": "deep-args", "vhost": "/", "durable": True, "auto_delete": False,
        "arguments": nested(65)}]}) == (400, {
            "error": "bad_request", "reason": "queues[0].arguments nested deeper than 64 levels"})
    assert call(base, "GET", f"/api/queues/%2F/{q}/bindings")[1][1:] == []
    # the broker is fine and logged no traceback
    assert amqpq.alive() and call(base, "GET", "/api/overview")[0] == 200
    log = amqpq.log_text()
    assert "Traceback" not in log and "RecursionError" not in log, amqpq.log()
    assert call(base, "DELETE", f"/api/queues/%2F/{q}")[0] == 204


# ---- a failed access change is logged without the document ---------------------------------


def test_failed_access_change_logs_no_password_hash(caplog: pytest.LogCaptureFixture) -> None:
    """With ``--workers N`` the API's worker sends its users, vhosts, permissions... to the
    others, which import them (:func:`broker.access_sync.apply_access`). A document that does
    not apply (here a parameter of a vhost it lacks) is logged naming the entry and why,
    without the document's password hashes (it was logged whole, hashes included)."""
    broker = Broker(BrokerConfig())
    password = f"pw-{uuid.uuid4().hex}"
    broker.users.add("secret-user", password)
    doc = access_document(broker)
    password_hash = next(u["password_hash"] for u in doc["users"] if u["name"] == "secret-user")
    doc["parameters"] = [{"component": "federation-upstream", "vhost": "fv", "name": "up",
                          "value": {"uri": "amqp://localhost"}}]
    with caplog.at_level(logging.INFO):
        assert apply_access(Broker(BrokerConfig()), doc) is False
    log = caplog.text
    assert "parameters[0] (component 'federation-upstream' name 'up' in vhost 'fv'): " \
           "no vhost 'fv'" in log
    assert password_hash not in log and password not in log and "password_hash" not in log
