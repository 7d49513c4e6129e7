"""pika.BlockingConnection against the broker: routing, acks, confirms, tx, errors, big bodies.

Every assertion is about what a client observes: bodies, their order and counts, delivery flags,
and reply codes with RabbitMQ's exact reply texts (recorded from RabbitMQ 3.10.8).
"""

from __future__ import annotations

import hashlib
import os
import time

import pika
import pytest
from pika.exceptions import (
    ChannelClosedByBroker,
    ConnectionClosedByBroker,
    ProbableAuthenticationError,
    UnroutableError,
)
from pika.spec import Basic, BasicProperties

from interop_tests.conftest import pika_parameters

pytestmark = pytest.mark.timeout(30)

WAIT = 5.0  # seconds any single expected event may take before the test gives up


# --- helpers ----------------------------------------------------------------------------------


def publish_confirmed(channel, exchange: str, routing_key: str, bodies, **props) -> None:
    """Publish on a channel in confirm mode: each publish returns once the broker acked it, so
    the messages are routed (and enqueued) when this returns."""
    properties = BasicProperties(**props) if props else None
    for body in bodies:
        channel.basic_publish(exchange, routing_key, body, properties)


def get_all(channel, queue: str, limit: int = 10_000) -> list[bytes]:
    """Drain ``queue`` with basic.get (auto-ack) until it is empty; the bodies in order."""
    bodies = []
    for _ in range(limit):
        method, _props, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            return bodies
        bodies.append(body)
    raise AssertionError(f"queue {queue!r} still not empty after {limit} basic.get")


def message_count(channel, queue: str) -> int:
    return channel.queue_declare(queue, passive=True).method.message_count


def consume(conn, channel, queue: str, n: int, *, ack: bool = True, timeout: float = WAIT):
    """Consume until ``n`` deliveries arrived (or ``timeout``); returns (method, props, body)
    tuples. Acks each delivery when ``ack``; the consumer is cancelled before returning."""
    received = []

    def on_message(ch, method, props, body):
        received.append((method, props, body))
        if ack:
            ch.basic_ack(method.delivery_tag)

    tag = channel.basic_consume(queue, on_message)
    deadline = time.monotonic() + timeout
    while len(received) < n:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        conn.process_data_events(time_limit=min(0.2, remaining))
    channel.basic_cancel(tag)
    return received


def wait_for(conn, predicate, timeout: float = WAIT) -> bool:
    """Process I/O on ``conn`` until ``predicate()`` is true; False on timeout."""
    deadline = time.monotonic() + timeout
    while not predicate():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        conn.process_data_events(time_limit=min(0.1, remaining))
    return True


def no_queue(name: str, vhost: str) -> str:
    return f"NOT_FOUND - no queue '{name}' in vhost '{vhost}'"


def no_exchange(name: str, vhost: str) -> str:
    return f"NOT_FOUND - no exchange '{name}' in vhost '{vhost}'"


def resource_locked(name: str, vhost: str) -> str:
    return (
        f"RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{name}' in vhost "
        f"'{vhost}'. It could be originally declared on another connection or the exclusive "
        "property value does not match that of the original declaration."
    )


def assert_connection_usable(conn) -> None:
    """A channel error closes only its channel: the connection still serves a new one."""
    assert conn.is_open
    channel = conn.channel()
    assert channel.queue_declare("", exclusive=True).method.queue.startswith("amq.gen-")
    channel.close()


@pytest.fixture
def conn(pika_connect):
    return pika_connect()


@pytest.fixture
def channel(conn):
    """A channel in publisher-confirm mode (publishes are synchronous)."""
    ch = conn.channel()
    ch.confirm_delivery()
    return ch


# --- exchange types ---------------------------------------------------------------------------


def test_default_exchange_routes_by_queue_name(channel, unique_name, cleanup):
    queue = cleanup.queue(unique_name("q"))
    channel.queue_declare(queue)
    publish_confirmed(channel, "", queue, [b"one", b"two"])
    publish_confirmed(channel, "", queue + ".other", [b"lost"])  # no such queue: dropped
    assert get_all(channel, queue) == [b"one", b"two"]


