"""kombu over py-amqp against the broker: Producer to a direct Exchange, SimpleQueue, and a
Consumer driven by ``drain_events(timeout=...)``.
"""

from __future__ import annotations

import time

import pytest
from kombu import Connection, Consumer, Exchange, Producer, Queue

pytestmark = pytest.mark.timeout(30)

WAIT = 5.0


def connect(broker_url: str) -> Connection:
    conn = Connection(broker_url, connect_timeout=5, transport_options={"confirm_publish": True})
    conn.connect()
    assert conn.transport.driver_type == "amqp"
    assert conn.transport.driver_name == "py-amqp"
    return conn


def drain_until(conn: Connection, predicate, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError("timed out waiting for deliveries")
        try:
            conn.drain_events(timeout=min(0.5, remaining))
        except TimeoutError:
            pass


def test_producer_direct_exchange_and_consumer(broker_url, unique_name, cleanup):
    exchange = Exchange(cleanup.exchange(unique_name("direct")), type="direct", durable=False)
    queue = Queue(
        cleanup.queue(unique_name("q")), exchange=exchange, routing_key="jobs", durable=False
    )
    other = Queue(
        cleanup.queue(unique_name("other")), exchange=exchange, routing_key="other", durable=False
    )

    with connect(broker_url) as conn:
        channel = conn.channel()
        queue(channel).declare()
        other(channel).declare()
        producer = Producer(channel, exchange=exchange, serializer="json")
        for i in range(20):
            producer.publish({"n": i, "kind": "job"}, routing_key="jobs")
        producer.publish({"n": -1}, routing_key="nobody")  # unroutable: dropped
        producer.publish(
            b"raw-bytes",
            routing_key="other",
            content_type="application/data",
            content_encoding="binary",
            headers={"h": "v"},
        )

        received = []

        def on_message(body, message):
            received.append((body, message.delivery_info["routing_key"], message.content_type))
            message.ack()

        with Consumer(channel, queues=[queue], callbacks=[on_message], accept=["json"]):
            drain_until(conn, lambda: len(received) >= 20)
            # nothing more arrives
            with pytest.raises(TimeoutError):
                conn.drain_events(timeout=0.3)

        assert [body for body, _, _ in received] == [{"n": i, "kind": "job"} for i in range(20)]
        assert {key for _, key, _ in received} == {"jobs"}
        assert {ctype for _, _, ctype in received} == {"application/json"}

        raw = other(channel).get(no_ack=True, accept=["application/data"])
        assert raw.body == b"raw-bytes"
        assert raw.headers == {"h": "v"}
        assert other(channel).get(no_ack=True) is None
        assert queue(channel).queue_declare(passive=True).message_count == 0


def test_simple_queue_put_get(broker_url, unique_name, cleanup):
    name = unique_name("simple")
    cleanup.queue(name)
    cleanup.exchange(name)  # SimpleQueue declares a direct exchange of the same name

    with connect(broker_url) as conn:
        simple = conn.SimpleQueue(name)
        try:
            for i in range(3):
                simple.put({"i": i, "text": "héllo"})
            assert simple.qsize() == 3

            message = simple.get(block=True, timeout=WAIT)
            assert message.payload == {"i": 0, "text": "héllo"}
            message.requeue()

            got = []
            for _ in range(3):
                message = simple.get(block=True, timeout=WAIT)
                got.append((message.payload["i"], message.delivery_info["redelivered"]))
                message.ack()
            # SimpleQueue consumes without a prefetch limit, so 1 and 2 may already sit in
            # kombu's buffer when 0 is requeued: only the set is the broker's doing.
            assert sorted(got) == [(0, True), (1, False), (2, False)]

            with pytest.raises(simple.Empty):
                simple.get(block=False)
            with pytest.raises(simple.Empty):
                simple.get(block=True, timeout=0.3)
            assert simple.qsize() == 0
        finally:
            simple.close()


def test_consumer_prefetch_and_reject(broker_url, unique_name, cleanup):
    exchange = Exchange(cleanup.exchange(unique_name("direct")), type="direct", durable=False)
    queue = Queue(
        cleanup.queue(unique_name("q")), exchange=exchange, routing_key="rk", durable=False
    )

    with connect(broker_url) as conn:
        channel = conn.channel()
        queue(channel).declare()
        producer = Producer(channel, exchange=exchange, serializer="json")
        for i in range(6):
            producer.publish({"i": i}, routing_key="rk")

        seen = []

        def on_message(body, message):
            seen.append((body["i"], message.delivery_info["redelivered"]))
            if body["i"] % 2:
                message.reject(requeue=False)  # odd ones are dropped
            elif not message.delivery_info["redelivered"]:
                message.requeue()  # even ones come back once, redelivered
            else:
                message.ack()

        consumer_channel = conn.channel()
        with Consumer(
            consumer_channel,
            queues=[queue],
            callbacks=[on_message],
            accept=["json"],
            prefetch_count=1,
        ):
            drain_until(conn, lambda: len(seen) >= 9)

        # prefetch 1 and a requeued message goes back to the head: it comes right back
        assert seen == [
            (0, False),
            (0, True),
            (1, False),
            (2, False),
            (2, True),
            (3, False),
            (4, False),
            (4, True),
            (5, False),
        ]
        assert queue(channel).queue_declare(passive=True).message_count == 0
