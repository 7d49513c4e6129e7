"""Queue features through pika.BlockingConnection: TTL expiry to a dead-letter exchange (x-death),
x-overflow reject-publish under publisher confirms, priority order, single active consumer
failover, alternate exchanges, consumer cancel notification, TTL 0.

These run against the reference RabbitMQ (3.10.8, ``AMQPQ_TEST_URL``) and against amqpq, and
assert the same observations on both. Where 3.10 and 3.13 differ (3.13 adds the
``x-last-death-*`` headers) the 3.13 behaviour is asserted only when the broker is amqpq. Where
amqpq is known to differ from RabbitMQ, the test is marked xfail (strict) only on amqpq.

Timing: TTLs are 50-100 ms and every wait polls with a short deadline.
"""

from __future__ import annotations

import datetime
import time

import pytest
from pika.exceptions import (
    ChannelClosedByBroker,
    ConnectionClosedByBroker,
    NackError,
    UnroutableError,
)
from pika.spec import BasicProperties

pytestmark = pytest.mark.timeout(30)

WAIT = 3.0  # seconds any single expected event may take


# --- helpers ----------------------------------------------------------------------------------


def is_amqpq(conn) -> bool:
    """True when the broker under test is amqpq (by its Connection.Start ``product``)."""
    product = conn._impl.server_properties.get("product")
    if isinstance(product, bytes):
        product = product.decode()
    return product == "amqpq"


def xfail_on_amqpq(request, conn, reason: str) -> None:
    """Mark the running test xfail(strict) when the broker is amqpq (RabbitMQ must pass it)."""
    if is_amqpq(conn):
        request.node.add_marker(pytest.mark.xfail(strict=True, reason=reason))


def wait_for(conn, predicate, timeout: float = WAIT) -> bool:
    """Process I/O on ``conn`` until ``predicate()`` is true; False on timeout."""
    deadline = time.monotonic() + timeout
    while not predicate():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        conn.process_data_events(time_limit=min(0.02, remaining))
    return True


def settle(conn, seconds: float) -> None:
    """Let ``seconds`` pass while processing I/O (to observe that nothing else arrives)."""
    deadline = time.monotonic() + seconds
    while (remaining := deadline - time.monotonic()) > 0:
        conn.process_data_events(time_limit=min(0.02, remaining))


def message_count(channel, queue: str) -> int:
    return channel.queue_declare(queue, passive=True).method.message_count


def get_all(channel, queue: str) -> list[tuple]:
    """Drain ``queue`` with basic.get (auto-ack): (method, properties, body) in order."""
    out = []
    while True:
        method, props, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            return out
        out.append((method, props, body))


def wait_count(conn, channel, queue: str, n: int, timeout: float = WAIT) -> int:
    """Poll the ready count of ``queue`` until it is ``n`` (or the deadline); the last count."""
    deadline = time.monotonic() + timeout
    while True:
        count = message_count(channel, queue)
        if count == n or time.monotonic() > deadline:
            return count
        conn.sleep(0.02)


def dead_letter_target(channel, unique_name, cleanup) -> tuple[str, str]:
    """A fanout dead-letter exchange bound to a queue: ``(exchange, queue)``."""
    dlx = cleanup.exchange(unique_name("dlx"))
    dead = cleanup.queue(unique_name("dead"))
    channel.exchange_declare(dlx, "fanout")
    channel.queue_declare(dead)
    channel.queue_bind(dead, dlx)
    return dlx, dead


def text(value):
    return value.decode() if isinstance(value, bytes) else value


@pytest.fixture
def conn(pika_connect):
    return pika_connect()


@pytest.fixture
def channel(conn):
    """A channel in publisher-confirm mode: each publish returns once the broker settled it."""
    ch = conn.channel()
    ch.confirm_delivery()
    return ch


# --- TTL and dead lettering ----------------------------------------------------------------------


