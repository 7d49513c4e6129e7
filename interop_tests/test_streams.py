"""Stream queues (``x-queue-type: stream``) with pika: the same script against amqpq and the
reference RabbitMQ (that case skips when the reference is not running): declare rules and
their texts, offsets (first, next, a number, an interval), the ``x-stream-offset`` header,
independent consumers, acks as credit, and what streams refuse. amqpq-only: exact filtering,
the timestamp header extension, retention by segment, and kill -9 (every confirmed message
back at its offset)."""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from base64 import b64encode
from collections.abc import Iterator
from typing import Any

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker

from interop_tests.conftest import pika_parameters, process_connection, url_for
from tests.support.broker_process import BrokerProcess, broker_fixture, free_port

pytestmark = pytest.mark.timeout(60)
STREAM = {"x-queue-type": "stream"}


def _connect(url: str) -> pika.BlockingConnection:
    try:
        return pika.BlockingConnection(pika_parameters(url))
    except Exception as exc:
        pytest.skip(f"{url} not reachable: {exc!r}")


@pytest.fixture(params=["amqpq", "rabbitmq"])
def url(request: pytest.FixtureRequest, broker_url: str) -> str:
    return url_for(request.param, broker_url)


@pytest.fixture
def stream(url: str) -> Iterator[tuple[pika.BlockingConnection, Any, str]]:
    """A stream with 10 messages ``m0``..``m9`` published with confirms."""
    conn = _connect(url)
    ch = conn.channel()
    name = f"stream-{uuid.uuid4().hex[:8]}"
    ch.queue_declare(name, durable=True, arguments=STREAM)
    ch.confirm_delivery()
    for i in range(10):
        ch.basic_publish("", name, f"m{i}".encode(), pika.BasicProperties(delivery_mode=2))
    yield conn, ch, name
    if not conn.is_open:
        conn = _connect(url)
    conn.channel().queue_delete(name)
    conn.close()


def consume(conn: pika.BlockingConnection, name: str, offset: Any, prefetch: int = 100,
            want: int = 10, ack: bool = True, arguments: dict[str, Any] | None = None,
            seconds: float = 3.0) -> list[tuple[int, bytes, dict[str, Any]]]:
    """(x-stream-offset, body, headers) of what a new consumer gets from ``offset``."""
    ch = conn.channel()
    ch.basic_qos(prefetch_count=prefetch)
    got: list[tuple[int, bytes, dict[str, Any]]] = []

    def on_message(c: Any, method: Any, props: Any, body: bytes) -> None:
        got.append((int(props.headers["x-stream-offset"]), body, dict(props.headers)))
        if ack:
            c.basic_ack(method.delivery_tag)

    ch.basic_consume(name, on_message,
                     arguments={"x-stream-offset": offset, **(arguments or {})})
    deadline = time.monotonic() + seconds
    while len(got) < want and time.monotonic() < deadline:
        conn.process_data_events(0.1)
    conn.process_data_events(0.2)  # anything beyond ``want`` shows too
    ch.close()
    return got


def refused(url: str, fn: Any) -> tuple[str, int, str]:
    conn = _connect(url)
    try:
        fn(conn.channel())
    except ChannelClosedByBroker as exc:
        return "channel", exc.reply_code, exc.reply_text
    except ConnectionClosedByBroker as exc:
        return "connection", exc.reply_code, exc.reply_text
    finally:
        if conn.is_open:
            conn.close()
    return "accepted", 0, ""


@pytest.mark.parametrize("durable,exclusive,auto_delete,prop", [
    (False, False, False, "non-durable"), (True, True, False, "exclusive-owner"),
    (True, False, True, "auto-delete")])
def test_declare_properties_refused(url: str, durable: bool, exclusive: bool,
                                    auto_delete: bool, prop: str) -> None:
    name = f"stream-{uuid.uuid4().hex[:8]}"
    assert refused(url, lambda ch: ch.queue_declare(
        name, durable=durable, exclusive=exclusive, auto_delete=auto_delete,
        arguments=STREAM)) == ("channel", 406, f"PRECONDITION_FAILED - invalid property "
                               f"'{prop}' for queue '{name}' in vhost '/'")