def test_direct_exchange(channel, unique_name, cleanup):
    exchange = cleanup.exchange(unique_name("ex"))
    q_red = cleanup.queue(unique_name("red"))
    q_green_blue = cleanup.queue(unique_name("gb"))
    channel.exchange_declare(exchange, "direct")
    for queue in (q_red, q_green_blue):
        channel.queue_declare(queue)
    channel.queue_bind(q_red, exchange, "red")
    channel.queue_bind(q_red, exchange, "red")  # a duplicate binding routes once, not twice
    channel.queue_bind(q_green_blue, exchange, "green")
    channel.queue_bind(q_green_blue, exchange, "blue")

    for key in ["red", "green", "black", "blue", "red", "RED", ""]:
        publish_confirmed(channel, exchange, key, [f"{key}-msg".encode()])

    assert get_all(channel, q_red) == [b"red-msg", b"red-msg"]
    assert get_all(channel, q_green_blue) == [b"green-msg", b"blue-msg"]

    channel.queue_unbind(q_red, exchange, "red")
    publish_confirmed(channel, exchange, "red", [b"after-unbind"])
    assert get_all(channel, q_red) == []


def test_fanout_exchange(channel, unique_name, cleanup):
    exchange = cleanup.exchange(unique_name("ex"))
    queues = [cleanup.queue(unique_name(f"q{i}")) for i in range(3)]
    channel.exchange_declare(exchange, "fanout")
    for queue, key in zip(queues, ["", "a", "whatever.#"], strict=True):
        channel.queue_declare(queue)
        channel.queue_bind(queue, exchange, key)  # fanout ignores binding keys

    bodies = [f"m{i}".encode() for i in range(5)]
    for i, body in enumerate(bodies):
        publish_confirmed(channel, exchange, f"rk{i}", [body])

    for queue in queues:
        assert get_all(channel, queue) == bodies


TOPIC_KEYS = [
    "stock",
    "stock.nyse",
    "stock.nyse.ibm",
    "bond.nyse",
    "stocks.nyse",
    "nyse.stock",
    "stock.",
    "stock.lse",
    "stock.lse.vod.l",
    "",
]


def test_topic_exchange(channel, unique_name, cleanup):
    exchange = cleanup.exchange(unique_name("ex"))
    q_star = cleanup.queue(unique_name("star"))
    q_hash = cleanup.queue(unique_name("hash"))
    channel.exchange_declare(exchange, "topic")
    channel.queue_declare(q_star)
    channel.queue_declare(q_hash)
    channel.queue_bind(q_star, exchange, "stock.*")
    channel.queue_bind(q_hash, exchange, "stock.#")

    for key in TOPIC_KEYS:
        publish_confirmed(channel, exchange, key, [key.encode() or b"<empty>"])

    # "*" is exactly one word (possibly empty: "stock." has words "stock" and "");
    # "#" is zero or more words.
    assert get_all(channel, q_star) == [b"stock.nyse", b"stock.", b"stock.lse"]
    assert get_all(channel, q_hash) == [
        b"stock",
        b"stock.nyse",
        b"stock.nyse.ibm",
        b"stock.",
        b"stock.lse",
        b"stock.lse.vod.l",
    ]


def test_topic_exchange_wildcard_mix(channel, unique_name, cleanup):
    exchange = cleanup.exchange(unique_name("ex"))
    q_all = cleanup.queue(unique_name("all"))
    q_mid = cleanup.queue(unique_name("mid"))
    channel.exchange_declare(exchange, "topic")
    channel.queue_declare(q_all)
    channel.queue_declare(q_mid)
    channel.queue_bind(q_all, exchange, "#")
    channel.queue_bind(q_mid, exchange, "*.nyse.#")

    for key in TOPIC_KEYS:
        publish_confirmed(channel, exchange, key, [key.encode() or b"<empty>"])

    assert get_all(channel, q_all) == [key.encode() or b"<empty>" for key in TOPIC_KEYS]
    assert get_all(channel, q_mid) == [
        b"stock.nyse",
        b"stock.nyse.ibm",
        b"bond.nyse",
        b"stocks.nyse",
    ]