def test_ttl_expiry_dead_letters_with_x_death(conn, channel, unique_name, cleanup):
    dlx, dead = dead_letter_target(channel, unique_name, cleanup)
    source = cleanup.queue(unique_name("src"))
    channel.queue_declare(source, arguments={"x-message-ttl": 100,
                                             "x-dead-letter-exchange": dlx})
    channel.basic_publish("", source, b"queue-ttl", BasicProperties(headers={"app": "kept"}))
    channel.basic_publish("", source, b"message-ttl", BasicProperties(expiration="50"))

    assert wait_count(conn, channel, dead, 2) == 2
    assert message_count(channel, source) == 0
    got = get_all(channel, dead)
    assert [body for _, _, body in got] == [b"queue-ttl", b"message-ttl"]

    for (method, props, _body), original_expiration in zip(got, (None, "50"), strict=True):
        assert method.exchange == dlx
        assert method.routing_key == source  # no x-dead-letter-routing-key: the original key
        assert props.expiration is None
        headers = props.headers
        [death] = headers["x-death"]
        assert death["count"] == 1
        assert text(death["reason"]) == "expired"
        assert text(death["queue"]) == source
        assert text(death["exchange"]) == ""
        assert [text(k) for k in death["routing-keys"]] == [source]
        assert isinstance(death["time"], datetime.datetime)
        assert text(death.get("original-expiration")) == original_expiration
        assert text(headers["x-first-death-reason"]) == "expired"
        assert text(headers["x-first-death-queue"]) == source
        assert text(headers["x-first-death-exchange"]) == ""
        if is_amqpq(conn):
            # RabbitMQ 3.13 adds x-last-death-*; the 3.10 reference does not send them
            assert text(headers["x-last-death-reason"]) == "expired"
            assert text(headers["x-last-death-queue"]) == source
            assert text(headers["x-last-death-exchange"]) == ""
    assert text(got[0][1].headers["app"]) == "kept"


def test_message_expires_at_the_head_only(conn, channel, unique_name, cleanup):
    queue = cleanup.queue(unique_name("q"))
    channel.queue_declare(queue)
    channel.basic_publish("", queue, b"long", BasicProperties(expiration="60000"))
    channel.basic_publish("", queue, b"short", BasicProperties(expiration="50"))
    settle(conn, 0.15)
    # classic queues expire messages from the head: "short" waits behind "long"
    assert message_count(channel, queue) == 2
    method, _, body = channel.basic_get(queue, auto_ack=True)
    assert body == b"long"
    assert wait_count(conn, channel, queue, 0) == 0
    assert channel.basic_get(queue, auto_ack=True)[0] is None


def test_ttl_zero_reaches_a_waiting_consumer_and_expires_otherwise(
        request, conn, channel, unique_name, cleanup):
    queue = cleanup.queue(unique_name("q"))
    channel.queue_declare(queue, arguments={"x-message-ttl": 0})
    channel.basic_publish("", queue, b"nobody-waits")
    assert message_count(channel, queue) == 0
    received = []
    consumer_channel = conn.channel()
    consumer_channel.basic_consume(queue, lambda ch, m, p, b: received.append(b), auto_ack=True)
    channel.basic_publish("", queue, b"delivered")
    assert wait_for(conn, lambda: received == [b"delivered"]), received


# --- length limits -------------------------------------------------------------------------------


@pytest.mark.parametrize("overflow", ["reject-publish", "reject-publish-dlx"])
def test_overflow_reject_publish_nacks_the_publisher(conn, channel, unique_name, cleanup,
                                                     overflow):
    dlx, dead = dead_letter_target(channel, unique_name, cleanup)
    queue = cleanup.queue(unique_name("q"))
    channel.queue_declare(queue, arguments={"x-max-length": 2, "x-overflow": overflow,
                                            "x-dead-letter-exchange": dlx})
    channel.basic_publish("", queue, b"m1")
    channel.basic_publish("", queue, b"m2")
    with pytest.raises(NackError):
        channel.basic_publish("", queue, b"m3")
    assert channel.is_open  # a nack is not an error: the channel stays usable
    assert message_count(channel, queue) == 2
    assert [body for _, _, body in get_all(channel, queue)] == [b"m1", b"m2"]
    channel.basic_publish("", queue, b"m4")  # room again
    assert message_count(channel, queue) == 1
    if overflow == "reject-publish":
        settle(conn, 0.05)
        assert message_count(channel, dead) == 0
    else:
        assert wait_count(conn, channel, dead, 1) == 1
        [(_, props, body)] = get_all(channel, dead)
        assert body == b"m3"
        [death] = props.headers["x-death"]
        assert (text(death["reason"]), text(death["queue"]), death["count"]) == (
            "maxlen", queue, 1)