@pytest.mark.parametrize("args,reason", [
    ({"x-max-age": "5X"}, "invalid_max_age"),
    ({"x-max-age": 5}, "{unacceptable_type,signedint}"),
    ({"x-stream-max-segment-size-bytes": "x"}, '"expected integer, got longstr"'),
    ({"x-message-ttl": 5}, None), ({"x-max-priority": 5}, None),
    ({"x-dead-letter-exchange": "dlx"}, None)])
def test_declare_arguments_refused(url: str, args: dict[str, Any], reason: str | None) -> None:
    name = f"stream-{uuid.uuid4().hex[:8]}"
    key = next(iter(args))
    tail = f": {reason}" if reason else " of queue type rabbit_stream_queue"
    assert refused(url, lambda ch: ch.queue_declare(
        name, durable=True, arguments={**STREAM, **args})) == (
        "channel", 406, f"PRECONDITION_FAILED - invalid arg '{key}' for queue '{name}' in "
                        f"vhost '/'{tail}")


def test_first_reads_everything_in_order_with_offsets(stream: Any) -> None:
    conn, _, name = stream
    got = consume(conn, name, "first")
    assert [(o, b) for o, b, _ in got] == [(i, f"m{i}".encode()) for i in range(10)]


def test_consumers_read_independently_and_acks_keep_messages(stream: Any) -> None:
    conn, _, name = stream
    assert len(consume(conn, name, "first")) == 10
    assert [o for o, _, _ in consume(conn, name, "first")] == list(range(10))


def test_numeric_interval_and_next_offsets(stream: Any) -> None:
    conn, ch, name = stream
    assert [o for o, _, _ in consume(conn, name, 7, want=3)] == [7, 8, 9]
    assert [o for o, _, _ in consume(conn, name, "1h")] == list(range(10))
    live = conn.channel()
    live.basic_qos(prefetch_count=10)
    got: list[int] = []
    live.basic_consume(name, lambda c, m, p, b: got.append(int(p.headers["x-stream-offset"])),
                       arguments={"x-stream-offset": "next"})
    conn.process_data_events(0.5)
    ch.basic_publish("", name, b"m10")
    deadline = time.monotonic() + 3
    while not got and time.monotonic() < deadline:
        conn.process_data_events(0.1)
    assert got == [10]


def test_unacked_deliveries_stop_at_the_prefetch(stream: Any) -> None:
    conn, _, name = stream
    got = consume(conn, name, "first", prefetch=3, want=3, ack=False, seconds=1.0)
    assert [o for o, _, _ in got] == [0, 1, 2]


@pytest.mark.parametrize("what,expected", [
    ("get", ("connection", 540, "NOT_IMPLEMENTED - basic.get not supported by stream queues "
                                "queue '{q}' in vhost '/'")),
    ("purge", ("connection", 540, "NOT_IMPLEMENTED - queue.purge not supported by stream "
                                  "queues queue '{q}' in vhost '/'")),
    ("no-ack", ("connection", 540, "NOT_IMPLEMENTED - automatic acknowledgement not "
                                   "supported by stream queues queue '{q}' in vhost '/'")),
    ("no-prefetch", ("channel", 406, "PRECONDITION_FAILED - consumer prefetch count is not "
                                     "set for 'queue '{q}' in vhost '/''")),
])
def test_what_streams_refuse(stream: Any, url: str, what: str,
                             expected: tuple[str, int, str]) -> None:
    _, _, name = stream

    def act(ch: Any) -> None:
        if what == "get":
            ch.basic_get(name)
        elif what == "purge":
            ch.queue_purge(name)
        else:
            if what == "no-ack":
                ch.basic_qos(prefetch_count=10)
            ch.basic_consume(name, lambda *a: None, auto_ack=what == "no-ack")
            ch.connection.process_data_events(0.5)

    kind, code, text = expected
    assert refused(url, act) == (kind, code, text.format(q=name))


def test_nack_is_refused(stream: Any, url: str) -> None:
    _, _, name = stream

    def act(ch: Any) -> None:
        ch.basic_qos(prefetch_count=1)
        ch.basic_consume(name, lambda c, m, p, b: c.basic_nack(m.delivery_tag),
                         arguments={"x-stream-offset": "first"})
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            ch.connection.process_data_events(0.1)

    assert refused(url, act) == (
        "connection", 540, "NOT_IMPLEMENTED - basic.nack and basic.reject not supported by "
                           f"stream queues queue '{name}' in vhost '/'")


