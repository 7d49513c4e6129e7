"""Every basic property and every field-table value type round-trips unchanged across its
whole wire range, through a real broker process: deliveries, a durable queue across a
restart, dead lettering (``x-death`` added, the rest byte for byte), the HTTP API's get.

RabbitMQ treats a ``timestamp`` (the property, or a ``T`` field value) as a u64 and passes
it through; amqpq used to decode it into a ``datetime`` and closed the connection with
``541 INTERNAL_ERROR - ValueError: year 91917996 is out of range`` (issue #34; RabbitMQ's Go
client's randomized publish test sends such values). pika sends any u64 timestamp property
but can neither encode nor decode a ``T`` value past year 9999, so messages with such
headers are built and read as raw frames here (:class:`RawClient`), compared byte for byte.
The same raw checks run against the reference RabbitMQ on 127.0.0.1:5672/15672 when it
answers (those cases skip otherwise).
"""

from __future__ import annotations

import base64
import json
import socket
import struct
import time
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pika
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import commands, frame
from support.broker_process import BrokerProcess, free_port
from support.wire import Client, body_frame

from amqp_common.properties import split_properties, split_table

EXTREMES = (0, 2**31, 2**63 - 1, 2**64 - 1)
REFERENCE_AMQP = 5672
REFERENCE_HTTP = "http://127.0.0.1:15672"
_FRAME = struct.Struct(">BHI")
_U64 = struct.Struct(">Q")


# ---- encoding (independent of the broker's code) ------------------------------------------

def shortstr(raw: bytes) -> bytes:
    return bytes((len(raw),)) + raw


def table(entries: list[tuple[bytes, bytes]]) -> bytes:
    """A field table from (key, tagged value bytes), with its u32 size."""
    body = b"".join(shortstr(k) + v for k, v in entries)
    return struct.pack(">I", len(body)) + body


def longstr(tag: bytes, raw: bytes) -> bytes:
    return tag + struct.pack(">I", len(raw)) + raw


_ORDER = ("content_type", "content_encoding", "headers", "delivery_mode", "priority",
          "correlation_id", "reply_to", "expiration", "message_id", "timestamp", "type",
          "user_id", "app_id", "cluster_id")


def props_raw(fields: dict[str, bytes]) -> bytes:
    """Property flags + list from property name -> its encoded bytes."""
    flags = 0
    parts = []
    for i, name in enumerate(_ORDER):
        if name in fields:
            flags |= 1 << (15 - i)
            parts.append(fields[name])
    return struct.pack(">H", flags) + b"".join(parts)


def stamp_headers(values: tuple[int, ...] = EXTREMES) -> bytes:
    """A headers table holding ``T`` values (top level, in an array, in a nested table)."""
    stamps = [b"T" + _U64.pack(v) for v in values]
    entries = [(f"t{i}".encode(), s) for i, s in enumerate(stamps)]
    arr = b"".join(stamps)
    entries.append((b"arr", b"A" + struct.pack(">I", len(arr)) + arr))
    entries.append((b"nested", b"F" + table([(b"deep", stamps[-1])])))
    return table(entries)


# ---- a raw-frame client: publishes and reads content headers without decoding them ------

