"""The consistent-hash exchange with pika, the same script against amqpq and against the
reference RabbitMQ's ``rabbitmq_consistent_hash_exchange`` plugin (that case skips when the
reference is not running or the plugin is not enabled): each message reaches exactly one
queue, the same key always the same queue, ``hash-header`` and ``hash-property`` choose the
input, and bad weights and arguments get the plugin's texts.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from interop_tests.conftest import channel_with_exchange_type, url_for

pytestmark = pytest.mark.timeout(60)



@pytest.fixture(params=["amqpq", "rabbitmq"])
def channel(request: pytest.FixtureRequest, broker_url: str) -> Iterator[object]:
    conn, ch = channel_with_exchange_type(url_for(request.param, broker_url), "x-consistent-hash")
    yield ch
    if conn.is_open:
        conn.close()


def _setup(ch: object, arguments: dict | None = None, queues: int = 4) -> tuple[str, list[str]]:
    x = f"chx-{uuid.uuid4().hex[:8]}"
    ch.exchange_declare(x, "x-consistent-hash", auto_delete=True, arguments=arguments)
    names = []
    for i in range(queues):
        q = ch.queue_declare(f"{x}-q{i}", exclusive=True).method.queue
        ch.queue_bind(q, x, "1")
        names.append(q)
    return x, names


def _drain(ch: object, queues: list[str]) -> dict[str, list[bytes]]:
    out: dict[str, list[bytes]] = {}
    for q in queues:
        bodies = []
        while True:
            method, _, body = ch.basic_get(q, auto_ack=True)
            if method is None:
                break
            bodies.append(body)
        out[q] = bodies
    return out


def test_each_message_reaches_one_queue_and_a_key_always_the_same(channel: object) -> None:
    x, queues = _setup(channel)
    for i in range(200):
        for _copy in range(2):  # every key twice: both copies must land together
            channel.basic_publish(x, f"key-{i}", f"key-{i}".encode(), mandatory=True)
    got = _drain(channel, queues)
    where = {}
    for q, bodies in got.items():
        for body in bodies:
            assert where.setdefault(body, q) == q, f"{body!r} reached two queues"
    counts = Counter(body for bodies in got.values() for body in bodies)
    assert counts == {f"key-{i}".encode(): 2 for i in range(200)}
    assert sum(1 for bodies in got.values() if bodies) >= 2  # spread, not all in one


@pytest.mark.parametrize("arguments", [{"hash-header": "tenant"},
                                       {"hash-property": "message_id"}])
def test_hash_header_and_property_choose_what_is_hashed(channel: object,
                                                       arguments: dict) -> None:
    x, queues = _setup(channel, arguments)
    for tenant in ("acme", "globex", "initech", "umbrella"):
        for i in range(5):  # five routing keys, one tenant: one queue
            props = pika.BasicProperties(headers={"tenant": tenant}, message_id=tenant)
            channel.basic_publish(x, f"rk-{i}", tenant.encode(), props, mandatory=True)
    got = _drain(channel, queues)
    for tenant in (b"acme", b"globex", b"initech", b"umbrella"):
        holders = [q for q, bodies in got.items() if tenant in bodies]
        assert len(holders) == 1 and got[holders[0]].count(tenant) == 5


@pytest.mark.parametrize(("weight", "text"), [
    ("abc", 'PRECONDITION_FAILED - The binding key must be an integer: <<"abc">>'),
    ("0", "PRECONDITION_FAILED - The binding key must be greater than 0"),
])
def test_a_weight_that_is_not_a_positive_integer_is_refused(channel: object, weight: str,
                                                            text: str) -> None:
    x, _ = _setup(channel, queues=0)
    q = channel.queue_declare("", exclusive=True).method.queue
    with pytest.raises(ChannelClosedByBroker) as err:
        channel.queue_bind(q, x, weight)
    assert (err.value.reply_code, err.value.reply_text) == (406, text)


@pytest.mark.parametrize(("arguments", "text"), [
    ({"hash-header": "h", "hash-property": "message_id"},
     "PRECONDITION_FAILED - hash-header and hash-property are mutually exclusive"),
    ({"hash-property": "nope"}, "PRECONDITION_FAILED - Unsupported property: nope"),
])
def test_bad_arguments_are_refused(channel: object, arguments: dict, text: str) -> None:
    with pytest.raises(ChannelClosedByBroker) as err:
        channel.exchange_declare(f"chx-bad-{uuid.uuid4().hex[:6]}", "x-consistent-hash",
                                 arguments=arguments)
    assert (err.value.reply_code, err.value.reply_text) == (406, text)
