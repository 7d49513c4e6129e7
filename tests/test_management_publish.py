"""The HTTP API's publish goes through the vhost's one publish pipeline, as Basic.Publish:
sender-selected distribution (CC/BCC) and queue limits apply, and a queue's refusal is
RabbitMQ's 400 "rejected". The same requests run against the reference RabbitMQ's API when
it answers on 127.0.0.1:15672 (that case skips otherwise).

Source: RabbitMQ ``rabbit_mgmt_wm_exchange_publish.erl`` (mandatory publish with confirms).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from test_management_api import REFERENCE, Answer, InProcessBroker, http


@pytest.fixture(scope="module")
def amqpq() -> Iterator[str]:
    b = InProcessBroker()
    b.start()
    yield b.url
    b.stop()


@pytest.fixture(params=["amqpq", "rabbitmq"])
def base(request: pytest.FixtureRequest, amqpq: str) -> str:
    if request.param == "amqpq":
        return amqpq
    try:
        if http(REFERENCE, "GET", "/api/overview").status != 200:
            raise OSError("not 200")
    except OSError as exc:
        pytest.skip(f"reference RabbitMQ API not reachable: {exc}")
    return REFERENCE


def _queue(api: Callable[..., Answer], name: str, arguments: dict[str, Any]) -> None:
    r = api("PUT", f"/api/queues/%2F/{name}", {"durable": False, "arguments": arguments})
    assert r.status in (201, 204), r.raw


def _publish(api: Callable[..., Answer], key: str, headers: dict[str, Any] | None = None,
             payload: str = "m") -> Answer:
    props = {"headers": headers} if headers else {}
    return api("POST", "/api/exchanges/%2F/amq.default/publish", {
        "properties": props, "routing_key": key, "payload": payload,
        "payload_encoding": "string"})


def _bodies(api: Callable[..., Answer], name: str) -> list[str]:
    r = api("POST", f"/api/queues/%2F/{name}/get", {
        "count": 10, "ackmode": "ack_requeue_false", "encoding": "auto"})
    assert r.status == 200, r.raw
    return [m["payload"] for m in r.json]


@pytest.fixture
def api(base: str) -> Iterator[Callable[..., Answer]]:
    made: list[str] = []

    def call(method: str, path: str, body: Any = None) -> Answer:
        if method == "PUT" and path.startswith("/api/queues/"):
            made.append(path)
        return http(base, method, path, body)

    yield call
    for path in made:
        http(base, "DELETE", path)


def test_a_queue_that_refuses_the_message_is_a_400_rejected(api: Callable[..., Answer]
                                                             ) -> None:
    name = f"pub-rej-{uuid.uuid4().hex[:8]}"
    _queue(api, name, {"x-max-length": 1, "x-overflow": "reject-publish"})
    first, second = _publish(api, name), _publish(api, name)
    assert (first.status, first.json) == (200, {"routed": True})
    assert (second.status, second.json) == (400, {
        "error": "bad_request",
        "reason": "rejected Unable to publish message. Check queue limits."})


def test_cc_and_bcc_headers_route_the_message(api: Callable[..., Answer]) -> None:
    cc, bcc = f"pub-cc-{uuid.uuid4().hex[:8]}", f"pub-bcc-{uuid.uuid4().hex[:8]}"
    _queue(api, cc, {})
    _queue(api, bcc, {})
    r = _publish(api, "no-such-queue", {"CC": [cc], "BCC": [bcc]}, payload="copied")
    assert (r.status, r.json) == (200, {"routed": True})
    assert (_bodies(api, cc), _bodies(api, bcc)) == (["copied"], ["copied"])
    assert _publish(api, "no-such-queue").json == {"routed": False}