def test_headers_exchange(channel, unique_name, cleanup):
    exchange = cleanup.exchange(unique_name("ex"))
    q_all = cleanup.queue(unique_name("all"))
    q_any = cleanup.queue(unique_name("any"))
    channel.exchange_declare(exchange, "headers")
    channel.queue_declare(q_all)
    channel.queue_declare(q_any)
    match = {"format": "pdf", "type": "report"}
    channel.queue_bind(q_all, exchange, "", arguments={"x-match": "all", **match})
    channel.queue_bind(q_any, exchange, "", arguments={"x-match": "any", **match})

    messages = [
        (b"both", {"format": "pdf", "type": "report"}),
        (b"format-only", {"format": "pdf", "type": "log"}),
        (b"none", {"format": "zip"}),
        (b"both-plus-extra", {"format": "pdf", "type": "report", "extra": "yes"}),
        (b"no-headers", None),
        (b"type-only", {"type": "report"}),
        (b"wrong-case", {"Format": "pdf", "Type": "report"}),
    ]
    for body, headers in messages:
        # the routing key plays no part in a headers exchange
        publish_confirmed(channel, exchange, "ignored", [body], headers=headers)

    assert get_all(channel, q_all) == [b"both", b"both-plus-extra"]
    assert get_all(channel, q_any) == [b"both", b"format-only", b"both-plus-extra", b"type-only"]


# --- consuming, acks, basic.get ---------------------------------------------------------------


def test_properties_round_trip(channel, unique_name, amqp_params, cleanup):
    queue = cleanup.queue(unique_name("q"))
    channel.queue_declare(queue)
    props = {
        "content_type": "application/json",
        "content_encoding": "utf-8",
        "headers": {"str": "v", "int": 42, "bool": True, "list": [1, "two"], "nested": {"k": "v"}},
        "delivery_mode": 2,
        "priority": 3,
        "correlation_id": "corr-1",
        "reply_to": "reply.q",
        "expiration": "60000",
        "message_id": "msg-1",
        "timestamp": 1_700_000_000,
        "type": "order.created",
        "user_id": amqp_params.user,  # RabbitMQ only accepts the authenticated user
        "app_id": "interop",
    }
    publish_confirmed(channel, "", queue, [b'{"a": 1}'], **props)
    method, got, body = channel.basic_get(queue, auto_ack=True)
    assert body == b'{"a": 1}'
    assert method.exchange == ""
    assert method.routing_key == queue
    for name, value in props.items():
        assert getattr(got, name) == value, name


def test_manual_ack_with_prefetch(conn, channel, unique_name, cleanup):
    queue = cleanup.queue(unique_name("q"))
    channel.queue_declare(queue)
    bodies = [f"m{i:03d}".encode() for i in range(100)]
    publish_confirmed(channel, "", queue, bodies)

    consumer = conn.channel()
    consumer.basic_qos(prefetch_count=10)
    received = []
    consumer.basic_consume(queue, lambda ch, method, props, body: received.append((method, body)))

    # Without acks the broker stops at the prefetch window.
    assert wait_for(conn, lambda: len(received) >= 10)
    conn.process_data_events(time_limit=0.3)
    assert len(received) == 10

    acked = 0
    deadline = time.monotonic() + 10
    while acked < len(bodies) and time.monotonic() < deadline:
        while acked < len(received):
            consumer.basic_ack(received[acked][0].delivery_tag)
            acked += 1
        conn.process_data_events(time_limit=0.05)
        assert len(received) - acked <= 10  # never more than prefetch_count unacked

    assert [body for _, body in received] == bodies
    assert [m.delivery_tag for m, _ in received] == list(range(1, len(bodies) + 1))
    assert not any(m.redelivered for m, _ in received)
    assert message_count(channel, queue) == 0


