"""Helpers for the sans-IO protocol tests: a fake clock and an AMQP client test double.

The :class:`Client` owns one :class:`~amqp_server.connection.Connection` and speaks to it the
way a real client would: frames are built with pamqp (the reference encoder), fed with
``receive_data``, and everything the connection writes back is decoded with
``pamqp.frame.unmarshal`` into ``(channel, frame)`` pairs. Tests assert what a client would
observe: frames, their fields, reply codes and reply texts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pytest
from pamqp import commands, encode
from pamqp import frame as pamqp_frame
from pamqp.body import ContentBody
from pamqp.header import ContentHeader

from amqp_server.connection import Connection
from broker.broker import Broker
from broker.config import BrokerConfig

pytest_plugins = ["tests.support.shared_fixtures",  # one broker for modules in a row
                  "tests.support.cluster_fixtures"]  # etcd, nodes (cluster tests)

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
LOCALHOST = ("127.0.0.1", 5000)
DEFAULT_CAPABILITIES = {
    "authentication_failure_close": True,
    "publisher_confirms": True,
    "basic.nack": True,
}

Frame = tuple[int, Any]


class FakeClock:
    """A monotonic clock the test moves by hand (seconds)."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


@dataclass
class Delivery:
    """A content-bearing method (Basic.Deliver/GetOk/Return) with its reassembled content."""

    channel: int
    method: Any
    header: ContentHeader
    body: bytes
    properties_raw: bytes  # the content header's property flags + list, as sent by the broker
    body_frames: int  # how many body frames carried ``body``

    @property
    def properties(self) -> commands.Basic.Properties:
        return self.header.properties


CONTENT_METHODS = (commands.Basic.Deliver, commands.Basic.GetOk, commands.Basic.Return)


def assemble(frames: Iterable[Frame]) -> list[Frame | Delivery]:
    """Frames with every content-bearing method merged with its header and body frames into a
    :class:`Delivery`; every other frame stays a ``(channel, frame)`` pair.

    Raises AssertionError when the content frames are missing, out of order or interleaved
    with other frames on the same channel.
    """
    out: list[Frame | Delivery] = []
    pending: dict[int, list[Any]] = {}  # channel -> [method, header, body parts]
    for ch, f in frames:
        state = pending.get(ch)
        if state is not None:
            if len(state) == 1:
                assert isinstance(f, ContentHeader), f"expected content header, got {f!r}"
                state.append(f)
            else:
                assert isinstance(f, ContentBody), f"expected content body, got {f!r}"
                state.append(f.value)
            header = state[1] if len(state) > 1 else None
            if header is not None and sum(len(p) for p in state[2:]) >= header.body_size:
                parts = state[2:]
                body = b"".join(parts)
                assert len(body) == header.body_size
                out.append(Delivery(ch, state[0], header, body, header.raw_properties, len(parts)))
                del pending[ch]
            continue
        if isinstance(f, CONTENT_METHODS):
            pending[ch] = [f]
            continue
        assert not isinstance(f, ContentHeader | ContentBody), f"stray content frame {f!r}"
        out.append((ch, f))
    assert not pending, f"incomplete content for {pending}"
    return out


def deliveries(frames: Iterable[Frame], kind: type | None = None) -> list[Delivery]:
    """The :class:`Delivery` items of ``frames`` (only those whose method is ``kind``)."""
    found = [d for d in assemble(frames) if isinstance(d, Delivery)]
    return [d for d in found if kind is None or isinstance(d.method, kind)]


def bodies(frames: Iterable[Frame]) -> list[bytes]:
    return [d.body for d in deliveries(frames, commands.Basic.Deliver)]


def methods(frames: Iterable[Frame], kind: type | None = None) -> list[Any]:
    """The method frames (pamqp objects) of ``frames``, optionally only those of ``kind``."""
    found = [f for _, f in frames if not isinstance(f, ContentHeader | ContentBody)]
    return [f for f in found if kind is None or isinstance(f, kind)]


def only(frames: Iterable[Frame], kind: type) -> Any:
    """The single frame of type ``kind`` in ``frames`` (AssertionError otherwise)."""
    frames = list(frames)
    found = methods(frames, kind)
    name = getattr(kind, "name", kind.__name__)
    got = [getattr(f, "name", f) for _, f in frames]
    assert len(found) == 1, f"expected one {name}, got {got!r}"
    return found[0]


