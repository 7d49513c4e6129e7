"""The management HTTP API against a broker running in-process (event loop in a background
thread, AMQP and HTTP on free ports), with a real HTTP client (urllib) and pika.

Expected statuses, error bodies and JSON fields are RabbitMQ 3.10.8's, checked with curl
against the reference broker; ``test_key_sets_match_rabbitmq`` compares the field names of the
main objects with a live RabbitMQ when one answers on 127.0.0.1:15672 (skipped otherwise).

Source: https://www.rabbitmq.com/docs/management#http-api.
"""

from __future__ import annotations

import asyncio
import base64
import json
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import pika
import pytest

from amqp_server.server import BrokerServer
from broker.config import BrokerConfig
from management import management_port, start_management, stop_management

T = TypeVar("T")
REFERENCE = "http://127.0.0.1:15672"


class InProcessBroker:
    """A BrokerServer plus the management app, in an asyncio loop on another thread."""

    def __init__(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.server: BrokerServer | None = None
        self.runner: Any = None
        self.amqp_port = 0
        self.http_port = 0

    def start(self) -> None:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(15)

    async def _start(self) -> None:
        self.server = BrokerServer(BrokerConfig(port=0, data_dir=Path(self.tmp.name)))
        await self.server.start()
        self.amqp_port = self.server.port
        self.runner = await start_management(self.server.broker, "127.0.0.1", 0,
                                             amqp_port=self.amqp_port)
        self.http_port = management_port(self.runner)

    def stop(self) -> None:
        async def _stop() -> None:
            await stop_management(self.runner)
            assert self.server is not None
            await self.server.stop()

        asyncio.run_coroutine_threadsafe(_stop(), self.loop).result(15)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.tmp.cleanup()

    def run(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the broker's loop (the only thread that may touch the broker)."""

        async def call() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(5)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"


@pytest.fixture(scope="module")
def node() -> Iterator[InProcessBroker]:
    b = InProcessBroker()
    b.start()
    yield b
    b.stop()


class Answer:
    def __init__(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.status = status
        self.raw = body
        self.headers = headers

    @property
    def json(self) -> Any:
        return json.loads(self.raw) if self.raw else None


def http(base: str, method: str, path: str, body: Any = None,
         auth: tuple[str, str] | None = ("guest", "guest"), raw: bytes | None = None,
         headers: dict[str, str] | None = None) -> Answer:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(base + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return Answer(resp.status, resp.read(), dict(resp.headers))
    except urllib.error.HTTPError as exc:
        return Answer(exc.code, exc.read(), dict(exc.headers))


@pytest.fixture
def api(node: InProcessBroker) -> Callable[..., Answer]:
    def call(method: str, path: str, body: Any = None, **kw: Any) -> Answer:
        return http(node.url, method, path, body, **kw)

    return call


@pytest.fixture
def vhost(api: Callable[..., Answer]) -> Iterator[str]:
    """A fresh vhost (guest has full permissions in it), deleted afterwards."""
    name = f"v-{uuid.uuid4().hex[:8]}"
    assert api("PUT", f"/api/vhosts/{name}").status == 201
    yield name
    api("DELETE", f"/api/vhosts/{name}")


def q(text: str) -> str:
    return quote(text, safe="")


NOT_FOUND = {"error": "Object Not Found", "reason": "Not Found"}


def publish(api: Callable[..., Answer], vhost: str, exchange: str, key: str, payload: str,
            **props: Any) -> bool:
    r = api("POST", f"/api/exchanges/{q(vhost)}/{exchange}/publish",
            {"properties": props, "routing_key": key, "payload": payload,
             "payload_encoding": "string"})
    assert r.status == 200, r.raw
    routed: bool = r.json["routed"]
    return routed


# ---- authentication and tags ---------------------------------------------------------------


def test_authentication(api: Callable[..., Answer]) -> None:
    r = api("GET", "/api/overview", auth=None)
    assert r.status == 401 and r.headers["WWW-Authenticate"].startswith("Basic")
    r = api("GET", "/api/overview", auth=("guest", "wrong"))
    assert (r.status, r.json) == (401, {"error": "not_authorized", "reason": "Login failed"})
    r = api("GET", "/api/whoami")
    assert (r.status, r.json) == (200, {"name": "guest", "tags": ["administrator"]})


def test_tags_are_enforced(api: Callable[..., Answer], vhost: str) -> None:
    user = f"u-{uuid.uuid4().hex[:6]}"
    assert api("PUT", f"/api/users/{user}", {"password": "pw", "tags": ""}).status == 201
    r = api("GET", "/api/overview", auth=(user, "pw"))
    assert (r.status, r.json["reason"]) == (401, "Not management user")
    api("PUT", f"/api/users/{user}", {"password": "pw", "tags": "management"})
    assert api("GET", "/api/overview", auth=(user, "pw")).status == 200
    r = api("GET", "/api/users", auth=(user, "pw"))
    assert (r.status, r.json) == (401, {"error": "not_authorised",
                                        "reason": "Not administrator user"})
    assert api("PUT", "/api/vhosts/zz", auth=(user, "pw")).status == 401
    # no permissions in the vhost: it is not listed and cannot be read
    assert vhost not in [v["name"] for v in api("GET", "/api/vhosts", auth=(user, "pw")).json]
    r = api("GET", f"/api/queues/{vhost}", auth=(user, "pw"))
    assert r.json["reason"] == "User not authorised to access virtual host"
    # permissions without configure: declaring is refused as over AMQP
    api("PUT", f"/api/permissions/{vhost}/{user}",
        {"configure": "", "write": ".*", "read": ".*"})
    assert vhost in [v["name"] for v in api("GET", "/api/vhosts", auth=(user, "pw")).json]
    r = api("PUT", f"/api/queues/{vhost}/q", {}, auth=(user, "pw"))
    assert (r.status, r.json) == (401, {"error": "not_authorised", "reason": "Access refused."})
    r = api("PUT", f"/api/policies/{vhost}/p", {"pattern": ".", "definition": {"max-length": 1}},
            auth=(user, "pw"))
    assert r.status == 401
    api("PUT", f"/api/permissions/{vhost}/{user}",
        {"configure": ".*", "write": ".*", "read": ".*"})
    assert api("PUT", f"/api/queues/{vhost}/q", {}, auth=(user, "pw")).status == 201
    api("DELETE", f"/api/users/{user}")


# ---- overview, health --------------------------------------------------------------------


def test_overview_health_and_aliveness(node: InProcessBroker, api: Callable[..., Answer],
                                       vhost: str) -> None:
    o = api("GET", "/api/overview").json
    assert o["rabbitmq_version"] == "3.10.8" and o["product_name"] == "amqpq"
    assert {"connections", "channels", "consumers", "exchanges", "queues"} <= \
        set(o["object_totals"])
    assert {"protocol": "amqp", "port": node.amqp_port}.items() <= o["listeners"][0].items()
    for path in ("/api/health/checks/alarms", "/api/healthchecks/alarms"):
        assert api("GET", path).json == {"status": "ok"}
    assert api("GET", f"/api/aliveness-test/{vhost}").json == {"status": "ok"}
    assert api("GET", "/api/aliveness-test/nope").json == NOT_FOUND
    assert api("GET", "/api/nonsense").json == NOT_FOUND


# ---- vhosts, users, permissions ------------------------------------------------------------


def test_vhosts(api: Callable[..., Answer]) -> None:
    name = f"vh/{uuid.uuid4().hex[:6]}"
    assert api("PUT", f"/api/vhosts/{q(name)}", {"description": "d", "tags": "a,b"}).status \
        == 201
    assert api("PUT", f"/api/vhosts/{q(name)}", {"description": "d2"}).status == 204
    v = api("GET", f"/api/vhosts/{q(name)}").json
    assert (v["name"], v["description"], v["tags"]) == (name, "d2", ["a", "b"])
    assert v["metadata"] == {"description": "d2", "tags": ["a", "b"]}
    assert name in [x["name"] for x in api("GET", "/api/vhosts").json]
    perms = api("GET", f"/api/vhosts/{q(name)}/permissions").json
    assert [(p["user"], p["configure"]) for p in perms] == [("guest", ".*")]
    assert api("DELETE", f"/api/vhosts/{q(name)}").status == 204
    assert api("DELETE", f"/api/vhosts/{q(name)}").json == NOT_FOUND
    assert api("GET", f"/api/vhosts/{q(name)}").status == 404


def test_users(api: Callable[..., Answer]) -> None:
    name = f"user-{uuid.uuid4().hex[:6]}"
    assert api("PUT", f"/api/users/{name}", {"password": "x"}).json == \
        {"error": "bad_request", "reason": "tags_not_present"}
    assert api("PUT", f"/api/users/{name}", {"password": "pw", "tags": "monitoring"}).status \
        == 201
    u = api("GET", f"/api/users/{name}").json
    assert set(u) == {"name", "password_hash", "hashing_algorithm", "tags", "limits"}
    assert u["tags"] == ["monitoring"]
    assert api("GET", "/api/whoami", auth=(name, "pw")).json == \
        {"name": name, "tags": ["monitoring"]}
    # a password hash (RabbitMQ's sha256 of "narrowpw") sets the password as is
    assert api("PUT", f"/api/users/{name}", {
        "password_hash": "oF/Got7/rIvQREr3NucuZhtOffO6tnjyYQGX+IkSQhcqRj7W",
        "tags": ["monitoring"]}).status == 204
    assert api("GET", "/api/whoami", auth=(name, "narrowpw")).status == 200
    assert api("PUT", f"/api/users/{name}", {"password_hash": "%%", "tags": ""}).json == \
        {"error": "bad_request", "reason": ["not_base64", "%%"]}
    assert name in [x["name"] for x in api("GET", "/api/users/without-permissions").json]
    assert api("DELETE", f"/api/users/{name}").status == 204
    assert api("DELETE", f"/api/users/{name}").json == NOT_FOUND
    assert api("GET", f"/api/users/{name}").json == NOT_FOUND


def test_permissions(api: Callable[..., Answer], vhost: str) -> None:
    user = f"p-{uuid.uuid4().hex[:6]}"
    api("PUT", f"/api/users/{user}", {"password": "pw", "tags": ""})
    path = f"/api/permissions/{vhost}/{user}"
    assert api("GET", path).json == NOT_FOUND
    assert api("PUT", path, {"configure": ".*"}).json == {
        "error": "bad_request", "reason": "[{key_missing,write},{key_missing,read}]"}
    assert api("PUT", path, {"configure": "(", "write": "", "read": ""}).status == 400
    assert api("PUT", path, {"configure": "^a", "write": "", "read": ".*"}).status == 201
    assert api("PUT", path, {"configure": "^b", "write": "", "read": ".*"}).status == 204
    assert api("GET", path).json == {"user": user, "vhost": vhost, "configure": "^b",
                                     "write": "", "read": ".*"}
    assert api("GET", f"/api/users/{user}/permissions").json == [api("GET", path).json]
    r = api("PUT", f"/api/permissions/{vhost}/nobody", {"configure": "", "write": "",
                                                        "read": ""})
    assert r.json == {"error": "bad_request", "reason": "vhost_or_user_not_found"}
    assert api("DELETE", path).status == 204
    assert api("DELETE", path).json == NOT_FOUND
    tpath = f"/api/topic-permissions/{vhost}/{user}"
    body = {"exchange": "amq.topic", "write": "^a", "read": ".*"}
    assert api("PUT", tpath, body).status == 201
    assert api("PUT", tpath, body).status == 204
    assert api("GET", tpath).json == [{"user": user, "vhost": vhost, **body}]
    assert {"user": user, "vhost": vhost, **body} in api("GET", "/api/topic-permissions").json
    assert api("DELETE", tpath).status == 204
    assert api("GET", tpath).json == NOT_FOUND
    api("DELETE", f"/api/users/{user}")


# ---- exchanges -----------------------------------------------------------------------------


def test_exchanges(api: Callable[..., Answer], vhost: str) -> None:
    base = f"/api/exchanges/{vhost}"
    assert api("PUT", f"{base}/x1", {"type": "topic", "durable": True}).status == 201
    assert api("PUT", f"{base}/x1", {"type": "topic", "durable": True}).status == 204
    assert api("PUT", f"{base}/x1", {"type": "fanout", "durable": True}).json == {
        "error": "bad_request", "reason": "inequivalent arg 'type' for exchange 'x1' in vhost "
        f"'{vhost}': received 'fanout' but current is 'topic'"}
    assert api("PUT", f"{base}/x2", {"type": "nope"}).json == \
        {"error": "bad_request", "reason": "unknown exchange type 'nope'"}
    assert api("PUT", f"{base}/amq.foo", {"type": "direct"}).json == \
        {"error": "not_authorised", "reason": "Access refused."}
    assert api("PUT", f"{base}/plain", {}).status == 201  # type defaults to direct
    x = api("GET", f"{base}/x1").json
    assert {k: x[k] for k in ("name", "vhost", "type", "durable", "auto_delete", "internal",
                              "arguments", "incoming", "outgoing")} == {
        "name": "x1", "vhost": vhost, "type": "topic", "durable": True, "auto_delete": False,
        "internal": False, "arguments": {}, "incoming": [], "outgoing": []}
    names = [e["name"] for e in api("GET", base).json]
    assert names[0] == "" and {"amq.direct", "amq.topic", "x1", "plain"} <= set(names)
    assert api("GET", f"{base}/amq.default").json["name"] == ""
    assert api("GET", f"{base}/nope").json == NOT_FOUND
    assert api("GET", "/api/exchanges/nope").json == NOT_FOUND
    api("PUT", f"/api/queues/{vhost}/q", {})
    api("POST", f"/api/bindings/{vhost}/e/x1/q/q", {"routing_key": "a.*"})
    assert len(api("GET", f"{base}/x1/bindings/source").json) == 1
    assert api("DELETE", f"{base}/x1?if-unused=true").json == {
        "error": "bad_request", "reason": f"exchange 'x1' in vhost '{vhost}' in use"}
    assert api("DELETE", f"{base}/amq.direct").status == 401
    assert api("DELETE", f"{base}/x1").status == 204
    assert api("DELETE", f"{base}/x1").json == NOT_FOUND


def test_publish(api: Callable[..., Answer], vhost: str) -> None:
    api("PUT", f"/api/queues/{vhost}/q", {})
    assert publish(api, vhost, "amq.default", "q", "hi") is True
    assert publish(api, vhost, "amq.default", "nowhere", "hi") is False
    pub = f"/api/exchanges/{vhost}/amq.default/publish"
    r = api("POST", pub, {"properties": {}, "routing_key": "q", "payload": "AAEC",
                          "payload_encoding": "base64"})
    assert r.json == {"routed": True}
    assert api("POST", pub, {"properties": {}, "routing_key": "q"}).json == {
        "error": "bad_request", "reason": "[{key_missing,payload},{key_missing,payload_encoding}]"}
    r = api("POST", pub, {"properties": {}, "routing_key": "q", "payload": "x",
                          "payload_encoding": "bogus"})
    assert r.json == {"error": "bad_request", "reason": ["unsupported_encoding", "bogus"]}
    r = api("POST", pub, {"properties": {"delivery_mode": "x"}, "routing_key": "q",
                          "payload": "x", "payload_encoding": "string"})
    assert r.json == {"error": "bad_request", "reason": ["not_int", "delivery_mode"]}
    r = api("POST", pub, {"properties": {"user_id": "other"}, "routing_key": "q",
                          "payload": "x", "payload_encoding": "string"})
    assert r.json["reason"] == ("406 PRECONDITION_FAILED - user_id property set to 'other' but "
                                "authenticated user was 'guest'")
    r = api("POST", f"/api/exchanges/{vhost}/nope/publish", {
        "properties": {}, "routing_key": "q", "payload": "x", "payload_encoding": "string"})
    assert r.json == {"error": "bad_request",
                      "reason": f"404 NOT_FOUND - no exchange 'nope' in vhost '{vhost}'"}
    assert api("GET", f"/api/queues/{vhost}/q").json["messages"] == 2


# ---- queues --------------------------------------------------------------------------------


def test_queues(api: Callable[..., Answer], vhost: str) -> None:
    base = f"/api/queues/{vhost}"
    assert api("PUT", f"{base}/q1", {"durable": True, "arguments": {"x-max-length": 10}}
               ).status == 201
    assert api("PUT", f"{base}/q1", {"durable": True, "arguments": {"x-max-length": 10}}
               ).status == 204
    assert api("PUT", f"{base}/q1", {"durable": False}).json == {
        "error": "bad_request", "reason": f"inequivalent arg 'durable' for queue 'q1' in vhost "
        f"'{vhost}': received 'false' but current is 'true'"}
    r = api("PUT", f"{base}/bad", {"arguments": {"x-max-length": "abc"}})
    assert r.json["reason"] == (f"invalid arg 'x-max-length' for queue 'bad' in vhost "
                                f"'{vhost}': \"expected integer, got longstr\"")
    assert api("PUT", f"{base}/amq.x", {}).status == 401
    api("POST", f"/api/exchanges/{vhost}/amq.default/publish", {
        "properties": {"delivery_mode": 2, "headers": {"h": "v"}}, "routing_key": "q1",
        "payload": "hello", "payload_encoding": "string"})
    one = api("GET", f"{base}/q1").json
    assert (one["messages"], one["messages_ready"], one["messages_unacknowledged"]) == (1, 1, 0)
    assert one["memory"] == 5 and one["message_bytes"] == 5 and one["state"] == "running"
    assert one["message_stats"]["publish"] == 1 and one["consumer_details"] == []
    assert [x["name"] for x in api("GET", base).json] == ["q1"]
    assert any(x["name"] == "q1" and x["vhost"] == vhost for x in api("GET", "/api/queues").json)
    assert api("GET", f"{base}/nope").json == NOT_FOUND
    assert api("DELETE", f"{base}/q1/contents").status == 204
    assert api("GET", f"{base}/q1").json["messages"] == 0
    assert api("DELETE", f"{base}/nope/contents").json == NOT_FOUND
    assert api("DELETE", f"{base}/q1").status == 204
    assert api("DELETE", f"{base}/q1").json == NOT_FOUND


def test_get_messages(api: Callable[..., Answer], vhost: str) -> None:
    base = f"/api/queues/{vhost}"
    api("PUT", f"{base}/dlq", {})
    api("PUT", f"{base}/q", {"arguments": {"x-dead-letter-exchange": "",
                                           "x-dead-letter-routing-key": "dlq"}})
    publish(api, vhost, "amq.default", "q", "first", content_type="text/plain", priority=3,
            headers={"a": {"b": [1, "x", True]}})
    api("POST", f"/api/exchanges/{vhost}/amq.default/publish", {
        "properties": {}, "routing_key": "q", "payload": base64.b64encode(b"\xff\x00").decode(),
        "payload_encoding": "base64"})
    get = f"{base}/q/get"
    got = api("POST", get, {"count": 5, "ackmode": "ack_requeue_true", "encoding": "auto",
                            "truncate": 3}).json
    assert got[0] == {"payload_bytes": 5, "redelivered": False, "exchange": "",
                      "routing_key": "q", "message_count": 1,
                      "properties": {"content_type": "text/plain", "priority": 3,
                                     "headers": {"a": {"b": [1, "x", True]}}},
                      "payload": "fir", "payload_encoding": "string"}
    assert (got[1]["properties"], got[1]["payload"], got[1]["payload_encoding"]) == \
        ([], "/wA=", "base64")
    again = api("POST", get, {"count": 1, "ackmode": "reject_requeue_true",
                              "encoding": "base64"}).json
    assert again[0]["redelivered"] is True and again[0]["payload"] == \
        base64.b64encode(b"first").decode()
    assert api("GET", f"{base}/q").json["messages"] == 2
    api("POST", get, {"count": 1, "ackmode": "reject_requeue_false", "encoding": "auto"})
    api("POST", get, {"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"})
    assert api("GET", f"{base}/q").json["messages"] == 0
    assert api("GET", f"{base}/dlq").json["messages"] == 1  # the rejected one, dead-lettered
    assert api("POST", get, {"ackmode": "ack_requeue_true", "encoding": "auto"}).json == \
        {"error": "bad_request", "reason": "[{key_missing,count}]"}
    assert api("POST", get, {"count": 1, "ackmode": "ack_requeue_true", "encoding": "x"}
               ).json["reason"] == "Unsupported encoding. Please use auto or base64."
    assert api("POST", f"{base}/nope/get", {"count": 1, "ackmode": "ack_requeue_true",
                                            "encoding": "auto"}).json == {
        "error": "not_found", "reason": f"NOT_FOUND - no queue 'nope' in vhost '{vhost}'"}
    assert api("PUT", f"{base}/x", raw=b"not json").json == \
        {"error": "bad_request", "reason": "not_json"}


# ---- bindings ------------------------------------------------------------------------------


def test_bindings(api: Callable[..., Answer], vhost: str) -> None:
    api("PUT", f"/api/queues/{vhost}/q", {})
    api("PUT", f"/api/exchanges/{vhost}/x", {"type": "direct"})
    api("PUT", f"/api/exchanges/{vhost}/y", {"type": "fanout"})
    between = f"/api/bindings/{vhost}/e/x/q/q"
    r = api("POST", between, {"routing_key": "rk1"})
    assert (r.status, r.headers["Location"]) == (201, "q/rk1")
    assert api("POST", between, {"routing_key": ""}).headers["Location"] == "q/~"
    r = api("POST", between, {"routing_key": "a b/c", "arguments": {"a": 1}})
    assert r.status == 201
    listed = api("GET", between).json
    keys = {b["routing_key"]: b["properties_key"] for b in listed}
    assert keys["rk1"] == "rk1" and keys[""] == "~" and keys["a b/c"].startswith("a+b%2Fc~")
    assert listed[0].keys() == {"source", "vhost", "destination", "destination_type",
                                "routing_key", "arguments", "properties_key"}
    assert api("GET", f"{between}/rk1").json["routing_key"] == "rk1"
    assert api("GET", f"{between}/{q(keys['a b/c'])}").json["arguments"] == {"a": 1}
    assert api("DELETE", f"{between}/rk1").status == 204
    assert api("DELETE", f"{between}/rk1").json == NOT_FOUND
    assert api("DELETE", f"{between}/~").status == 204
    assert api("DELETE", f"{between}/{q(keys['a b/c'])}").status == 204
    assert api("POST", f"/api/bindings/{vhost}/e/x/e/y", {"routing_key": "k"}).headers[
        "Location"] == "y/k"
    assert [b["destination"] for b in api("GET", f"/api/bindings/{vhost}/e/x/e/y").json] == ["y"]
    all_ = api("GET", f"/api/bindings/{vhost}").json
    assert all_[0] == {"source": "", "vhost": vhost, "destination": "q",
                       "destination_type": "queue", "routing_key": "q", "arguments": {},
                       "properties_key": "q"}
    assert api("POST", f"/api/bindings/{vhost}/e/nope/q/q", {"routing_key": ""}).json == \
        {"error": "not_found", "reason": f"no exchange 'nope' in vhost '{vhost}'"}
    assert api("GET", "/api/bindings/nope").json == NOT_FOUND
    assert len(api("GET", f"/api/queues/{vhost}/q/bindings").json) == 1  # the default one


# ---- policies ------------------------------------------------------------------------------


def test_policies(api: Callable[..., Answer], vhost: str) -> None:
    api("PUT", f"/api/queues/{vhost}/qa", {})
    path = f"/api/policies/{vhost}/p1"
    body = {"pattern": "^q", "definition": {"max-length": 5}, "priority": 1,
            "apply-to": "queues"}
    assert api("PUT", path, body).status == 201
    assert api("PUT", path, body).status == 204
    assert api("GET", path).json == {"vhost": vhost, "name": "p1", "pattern": "^q",
                                     "apply-to": "queues", "definition": {"max-length": 5},
                                     "priority": 1}
    assert api("GET", f"/api/policies/{vhost}").json == [api("GET", path).json]
    qa = api("GET", f"/api/queues/{vhost}/qa").json
    assert (qa["policy"], qa["effective_policy_definition"]) == ("p1", {"max-length": 5})
    r = api("PUT", f"/api/policies/{vhost}/p2", {"pattern": "(", "definition": {"a": 1}})
    assert r.status == 400 and r.json["reason"].startswith("Validation failed\n\n")
    r = api("PUT", f"/api/policies/{vhost}/p2", {"pattern": "x", "definition": {"a": 1},
                                                 "apply-to": "bogus"})
    assert r.json["reason"] == ("Validation failed\n\napply-to 'bogus' unrecognised; should be "
                                "'queues', 'exchanges' or 'all'\n")
    assert api("GET", f"/api/policies/{vhost}/zz").json == NOT_FOUND
    assert api("DELETE", path).status == 204
    assert api("DELETE", path).json == NOT_FOUND
    assert api("GET", f"/api/queues/{vhost}/qa").json["policy"] is None


# ---- connections, channels, consumers ------------------------------------------------------


def test_connections_channels_consumers(node: InProcessBroker, api: Callable[..., Answer],
                                        vhost: str) -> None:
    params = pika.ConnectionParameters("127.0.0.1", node.amqp_port, vhost,
                                       client_properties={"connection_name": "tester"})
    conn = pika.BlockingConnection(params)
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=7)
        ch.queue_declare("cq")
        ch.basic_consume("cq", lambda *a: None, consumer_tag="ctag1",
                         arguments={"x-priority": 3})
        conn.process_data_events(0.1)
        local_port = conn._impl._transport._sock.getsockname()[1]
        name = f"127.0.0.1:{local_port} -> 127.0.0.1:{node.amqp_port}"
        mine = [c for c in api("GET", "/api/connections").json if c["name"] == name]
        assert len(mine) == 1
        c = mine[0]
        assert {k: c[k] for k in ("user", "vhost", "channels", "peer_host", "peer_port",
                                  "state", "protocol", "user_provided_name")} == {
            "user": "guest", "vhost": vhost, "channels": 1, "peer_host": "127.0.0.1",
            "peer_port": local_port, "state": "running", "protocol": "AMQP 0-9-1",
            "user_provided_name": "tester"}
        assert c["client_properties"]["product"] == "Pika Python Client Library"
        assert api("GET", f"/api/connections/{q(name)}").json["name"] == name
        assert api("GET", f"/api/vhosts/{vhost}/connections").json[0]["name"] == name
        chans = api("GET", f"/api/connections/{q(name)}/channels").json
        assert [(x["name"], x["number"], x["prefetch_count"], x["consumer_count"])
                for x in chans] == [(f"{name} (1)", 1, 7, 1)]
        consumers = api("GET", f"/api/consumers/{vhost}").json
        assert [(x["consumer_tag"], x["queue"], x["prefetch_count"], x["arguments"],
                 x["ack_required"], x["channel_details"]["connection_name"])
                for x in consumers] == [("ctag1", {"name": "cq", "vhost": vhost}, 7,
                                         {"x-priority": 3}, True, name)]
        cq = api("GET", f"/api/queues/{vhost}/cq").json
        assert cq["consumers"] == 1 and cq["consumer_details"][0]["consumer_tag"] == "ctag1"
        assert api("DELETE", f"/api/connections/{q(name)}").status == 204
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
            for _ in range(50):
                conn.process_data_events(0.05)
        assert (info.value.reply_code, info.value.reply_text) == (
            320, "CONNECTION_FORCED - Closed via management plugin")
    finally:
        if conn.is_open:
            conn.close()
    assert api("DELETE", "/api/connections/nope").json == NOT_FOUND


# ---- definitions ------------------------------------------------------------------


def test_definitions_endpoint(api: Callable[..., Answer], vhost: str) -> None:
    api("PUT", f"/api/queues/{vhost}/dq", {"durable": True})
    doc = api("GET", "/api/definitions").json
    assert {"name": "dq", "vhost": vhost, "durable": True, "auto_delete": False,
            "arguments": {}} in doc["queues"]
    per_vhost = api("GET", f"/api/definitions/{vhost}").json
    assert per_vhost["queues"] == [{"name": "dq", "durable": True, "auto_delete": False,
                                    "arguments": {}}]
    new = f"imp-{uuid.uuid4().hex[:6]}"
    good = {"vhosts": [{"name": new}],
            "exchanges": [{"name": "ix", "vhost": new, "type": "fanout", "durable": True,
                           "auto_delete": False, "internal": False, "arguments": {}}]}
    assert api("POST", "/api/definitions", good).status == 204
    assert api("GET", f"/api/exchanges/{new}/ix").status == 200
    bad = {"vhosts": [{"name": new + "-2"}],
           "exchanges": [{"name": "x", "vhost": new, "type": "nope"}]}
    r = api("POST", "/api/definitions", bad)
    assert r.json == {"error": "bad_request", "reason":
                      f"exchanges[0] (name 'x' in vhost '{new}'): unknown exchange type 'nope'"}
    assert api("GET", f"/api/vhosts/{new}-2").status == 404  # nothing applied
    assert api("POST", "/api/definitions", raw=b"garbage").json == \
        {"error": "bad_request", "reason": "failed_to_parse_json"}
    api("DELETE", f"/api/vhosts/{new}")


def test_message_stats_count_what_clients_did(node: InProcessBroker,
                                              api: Callable[..., Answer], vhost: str) -> None:
    """Every RabbitMQ message_stats counter, with its rate, on the vhost, /api/overview,
    the queue, the exchange and the channels (same workload and figures as RabbitMQ 3.10.8
    gave, checked by hand)."""
    overview_before = api("GET", "/api/overview").json["message_stats"]
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", node.amqp_port,
                                                             vhost))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("ms")
    ch.queue_bind("ms", "amq.direct", "k")
    for _ in range(5):
        ch.basic_publish("amq.direct", "k", b"hello")
    ch.basic_publish("amq.direct", "nowhere", b"x")  # dropped
    with pytest.raises(pika.exceptions.UnroutableError):
        ch.basic_publish("amq.direct", "nowhere", b"x", mandatory=True)  # returned
    ch.basic_ack(ch.basic_get("ms")[0].delivery_tag)
    ch.basic_get("ms", auto_ack=True)
    ch.basic_nack(ch.basic_get("ms")[0].delivery_tag, requeue=True)
    consumer = conn.channel()
    for method, _, _ in consumer.consume("ms", inactivity_timeout=0.5):
        if method is None:
            break
        consumer.basic_ack(method.delivery_tag)
    consumer.cancel()
    assert ch.basic_get("ms") == (None, None, None)
    try:
        every = {"publish": 7, "confirm": 7, "return_unroutable": 1, "drop_unroutable": 1,
                 "deliver": 3, "deliver_no_ack": 0, "get": 2, "get_no_ack": 1,
                 "get_empty": 1, "deliver_get": 6, "redeliver": 1, "ack": 4}

        def counts(stats: dict[str, Any]) -> dict[str, Any]:
            assert all(isinstance(stats[f"{k}_details"]["rate"], float)
                       for k in stats if not k.endswith("_details"))
            return {k: v for k, v in stats.items() if not k.endswith("_details")}

        assert counts(api("GET", f"/api/vhosts/{vhost}").json["message_stats"]) == every
        overview = counts(api("GET", "/api/overview").json["message_stats"])
        assert {k: overview[k] - overview_before.get(k, 0) for k in every} == every
        queue = {k: v for k, v in every.items()
                 if k not in ("confirm", "return_unroutable", "drop_unroutable")}
        queue["publish"] = 5
        assert counts(api("GET", f"/api/queues/{vhost}/ms").json["message_stats"]) == queue
        assert counts(api("GET", f"/api/exchanges/{vhost}/amq.direct").json[
            "message_stats"]) == {"publish_in": 7, "publish_out": 5}
        channels = sorted((c["number"], counts(c["message_stats"]))
                          for c in api("GET", f"/api/vhosts/{vhost}/channels").json)
        assert channels == [
            (1, {"publish": 7, "confirm": 7, "return_unroutable": 1, "drop_unroutable": 1,
                 "deliver": 0, "deliver_no_ack": 0, "get": 2, "get_no_ack": 1,
                 "get_empty": 1, "deliver_get": 3, "redeliver": 0, "ack": 1}),
            (2, {"deliver": 3, "deliver_no_ack": 0, "get": 0, "get_no_ack": 0,
                 "get_empty": 0, "deliver_get": 3, "redeliver": 1, "ack": 3})]
    finally:
        conn.close()
    # closed channels still count for their vhost
    assert counts(api("GET", f"/api/vhosts/{vhost}").json["message_stats"]) == every


# ---- key sets against the reference RabbitMQ -----------------------------------------------

# Fields RabbitMQ shows that describe the Erlang runtime, or statistics this broker does not
# keep; everything else must have the same name in both.
NOT_KEPT: dict[str, set[str]] = {
    "overview": {"churn_rates", "erlang_full_version", "erlang_version",
                 "release_series_support_status"},
    "queue": {"garbage_collection", "reductions", "reductions_details", "idle_since",
              "message_bytes_persistent"},
    "connection": {"garbage_collection", "reductions", "reductions_details"},
    "channel": {"garbage_collection", "reductions", "reductions_details", "idle_since"},
}

#: amqpq's additions (documented): ready messages per backing-queue state
AMQPQ_EXTRA: dict[str, set[str]] = {
    "queue": {"messages_alpha", "messages_beta", "messages_gamma", "messages_delta"},
}


def _reference_up() -> bool:
    r = None
    try:
        r = http(REFERENCE, "GET", "/api/overview")
    except OSError:
        return False
    return r.status == 200 and (r.json or {}).get("product_name") == "RabbitMQ"


def _setup(base: str, amqp_port: int, vh: str) -> pika.BlockingConnection:
    for method, path, body in [
        ("PUT", f"/api/vhosts/{vh}", {}),
        ("PUT", f"/api/exchanges/{vh}/kx", {"type": "direct", "durable": True}),
        ("PUT", f"/api/queues/{vh}/kq", {"durable": True, "arguments": {"x-max-length": 9}}),
        ("POST", f"/api/bindings/{vh}/e/kx/q/kq", {"routing_key": "k"}),
        ("PUT", f"/api/policies/{vh}/kp", {"pattern": "^none$", "definition":
                                          {"max-length": 1}}),
        ("POST", f"/api/exchanges/{vh}/kx/publish", {"properties": {}, "routing_key": "k",
                                                      "payload": "x",
                                                      "payload_encoding": "string"}),
    ]:
        assert http(base, method, path, body).status in (200, 201, 204), (base, path)
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", amqp_port, vh))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=1)
    ch.basic_consume("kq", lambda *a: None, consumer_tag="kc")
    conn.process_data_events(0.2)
    return conn


def _objects(base: str, vh: str) -> dict[str, dict[str, Any]]:
    def first(path: str, pred: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        return next((x for x in http(base, "GET", path).json if pred(x)), {})

    return {
        "overview": http(base, "GET", "/api/overview").json,
        "vhost": first("/api/vhosts", lambda x: x["name"] == vh),
        "user": first("/api/users", lambda x: x["name"] == "guest"),
        "permission": first("/api/permissions", lambda x: x["vhost"] == vh),
        "exchange": first(f"/api/exchanges/{vh}", lambda x: x["name"] == "kx"),
        "exchange_single": http(base, "GET", f"/api/exchanges/{vh}/kx").json,
        "queue": first(f"/api/queues/{vh}", lambda x: x["name"] == "kq"),
        "queue_single": http(base, "GET", f"/api/queues/{vh}/kq").json,
        "binding": first(f"/api/bindings/{vh}", lambda x: x["source"] == "kx"),
        "policy": first(f"/api/policies/{vh}", lambda x: True),
        "connection": first(f"/api/vhosts/{vh}/connections", lambda x: True),
        "channel": first(f"/api/vhosts/{vh}/channels", lambda x: True),
        "consumer": first(f"/api/consumers/{vh}", lambda x: True),
        "definitions": http(base, "GET", "/api/definitions").json,
    }


@pytest.mark.reference
def test_key_sets_match_rabbitmq(node: InProcessBroker) -> None:
    if not _reference_up():
        pytest.skip("reference RabbitMQ not reachable at " + REFERENCE)
    vh = f"amqpq-keys-{uuid.uuid4().hex[:6]}"
    ref_conn = _setup(REFERENCE, 5672, vh)
    our_conn = _setup(node.url, node.amqp_port, vh)
    try:
        deadline = time.monotonic() + 15
        while True:  # RabbitMQ fills queue/connection stats every 5 s
            ref = _objects(REFERENCE, vh)
            ready = ("messages" in ref["queue"] and "channels" in ref["connection"]
                     and "backing_queue_status" in ref["queue"]
                     and "backing_queue_status" in ref["queue_single"]
                     and "consumer_count" in ref["channel"] and ref["consumer"]
                     and "message_stats" in ref["exchange"])
            if ready or time.monotonic() > deadline:
                break
            ref_conn.process_data_events(0.5)
        ours = _objects(node.url, vh)
        differences = {}
        for kind, ref_obj in ref.items():
            expected = set(ref_obj) - NOT_KEPT.get(kind.removesuffix("_single"), set())
            keys = set(ours[kind]) - AMQPQ_EXTRA.get(kind.removesuffix("_single"), set())
            if keys != expected:
                differences[kind] = {"missing": sorted(expected - keys),
                                     "extra": sorted(keys - expected)}
        assert differences == {}
        # backing_queue_status: RabbitMQ's keys
        ref_bqs, our_bqs = ref["queue"]["backing_queue_status"], ours["queue"][
            "backing_queue_status"]
        assert set(our_bqs) == set(ref_bqs)
        same_type = sorted(set(our_bqs) - {"target_ram_count"})  # "infinity" or a count
        assert [type(our_bqs[k]) for k in same_type] == [type(ref_bqs[k]) for k in same_type]
        assert our_bqs["delta"][0] == ref_bqs["delta"][0] == "delta"
    finally:
        for conn in (ref_conn, our_conn):
            if conn.is_open:
                conn.close()
        http(REFERENCE, "DELETE", f"/api/vhosts/{vh}")
        http(node.url, "DELETE", f"/api/vhosts/{vh}")


# ---- /api/nodes (field names as RabbitMQ 3.10.8; its 401 text for non-monitor users) ----------


NODE_FIELDS = {"name", "type", "running", "os_pid", "uptime", "mem_used", "mem_limit",
          "mem_alarm", "disk_free", "disk_free_limit", "disk_free_alarm", "fd_used",
          "fd_total", "sockets_used", "sockets_total", "proc_used", "proc_total",
          "processors", "rates_mode", "partitions", "mem_calculation_strategy"}


def test_the_one_node_and_its_resources(api: Callable[..., Answer],
                                        node: InProcessBroker) -> None:
    r = api("GET", "/api/nodes")
    assert r.status == 200 and len(r.json) == 1
    n = r.json[0]
    assert NODE_FIELDS <= set(n)
    assert n["running"] is True and n["type"] == "disc"
    assert n["mem_used"] > 0 and n["mem_limit"] > n["mem_used"]
    assert n["disk_free"] > 0 and n["fd_used"] > 0 and n["fd_total"] >= n["fd_used"]
    assert n["sockets_used"] == node.run(lambda: len(node.server.broker.connections))
    assert n["mem_used_details"] == {"rate": 0.0}
    assert api("GET", f"/api/nodes/{n['name']}").json["name"] == n["name"]
    assert api("GET", "/api/nodes/nosuch@host").status == 404  # RabbitMQ answers 500


def test_alarm_flags_follow_the_broker(api: Callable[..., Answer],
                                       node: InProcessBroker) -> None:
    node.run(lambda: node.server.broker.alarms.write_failed(True))  # a write failed: disk alarm
    try:
        n = api("GET", "/api/nodes").json[0]
        assert n["disk_free_alarm"] is True and n["mem_alarm"] is False
        assert api("GET", "/api/health/checks/alarms").status == 503
    finally:
        node.run(lambda: node.server.broker.alarms.write_failed(False))
    assert api("GET", "/api/nodes").json[0]["disk_free_alarm"] is False


def test_nodes_need_the_monitoring_tag(api: Callable[..., Answer]) -> None:
    user = f"u-{uuid.uuid4().hex[:6]}"
    assert api("PUT", f"/api/users/{user}", {"password": "pw", "tags": "management"}).status \
        == 201
    try:
        r = api("GET", "/api/nodes", auth=(user, "pw"))
        assert (r.status, r.json) == (401, {"error": "not_authorised",
                                            "reason": "Not monitor user"})
        api("PUT", f"/api/users/{user}", {"password": "pw", "tags": "monitoring"})
        assert api("GET", "/api/nodes", auth=(user, "pw")).status == 200
    finally:
        api("DELETE", f"/api/users/{user}")


def test_message_rates_come_from_successive_reads(api: Callable[..., Answer], vhost: str) -> None:
    assert api("PUT", f"/api/queues/{q(vhost)}/rq", {"durable": False}).status == 201
    first = api("GET", f"/api/queues/{q(vhost)}/rq").json
    assert first["message_stats"]["publish_details"] == {"rate": 0.0}  # no sample before
    for i in range(20):
        assert publish(api, vhost, "amq.default", "rq", f"m{i}")
    time.sleep(0.5)
    later = api("GET", f"/api/queues/{q(vhost)}/rq").json
    assert later["message_stats"]["publish"] == 20
    assert later["message_stats"]["publish_details"]["rate"] > 0.0
    assert later["messages_ready_details"]["rate"] > 0.0


# ---- /api/vhost-limits, /api/user-limits (statuses and texts as RabbitMQ 3.10.8) --------------


def test_vhost_limits_set_read_enforce_clear(api: Callable[..., Answer], vhost: str,
                                             node: InProcessBroker) -> None:
    path = f"/api/vhost-limits/{q(vhost)}"
    assert api("GET", path).json == []
    assert api("PUT", f"{path}/max-queues", {"value": 1}).status == 204
    assert api("GET", path).json == [{"vhost": vhost, "value": {"max-queues": 1}}]
    assert {"vhost": vhost, "value": {"max-queues": 1}} in api("GET", "/api/vhost-limits").json
    assert api("PUT", f"/api/queues/{q(vhost)}/first", {}).status == 201
    params = pika.ConnectionParameters("127.0.0.1", node.amqp_port, vhost,
                                       pika.PlainCredentials("guest", "guest"))
    with pika.BlockingConnection(params) as conn:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            conn.channel().queue_declare("second")
    assert (info.value.reply_code, info.value.reply_text) == (
        406, f"PRECONDITION_FAILED - cannot declare queue 'second': queue limit in vhost "
             f"'{vhost}' (1) is reached")
    assert api("DELETE", f"{path}/max-queues").status == 204
    assert api("GET", path).json == []
    assert api("PUT", f"/api/queues/{q(vhost)}/second", {}).status == 201


def test_vhost_limit_errors(api: Callable[..., Answer], vhost: str) -> None:
    path = f"/api/vhost-limits/{q(vhost)}"
    r = api("PUT", f"{path}/max-foo", {"value": 1})
    assert (r.status, r.json["reason"]) == (
        400, 'Validation failed\n\nUnrecognised terms [{<<"max-foo">>,1}] in limits\n')
    r = api("PUT", f"{path}/max-queues", {"value": "x"})
    assert (r.status, r.json["reason"]) == (
        400, 'Validation failed\n\nmax-queues should be a number, actually was <<"x">>\n')
    r = api("PUT", f"{path}/max-queues", {})
    assert (r.status, r.json["reason"]) == (400, "[{key_missing,value}]")
    r = api("PUT", "/api/vhost-limits/no-such-vhost/max-queues", {"value": 1})
    assert (r.status, r.json) == (404, {"error": "not_found", "reason": "vhost_not_found"})
    assert api("GET", "/api/vhost-limits/no-such-vhost").status == 404


def test_user_limits_set_read_clear_and_errors(api: Callable[..., Answer]) -> None:
    user = f"u-{uuid.uuid4().hex[:6]}"
    assert api("PUT", f"/api/users/{user}", {"password": "pw", "tags": ""}).status == 201
    try:
        assert api("PUT", f"/api/user-limits/{user}/max-channels", {"value": 2}).status == 204
        assert api("GET", f"/api/user-limits/{user}").json == [
            {"user": user, "value": {"max-channels": 2}}]
        assert api("GET", f"/api/users/{user}").json["limits"] == {"max-channels": 2}
        r = api("PUT", f"/api/user-limits/{user}/max-foo", {"value": 1})
        assert (r.status, r.json["reason"]) == (
            400, 'Unrecognised terms [{<<"max-foo">>,1}] in user-limits')
        r = api("PUT", "/api/user-limits/no-such-user/max-channels", {"value": 1})
        assert (r.status, r.json["reason"]) == (400, ["no_such_user", "no-such-user"])
        assert api("DELETE", f"/api/user-limits/{user}/max-channels").status == 204
        assert api("GET", f"/api/user-limits/{user}").json == []
    finally:
        api("DELETE", f"/api/users/{user}")


def test_clearing_a_limit_that_is_not_set_is_204(api: Callable[..., Answer], vhost: str) -> None:
    assert api("DELETE", f"/api/vhost-limits/{q(vhost)}/max-queues").status == 204
    assert api("DELETE", "/api/user-limits/guest/max-channels").status == 204
    assert api("DELETE", "/api/user-limits/no-such-user/max-channels").status == 404


def test_list_query_parameters_over_http(api: Callable[..., Answer], vhost: str) -> None:
    for name in ("lq.b", "lq.a", "lq.c"):
        assert api("PUT", f"/api/queues/{q(vhost)}/{name}", {}).status == 201
    rows = api("GET", f"/api/queues/{q(vhost)}?columns=name,durable&sort=name"
                      "&sort_reverse=true").json
    assert rows == [{"name": "lq.c", "durable": False}, {"name": "lq.b", "durable": False},
                    {"name": "lq.a", "durable": False}]
    page = api("GET", f"/api/queues/{q(vhost)}?page=1&page_size=2&name=LQ&sort=name").json
    assert [i["name"] for i in page["items"]] == ["lq.a", "lq.b"]
    assert (page["filtered_count"], page["page_count"], page["total_count"]) == (3, 2, 3)
    r = api("GET", f"/api/queues/{q(vhost)}?page=5&page_size=2")
    assert (r.status, r.json["error"]) == (400, "page_out_of_range")


def test_quorum_queue_over_http(api: Callable[..., Answer], vhost: str) -> None:
    r = api("PUT", f"/api/queues/{q(vhost)}/qq",
            {"durable": True, "arguments": {"x-queue-type": "quorum"}})
    assert r.status == 201
    got = api("GET", f"/api/queues/{q(vhost)}/qq").json
    assert got["type"] == "quorum"
    assert got["members"] == [got["node"]] and got["leader"] == got["node"]
    assert got["online"] == [got["node"]]
    r = api("PUT", f"/api/queues/{q(vhost)}/qq2",
            {"durable": False, "arguments": {"x-queue-type": "quorum"}})
    assert (r.status, r.json["reason"]) == (
        400, f"invalid property 'non-durable' for queue 'qq2' in vhost '{vhost}'")


# ---- /api/parameters (RabbitMQ 3.10.8 without plugins) -------------------------------------


def test_parameters_list_vhost_limits_and_refuse_unknown_components(
        api: Callable[..., Answer], vhost: str) -> None:
    assert api("PUT", f"/api/vhost-limits/{q(vhost)}/max-queues", {"value": 3}).status == 204
    row = {"value": {"max-queues": 3}, "vhost": vhost, "component": "vhost-limits",
           "name": "limits"}
    assert row in api("GET", "/api/parameters").json
    assert api("GET", f"/api/parameters/vhost-limits/{q(vhost)}").json == [row]
    assert api("GET", f"/api/parameters/vhost-limits/{q(vhost)}/limits").json == row
    r = api("PUT", f"/api/parameters/sharding/{q(vhost)}/up", {"value": {"uri": "amqp://x"}})
    assert (r.status, r.json["reason"]) == (
        400, "Validation failed\n\ncomponent sharding not found\n")
    assert api("GET", f"/api/parameters/sharding/{q(vhost)}/up").status == 404
    r = api("PUT", f"/api/parameters/vhost-limits/{q(vhost)}/limits",
            {"value": {"max-connections": 5}})
    assert r.status == 204
    assert api("GET", f"/api/vhost-limits/{q(vhost)}").json == [
        {"vhost": vhost, "value": {"max-connections": 5}}]
    assert api("DELETE", f"/api/parameters/vhost-limits/{q(vhost)}/limits").status == 204
    assert api("GET", f"/api/vhost-limits/{q(vhost)}").json == []
    assert api("GET", "/api/global-parameters").status == 200
    assert api("GET", "/api/global-parameters/nosuch").status == 404


def test_operator_policies_over_http(api: Callable[..., Answer], vhost: str) -> None:
    path = f"/api/operator-policies/{q(vhost)}/cap"
    body = {"pattern": "^op\\.", "definition": {"max-length": 2}, "apply-to": "queues"}
    assert api("PUT", path, body).status == 201
    assert api("GET", path).json == {"vhost": vhost, "name": "cap", "pattern": "^op\\.",
                                     "apply-to": "queues", "definition": {"max-length": 2},
                                     "priority": 0}
    assert api("PUT", f"/api/queues/{q(vhost)}/op.q",
               {"arguments": {"x-max-length": 5}}).status == 201
    got = api("GET", f"/api/queues/{q(vhost)}/op.q").json
    assert got["operator_policy"] == "cap"
    assert got["effective_policy_definition"] == {"max-length": 2}
    r = api("PUT", f"/api/operator-policies/{q(vhost)}/bad",
            {"pattern": ".*", "definition": {"foo": 1}})
    assert (r.status, r.json["reason"]) == (
        400, 'Validation failed\n\n[{<<"foo">>,1}] are not recognised policy settings\n')
    assert api("DELETE", path).status == 204
    assert api("DELETE", path).status == 404