def test_max_length_drop_head_dead_letters_the_oldest(conn, channel, unique_name, cleanup):
    dead = cleanup.queue(unique_name("dead"))
    queue = cleanup.queue(unique_name("q"))
    channel.queue_declare(dead)
    channel.queue_declare(queue, arguments={"x-max-length": 2, "x-dead-letter-exchange": "",
                                            "x-dead-letter-routing-key": dead})
    for body in (b"m1", b"m2", b"m3", b"m4"):
        channel.basic_publish("", queue, body)
    assert [body for _, _, body in get_all(channel, queue)] == [b"m3", b"m4"]
    assert wait_count(conn, channel, dead, 2) == 2
    got = get_all(channel, dead)
    assert [body for _, _, body in got] == [b"m1", b"m2"]
    for method, props, _ in got:
        assert method.routing_key == dead
        [death] = props.headers["x-death"]
        assert text(death["reason"]) == "maxlen"
        assert [text(k) for k in death["routing-keys"]] == [queue]


# --- priorities ----------------------------------------------------------------------------------


def test_priority_queue_order(conn, channel, unique_name, cleanup):
    queue = cleanup.queue(unique_name("q"))
    channel.queue_declare(queue, arguments={"x-max-priority": 10})
    for body, priority in ((b"a1", 1), (b"b5", 5), (b"c10", 10), (b"d5", 5), (b"e-none", None),
                           (b"f20", 20), (b"g0", 0)):
        channel.basic_publish("", queue, body, BasicProperties(priority=priority))
    # higher first, FIFO within a priority, 20 capped to 10, no priority = 0
    expected = [b"c10", b"f20", b"b5", b"d5", b"a1", b"e-none", b"g0"]
    received = []
    consumer = conn.channel()
    consumer.basic_qos(prefetch_count=1)

    def on_message(ch, method, props, body):
        received.append(body)
        ch.basic_ack(method.delivery_tag)

    consumer.basic_consume(queue, on_message)
    assert wait_for(conn, lambda: len(received) == len(expected)), received
    assert received == expected


# --- single active consumer ----------------------------------------------------------------------


def sac_setup(conn, channel, unique_name, cleanup):
    """A single-active-consumer queue, 'first' (prefetch 1, holding m1 unacked) and 'second'
    consuming on their own channels, m1..m3 published. Returns (queue, first channel, got)."""
    queue = cleanup.queue(unique_name("q"))
    channel.queue_declare(queue, arguments={"x-single-active-consumer": True})
    got: dict[str, list] = {"first": [], "second": []}
    first = conn.channel()
    first.basic_qos(prefetch_count=1)
    first.basic_consume(queue, lambda ch, m, p, b: got["first"].append((m, b)))
    second = conn.channel()
    second.basic_consume(queue, lambda ch, m, p, b: got["second"].append((m, b)),
                         auto_ack=True)
    for body in (b"m1", b"m2", b"m3"):
        channel.basic_publish("", queue, body)
    assert wait_for(conn, lambda: len(got["first"]) == 1)
    settle(conn, 0.1)
    # only the active consumer gets messages, even while its prefetch window is full
    assert [b for _, b in got["first"]] == [b"m1"]
    assert got["second"] == []
    assert channel.queue_declare(queue, passive=True).method.consumer_count == 2
    return queue, first, got


