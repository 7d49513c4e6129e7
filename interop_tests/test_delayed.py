"""Delayed messages with pika, aio-pika and kombu: code written for the
``rabbitmq-delayed-message-exchange`` plugin, unchanged. The pika scenarios run against amqpq
and against the reference RabbitMQ (skipped when it is not running or lacks the plugin), the
mandatory-return case against amqpq only (the plugin never returns a delayed message).

Delays are a few hundred ms; the checks allow seconds of slack (no timing figures here: those
are in ``benchmarks/delayed_bench.py``).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, UnroutableError

from interop_tests.conftest import channel_with_exchange_type, url_for

pytestmark = pytest.mark.timeout(60)

DELAYED = {"x-delayed-type": "direct"}


@pytest.fixture(params=["amqpq", "rabbitmq"])
def channel(request: pytest.FixtureRequest, broker_url: str) -> Iterator[object]:
    conn, ch = channel_with_exchange_type(url_for(request.param, broker_url), "x-delayed-message", DELAYED)
    yield ch
    if conn.is_open:
        conn.close()


@pytest.fixture
def amqpq_channel(broker_url: str) -> Iterator[object]:
    conn, ch = channel_with_exchange_type(broker_url, "x-delayed-message", DELAYED)
    yield ch
    if conn.is_open:
        conn.close()


def _setup(ch: object, type_name: str = "direct") -> tuple[str, str]:
    x = f"dx-{uuid.uuid4().hex[:8]}"
    ch.exchange_declare(x, "x-delayed-message", auto_delete=True,
                        arguments={"x-delayed-type": type_name})
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, x, "k")
    return x, q


def _delay(ms: int) -> pika.BasicProperties:
    return pika.BasicProperties(headers={"x-delay": ms})


def _wait_for(ch: object, queue: str, count: int, timeout: float = 10.0
              ) -> list[tuple[bytes, dict]]:
    got: list[tuple[bytes, dict]] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        method, props, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            ch.connection.sleep(0.05)
            continue
        got.append((body, props.headers or {}))
    return got


def test_declare_without_delayed_type_is_406(channel: object) -> None:
    with pytest.raises(ChannelClosedByBroker) as err:
        channel.exchange_declare(f"dx-{uuid.uuid4().hex[:8]}", "x-delayed-message")
    assert err.value.reply_code == 406
    assert err.value.reply_text == ("PRECONDITION_FAILED - Invalid argument, 'x-delayed-type' "
                                    "must be an existing exchange type")


def test_delayed_message_arrives_later_with_negative_x_delay(channel: object) -> None:
    x, q = _setup(channel)
    start = time.monotonic()
    channel.basic_publish(x, "k", b"later", _delay(700))  # confirmed when held
    channel.basic_publish(x, "k", b"now", _delay(0))
    channel.basic_publish(x, "k", b"plain")
    assert [b for b, _ in _wait_for(channel, q, 2, timeout=0.5)] == [b"now", b"plain"]
    [(body, headers)] = _wait_for(channel, q, 1)
    assert body == b"later" and time.monotonic() - start >= 0.65
    assert headers["x-delay"] == -700


def test_due_order_then_publish_order(channel: object) -> None:
    x, q = _setup(channel)
    for body, delay in ((b"c", 1200), (b"a1", 400), (b"b", 800), (b"a2", 400)):
        channel.basic_publish(x, "k", body, _delay(delay))
    assert [b for b, _ in _wait_for(channel, q, 4)] == [b"a1", b"a2", b"b", b"c"]


def test_routed_by_bindings_at_due_time(channel: object) -> None:
    x, q = _setup(channel)
    late = channel.queue_declare("", exclusive=True).method.queue
    channel.basic_publish(x, "late", b"m", _delay(500))  # no binding for 'late' yet
    channel.queue_bind(late, x, "late")
    assert [b for b, _ in _wait_for(channel, late, 1)] == [b"m"]


def test_deleting_the_exchange_drops_held_messages(channel: object) -> None:
    x, q = _setup(channel)
    channel.basic_publish(x, "k", b"gone", _delay(400))
    channel.exchange_delete(x)
    channel.connection.sleep(0.8)
    assert channel.basic_get(q, auto_ack=True)[0] is None


def test_mandatory_unroutable_is_returned_at_publish(amqpq_channel: object) -> None:
    """amqpq only: the plugin cannot return a delayed message (documented difference)."""
    x, q = _setup(amqpq_channel)
    with pytest.raises(UnroutableError):
        amqpq_channel.basic_publish(x, "nobody", b"m", _delay(300), mandatory=True)
    amqpq_channel.basic_publish(x, "k", b"ok", _delay(300), mandatory=True)
    assert [b for b, _ in _wait_for(amqpq_channel, q, 1)] == [b"ok"]


def test_aio_pika_delayed_publish_and_consume(broker_url: str) -> None:
    aio_pika = pytest.importorskip("aio_pika")

    async def scenario() -> list[tuple[bytes, object]]:
        connection = await aio_pika.connect(broker_url, timeout=10)
        async with connection:
            ch = await connection.channel(publisher_confirms=True)
            x = await ch.declare_exchange(f"dx-{uuid.uuid4().hex[:8]}", "x-delayed-message",
                                          auto_delete=True, arguments=DELAYED)
            q = await ch.declare_queue(exclusive=True)
            await q.bind(x, "k")
            for body, delay in ((b"second", 600), (b"first", 300)):
                await x.publish(aio_pika.Message(body, headers={"x-delay": delay},
                                                 delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                                routing_key="k")
            out = []
            async with q.iterator() as it:
                async for message in it:
                    async with message.process():
                        out.append((message.body, message.headers.get("x-delay")))
                    if len(out) == 2:
                        break
            return out

    got = asyncio.run(asyncio.wait_for(scenario(), 20))
    assert got == [(b"first", -300), (b"second", -600)]


def test_kombu_producer_with_x_delay_header(broker_url: str) -> None:
    kombu = pytest.importorskip("kombu")
    name = f"dx-{uuid.uuid4().hex[:8]}"
    exchange = kombu.Exchange(name, type="x-delayed-message", arguments=DELAYED,
                              auto_delete=True, durable=False)
    queue = kombu.Queue(f"{name}-q", exchange=exchange, routing_key="jobs",
                        auto_delete=True, durable=False)
    got: list[tuple[dict, object]] = []
    with kombu.Connection(broker_url, connect_timeout=5,
                          transport_options={"confirm_publish": True}) as conn:
        channel = conn.channel()
        queue(channel).declare()
        producer = kombu.Producer(channel, exchange=exchange, serializer="json")
        start = time.monotonic()
        producer.publish({"n": 2}, routing_key="jobs", headers={"x-delay": 500})
        producer.publish({"n": 1}, routing_key="jobs", headers={"x-delay": 200})
        with kombu.Consumer(channel, [queue],
                            callbacks=[lambda body, m: (got.append(
                                (body, m.headers.get("x-delay"))), m.ack())]):
            deadline = time.monotonic() + 10
            while len(got) < 2 and time.monotonic() < deadline:
                try:
                    conn.drain_events(timeout=0.5)
                except TimeoutError:
                    pass
    assert got == [({"n": 1}, -200), ({"n": 2}, -500)]
    assert time.monotonic() - start >= 0.45


def test_celery_task_sent_through_a_delayed_exchange(broker_url: str) -> None:
    """Celery's usual recipe for the plugin: the task queue bound to an x-delayed-message
    exchange, ``apply_async(headers={"x-delay": ms})``; the task runs after the delay."""
    celery = pytest.importorskip("celery")
    kombu = pytest.importorskip("kombu")
    from celery.contrib.testing.worker import start_worker

    name = f"celery-delayed-{uuid.uuid4().hex[:8]}"
    exchange = kombu.Exchange(name, type="x-delayed-message", arguments=DELAYED,
                              durable=False, auto_delete=True)
    app = celery.Celery(name, broker=broker_url, backend="rpc://", set_as_current=False)
    app.conf.update(
        task_queues=[kombu.Queue(name, exchange, routing_key=name, durable=False,
                                 auto_delete=True)],
        task_default_queue=name, task_default_exchange=name,
        task_default_exchange_type="x-delayed-message", task_default_routing_key=name,
        worker_enable_remote_control=False, worker_send_task_events=False,
        worker_hijack_root_logger=False, broker_connection_retry_on_startup=False,
        broker_connection_timeout=5, broker_heartbeat=0, result_expires=60)
    ran_at: list[float] = []

    @app.task(name="delayed.stamp")
    def stamp(x: int) -> int:
        ran_at.append(time.monotonic())
        return x * 2

    try:
        with start_worker(app, pool="solo", concurrency=1, perform_ping_check=False,
                          shutdown_timeout=20, loglevel="WARNING"):
            start = time.monotonic()
            result = stamp.apply_async((21,), headers={"x-delay": 800})
            assert result.get(timeout=20) == 42
            assert ran_at and ran_at[0] - start >= 0.75
    finally:
        app.close()