def test_basic_get(channel, unique_name, cleanup):
    queue = cleanup.queue(unique_name("q"))
    channel.queue_declare(queue)
    publish_confirmed(channel, "", queue, [b"first", b"second", b"third"])

    method, props, body = channel.basic_get(queue)
    assert isinstance(method, Basic.GetOk)
    assert body == b"first"
    assert method.redelivered is False
    assert method.message_count == 2  # messages left in the queue after this one
    assert method.exchange == ""
    assert method.routing_key == queue
    assert method.delivery_tag == 1
    channel.basic_ack(method.delivery_tag)

    method, _, body = channel.basic_get(queue, auto_ack=True)
    assert (body, method.message_count, method.delivery_tag) == (b"second", 1, 2)
    method, _, body = channel.basic_get(queue, auto_ack=True)
    assert (body, method.message_count, method.delivery_tag) == (b"third", 0, 3)

    assert channel.basic_get(queue) == (None, None, None)
    assert message_count(channel, queue) == 0


def test_mandatory_unroutable_in_confirm_mode(channel, unique_name, cleanup):
    exchange = cleanup.exchange(unique_name("ex"))
    channel.exchange_declare(exchange, "direct")
    with pytest.raises(UnroutableError) as info:
        channel.basic_publish(exchange, "nobody-bound", b"bounce", mandatory=True)
    (returned,) = info.value.messages
    assert isinstance(returned.method, Basic.Return)
    assert returned.method.reply_code == 312
    assert returned.method.reply_text == "NO_ROUTE"
    assert returned.method.exchange == exchange
    assert returned.method.routing_key == "nobody-bound"
    assert returned.body == b"bounce"
    # not mandatory: silently dropped (and still confirmed)
    channel.basic_publish(exchange, "nobody-bound", b"dropped")
    assert channel.is_open


def test_mandatory_unroutable_return_callback(conn, unique_name):
    channel = conn.channel()
    returns = []
    channel.add_on_return_callback(
        lambda ch, method, props, body: returns.append((method, props, body))
    )
    key = unique_name("nobody")
    channel.basic_publish("", key, b"bounce", BasicProperties(message_id="id-7"), mandatory=True)
    assert wait_for(conn, lambda: returns)
    method, props, body = returns[0]
    assert (method.reply_code, method.reply_text) == (312, "NO_ROUTE")
    assert (method.exchange, method.routing_key) == ("", key)
    assert body == b"bounce"
    assert props.message_id == "id-7"
    conn.process_data_events(time_limit=0.2)
    assert len(returns) == 1


def test_publisher_confirms_1000(conn, channel, unique_name, cleanup):
    queue = cleanup.queue(unique_name("q"))
    channel.queue_declare(queue)
    bodies = [f"confirm-{i}".encode() for i in range(1000)]
    publish_confirmed(channel, "", queue, bodies)  # raises NackError if any were nacked
    assert message_count(channel, queue) == 1000

    consumer = conn.channel()
    consumer.basic_qos(prefetch_count=200)
    received = consume(conn, consumer, queue, len(bodies), timeout=15)
    assert [body for _, _, body in received] == bodies
    assert message_count(channel, queue) == 0


def test_tx_rollback_and_commit(conn, unique_name, cleanup):
    queue = cleanup.queue(unique_name("q"))
    observer = conn.channel()
    observer.queue_declare(queue)

    tx = conn.channel()
    tx.tx_select()
    tx.basic_publish("", queue, b"rolled-back")
    assert message_count(observer, queue) == 0  # not visible before commit
    tx.tx_rollback()
    assert message_count(observer, queue) == 0
    assert observer.basic_get(queue) == (None, None, None)

    tx.basic_publish("", queue, b"committed-1")
    tx.basic_publish("", queue, b"committed-2")
    assert message_count(observer, queue) == 0
    tx.tx_commit()
    assert message_count(observer, queue) == 2
    assert get_all(observer, queue) == [b"committed-1", b"committed-2"]


def test_requeue_on_disconnect(pika_connect, unique_name, cleanup):
    queue = cleanup.queue(unique_name("q"))
    conn_b = pika_connect()
    ch_b = conn_b.channel()
    ch_b.confirm_delivery()
    ch_b.queue_declare(queue)
    bodies = [f"m{i}".encode() for i in range(7)]
    publish_confirmed(ch_b, "", queue, bodies)

    conn_a = pika_connect()
    ch_a = conn_a.channel()
    ch_a.basic_qos(prefetch_count=5)
    got_a = consume(conn_a, ch_a, queue, 5, ack=False)
    assert [body for _, _, body in got_a] == bodies[:5]
    assert not any(m.redelivered for m, _, _ in got_a)
    conn_a.close()  # the 5 unacked messages go back to the queue, at their old places

    got_b = consume(conn_b, ch_b, queue, 7)
    assert [body for _, _, body in got_b] == bodies
    assert [m.redelivered for m, _, _ in got_b] == [True] * 5 + [False] * 2
    assert message_count(ch_b, queue) == 0