def test_single_active_consumer_failover(conn, channel, unique_name, cleanup):
    queue, first, got = sac_setup(conn, channel, unique_name, cleanup)
    first.close()  # m1 (unacked) goes back; 'second' becomes the active consumer
    assert wait_for(conn, lambda: len(got["second"]) == 3), got["second"]
    assert sorted(b for _, b in got["second"]) == [b"m1", b"m2", b"m3"]
    redelivered = {b: m.redelivered for m, b in got["second"]}
    assert redelivered == {b"m1": True, b"m2": False, b"m3": False}
    assert message_count(channel, queue) == 0


def test_single_active_consumer_failover_order(request, conn, channel, unique_name, cleanup):
    _, first, got = sac_setup(conn, channel, unique_name, cleanup)
    first.close()
    assert wait_for(conn, lambda: len(got["second"]) == 3), got["second"]
    # RabbitMQ requeues the closed channel's messages (to their original place) first
    assert [b for _, b in got["second"]] == [b"m1", b"m2", b"m3"]


def test_single_active_consumer_cancel_hands_over(conn, channel, unique_name, cleanup):
    queue = cleanup.queue(unique_name("q"))
    channel.queue_declare(queue, arguments={"x-single-active-consumer": True})
    got: dict[str, list[bytes]] = {"first": [], "second": []}
    consumer = conn.channel()
    tag = consumer.basic_consume(queue, lambda ch, m, p, b: got["first"].append(b),
                                 auto_ack=True)
    consumer.basic_consume(queue, lambda ch, m, p, b: got["second"].append(b), auto_ack=True)
    channel.basic_publish("", queue, b"m1")
    assert wait_for(conn, lambda: got["first"] == [b"m1"])
    consumer.basic_cancel(tag)
    channel.basic_publish("", queue, b"m2")
    assert wait_for(conn, lambda: got["second"] == [b"m2"]), got
    assert got["first"] == [b"m1"]


# --- alternate exchange --------------------------------------------------------------------------


def test_alternate_exchange_takes_unroutable_messages(conn, channel, unique_name, cleanup):
    ae = cleanup.exchange(unique_name("ae"))
    main = cleanup.exchange(unique_name("main"))
    unrouted = cleanup.queue(unique_name("unrouted"))
    routed = cleanup.queue(unique_name("routed"))
    channel.exchange_declare(ae, "fanout")
    channel.queue_declare(unrouted)
    channel.queue_bind(unrouted, ae)
    channel.exchange_declare(main, "direct", arguments={"alternate-exchange": ae})
    channel.queue_declare(routed)
    channel.queue_bind(routed, main, "k")

    channel.basic_publish(main, "k", b"routable", mandatory=True)
    # routed by the alternate exchange: not returned although mandatory
    channel.basic_publish(main, "other", b"unroutable", mandatory=True)
    assert [b for _, _, b in get_all(channel, routed)] == [b"routable"]
    [(method, _, body)] = get_all(channel, unrouted)
    assert (body, method.exchange, method.routing_key) == (b"unroutable", main, "other")


def test_alternate_exchange_that_routes_nowhere_returns_mandatory(conn, channel, unique_name,
                                                                  cleanup):
    ae = cleanup.exchange(unique_name("ae"))
    main = cleanup.exchange(unique_name("main"))
    channel.exchange_declare(ae, "direct")  # nothing bound
    channel.exchange_declare(main, "direct", arguments={"alternate-exchange": ae})
    with pytest.raises(UnroutableError):
        channel.basic_publish(main, "k", b"m", mandatory=True)


def test_internal_exchange_refuses_publish(conn, unique_name, cleanup):
    name = cleanup.exchange(unique_name("internal"))
    ch = conn.channel()
    ch.exchange_declare(name, "fanout", internal=True)
    ch.confirm_delivery()
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.basic_publish(name, "", b"m")
    assert info.value.reply_code == 403
    assert info.value.reply_text == (
        f"ACCESS_REFUSED - cannot publish to internal exchange '{name}' in vhost '/'")


# --- consumer cancel notification --------------------------------------------------------------


