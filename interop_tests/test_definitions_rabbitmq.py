"""amqpq's definitions export imports into the reference RabbitMQ (issue [4/9]).

Skipped unless RabbitMQ's management API answers on http://127.0.0.1:15672 (guest/guest);
everything is created in a vhost of its own, deleted afterwards.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
import uuid
from typing import Any

import pytest

from broker.broker import Broker
from broker.config import BrokerConfig
from exchanges.binding import Destination
from vhosts.definitions import export_definitions

API = "http://127.0.0.1:15672/api"
AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()


def _call(method: str, path: str, body: Any = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(API + path, data=data, method=method,
                                 headers={"Authorization": AUTH,
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        raw = resp.read()
    return json.loads(raw) if raw else None


def _reachable() -> bool:
    try:
        _call("GET", "/overview")
        return True
    except (OSError, urllib.error.URLError):
        return False


pytestmark = [pytest.mark.timeout(60),
              pytest.mark.skipif(not _reachable(), reason="reference RabbitMQ API not running")]


def test_our_export_imports_into_rabbitmq() -> None:
    vhost_name = f"amqpq-export-{uuid.uuid4().hex[:8]}"
    broker = Broker(BrokerConfig())
    vhost = broker.add_vhost(vhost_name)
    broker.users.add("amqpq-export-user", "pw", ["management"])
    broker.permissions.set("amqpq-export-user", vhost_name, "^x", ".*", ".*")
    vhost.declare_exchange("events", "topic", durable=True)
    vhost.declare_queue("orders", durable=True, arguments={"x-max-length": 10})
    vhost.bind(Destination("queue", "orders"), "events", "order.#")
    vhost.set_policy("ttl", "^orders$", {"message-ttl": 60000}, priority=1, apply_to="queues")
    doc = export_definitions(broker)
    # only what belongs to the test vhost/user goes to the shared reference broker
    doc["vhosts"] = [v for v in doc["vhosts"] if v["name"] == vhost_name]
    doc["users"] = [u for u in doc["users"] if u["name"] == "amqpq-export-user"]
    doc["permissions"] = [p for p in doc["permissions"] if p["vhost"] == vhost_name]
    try:
        _call("POST", "/definitions", doc)
        enc = urllib.request.quote(vhost_name, safe="")
        queue = _call("GET", f"/queues/{enc}/orders")
        assert queue["durable"] is True and queue["arguments"] == {"x-max-length": 10}
        assert _call("GET", f"/exchanges/{enc}/events")["type"] == "topic"
        bindings = _call("GET", f"/bindings/{enc}/e/events/q/orders")
        assert [b["routing_key"] for b in bindings] == ["order.#"]
        policy = _call("GET", f"/policies/{enc}/ttl")
        assert policy["definition"] == {"message-ttl": 60000}
        perms = _call("GET", f"/permissions/{enc}/amqpq-export-user")
        assert (perms["configure"], perms["write"], perms["read"]) == ("^x", ".*", ".*")
        # the password hash we wrote is one RabbitMQ accepts
        req = urllib.request.Request(API + "/whoami", headers={
            "Authorization": "Basic " + base64.b64encode(b"amqpq-export-user:pw").decode()})
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert json.loads(resp.read())["name"] == "amqpq-export-user"
    finally:
        for path in (f"/vhosts/{urllib.request.quote(vhost_name, safe='')}",
                     "/users/amqpq-export-user"):
            try:
                _call("DELETE", path)
            except urllib.error.HTTPError:
                pass