def test_requeue_on_disconnect_after_partial_ack(pika_connect, unique_name, cleanup):
    queue = cleanup.queue(unique_name("q"))
    conn_b = pika_connect()
    ch_b = conn_b.channel()
    ch_b.confirm_delivery()
    ch_b.queue_declare(queue)
    bodies = [f"m{i}".encode() for i in range(6)]
    publish_confirmed(ch_b, "", queue, bodies)

    conn_a = pika_connect()
    ch_a = conn_a.channel()
    got_a = consume(conn_a, ch_a, queue, 6, ack=False)
    assert [body for _, _, body in got_a] == bodies
    for method, _, _ in (got_a[1], got_a[4]):
        ch_a.basic_ack(method.delivery_tag)
    conn_a.close()

    got_b = consume(conn_b, ch_b, queue, 4)
    assert [body for _, _, body in got_b] == [b"m0", b"m2", b"m3", b"m5"]
    assert all(m.redelivered for m, _, _ in got_b)
    assert message_count(ch_b, queue) == 0


def test_nack_requeue_and_reject(channel, unique_name, cleanup):
    queue = cleanup.queue(unique_name("q"))
    channel.queue_declare(queue)
    publish_confirmed(channel, "", queue, [b"a", b"b"])

    method, _, body = channel.basic_get(queue)
    assert (body, method.redelivered) == (b"a", False)
    channel.basic_nack(method.delivery_tag, requeue=True)

    method, _, body = channel.basic_get(queue)  # requeued to the head of the queue
    assert (body, method.redelivered) == (b"a", True)
    channel.basic_reject(method.delivery_tag, requeue=False)  # dropped for good

    method, _, body = channel.basic_get(queue)
    assert (body, method.redelivered, method.message_count) == (b"b", False, 0)
    channel.basic_reject(method.delivery_tag, requeue=True)
    method, _, body = channel.basic_get(queue)
    assert (body, method.redelivered) == (b"b", True)
    channel.basic_nack(method.delivery_tag, requeue=False)

    assert channel.basic_get(queue) == (None, None, None)
    assert message_count(channel, queue) == 0


def test_nack_multiple_requeue_via_consumer(conn, channel, unique_name, cleanup):
    queue = cleanup.queue(unique_name("q"))
    channel.queue_declare(queue)
    bodies = [b"x1", b"x2", b"x3"]
    publish_confirmed(channel, "", queue, bodies)

    consumer = conn.channel()
    got = consume(conn, consumer, queue, 3, ack=False)
    assert [body for _, _, body in got] == bodies
    consumer.basic_nack(got[-1][0].delivery_tag, multiple=True, requeue=True)

    again = consume(conn, consumer, queue, 3)
    assert [body for _, _, body in again] == bodies
    assert all(m.redelivered for m, _, _ in again)
    assert message_count(channel, queue) == 0


# --- queue lifetimes --------------------------------------------------------------------------


