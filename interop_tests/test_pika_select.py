"""pika.SelectConnection (callback style, pika's own ioloop) against the broker.

One asynchronous conversation: declare, bind, publish 100 with publisher confirms, consume and
ack them all, delete the queue, close cleanly. A timer on the ioloop bounds the whole run so a
broker that stops answering fails the test instead of hanging it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pika
import pytest
from pika.exceptions import ChannelClosedByClient, ConnectionClosedByClient
from pika.spec import Basic, BasicProperties

from interop_tests.conftest import pika_parameters

pytestmark = pytest.mark.timeout(30)

N = 100
RUN_TIMEOUT = 20.0


@dataclass
class Run:
    steps: list[str] = field(default_factory=list)
    acked: set[int] = field(default_factory=set)
    nacked: set[int] = field(default_factory=set)
    received: list[tuple[bytes, bool, int, str | None]] = field(default_factory=list)
    consuming: bool = False
    consumer_tag: str | None = None
    deleted_message_count: int | None = None
    open_error: object = None
    channel_closed: object = None
    close_reason: object = None
    timed_out: bool = False


def test_select_connection_confirm_consume_ack(broker_url, unique_name, cleanup):
    exchange = cleanup.exchange(unique_name("ex"))
    queue = cleanup.queue(unique_name("q"))
    bodies = [f"select-{i}".encode() for i in range(N)]
    run = Run()
    state: dict[str, object] = {}

    def on_open(conn):
        run.steps.append("open")
        conn.channel(on_open_callback=on_channel_open)

    def on_open_error(conn, error):
        run.open_error = error
        conn.ioloop.stop()

    def on_closed(conn, reason):
        run.close_reason = reason
        conn.ioloop.stop()

    def on_channel_open(channel):
        run.steps.append("channel")
        state["channel"] = channel
        channel.add_on_close_callback(on_channel_closed)
        channel.confirm_delivery(on_confirm, callback=on_select_ok)

    def on_channel_closed(channel, reason):
        # expected only as part of the final, client-initiated connection close
        if not isinstance(reason, ChannelClosedByClient):
            run.channel_closed = reason
        if connection.is_open:
            connection.close()

    def on_select_ok(frame):
        run.steps.append("confirm.select-ok")
        state["channel"].exchange_declare(exchange, "direct", callback=on_exchange_ok)

    def on_exchange_ok(frame):
        run.steps.append("exchange.declare-ok")
        state["channel"].queue_declare(queue, callback=on_queue_ok)

    def on_queue_ok(frame):
        run.steps.append("queue.declare-ok")
        assert frame.method.queue == queue
        state["channel"].queue_bind(queue, exchange, routing_key="rk", callback=on_bind_ok)

    def on_bind_ok(frame):
        run.steps.append("queue.bind-ok")
        channel = state["channel"]
        for i, body in enumerate(bodies):
            channel.basic_publish(
                exchange, "rk", body, BasicProperties(message_id=str(i), delivery_mode=1)
            )

    def on_confirm(frame):
        method = frame.method
        tags = range(1, method.delivery_tag + 1) if method.multiple else [method.delivery_tag]
        (run.acked if isinstance(method, Basic.Ack) else run.nacked).update(tags)
        if len(run.acked) + len(run.nacked) >= N and not run.consuming:
            run.steps.append("all confirmed")
            run.consuming = True
            channel = state["channel"]
            channel.basic_qos(prefetch_count=20)
            run.consumer_tag = channel.basic_consume(queue, on_message)

    def on_message(channel, method, props, body):
        run.received.append((body, method.redelivered, method.delivery_tag, props.message_id))
        channel.basic_ack(method.delivery_tag)
        if len(run.received) == N:
            run.steps.append("all consumed")
            channel.basic_cancel(run.consumer_tag, callback=on_cancel_ok)

    def on_cancel_ok(frame):
        run.steps.append("basic.cancel-ok")
        state["channel"].queue_delete(queue, callback=on_delete_ok)

    def on_delete_ok(frame):
        run.steps.append("queue.delete-ok")
        run.deleted_message_count = frame.method.message_count
        state["channel"].exchange_delete(exchange, callback=on_exchange_delete_ok)

    def on_exchange_delete_ok(frame):
        run.steps.append("exchange.delete-ok")
        connection.close()

    def on_timeout():
        run.timed_out = True
        if connection.is_open:
            connection.close()
        # if the broker never answers Connection.Close, stop anyway
        connection.ioloop.call_later(2.0, connection.ioloop.stop)

    connection = pika.SelectConnection(
        pika_parameters(broker_url),
        on_open_callback=on_open,
        on_open_error_callback=on_open_error,
        on_close_callback=on_closed,
    )
    timer = connection.ioloop.call_later(RUN_TIMEOUT, on_timeout)
    connection.ioloop.start()
    connection.ioloop.remove_timeout(timer)

    assert run.open_error is None
    assert not run.timed_out, f"timed out after steps {run.steps}"
    assert run.channel_closed is None
    assert run.steps == [
        "open",
        "channel",
        "confirm.select-ok",
        "exchange.declare-ok",
        "queue.declare-ok",
        "queue.bind-ok",
        "all confirmed",
        "all consumed",
        "basic.cancel-ok",
        "queue.delete-ok",
        "exchange.delete-ok",
    ]
    assert run.acked == set(range(1, N + 1))
    assert run.nacked == set()
    assert [r[0] for r in run.received] == bodies
    assert [r[3] for r in run.received] == [str(i) for i in range(N)]
    assert [r[2] for r in run.received] == list(range(1, N + 1))
    assert not any(r[1] for r in run.received)
    assert run.deleted_message_count == 0  # everything was acked before the delete
    assert isinstance(run.close_reason, ConnectionClosedByClient)
    assert (run.close_reason.reply_code, run.close_reason.reply_text) == (200, "Normal shutdown")
    assert connection.is_closed