# ---- amqpq only ------------------------------------------------------------------------


def test_filtering_is_exact_and_unfiltered_on_request(broker_url: str) -> None:
    conn = _connect(broker_url)
    ch = conn.channel()
    name = f"stream-{uuid.uuid4().hex[:8]}"
    ch.queue_declare(name, durable=True, arguments=STREAM)
    ch.confirm_delivery()
    for i, value in enumerate(["red", "blue", None, "red", "green"]):
        headers = {"x-stream-filter-value": value} if value else {}
        ch.basic_publish("", name, f"m{i}".encode(), pika.BasicProperties(headers=headers))
    red = consume(conn, name, "first", want=2, arguments={"x-stream-filter": "red"})
    assert [b for _, b, _ in red] == [b"m0", b"m3"]
    some = consume(conn, name, "first", want=3, arguments={
        "x-stream-filter": ["blue", "green"], "x-stream-match-unfiltered": True})
    assert [b for _, b, _ in some] == [b"m1", b"m2", b"m4"]
    conn.channel().queue_delete(name)
    conn.close()


def test_timestamp_header_on_request(broker_url: str) -> None:
    conn = _connect(broker_url)
    ch = conn.channel()
    name = f"stream-{uuid.uuid4().hex[:8]}"
    ch.queue_declare(name, durable=True, arguments=STREAM)
    before = int(time.time() * 1000)
    ch.basic_publish("", name, b"m0")
    plain = consume(conn, name, "first", want=1)
    stamped = consume(conn, name, "first", want=1,
                      arguments={"x-stream-timestamp-header": True})
    assert "x-stream-timestamp" not in plain[0][2]
    assert before - 1000 <= int(stamped[0][2]["x-stream-timestamp"]) <= time.time() * 1000
    conn.channel().queue_delete(name)
    conn.close()


def _api(bp: BrokerProcess, path: str) -> Any:
    req = urllib.request.Request(f"http://127.0.0.1:{bp.management_port}{path}", headers={
        "Authorization": "Basic " + b64encode(b"guest:guest").decode()})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.load(resp)


stream_broker = broker_fixture(start=False, fresh_port=True, log_level="info",
                               management=free_port())


@pytest.mark.own_broker
def test_kill_9_keeps_every_confirmed_message_at_its_offset(stream_broker: BrokerProcess
                                                            ) -> None:
    bp = stream_broker
    bp.start()
    conn = process_connection(bp)
    ch = conn.channel()
    ch.queue_declare("events", durable=True,
                     arguments={**STREAM, "x-stream-max-segment-size-bytes": 4000})
    ch.confirm_delivery()
    for i in range(300):
        ch.basic_publish("", "events", f"e{i}".encode())
    bp.kill()
    bp.start()
    conn = process_connection(bp)
    got = consume(conn, "events", "first", want=300, prefetch=500)
    assert [(o, b) for o, b, _ in got] == [(i, f"e{i}".encode()) for i in range(300)]
    q = _api(bp, "/api/queues/%2F/events")
    assert (q["type"], q["messages"], q["first_offset"], q["last_offset"]) == (
        "stream", 300, 0, 299)
    assert q["segments"] > 1
    conn.close()


@pytest.mark.own_broker
def test_retention_drops_whole_old_segments(stream_broker: BrokerProcess) -> None:
    bp = stream_broker
    bp.start()
    conn = process_connection(bp)
    ch = conn.channel()
    ch.queue_declare("capped", durable=True, arguments={
        **STREAM, "x-stream-max-segment-size-bytes": 2000, "x-max-length-bytes": 6000})
    ch.confirm_delivery()
    for i in range(400):
        ch.basic_publish("", "capped", f"c{i:04d}".encode())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # retention runs on the broker's 1 s tick (a tick
        q = _api(bp, "/api/queues/%2F/capped")  # during the publishes trims only part)
        if q["first_offset"] and q["message_bytes"] <= 6000 + 2000:
            break
        time.sleep(0.2)
    assert q["first_offset"] > 0 and q["last_offset"] == 399
    assert q["message_bytes"] <= 6000 + 2000
    got = consume(conn, "capped", "first", want=400 - q["first_offset"], prefetch=500)
    assert got[0][0] == q["first_offset"] and got[-1][0] == 399
    conn.close()
