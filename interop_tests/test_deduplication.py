"""Message deduplication with pika (the ``rabbitmq-message-deduplication`` plugin's API): the
``x-message-deduplication`` exchange and queues declared with ``x-message-deduplication``
take one message per ``x-deduplication-header`` value; duplicates are confirmed (acked) and,
published mandatory, not returned (pika's BlockingChannel raises UnroutableError or
NackError otherwise). Skips on a broker without the exchange type (RabbitMQ without the
plugin).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from interop_tests.conftest import channel_with_exchange_type

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def channel(broker_url: str) -> Iterator[object]:
    conn, ch = channel_with_exchange_type(broker_url, "x-message-deduplication",
                                          {"x-cache-size": 1})
    yield ch
    if conn.is_open:
        conn.close()


def _props(key: str) -> pika.BasicProperties:
    return pika.BasicProperties(headers={"x-deduplication-header": key})


def _drain(ch: object, queue: str) -> list[bytes]:
    out = []
    while True:
        method, _, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            return out
        out.append(body)


def test_exchange_routes_one_message_per_header_value(channel: object) -> None:
    ch = channel
    x = f"dedup-{uuid.uuid4().hex[:8]}"
    ch.exchange_declare(x, "x-message-deduplication", auto_delete=True,
                        arguments={"x-cache-size": 100, "x-cache-ttl": 60_000})
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, x)
    ch.basic_publish(x, "", b"first", _props("order-1"), mandatory=True)
    ch.basic_publish(x, "", b"again", _props("order-1"), mandatory=True)  # acked, not returned
    ch.basic_publish(x, "", b"other", _props("order-2"), mandatory=True)
    ch.basic_publish(x, "", b"no-header", mandatory=True)
    assert _drain(ch, q) == [b"first", b"other", b"no-header"]


def test_queue_takes_one_message_per_header_value(channel: object) -> None:
    ch = channel
    q = ch.queue_declare("", exclusive=True,
                         arguments={"x-message-deduplication": True}).method.queue
    ch.basic_publish("", q, b"first", _props("k"), mandatory=True)
    ch.basic_publish("", q, b"again", _props("k"), mandatory=True)
    assert _drain(ch, q) == [b"first"]
    ch.basic_publish("", q, b"after", _props("k"), mandatory=True)  # the first one left
    assert _drain(ch, q) == [b"after"]


def test_missing_cache_size_is_406(channel: object) -> None:
    with pytest.raises(ChannelClosedByBroker) as err:
        channel.exchange_declare(f"dedup-{uuid.uuid4().hex[:8]}", "x-message-deduplication")
    assert err.value.reply_code == 406
    assert "'x-cache-size' must be an integer greater than 0" in err.value.reply_text