def parse_frames(data: bytes) -> list[tuple[int, Any, bytes]]:
    """Decode a byte stream with pamqp into ``(channel, frame, raw frame bytes)``."""
    out = []
    pos = 0
    while pos < len(data):
        consumed, channel, value = pamqp_frame.unmarshal(data[pos:])
        raw = data[pos : pos + consumed]
        if isinstance(value, ContentHeader):
            value.raw_properties = raw[7 + 12 : -1]  # after class, weight, body size
        out.append((channel, value, raw))
        pos += consumed
    return out


def amqplain_response(user: str, password: str) -> str:
    """An AMQPLAIN StartOk response: a field table without its length prefix."""
    table = encode.field_table({"LOGIN": user, "PASSWORD": password})[4:]
    return table.decode("latin-1")


class Client:
    """A client test double that owns one server :class:`Connection`.

    ``received`` holds every ``(channel, frame)`` decoded so far; :meth:`send` and friends
    return only the frames produced by that call.
    """

    def __init__(self, broker: Broker, clock: FakeClock | None = None,
                 peer: tuple[str, int] | None = LOCALHOST) -> None:
        self.broker = broker
        self.clock = clock or FakeClock()
        self.conn = Connection(broker, peer=peer, clock=self.clock)
        self.received: list[Frame] = []
        self.raw: list[bytes] = []
        self.frame_max = broker.config.frame_max

    # ---- transport ---------------------------------------------------------------------

    def read(self) -> list[Frame]:
        """Decode whatever the connection has pending for the client."""
        data = self.conn.data_to_send()
        new = []
        for channel, value, raw in parse_frames(data):
            new.append((channel, value))
            self.raw.append(raw)
        self.received.extend(new)
        return new

    def send_bytes(self, data: bytes) -> list[Frame]:
        self.conn.receive_data(data)
        return self.read()

    def send(self, channel: int, *frames: Any) -> list[Frame]:
        """Marshal ``frames`` with pamqp and deliver them in one ``receive_data`` call."""
        return self.send_bytes(b"".join(pamqp_frame.marshal(f, channel) for f in frames))

    def call(self, channel: int, method: Any, reply: type | None = None) -> Any:
        """Send ``method``; return the single reply frame (of type ``reply`` when given)."""
        frames = self.send(channel, method)
        if reply is not None:
            return only(frames, reply)
        assert len(frames) == 1, f"expected one reply to {method.name}, got {frames!r}"
        return frames[0][1]

    @property
    def closed(self) -> bool:
        return self.conn.closed

    # ---- handshake ---------------------------------------------------------------------

    def handshake(self, user: str = "guest", password: str = "guest", vhost: str = "/",
                  heartbeat: int | None = None, frame_max: int | None = None,
                  client_properties: dict[str, Any] | None = None) -> Client:
        """Protocol header, StartOk (PLAIN), TuneOk (echoing Tune unless told), Open."""
        start = only(self.send_bytes(PROTOCOL_HEADER), commands.Connection.Start)
        assert "PLAIN" in start.mechanisms.split()
        props = client_properties if client_properties is not None else {
            "product": "amqpq-tests", "capabilities": dict(DEFAULT_CAPABILITIES)}
        tune = only(self.send(0, commands.Connection.StartOk(
            client_properties=props, mechanism="PLAIN", response=f"\0{user}\0{password}",
        )), commands.Connection.Tune)
        self.frame_max = tune.frame_max if frame_max is None else frame_max
        out = self.send(
            0,
            commands.Connection.TuneOk(
                channel_max=tune.channel_max, frame_max=self.frame_max,
                heartbeat=tune.heartbeat if heartbeat is None else heartbeat,
            ),
            commands.Connection.Open(virtual_host=vhost),
        )
        only(out, commands.Connection.OpenOk)
        return self

    def open_channel(self, number: int = 1) -> Client:
        only(self.send(number, commands.Channel.Open()), commands.Channel.OpenOk)
        return self

    # ---- topology shortcuts ------------------------------------------------------------

    def declare_queue(self, ch: int, queue: str = "", **kw: Any) -> commands.Queue.DeclareOk:
        return self.call(ch, commands.Queue.Declare(queue=queue, **kw), commands.Queue.DeclareOk)

    def declare_exchange(self, ch: int, exchange: str, exchange_type: str = "direct",
                         **kw: Any) -> None:
        self.call(ch, commands.Exchange.Declare(exchange=exchange, exchange_type=exchange_type,
                                                **kw), commands.Exchange.DeclareOk)

    def bind(self, ch: int, queue: str, exchange: str, routing_key: str = "",
             arguments: dict[str, Any] | None = None) -> None:
        self.call(ch, commands.Queue.Bind(queue=queue, exchange=exchange,
                                          routing_key=routing_key, arguments=arguments),
                  commands.Queue.BindOk)

    def consume(self, ch: int, queue: str, tag: str = "", no_ack: bool = False,
                exclusive: bool = False, arguments: dict[str, Any] | None = None
                ) -> list[Frame]:
        """Basic.Consume; returns every frame it produced (ConsumeOk, then deliveries)."""
        return self.send(ch, commands.Basic.Consume(queue=queue, consumer_tag=tag,
                                                    no_ack=no_ack, exclusive=exclusive,
                                                    arguments=arguments))

    def qos(self, ch: int, prefetch_count: int, global_: bool = False) -> None:
        self.call(ch, commands.Basic.Qos(prefetch_count=prefetch_count, global_=global_),
                  commands.Basic.QosOk)

    # ---- publishing --------------------------------------------------------------------

    def publish_bytes(self, ch: int, exchange: str, routing_key: str, body: bytes,
                      properties: commands.Basic.Properties | None = None,
                      mandatory: bool = False, immediate: bool = False) -> bytes:
        """Basic.Publish + content header + body frames (split at frame_max) as bytes."""
        frames = [
            pamqp_frame.marshal(commands.Basic.Publish(
                exchange=exchange, routing_key=routing_key, mandatory=mandatory,
                immediate=immediate), ch),
            pamqp_frame.marshal(ContentHeader(0, len(body), properties), ch),
        ]
        chunk = self.frame_max - 8
        for start in range(0, len(body), chunk):
            frames.append(pamqp_frame.marshal(ContentBody(body[start : start + chunk]), ch))
        return b"".join(frames)

    def publish(self, ch: int, exchange: str, routing_key: str, body: bytes,
                properties: commands.Basic.Properties | None = None,
                mandatory: bool = False, immediate: bool = False) -> list[Frame]:
        return self.send_bytes(self.publish_bytes(ch, exchange, routing_key, body, properties,
                                                  mandatory, immediate))

    def ack(self, ch: int, tag: int, multiple: bool = False) -> list[Frame]:
        return self.send(ch, commands.Basic.Ack(delivery_tag=tag, multiple=multiple))