def test_exclusive_queue(pika_connect, unique_name, amqp_params, cleanup):
    queue = cleanup.queue(unique_name("excl"))
    owner = pika_connect()
    owner_ch = owner.channel()
    owner_ch.queue_declare(queue, exclusive=True)
    owner_ch.basic_publish("", queue, b"mine")

    other = pika_connect()
    with pytest.raises(ChannelClosedByBroker) as info:
        other.channel().queue_declare(queue, passive=True)
    assert info.value.reply_code == 405
    assert info.value.reply_text == resource_locked(queue, amqp_params.vhost)

    with pytest.raises(ChannelClosedByBroker) as info:
        other.channel().basic_consume(queue, lambda *args: None)
    assert info.value.reply_code == 405
    assert info.value.reply_text == resource_locked(queue, amqp_params.vhost)

    # the owner is unaffected
    assert owner_ch.queue_declare(queue, passive=True).method.message_count == 1

    owner.close()  # an exclusive queue is deleted with its connection: soon after the
    deadline = time.monotonic() + WAIT  # Close-Ok (RabbitMQ's queue sees its owner go down;
    while True:  # with --workers or a cluster the delete record travels to the others)
        with pytest.raises(ChannelClosedByBroker) as info:
            other.channel().queue_declare(queue, passive=True)
        if info.value.reply_code != 405 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert info.value.reply_code == 404
    assert info.value.reply_text == no_queue(queue, amqp_params.vhost)
    assert_connection_usable(other)


def test_auto_delete_queue_goes_with_last_consumer(pika_connect, unique_name, amqp_params, cleanup):
    queue = cleanup.queue(unique_name("ad"))
    conn = pika_connect()
    channel = conn.channel()
    channel.queue_declare(queue, auto_delete=True)
    tag1 = channel.basic_consume(queue, lambda *args: None)
    tag2 = channel.basic_consume(queue, lambda *args: None)

    observer = pika_connect()
    channel.basic_cancel(tag1)
    assert observer.channel().queue_declare(queue, passive=True).method.consumer_count == 1
    channel.basic_cancel(tag2)  # last consumer gone -> queue deleted before cancel-ok

    with pytest.raises(ChannelClosedByBroker) as info:
        observer.channel().queue_declare(queue, passive=True)
    assert info.value.reply_code == 404
    assert info.value.reply_text == no_queue(queue, amqp_params.vhost)
    assert channel.is_open


def test_server_named_queue(conn):
    channel = conn.channel()
    first = channel.queue_declare("", exclusive=True).method
    second = channel.queue_declare("", exclusive=True).method
    assert first.queue.startswith("amq.gen-")
    assert second.queue.startswith("amq.gen-")
    assert first.queue != second.queue
    assert (first.message_count, first.consumer_count) == (0, 0)
    # usable by its name through the default exchange
    channel.basic_publish("", first.queue, b"hello")
    assert wait_for(
        conn, lambda: channel.queue_declare(first.queue, passive=True).method.message_count == 1
    )


def test_consumer_cancel_notification(pika_connect, unique_name, cleanup):
    queue = cleanup.queue(unique_name("q"))
    conn = pika_connect()
    channel = conn.channel()
    channel.queue_declare(queue)
    cancels = []
    channel.add_on_cancel_callback(cancels.append)
    tag = channel.basic_consume(queue, lambda *args: None)
    assert channel.consumer_tags == [tag]

    other = pika_connect()
    other.channel().queue_delete(queue)

    assert wait_for(conn, lambda: cancels), "no Basic.Cancel from the broker"
    (frame,) = cancels
    assert isinstance(frame.method, Basic.Cancel)
    assert frame.method.consumer_tag == tag
    assert channel.is_open  # the channel survives the cancel
    assert channel.consumer_tags == []
    assert channel.queue_declare("", exclusive=True).method.queue.startswith("amq.gen-")


# --- errors: exact reply codes and texts ------------------------------------------------------


def test_passive_declare_missing_queue(conn, unique_name, amqp_params):
    queue = unique_name("missing")
    with pytest.raises(ChannelClosedByBroker) as info:
        conn.channel().queue_declare(queue, passive=True)
    assert info.value.reply_code == 404
    assert info.value.reply_text == no_queue(queue, amqp_params.vhost)
    assert_connection_usable(conn)


def test_passive_declare_missing_exchange(conn, unique_name, amqp_params):
    exchange = unique_name("missing")
    with pytest.raises(ChannelClosedByBroker) as info:
        conn.channel().exchange_declare(exchange, "direct", passive=True)
    assert info.value.reply_code == 404
    assert info.value.reply_text == no_exchange(exchange, amqp_params.vhost)
    assert_connection_usable(conn)