def test_consumer_cancel_notification_on_queue_delete(conn, channel, unique_name, cleanup):
    queue = cleanup.queue(unique_name("q"))
    channel.queue_declare(queue)
    consumer = conn.channel()
    cancels = []
    consumer.add_on_cancel_callback(lambda frame: cancels.append(frame.method.consumer_tag))
    tag = consumer.basic_consume(queue, lambda ch, m, p, b: None, auto_ack=True)
    other = conn.channel()
    other.queue_delete(queue)
    assert wait_for(conn, lambda: cancels == [tag]), cancels
    assert consumer.is_open  # the broker cancels the consumer, not the channel
    assert consumer.consumer_tags == []
    # the channel still works
    assert consumer.queue_declare("", exclusive=True).method.queue.startswith("amq.gen-")


# --- quorum queues ------------------------------------------------------------------------------


def test_quorum_queue_counts_deliveries_and_dead_letters_past_the_limit(
        conn, channel, unique_name, cleanup):
    """x-delivery-count on every delivery (0 first), x-delivery-limit 2: the third return
    dead-letters the message with reason delivery_limit."""
    dlx, dead = dead_letter_target(channel, unique_name, cleanup)
    source = cleanup.queue(unique_name("qq"))
    channel.queue_declare(source, durable=True, arguments={
        "x-queue-type": "quorum", "x-delivery-limit": 2, "x-dead-letter-exchange": dlx})
    channel.basic_publish("", source, b"poison", BasicProperties(headers={"app": "kept"}))
    assert wait_count(conn, channel, source, 1) == 1
    counts = []
    for _ in range(3):
        method, props, _body = channel.basic_get(source)
        counts.append((props.headers["x-delivery-count"], method.redelivered))
        channel.basic_nack(method.delivery_tag, requeue=True)
    assert counts == [(0, False), (1, True), (2, True)]
    assert wait_count(conn, channel, dead, 1) == 1
    assert message_count(channel, source) == 0
    [(_method, props, body)] = get_all(channel, dead)
    assert body == b"poison" and text(props.headers["app"]) == "kept"
    [death] = props.headers["x-death"]
    assert text(death["reason"]) == "delivery_limit"
    assert text(death["queue"]) == source


def test_quorum_queue_declare_rules(conn, pika_connect, unique_name, cleanup):
    name = cleanup.queue(unique_name("qq"))
    texts = []
    for kwargs in ({"durable": False}, {"durable": True, "auto_delete": True},
                   {"durable": True, "arguments": {"x-max-priority": 5}}):
        arguments = {"x-queue-type": "quorum", **kwargs.pop("arguments", {})}
        ch = pika_connect().channel()
        with pytest.raises(ChannelClosedByBroker) as info:
            ch.queue_declare(name, arguments=arguments, **kwargs)
        texts.append(info.value.reply_text)
    assert texts == [
        f"PRECONDITION_FAILED - invalid property 'non-durable' for queue '{name}' in vhost '/'",
        f"PRECONDITION_FAILED - invalid property 'auto-delete' for queue '{name}' in vhost '/'",
        f"PRECONDITION_FAILED - invalid arg 'x-max-priority' for queue '{name}' in vhost '/' "
        "of queue type rabbit_quorum_queue"]
    ch = pika_connect().channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.queue_declare("", durable=True, arguments={"x-queue-type": "quorum"})
    assert info.value.reply_text == ("PRECONDITION_FAILED - Cannot declare a server-named "
                                     "queue for type rabbit_quorum_queue")


def test_quorum_queue_refuses_global_qos_consumers(pika_connect, unique_name, cleanup):
    name = cleanup.queue(unique_name("qq"))
    conn = pika_connect()
    ch = conn.channel()
    ch.queue_declare(name, durable=True, arguments={"x-queue-type": "quorum"})
    ch.basic_qos(prefetch_count=10, global_qos=True)
    with pytest.raises(ConnectionClosedByBroker) as info:
        ch.basic_consume(name, lambda *args: None)
    assert (info.value.reply_code, info.value.reply_text) == (
        540, f"NOT_IMPLEMENTED - queue '{name}' in vhost '/' does not support global qos")
    ch = pika_connect().channel()
    ch.basic_qos(prefetch_count=10)  # per-consumer prefetch is fine
    ch.basic_consume(name, lambda *args: None, arguments={"x-priority": 5})
