"""AMQP 0-9-1 client-side wire helpers, encoded with pamqp, for the tools that speak the
protocol on a raw socket instead of through a client library: the benchmark load generator and
null sink (benchmarks/), the fuzz suite's raw-socket clients (tests/fuzz/broker_process.py).

Two halves:

* :class:`Client`, a small blocking client (one socket, pamqp to decode) for set-up and
  admin work: handshake, declares, binds, deletes, passive declares. Never on a hot path.
  :func:`start_ok` and :func:`tune_ok_open` are its handshake frames, for other clients
  (the benchmark's asyncio idle connections).
* pre-encoders (:func:`publish_bytes`, :func:`ack_frame`, ...) and stream counters that
  the hot loops use: publishers write pre-encoded batches, consumers count frames by a
  fixed byte pattern with ``bytearray.count`` (C speed) instead of decoding.

Everything talks to 127.0.0.1 only (the caller passes the port). Deliberately invalid frames
(what pamqp refuses to encode) are tests/fuzz/frames.py's job.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

from pamqp import commands, frame, header
from pamqp.body import ContentBody
from pamqp.exceptions import UnmarshalingException

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_END = 0xCE
HOST = "127.0.0.1"

_FRAME_HDR = struct.Struct(">BHI")
_ACK = struct.Struct(">BHIHHQBB")  # method frame: Basic.Ack(tag, multiple)
_METHOD_ID = struct.Struct(">HH")
_TAG_BITS = struct.Struct(">QB")


class AmqpError(Exception):
    """The broker closed the channel or connection (reply code and text in the message)."""


def _props(persistent: bool = False, **kw: Any) -> commands.Basic.Properties:
    if persistent:
        kw["delivery_mode"] = 2
    return commands.Basic.Properties(**kw)


def publish_bytes(exchange: str, routing_key: str, body: bytes, channel: int = 1,
                  persistent: bool = False) -> bytes:
    """One pre-encoded Basic.Publish + content header + body, ready to write."""
    return (frame.marshal(commands.Basic.Publish(exchange=exchange, routing_key=routing_key), channel)
            + frame.marshal(header.ContentHeader(0, len(body), _props(persistent)), channel)
            + frame.marshal(ContentBody(body), channel))


def publish_head(exchange: str, routing_key: str, body_size: int, channel: int = 1,
                 persistent: bool = False) -> bytes:
    """Basic.Publish + content header for a body of ``body_size`` (the body frame follows)."""
    return (frame.marshal(commands.Basic.Publish(exchange=exchange, routing_key=routing_key), channel)
            + frame.marshal(header.ContentHeader(0, body_size, _props(persistent)), channel))


def body_frame(body: bytes, channel: int = 1) -> bytes:
    """One content body frame carrying ``body``."""
    return _FRAME_HDR.pack(3, channel, len(body)) + body + b"\xce"


def deliver_bytes(ctag: str, tag: int, routing_key: str, body: bytes, channel: int = 1) -> bytes:
    """A pre-encoded Basic.Deliver + header + body (the null source server streams these)."""
    return (frame.marshal(commands.Basic.Deliver(consumer_tag=ctag, delivery_tag=tag,
                                                 redelivered=False, exchange="",
                                                 routing_key=routing_key), channel)
            + frame.marshal(header.ContentHeader(0, len(body), _props()), channel)
            + frame.marshal(ContentBody(body), channel))


def ack_frame(tag: int, channel: int = 1, multiple: bool = False) -> bytes:
    """One Basic.Ack frame."""
    return _ACK.pack(1, channel, 13, 60, 80, tag, 1 if multiple else 0, FRAME_END)


def acks_bytes(first: int, last: int, channel: int = 1) -> bytes:
    """One Basic.Ack frame per delivery tag in ``first..last`` (what a typical client sends)."""
    pack = _ACK.pack
    return b"".join([pack(1, channel, 13, 60, 80, t, 0, FRAME_END) for t in range(first, last + 1)])


def body_frame_pattern(body_size: int, channel: int = 1) -> bytes:
    """Bytes that start every body frame of a message: end of the content header frame
    (0xCE), frame type 3, channel, size. Counting it counts complete-header deliveries."""
    return b"\xce" + _FRAME_HDR.pack(3, channel, body_size)


class PatternCounter:
    """Counts occurrences of a pattern in a byte stream that arrives in chunks."""

    __slots__ = ("pat", "keep", "tail", "count")

    def __init__(self, pat: bytes) -> None:
        self.pat = pat
        self.keep = len(pat) - 1
        self.tail = b""
        self.count = 0

    def feed(self, buf: bytearray | bytes, n: int) -> int:
        """Count new matches in ``buf[:n]``; returns how many."""
        keep = self.keep
        c = buf.count(self.pat, 0, n)
        if self.tail:
            c += (self.tail + bytes(buf[:min(n, keep)])).count(self.pat)
        if n >= keep:
            self.tail = bytes(buf[n - keep:n])
        else:
            self.tail = (self.tail + bytes(buf[:n]))[-keep:]
        self.count += c
        return c


class ConfirmTracker:
    """Parses publisher confirms (Basic.Ack / Basic.Nack) out of a byte stream."""

    __slots__ = ("buf", "confirmed", "nacked", "error")

    def __init__(self) -> None:
        self.buf = b""
        self.confirmed = 0  # highest tag known confirmed (brokers confirm a queue in order)
        self.nacked = 0
        self.error: str | None = None

    def feed(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        pos, end = 0, len(buf)
        unpack_hdr, unpack_id, unpack_tag = (_FRAME_HDR.unpack_from, _METHOD_ID.unpack_from,
                                             _TAG_BITS.unpack_from)
        while end - pos >= 7:
            ftype, _ch, size = unpack_hdr(buf, pos)
            nxt = pos + 8 + size
            if nxt > end:
                break
            if ftype == 1:
                cls, meth = unpack_id(buf, pos + 7)
                if cls == 60 and (meth == 80 or meth == 120):
                    tag, bits = unpack_tag(buf, pos + 11)
                    if meth == 120:
                        self.nacked += 1
                    if bits & 1 or tag > self.confirmed:
                        self.confirmed = max(self.confirmed, tag)
                elif (cls, meth) in ((20, 40), (10, 50)):
                    try:
                        _, _, m = frame.unmarshal(bytes(buf[pos:nxt]))
                        self.error = f"{type(m).__name__}: {m.reply_code} {m.reply_text}"
                    except Exception:  # noqa: BLE001
                        self.error = "channel/connection closed by broker"
            pos = nxt
        self.buf = buf[pos:]


CAPABILITIES = {"publisher_confirms": True, "consumer_cancel_notify": True}


def start_ok(product: str = "amqpq-bench", user: str = "guest", password: str = "guest",
             capabilities: dict[str, bool] | None = None) -> bytes:
    """The Connection.StartOk frame: PLAIN login, ``capabilities`` (default
    :data:`CAPABILITIES`) in the client properties."""
    return frame.marshal(commands.Connection.StartOk(
        client_properties={"product": product, "platform": "Python",
                           "capabilities": CAPABILITIES if capabilities is None
                           else capabilities},
        mechanism="PLAIN", response=f"\0{user}\0{password}", locale="en_US"), 0)


def tune_ok_open(tune: commands.Connection.Tune, heartbeat: int, frame_max: int = 131072,
                 vhost: str = "/") -> bytes:
    """Connection.TuneOk (the broker's channel_max, ``frame_max`` capped by the broker's)
    followed by Connection.Open of ``vhost``."""
    return (frame.marshal(commands.Connection.TuneOk(
        channel_max=tune.channel_max or 2047,
        frame_max=min(tune.frame_max or frame_max, frame_max), heartbeat=heartbeat), 0)
        + frame.marshal(commands.Connection.Open(virtual_host=vhost), 0))


class Client:
    """A blocking AMQP client for set-up and admin; ``sock`` is there for hot loops."""

    def __init__(self, port: int, host: str = HOST, timeout: float = 30.0, heartbeat: int = 0,
                 vhost: str = "/", user: str = "guest", password: str = "guest",
                 frame_max: int = 131072, capabilities: dict[str, bool] | None = None) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.timeout = timeout
        self.sock.sendall(PROTOCOL_HEADER)
        self.expect(0, commands.Connection.Start)
        self.sock.sendall(start_ok("amqpq-bench", user, password, capabilities))
        tune = self.expect(0, commands.Connection.Tune)
        self.frame_max = min(tune.frame_max or frame_max, frame_max)
        self.sock.sendall(tune_ok_open(tune, heartbeat, frame_max, vhost))
        self.expect(0, commands.Connection.OpenOk)

    # -- frames
    def send(self, channel: int, method: Any) -> None:
        self.sock.sendall(frame.marshal(method, channel))

    def read_frame(self, deadline: float | None = None) -> tuple[int, Any]:
        while True:
            if self.buf:
                try:
                    used, ch, value = frame.unmarshal(self.buf)
                except UnmarshalingException:
                    pass
                else:
                    self.buf = self.buf[used:]
                    return ch, value
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError("no frame from broker in time")
            data = self.sock.recv(1 << 16)
            if not data:
                raise AmqpError("connection closed by broker")
            self.buf += data

    def expect(self, channel: int, cls: type, timeout: float | None = None) -> Any:
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        while True:
            ch, m = self.read_frame(deadline)
            if isinstance(m, cls) and ch == channel:
                return m
            if isinstance(m, commands.Connection.Close):
                self.send(0, commands.Connection.CloseOk())
                raise AmqpError(f"connection closed: {m.reply_code} {m.reply_text}")
            if isinstance(m, commands.Channel.Close):
                self.send(ch, commands.Channel.CloseOk())
                raise AmqpError(f"channel {ch} closed: {m.reply_code} {m.reply_text}")
            # anything else (deliveries, confirms, heartbeats) is ignored here

    def call(self, channel: int, method: Any, reply: type) -> Any:
        self.send(channel, method)
        return self.expect(channel, reply)

    # -- conveniences
    def channel(self, ch: int = 1) -> None:
        self.call(ch, commands.Channel.Open(), commands.Channel.OpenOk)

    def declare_queue(self, name: str, durable: bool = False, ch: int = 1) -> None:
        self.call(ch, commands.Queue.Declare(queue=name, durable=durable),
                  commands.Queue.DeclareOk)

    def queue_count(self, name: str, ch: int = 1) -> int:
        ok = self.call(ch, commands.Queue.Declare(queue=name, passive=True),
                       commands.Queue.DeclareOk)
        return int(ok.message_count)

    def delete_queue(self, name: str, ch: int = 1) -> None:
        self.call(ch, commands.Queue.Delete(queue=name), commands.Queue.DeleteOk)

    def declare_exchange(self, name: str, kind: str, ch: int = 1) -> None:
        self.call(ch, commands.Exchange.Declare(exchange=name, exchange_type=kind),
                  commands.Exchange.DeclareOk)

    def delete_exchange(self, name: str, ch: int = 1) -> None:
        self.call(ch, commands.Exchange.Delete(exchange=name), commands.Exchange.DeleteOk)

    def bind_many(self, binds: list[tuple[str, str, str]], ch: int = 1) -> None:
        """Pipelined Queue.Bind for (queue, exchange, key) triples, then wait for every BindOk."""
        data = b"".join(frame.marshal(commands.Queue.Bind(queue=q, exchange=x, routing_key=k), ch)
                        for q, x, k in binds)
        self.sock.sendall(data)
        for _ in binds:
            self.expect(ch, commands.Queue.BindOk)

    def qos(self, prefetch: int, ch: int = 1) -> None:
        self.call(ch, commands.Basic.Qos(prefetch_count=prefetch), commands.Basic.QosOk)

    def confirm_select(self, ch: int = 1) -> None:
        self.call(ch, commands.Confirm.Select(), commands.Confirm.SelectOk)

    def consume(self, queue: str, no_ack: bool, ctag: str, ch: int = 1) -> None:
        self.call(ch, commands.Basic.Consume(queue=queue, consumer_tag=ctag, no_ack=no_ack),
                  commands.Basic.ConsumeOk)

    def close(self, timeout: float = 5.0) -> None:
        """Connection.Close, then read raw bytes (undecoded, so a backlog of deliveries does not
        cost a parse) until CloseOk or ``timeout``; the socket is closed either way."""
        deadline = time.monotonic() + timeout
        try:
            self.sock.sendall(CLOSE_FRAME)
            seen = self.buf[-64:]
            while CLOSE_OK_FRAME not in seen:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.sock.settimeout(left)
                data = self.sock.recv(1 << 20)
                if not data:
                    break
                seen = seen[-16:] + data
        except OSError:
            pass
        finally:
            self.sock.close()


CLOSE_FRAME = frame.marshal(commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0), 0)
CLOSE_OK_FRAME = frame.marshal(commands.Connection.CloseOk(), 0)