def test_redeclare_exchange_with_other_type(conn, unique_name, amqp_params, cleanup):
    exchange = cleanup.exchange(unique_name("ex"))
    channel = conn.channel()
    channel.exchange_declare(exchange, "direct")
    channel.exchange_declare(exchange, "direct")  # an equivalent redeclare is fine
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.exchange_declare(exchange, "topic")
    assert info.value.reply_code == 406
    assert info.value.reply_text == (
        f"PRECONDITION_FAILED - inequivalent arg 'type' for exchange '{exchange}' in vhost "
        f"'{amqp_params.vhost}': received 'topic' but current is 'direct'"
    )
    assert_connection_usable(conn)


def test_declare_reserved_amq_exchange(conn, cleanup):
    cleanup.exchange("amq.foo")  # only matters if a broker wrongly creates it
    with pytest.raises(ChannelClosedByBroker) as info:
        conn.channel().exchange_declare("amq.foo", "direct")
    assert info.value.reply_code == 403
    assert info.value.reply_text == (
        "ACCESS_REFUSED - exchange name 'amq.foo' contains reserved prefix 'amq.*'"
    )
    assert_connection_usable(conn)


def test_publish_to_missing_exchange(conn, unique_name, amqp_params):
    exchange = unique_name("missing")
    channel = conn.channel()
    channel.basic_publish(exchange, "k", b"nowhere")  # no reply: the channel close is async
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.queue_declare("", exclusive=True)
    assert info.value.reply_code == 404
    assert info.value.reply_text == no_exchange(exchange, amqp_params.vhost)
    assert channel.is_closed
    assert_connection_usable(conn)


def test_ack_unknown_delivery_tag(conn):
    channel = conn.channel()
    channel.basic_ack(99)
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.queue_declare("", exclusive=True)
    assert info.value.reply_code == 406
    assert info.value.reply_text == "PRECONDITION_FAILED - unknown delivery tag 99"
    assert_connection_usable(conn)


def test_bind_to_default_exchange(conn):
    channel = conn.channel()
    queue = channel.queue_declare("", exclusive=True).method.queue
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.queue_bind(queue, "", "some-key")
    assert info.value.reply_code == 403
    assert (
        info.value.reply_text == "ACCESS_REFUSED - operation not permitted on the default exchange"
    )
    assert_connection_usable(conn)


PRECONDITION_CASES = {
    "delete-if-empty": (
        lambda ch, q, x: ch.queue_delete(q, if_empty=True),
        "PRECONDITION_FAILED - queue '{q}' in vhost '{v}' not empty",
    ),
    "delete-if-unused": (
        lambda ch, q, x: ch.queue_delete(q, if_unused=True),
        "PRECONDITION_FAILED - queue '{q}' in vhost '{v}' in use",
    ),
    "exchange-delete-if-unused": (
        lambda ch, q, x: ch.exchange_delete(x, if_unused=True),
        "PRECONDITION_FAILED - exchange '{x}' in vhost '{v}' in use",
    ),
    "redeclare-durable": (
        lambda ch, q, x: ch.queue_declare(q, durable=True),
        "PRECONDITION_FAILED - inequivalent arg 'durable' for queue '{q}' in vhost '{v}': "
        "received 'true' but current is 'false'",
    ),
    "redeclare-new-argument": (
        lambda ch, q, x: ch.queue_declare(q, arguments={"x-max-length": 5}),
        "PRECONDITION_FAILED - inequivalent arg 'x-max-length' for queue '{q}' in vhost '{v}': "
        "received the value '5' of type 'signedint' but current is none",
    ),
}


@pytest.mark.parametrize("case", sorted(PRECONDITION_CASES))
def test_precondition_failed(conn, unique_name, amqp_params, cleanup, case):
    """A queue holding one (unacked) message with a consumer, bound to a direct exchange."""
    operation, text = PRECONDITION_CASES[case]
    queue = cleanup.queue(unique_name("q"))
    exchange = cleanup.exchange(unique_name("ex"))
    channel = conn.channel()
    channel.confirm_delivery()
    channel.queue_declare(queue)
    channel.exchange_declare(exchange, "direct")
    channel.queue_bind(queue, exchange, "k")
    channel.basic_publish("", queue, b"x")
    if case != "delete-if-empty":  # a consumer holding the message makes the queue "in use"
        consume(conn, channel, queue, 1, ack=False)
        channel.basic_consume(queue, lambda *args: None)

    with pytest.raises(ChannelClosedByBroker) as info:
        operation(conn.channel(), queue, exchange)
    assert info.value.reply_code == 406
    assert info.value.reply_text == text.format(q=queue, x=exchange, v=amqp_params.vhost)
    assert channel.is_open  # only the failing channel was closed