class RawClient(Client):
    """wire.Client's handshake and set-up calls, plus publishing property bytes as given and
    Basic.Get answering (properties raw, body) without decoding the content header."""

    def publish(self, exchange: str, key: str, raw_props: bytes, body: bytes,
                ch: int = 1) -> None:
        payload = struct.pack(">HHQ", 60, 0, len(body)) + raw_props
        self.sock.sendall(frame.marshal(commands.Basic.Publish(exchange=exchange,
                                                               routing_key=key), ch)
                          + _FRAME.pack(2, ch, len(payload)) + payload + b"\xce"
                          + (body_frame(body, ch) if body else b""))  # none for no body

    def _raw_frame(self, deadline: float) -> tuple[int, int, bytes]:
        while True:
            if len(self.buf) >= 7:
                kind, ch, size = _FRAME.unpack_from(self.buf, 0)
                if len(self.buf) >= 8 + size:
                    payload = self.buf[7:7 + size]
                    self.buf = self.buf[8 + size:]
                    return kind, ch, payload
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no frame from broker in time")
            self.sock.settimeout(left)
            data = self.sock.recv(1 << 16)
            if not data:
                raise ConnectionError("connection closed by broker")
            self.buf += data

    def get(self, queue: str, no_ack: bool = True, ch: int = 1, timeout: float = 10.0
            ) -> tuple[int, bytes, bytes] | None:
        """Basic.Get: (delivery tag, property bytes, body), or None when the queue is empty.

        Raises:
            ConnectionError: the broker closed the channel or connection (reply in the text).
        """
        self.send(ch, commands.Basic.Get(queue=queue, no_ack=no_ack))
        deadline = time.monotonic() + timeout
        while True:
            kind, got_ch, payload = self._raw_frame(deadline)
            if kind != 1:
                continue
            method = frame.unmarshal(_FRAME.pack(1, got_ch, len(payload)) + payload
                                     + b"\xce")[2]
            if isinstance(method, commands.Basic.GetEmpty):
                return None
            if isinstance(method, commands.Connection.Close | commands.Channel.Close):
                raise ConnectionError(f"{method.reply_code} {method.reply_text}")
            if isinstance(method, commands.Basic.GetOk):
                break
        kind, _, header = self._raw_frame(deadline)
        assert kind == 2, kind
        (size,) = struct.unpack_from(">Q", header, 4)
        body = b""
        while len(body) < size:
            kind, _, chunk = self._raw_frame(deadline)
            assert kind == 3, kind
            body += chunk
        return method.delivery_tag, header[12:], body

    def reject(self, tag: int, ch: int = 1) -> None:
        self.send(ch, commands.Basic.Reject(delivery_tag=tag, requeue=False))

    def declare(self, name: str, ch: int = 1, **kw: Any) -> None:
        self.call(ch, commands.Queue.Declare(queue=name, **kw), commands.Queue.DeclareOk)

    def get_until(self, queue: str, timeout: float = 5.0) -> tuple[int, bytes, bytes]:
        deadline = time.monotonic() + timeout
        while True:
            got = self.get(queue)
            if got is not None:
                return got
            assert time.monotonic() < deadline, f"nothing arrived in {queue}"
            time.sleep(0.02)