def connection_close(frames: Iterable[Frame]) -> commands.Connection.Close:
    """The single Connection.Close (channel 0) among ``frames``."""
    frames = list(frames)
    close = only(frames, commands.Connection.Close)
    assert [ch for ch, f in frames if f is close] == [0]
    return close


def channel_close(frames: Iterable[Frame]) -> commands.Channel.Close:
    """The single Channel.Close among ``frames`` (and no Connection.Close)."""
    frames = list(frames)
    assert methods(frames, commands.Connection.Close) == []
    return only(frames, commands.Channel.Close)


# ---- fixtures ------------------------------------------------------------------------------


@pytest.fixture
def broker() -> Broker:
    return Broker(BrokerConfig())


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_client(broker: Broker, clock: FakeClock) -> Callable[..., Client]:
    """``make_client(peer=..., handshake=True, channel=1, **handshake_kwargs)``."""

    def make(peer: tuple[str, int] | None = LOCALHOST, handshake: bool = True,
             channel: int | None = 1, **kwargs: Any) -> Client:
        c = Client(broker, clock, peer)
        if handshake:
            c.handshake(**kwargs)
            if channel:
                c.open_channel(channel)
        return c

    return make


@pytest.fixture
def client(make_client: Callable[..., Client]) -> Client:
    """A client past the handshake with channel 1 open."""
    return make_client()