def test_bind_missing_exchange_or_queue(conn, unique_name, amqp_params, cleanup):
    queue = cleanup.queue(unique_name("q"))
    exchange = cleanup.exchange(unique_name("ex"))
    channel = conn.channel()
    channel.queue_declare(queue)
    channel.exchange_declare(exchange, "direct")
    with pytest.raises(ChannelClosedByBroker) as info:
        conn.channel().queue_bind(queue, exchange + ".missing", "k")
    assert (info.value.reply_code, info.value.reply_text) == (
        404,
        no_exchange(exchange + ".missing", amqp_params.vhost),
    )
    with pytest.raises(ChannelClosedByBroker) as info:
        conn.channel().queue_bind(queue + ".missing", exchange, "k")
    assert (info.value.reply_code, info.value.reply_text) == (
        404,
        no_queue(queue + ".missing", amqp_params.vhost),
    )


def test_queue_delete_counts_only_ready_messages(channel, unique_name, cleanup):
    queue = cleanup.queue(unique_name("q"))
    channel.queue_declare(queue)
    publish_confirmed(channel, "", queue, [b"a", b"b", b"c"])
    method, _, body = channel.basic_get(queue)  # "a" is now unacked, not ready
    assert (body, method.message_count) == (b"a", 2)
    assert channel.queue_delete(queue).method.message_count == 2


def test_unknown_exchange_type_closes_connection(conn, unique_name, cleanup):
    exchange = cleanup.exchange(unique_name("ex"))
    with pytest.raises(ConnectionClosedByBroker) as info:
        conn.channel().exchange_declare(exchange, "nope")
    assert info.value.reply_code == 503
    assert info.value.reply_text == "COMMAND_INVALID - unknown exchange type 'nope'"
    assert conn.is_closed


# --- big bodies -------------------------------------------------------------------------------


def test_large_message_round_trip(conn, channel, unique_name, cleanup):
    queue = cleanup.queue(unique_name("big"))
    channel.queue_declare(queue)
    body = os.urandom(10 * 1024 * 1024)  # 10 MiB: ~80 body frames at RabbitMQ's frame_max
    publish_confirmed(channel, "", queue, [body], content_type="application/octet-stream")

    consumer = conn.channel()
    ((method, props, got),) = consume(conn, consumer, queue, 1, timeout=15)
    assert len(got) == len(body)
    assert hashlib.sha256(got).hexdigest() == hashlib.sha256(body).hexdigest()
    assert props.content_type == "application/octet-stream"

    publish_confirmed(channel, "", queue, [body])
    method, _, got = channel.basic_get(queue, auto_ack=True)
    assert got == body
    assert method.message_count == 0


def test_connection_negotiation(conn):
    impl = conn._impl  # the negotiated parameters live on the underlying connection
    assert conn.is_open
    assert impl.params.frame_max >= 4096
    assert impl.params.channel_max >= 1
    props = impl.server_properties
    caps = props.get("capabilities", {})
    for cap in (
        "publisher_confirms",
        "exchange_exchange_bindings",
        "basic.nack",
        "consumer_cancel_notify",
        "connection.blocked",
        "authentication_failure_close",
    ):
        assert caps.get(cap) is True, cap


def test_bad_credentials_refused(broker_url):
    params = pika_parameters(broker_url)
    params.credentials = pika.PlainCredentials("guest", "wrong-password")
    with pytest.raises(ProbableAuthenticationError) as info:
        pika.BlockingConnection(params)
    # RabbitMQ advertises authentication_failure_close and sends Connection.Close before closing
    assert (
        "(403) 'ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. "
        "For details see the broker logfile.'"
    ) in str(info.value)