def http(base: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    req = urllib.request.Request(base + path, method=method,
                                 data=None if body is None else json.dumps(body).encode())
    req.add_header("Content-Type", "application/json")
    req.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.status, json.loads(resp.read() or b"null")


def api_get(base: str, queue: str, count: int = 10) -> list[dict[str, Any]]:
    status, out = http(base, "POST", f"/api/queues/%2F/{queue}/get", {
        "count": count, "ackmode": "ack_requeue_true", "encoding": "auto"})
    assert status == 200
    return list(out)


# ---- brokers -------------------------------------------------------------------------------

class Target:
    def __init__(self, amqp_port: int, http_base: str, broker: BrokerProcess | None) -> None:
        self.amqp_port = amqp_port
        self.http_base = http_base
        self.broker = broker

    def client(self) -> RawClient:
        c = RawClient(self.amqp_port)
        c.channel()
        return c


@pytest.fixture(scope="module")
def amqpq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    tmp = tmp_path_factory.mktemp("ranges")
    mport = free_port()
    broker = BrokerProcess(tmp / "data", tmp / "broker.log", management=mport)
    broker.start()
    try:
        yield Target(broker.port, f"http://127.0.0.1:{mport}", broker)
    finally:
        broker.stop()


def _reference() -> Target:
    try:
        with socket.create_connection(("127.0.0.1", REFERENCE_AMQP), timeout=1):
            pass
        http(REFERENCE_HTTP, "GET", "/api/overview")
    except OSError as exc:
        pytest.skip(f"reference RabbitMQ not reachable: {exc}")
    return Target(REFERENCE_AMQP, REFERENCE_HTTP, None)


@pytest.fixture(params=["amqpq", "rabbitmq"])
def target(request: pytest.FixtureRequest, amqpq: Target) -> Target:
    return amqpq if request.param == "amqpq" else _reference()


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# ---- the extremes ----------------------------------------------------------------------------

def test_pika_timestamps_round_trip(amqpq: Target) -> None:
    """pika publishes each extreme timestamp, consumes it back unchanged; the connection
    stays open (it used to be closed with 541 once a feature decoded the properties)."""
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", amqpq.amqp_port))
    try:
        ch = conn.channel()
        q = ch.queue_declare(_name("pika-ts"), exclusive=True).method.queue
        ch.exchange_declare("ranges.headers", "headers", auto_delete=True)
        ch.queue_bind(q, "ranges.headers", arguments={"x-match": "any", "k": "v"})
        for v in EXTREMES:  # the headers exchange decodes every message's properties
            ch.basic_publish("ranges.headers", "", str(v).encode(),
                             pika.BasicProperties(timestamp=v, headers={"k": "v"}))
        got: list[int] = []
        for method, props, body in ch.consume(q, inactivity_timeout=5):
            assert method is not None, f"only {got} arrived"
            assert body == str(props.timestamp).encode()
            got.append(props.timestamp)
            ch.basic_ack(method.delivery_tag)
            if len(got) == len(EXTREMES):
                break
        ch.cancel()
        assert got == list(EXTREMES)
        assert conn.is_open
    finally:
        conn.close()


def test_raw_timestamps_and_T_headers_round_trip(target: Target) -> None:
    """Property bytes with each extreme timestamp and ``T`` header values (top level, in an
    array, in a nested table) come back byte for byte, through a headers exchange."""
    c = target.client()
    try:
        q = _name("raw-ts")
        c.declare(q, exclusive=True)
        x = _name("raw-ts-x")
        c.call(1, commands.Exchange.Declare(exchange=x, exchange_type="headers",
                                            auto_delete=True), commands.Exchange.DeclareOk)
        c.call(1, commands.Queue.Bind(queue=q, exchange=x, arguments={"x-match": "all"}),
               commands.Queue.BindOk)
        sent = [props_raw({"headers": stamp_headers(), "timestamp": _U64.pack(v)})
                for v in EXTREMES]
        for raw in sent:
            c.publish(x, "", raw, b"m")
        for raw in sent:
            _, got, body = c.get_until(q)
            assert (got, body) == (raw, b"m")
    finally:
        c.close()


def test_http_get_shows_timestamps_as_numbers(target: Target) -> None:
    """GET /api/queues/.../get: the timestamp property and ``T`` header values as numbers."""
    c = target.client()
    q = _name("http-ts")
    try:
        c.declare(q)
        for v in EXTREMES:
            c.publish("", q, props_raw({"timestamp": _U64.pack(v),
                                        "headers": stamp_headers((v,))}), b"m")
        deadline = time.monotonic() + 5
        while (out := api_get(target.http_base, q)) and len(out) < len(EXTREMES):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert [m["properties"]["timestamp"] for m in out] == list(EXTREMES)
        assert [m["properties"]["headers"]["t0"] for m in out] == list(EXTREMES)
        assert [m["properties"]["headers"]["arr"] for m in out] == [[v] for v in EXTREMES]
        c.delete_queue(q)
    finally:
        c.close()


def test_http_publish_extreme_timestamps(target: Target) -> None:
    """The HTTP API's publish takes every u64 timestamp; AMQP delivers the same 8 bytes."""
    c = target.client()
    q = _name("http-pub-ts")
    try:
        c.declare(q, exclusive=True)
        for v in EXTREMES:
            status, out = http(target.http_base, "POST", "/api/exchanges/%2F/amq.default/publish",
                               {"properties": {"timestamp": v}, "routing_key": q,
                                "payload": "m", "payload_encoding": "string"})
            assert (status, out) == (200, {"routed": True})
        for v in EXTREMES:
            _, raw, _ = c.get_until(q)
            assert split_properties(raw)["timestamp"] == _U64.pack(v)
    finally:
        c.close()


def test_dead_lettering_keeps_timestamps(target: Target) -> None:
    """A rejected message with extreme timestamps is dead-lettered with ``x-death`` added:
    the timestamp property and every original header entry byte for byte, the connection
    open afterwards."""
    c = target.client()
    q, dlq = _name("dl-src"), _name("dl-dst")
    try:
        c.declare(dlq, exclusive=True)
        c.declare(q, exclusive=True, arguments={"x-dead-letter-exchange": "",
                                                "x-dead-letter-routing-key": dlq})
        for v in EXTREMES:
            raw = props_raw({"timestamp": _U64.pack(v), "headers": stamp_headers()})
            c.publish("", q, raw, b"m")
            tag, _, _ = _get_unacked(c, q)
            c.reject(tag)
            _, got, body = c.get_until(dlq)
            fields = split_properties(got)
            assert fields["timestamp"] == _U64.pack(v)
            entries = dict(split_table(fields["headers"]))
            assert "x-death" in entries
            for key, value in split_table(stamp_headers()):
                assert entries[key] == value, key
        c.declare(q, passive=True)  # the channel and connection are still open
    finally:
        c.close()


def _get_unacked(c: RawClient, q: str) -> tuple[int, bytes, bytes]:
    deadline = time.monotonic() + 5
    while (got := c.get(q, no_ack=False)) is None:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return got


def test_durable_queue_keeps_timestamps_across_restart(amqpq: Target) -> None:
    """Persistent messages with extreme timestamps survive a restart byte for byte."""
    assert amqpq.broker is not None
    q = _name("durable-ts")
    sent = [props_raw({"headers": stamp_headers(), "delivery_mode": b"\x02",
                       "timestamp": _U64.pack(v)}) for v in EXTREMES]
    c = amqpq.client()
    try:
        c.declare(q, durable=True)
        c.confirm_select()
        for raw in sent:
            c.publish("", q, raw, b"persisted")
        confirmed = 0
        while confirmed < len(sent):  # acks may be multiple
            confirmed = max(confirmed, c.expect(1, commands.Basic.Ack).delivery_tag)
    finally:
        c.close()
    amqpq.broker.stop()
    amqpq.broker.start()
    c = amqpq.client()
    try:
        for raw in sent:
            _, got, body = c.get_until(q)
            assert (got, body) == (raw, b"persisted")
        c.delete_queue(q)
    finally:
        c.close()


# ---- every property and field type, generated -----------------------------------------------

def _packed(fmt: str, values: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    return values.map(lambda v: struct.pack(fmt, v))


def _ints(fmt: str, bits: int, signed: bool) -> st.SearchStrategy[bytes]:
    lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    edges = st.sampled_from(sorted({lo, hi, 0, 1, -1 if signed else 1}))
    return _packed(fmt, st.one_of(edges, st.integers(lo, hi)))


SCALARS: st.SearchStrategy[bytes] = st.one_of(
    st.integers(0, 255).map(lambda v: b"t" + bytes((v,))),
    _ints(">b", 8, True).map(lambda b: b"b" + b),
    _ints(">B", 8, False).map(lambda b: b"B" + b),
    _ints(">h", 16, True).map(lambda b: b"s" + b),
    _ints(">H", 16, False).map(lambda b: b"u" + b),
    _ints(">i", 32, True).map(lambda b: b"I" + b),
    _ints(">I", 32, False).map(lambda b: b"i" + b),
    _ints(">q", 64, True).map(lambda b: b"l" + b),
    st.one_of(_packed(">f", st.floats(width=32)), st.binary(min_size=4, max_size=4)
              ).map(lambda b: b"f" + b),
    st.one_of(_packed(">d", st.floats()), st.binary(min_size=8, max_size=8)
              ).map(lambda b: b"d" + b),
    st.tuples(st.integers(0, 255), _ints(">i", 32, True)).map(
        lambda t: b"D" + bytes((t[0],)) + t[1]),
    _ints(">Q", 64, False).map(lambda b: b"T" + b),
    st.binary(max_size=40).map(lambda b: longstr(b"S", b)),
    st.binary(max_size=40).map(lambda b: longstr(b"x", b)),
    st.just(b"V"),
)
KEYS = st.text("abcdefghijklmnopqrstuvwxyz0123456789_", min_size=1, max_size=12).map(
    str.encode)


def _containers(children: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.lists(children, max_size=4).map(lambda vs: longstr(b"A", b"".join(vs))),
        st.dictionaries(KEYS, children, max_size=4).map(
            lambda d: b"F" + table(list(d.items()))))


VALUES = st.recursive(SCALARS, _containers, max_leaves=12)
SHORTSTR = st.binary(max_size=255).map(shortstr)
OCTET = st.integers(0, 255).map(lambda v: bytes((v,)))
PROPERTY_VALUES: dict[str, st.SearchStrategy[bytes]] = {
    "content_type": SHORTSTR, "content_encoding": SHORTSTR,
    "headers": st.dictionaries(KEYS.filter(lambda k: k != b"route"), VALUES, max_size=8).map(
        lambda d: table([(b"route", longstr(b"S", b"yes")), *d.items()])),
    "delivery_mode": OCTET, "priority": OCTET, "correlation_id": SHORTSTR,
    "reply_to": SHORTSTR,
    # an expiration must be a number of ms (RabbitMQ refuses anything else): long enough here
    "expiration": st.integers(3_600_000, 315_360_000_000).map(lambda v: shortstr(b"%d" % v)),
    "message_id": SHORTSTR, "timestamp": _ints(">Q", 64, False), "type": SHORTSTR,
    "user_id": st.just(shortstr(b"guest")),  # another user is refused, as by RabbitMQ
    "app_id": SHORTSTR, "cluster_id": SHORTSTR,
}


@st.composite
def properties(draw: st.DrawFn) -> dict[str, bytes]:
    names = draw(st.sets(st.sampled_from(_ORDER)))
    fields = {name: draw(PROPERTY_VALUES[name]) for name in names}
    fields.setdefault("headers", draw(PROPERTY_VALUES["headers"]))  # routes the message
    return fields


@pytest.fixture(scope="module")
def generated(amqpq: Target) -> Iterator[tuple[str, str, str]]:
    """A headers exchange -> queue -> dead-letter queue for the examples (each example
    connects anew, so one that fails does not fail the others)."""
    c = amqpq.client()
    q, dlq, x = _name("gen"), _name("gen-dl"), _name("gen-x")
    c.declare(dlq)
    c.declare(q, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    c.call(1, commands.Exchange.Declare(exchange=x, exchange_type="headers"),
           commands.Exchange.DeclareOk)
    c.call(1, commands.Queue.Bind(queue=q, exchange=x,
                                  arguments={"x-match": "any", "route": "yes"}),
           commands.Queue.BindOk)
    c.close()
    yield q, dlq, x
    c = amqpq.client()
    for name in (q, dlq):
        c.delete_queue(name)
    c.delete_exchange(x)
    c.close()


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(fields=properties(), body=st.binary(max_size=64))
def test_every_property_and_field_type_round_trips(
        amqpq: Target, generated: tuple[str, str, str], fields: dict[str, bytes],
        body: bytes) -> None:
    """Generated properties (all 14, every field type at its limits, nested) go through a
    headers exchange (which decodes them), the HTTP API's get (which decodes them to JSON)
    and dead lettering (which decodes and re-encodes ``x-death``): the delivery carries the
    property bytes unchanged, the dead-lettered copy every property but ``expiration`` and
    every original header entry unchanged, and the connection stays open."""
    q, dlq, x = generated
    c = amqpq.client()
    try:
        _round_trip(c, amqpq, q, dlq, x, fields, body)
    except (ConnectionError, OSError) as exc:
        assert amqpq.broker is not None
        pytest.fail(f"{exc!r}\n{amqpq.broker.log()}")
    finally:
        c.close()


def _round_trip(c: RawClient, amqpq: Target, q: str, dlq: str, x: str,
                fields: dict[str, bytes], body: bytes) -> None:
    for name in (q, dlq):  # what an earlier failing example left
        c.call(1, commands.Queue.Purge(queue=name), commands.Queue.PurgeOk)
    raw = props_raw(fields)
    c.publish(x, "", raw, body)
    shown = api_get(amqpq.http_base, q, count=1)  # also waits until it is in the queue
    deadline = time.monotonic() + 5
    while not shown:
        assert time.monotonic() < deadline, "the message was not routed"
        time.sleep(0.01)
        shown = api_get(amqpq.http_base, q, count=1)
    if "timestamp" in fields:
        assert shown[0]["properties"]["timestamp"] == _U64.unpack(fields["timestamp"])[0]
    tag, got, got_body = _get_unacked(c, q)
    assert (got, got_body) == (raw, body)
    c.reject(tag)
    _, dead, dead_body = c.get_until(dlq)
    assert dead_body == body
    dead_fields = split_properties(dead)
    for name, value in fields.items():
        if name not in ("headers", "expiration"):
            assert dead_fields[name] == value, name
    assert "expiration" not in dead_fields
    entries = dict(split_table(dead_fields["headers"]))
    assert "x-death" in entries
    for key, value in split_table(fields["headers"]):
        assert entries[key] == value, key



def test_spark_source_row_timestamps() -> None:
    """The Spark source's ``properties.timestamp`` column: the datetime up to 9999-12-31,
    null past it (a TimestampType cannot hold it) instead of failing the read."""
    pytest.importorskip("pyspark")
    from types import SimpleNamespace

    from spark_sink.source import _row

    def column(stamp: int) -> Any:
        props = SimpleNamespace(**dict.fromkeys(
            ("content_type", "content_encoding", "delivery_mode", "priority",
             "correlation_id", "reply_to", "expiration", "message_id", "type", "user_id",
             "app_id")), timestamp=stamp)
        row = _row("s", 0, SimpleNamespace(exchange="", routing_key="k"), props, {}, b"")
        return row[5][8]

    assert column(2**31).timestamp() == 2**31
    assert column(253_402_300_799).year == 9999
    assert [column(v) for v in (253_402_300_800, 2**63 - 1, 2**64 - 1)] == [None] * 3


def test_headers_exchange_matches_extreme_T_binding(target: Target) -> None:
    """A binding argument that is a ``T`` past year 9999 (decoded from a method frame) matches
    a message header with the same u64, and not one with the next value down."""
    c = target.client()
    q, x = _name("hx-q"), _name("hx-x")
    top = b"T" + _U64.pack(2**64 - 1)
    try:
        c.declare(q, exclusive=True)
        c.call(1, commands.Exchange.Declare(exchange=x, exchange_type="headers",
                                            auto_delete=True), commands.Exchange.DeclareOk)
        args = table([(b"x-match", longstr(b"S", b"all")), (b"t", top)])
        bind = (struct.pack(">HHH", 50, 20, 0) + shortstr(q.encode()) + shortstr(x.encode())
                + shortstr(b"") + b"\x00" + args)
        c.sock.sendall(_FRAME.pack(1, 1, len(bind)) + bind + b"\xce")
        c.expect(1, commands.Queue.BindOk)
        for value, body in ((b"T" + _U64.pack(2**64 - 2), b"other"), (top, b"same")):
            c.publish(x, "", props_raw({"headers": table([(b"t", value)])}), body)
        _, _, body = c.get_until(q)
        assert body == b"same"
        assert c.get(q) is None
    finally:
        c.close()


@pytest.mark.parametrize("raw", [
    b"x" + (3).to_bytes(4, "big") + b"a\x00c",  # byte array
    b"x" + (0).to_bytes(4, "big"),
    b"D" + bytes([2]) + (12345).to_bytes(4, "big", signed=True),  # 123.45
    b"D" + bytes([0]) + (-7).to_bytes(4, "big", signed=True),
    b"D" + bytes([9]) + (2**31 - 1).to_bytes(4, "big", signed=True),
])
def test_byte_arrays_and_decimals_re_encode_as_they_came(raw: bytes) -> None:
    """A header entry kept while dead lettering (a user's own ``x-death``, for one) is
    decoded, then written again by ``encode_value``: byte arrays and decimals come out as the
    same bytes (they raised TypeError before)."""
    from pamqp import decode

    from amqp_common.properties import encode_value

    _, value = decode.embedded_value(raw)
    assert encode_value(value) == raw
