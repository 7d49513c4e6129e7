"""``POST /api/queues/{vhost}/{name}/move`` (the web UI's "Move messages"): ready messages go
to another queue of the vhost, each acked on the source only once the destination took it;
a destination that refuses (``x-overflow: reject-publish``) stops the move and keeps the
message on the source. Checked with pika against a broker process.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pika
import pytest

from tests.support.broker_process import BrokerProcess
from tests.ui.support import Http


@pytest.fixture
def channel(ui_broker: BrokerProcess) -> Iterator[Any]:
    conn = pika.BlockingConnection(pika.URLParameters(ui_broker.url))
    ch = conn.channel()
    yield ch
    conn.close()


def fill(ch: Any, queue: str, n: int, **declare: Any) -> None:
    ch.queue_declare(queue, **declare)
    ch.queue_purge(queue)
    for i in range(n):
        ch.basic_publish("", queue, f"m{i}".encode(), pika.BasicProperties(
            content_type="text/plain", headers={"i": i}))


def drain(ch: Any, queue: str) -> list[tuple[bytes, str, Any]]:
    out = []
    while True:
        method, props, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            return out
        out.append((body, method.routing_key, props.headers))


def test_moves_every_ready_message_keeping_order_and_properties(http: Http, channel: Any
                                                                ) -> None:
    fill(channel, "mv-a", 5)
    fill(channel, "mv-b", 0)
    assert http.json("POST", "/api/queues/%2F/mv-a/move", {"destination": "mv-b"}) == \
        {"moved": 5, "remaining": 0}
    moved = drain(channel, "mv-b")
    assert [m[0] for m in moved] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert moved[2][1] == "mv-b"  # republished to the default exchange, as a shovel does
    assert moved[2][2] == {"i": 2}
    assert drain(channel, "mv-a") == []


def test_count_limits_the_move(http: Http, channel: Any) -> None:
    fill(channel, "mv-c", 4)
    fill(channel, "mv-d", 0)
    assert http.json("POST", "/api/queues/%2F/mv-c/move", {"destination": "mv-d",
                                                            "count": 3}) == \
        {"moved": 3, "remaining": 1}
    assert [m[0] for m in drain(channel, "mv-c")] == [b"m3"]


def test_a_refusing_destination_keeps_the_rest_on_the_source(http: Http, channel: Any) -> None:
    fill(channel, "mv-src", 3)
    fill(channel, "mv-full", 0, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    assert http.json("POST", "/api/queues/%2F/mv-src/move", {"destination": "mv-full"}) == \
        {"moved": 1, "remaining": 2}
    assert [m[0] for m in drain(channel, "mv-full")] == [b"m0"]
    assert [m[0] for m in drain(channel, "mv-src")] == [b"m1", b"m2"]


def test_bad_requests(http: Http, channel: Any) -> None:
    fill(channel, "mv-e", 1)
    status, _, body = http.call("POST", "/api/queues/%2F/mv-e/move", {"destination": "nope"})
    assert status == 404
    assert json.loads(body) == {"error": "not_found", "reason": "no queue 'nope' in vhost '/'"}
    status, _, body = http.call("POST", "/api/queues/%2F/mv-e/move", {"destination": "mv-e"})
    assert status == 400 and "same queue" in json.loads(body)["reason"]
    status, _, body = http.call("POST", "/api/queues/%2F/mv-e/move", {})
    assert status == 400 and json.loads(body)["reason"] == "[{key_missing,destination}]"
    status, _, _ = http.call("POST", "/api/queues/%2F/no-such/move", {"destination": "mv-e"})
    assert status == 404
    assert [m[0] for m in drain(channel, "mv-e")] == [b"m0"]


def test_needs_read_on_the_source(http: Http, channel: Any, ui_broker: BrokerProcess) -> None:
    fill(channel, "mv-f", 1)
    fill(channel, "mv-g", 0)
    http.json("PUT", "/api/users/mv-user", {"password": "pw", "tags": "management"})
    http.json("PUT", "/api/permissions/%2F/mv-user",
              {"configure": "", "write": ".*", "read": "^mv-g$"})
    assert ui_broker.management_port is not None
    other = Http(ui_broker.management_port, "mv-user", "pw")
    status, _, body = other.call("POST", "/api/queues/%2F/mv-f/move", {"destination": "mv-g"})
    assert status == 401 and json.loads(body)["reason"] == "Access refused."
    assert [m[0] for m in drain(channel, "mv-f")] == [b"m0"]
