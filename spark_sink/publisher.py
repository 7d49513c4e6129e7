"""A small blocking AMQP 0-9-1 publisher with a publisher-confirm window.

It speaks just enough of the protocol to publish fast and safely from one Spark task: PLAIN
login, optionally over TLS (``amqps://``), one channel in confirm mode, Exchange.Declare, and
Basic.Publish frames that the caller encodes in bulk (see :mod:`spark_sink.frames`). Incoming
Basic.Ack/Nack are parsed by hand (they are most of the traffic); everything else goes through
pamqp.

Failure handling is strict: a Basic.Nack, a Channel.Close, a Connection.Close, a lost socket,
or no confirm progress for ``timeout`` seconds raise :class:`PublishError`; a lost connection
(or one the broker closed with 320 CONNECTION_FORCED) raises its subclass
:class:`ConnectionLost`, which :mod:`spark_sink.retry` answers by reconnecting. A Basic.Return
(a mandatory message no queue took; RabbitMQ sends it before the message's confirm) raises
:class:`UnroutableError`, or with ``on_unroutable="drop"`` is only counted.

Sources: AMQP 0-9-1 specification (frames, section 4.2.3; content header, 4.2.6);
publisher confirms, https://www.rabbitmq.com/docs/confirms#publisher-confirms; returns,
https://www.rabbitmq.com/docs/publishers#unroutable.
"""

from __future__ import annotations

import logging
import select
import socket
import ssl
import struct
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from pamqp import commands, frame, header
from pamqp.base import Frame
from pamqp.body import ContentBody
from pamqp.exceptions import UnmarshalingException

from spark_sink.tls import TlsSettings, TlsSettingsError
from spark_sink.uri import BrokerAddress

log = logging.getLogger("spark_sink.publisher")

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
HEARTBEAT_FRAME = b"\x08\x00\x00\x00\x00\x00\x00\xce"
CHANNEL = 1
FRAME_MAX = 131072  # bytes; the largest frame we ask for (RabbitMQ's default)
_ACK = b"\x00\x3c\x00\x50"  # Basic.Ack class/method ids
_NACK = b"\x00\x3c\x00\x78"  # Basic.Nack
_UNPACK_HEAD = struct.Struct(">BHI").unpack_from
_UNPACK_TAG = struct.Struct(">QB").unpack_from


RETRYABLE_CLOSE_CODES = (320, 541)  # CONNECTION_FORCED (shutdown, management close), INTERNAL_ERROR
ON_UNROUTABLE = ("fail", "drop")


class PublishError(RuntimeError):
    """Publishing failed; rows sent on this connection may or may not have arrived."""


class ConnectionLost(PublishError):
    """The connection dropped (socket error, EOF, or closed by the broker with 320/541):
    unconfirmed messages may be republished on a new connection."""


class UnroutableError(PublishError):
    """A mandatory message was returned (e.g. 312 NO_ROUTE): no queue took it.

    Attributes:
        exchange, routing_key: where it was published.
    """

    def __init__(self, message: str, exchange: str, routing_key: str) -> None:
        super().__init__(message)
        self.exchange = exchange
        self.routing_key = routing_key


class ConfirmPublisher:
    """One connection + one confirm-mode channel, used from one thread.

    Args:
        addresses: brokers to try, in order, until one accepts the connection (failover).
        timeout: seconds allowed for connecting, for one socket write, and without confirm
            progress while waiting for confirms.
        max_in_flight: most published-but-unconfirmed messages before :meth:`send` blocks.
        client_name: ``connection_name`` client property shown by the broker.
        tls: TLS settings for ``amqps://`` addresses (None: defaults, system CAs).
        on_unroutable: ``"fail"``: a Basic.Return raises :class:`UnroutableError`;
            ``"drop"``: it is counted in :attr:`returned` (the broker then confirms the
            message: it counts as confirmed too).

    Raises:
        ValueError: no address, or an unknown ``on_unroutable``.
    """

    def __init__(
        self,
        addresses: Sequence[BrokerAddress],
        *,
        timeout: float = 30.0,
        max_in_flight: int = 20000,
        client_name: str = "amqpq-spark-sink",
        tls: TlsSettings | None = None,
        on_unroutable: str = "fail",
    ) -> None:
        if not addresses:
            raise ValueError("no broker address")
        if on_unroutable not in ON_UNROUTABLE:
            raise ValueError(f"on_unroutable must be fail or drop, got {on_unroutable!r}")
        self.tls = tls or TlsSettings()
        self.on_unroutable = on_unroutable
        self._ssl_context: ssl.SSLContext | None = None
        self.addresses = list(addresses)
        self.timeout = timeout
        self.max_in_flight = max_in_flight
        self.client_name = client_name
        self.address: BrokerAddress | None = None
        self.frame_max = FRAME_MAX
        self.published = 0  # messages sent (== last delivery tag used)
        self.confirmed = 0  # every tag <= confirmed is acked
        self._acked_above: set[int] = set()  # single acks above ``confirmed``
        self._sock: socket.socket | None = None
        self._buf = bytearray()
        self._heartbeat = 0
        self._last_send = 0.0
        self.returned = 0  # Basic.Return received (on_unroutable="drop")
        self.last_return: tuple[str, str, str] | None = None  # exchange, routing key, reply
        self._rpc_replies: deque[Frame] = deque()

    # ------------------------------------------------------------------ connection
    def connect(self, limit: float | None = None) -> BrokerAddress:
        """Open the connection to the first reachable broker and put channel 1 in confirm mode.

        Args:
            limit: most seconds for each broker's connect + handshake (None: ``timeout``,
                or the URI's ``connection_timeout``).

        Raises:
            PublishError: no broker in the list accepted (message lists each one's error).
        """
        errors: list[str] = []
        for address in self.addresses:
            try:
                self._open(address, limit)
            except (OSError, PublishError, UnmarshalingException, TlsSettingsError) as exc:
                self._drop()
                errors.append(f"{address.redacted()}: {exc}")
                continue
            self.address = address
            return address
        raise PublishError("could not connect to any broker: " + "; ".join(errors))

    def _open(self, address: BrokerAddress, most: float | None) -> None:
        limit = address.connection_timeout or self.timeout
        if most is not None:
            limit = max(min(limit, most), 0.1)
        deadline = time.monotonic() + limit
        sock = socket.create_connection((address.host, address.port), timeout=limit)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        self._sock = sock
        if address.tls:
            if self._ssl_context is None:
                self._ssl_context = self.tls.context()
            # the handshake runs here, within the socket's timeout
            sock = self._ssl_context.wrap_socket(
                sock, server_hostname=self.tls.server_name or address.host)
            self._sock = sock
        self._buf.clear()
        self._rpc_replies.clear()
        self.published = self.confirmed = self.returned = 0
        self._acked_above.clear()
        sock.sendall(PROTOCOL_HEADER)
        self._expect(commands.Connection.Start, deadline)
        self._send_method(
            0,
            commands.Connection.StartOk(
                client_properties={
                    "product": "amqpq spark sink",
                    "connection_name": self.client_name,
                    "capabilities": {
                        "publisher_confirms": True,
                        "connection.blocked": True,
                        "basic.nack": True,
                        "authentication_failure_close": True,
                    },
                },
                mechanism="PLAIN",
                response=f"\0{address.username}\0{address.password}",
            ),
        )
        tune = self._expect(commands.Connection.Tune, deadline)
        assert isinstance(tune, commands.Connection.Tune)
        self.frame_max = min(FRAME_MAX, tune.frame_max or FRAME_MAX)
        wanted = 0 if address.heartbeat is None else address.heartbeat
        self._heartbeat = min(wanted, tune.heartbeat) if tune.heartbeat else wanted
        channel_max = tune.channel_max or 2047
        self._send_method(
            0, commands.Connection.TuneOk(channel_max, self.frame_max, self._heartbeat)
        )
        self._send_method(0, commands.Connection.Open(address.vhost))
        self._expect(commands.Connection.OpenOk, deadline)
        self._send_method(CHANNEL, commands.Channel.Open())
        self._expect(commands.Channel.OpenOk, deadline)
        self._send_method(CHANNEL, commands.Confirm.Select())
        self._expect(commands.Confirm.SelectOk, deadline)
        sock.settimeout(self.timeout)

    def close(self) -> None:
        """Close politely (Connection.Close, wait briefly for CloseOk); never raises."""
        sock = self._sock
        if sock is None:
            return
        try:
            sock.settimeout(min(self.timeout, 2.0))
            self._send_method(0, commands.Connection.Close(200, "Normal shutdown"))
            self._rpc_replies.clear()
            self._expect(commands.Connection.CloseOk, time.monotonic() + min(self.timeout, 2.0))
        except Exception:  # noqa: BLE001 - closing is best effort
            pass
        self._drop()

    def abandon(self) -> None:
        """Drop the socket without the closing handshake (after the connection was lost)."""
        self._drop()

    def _drop(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
        self._sock = None

    # ------------------------------------------------------------------ topology
    def declare_exchange(self, name: str, kind: str, *, durable: bool = True,
                         passive: bool = False, arguments: dict[str, Any] | None = None) -> None:
        """Exchange.Declare and wait for DeclareOk (raises PublishError with the broker's
        reply, e.g. 404 NOT_FOUND for a passive declare of a missing exchange, 406
        PRECONDITION_FAILED ``inequivalent arg 'type' ...`` for one of another type)."""
        self._send_method(
            CHANNEL,
            commands.Exchange.Declare(exchange=name, exchange_type=kind, durable=durable,
                                      passive=passive, arguments=arguments),
        )
        self._expect(commands.Exchange.DeclareOk, time.monotonic() + self.timeout)

    def declare_queue(self, name: str, *, durable: bool = True,
                      arguments: dict[str, Any] | None = None) -> None:
        """Queue.Declare (not passive) and wait for DeclareOk (raises PublishError with the
        broker's reply, e.g. 406 for an existing queue with other settings)."""
        self._send_method(CHANNEL, commands.Queue.Declare(queue=name, durable=durable,
                                                          arguments=arguments))
        self._expect(commands.Queue.DeclareOk, time.monotonic() + self.timeout)

    def check_queue(self, name: str) -> None:
        """Queue.Declare passive: raise PublishError (404 NOT_FOUND) unless ``name`` exists.
        A failure closes the channel: use this publisher for nothing else afterwards."""
        self._send_method(CHANNEL, commands.Queue.Declare(queue=name, passive=True))
        self._expect(commands.Queue.DeclareOk, time.monotonic() + self.timeout)

    # ------------------------------------------------------------------ publishing
    def send(self, data: bytes | bytearray | memoryview, count: int) -> None:
        """Write ``count`` pre-encoded messages (Basic.Publish + header + body frames for
        channel 1), first waiting until they fit in the confirm window."""
        limit = self.max_in_flight - count
        if self.published - self.confirmed - len(self._acked_above) > limit:
            deadline = time.monotonic() + self.timeout
            while self.published - self.confirmed - len(self._acked_above) > limit:
                if not self._pump(deadline):
                    self._no_progress("waiting for publisher confirms")
                deadline = time.monotonic() + self.timeout
        self._write(data)
        self.published += count
        self._pump(None)  # read whatever confirms are already there, without blocking

    def wait_for_confirms(self) -> None:
        """Block until every message sent so far is confirmed (raises PublishError)."""
        while self.confirmed < self.published:
            if not self._pump(time.monotonic() + self.timeout):
                self._no_progress("waiting for the last publisher confirms")

    def is_confirmed(self, tag: int) -> bool:
        """Whether the broker acked delivery tag ``tag`` on this connection."""
        return tag <= self.confirmed or tag in self._acked_above

    @property
    def in_flight(self) -> int:
        """Messages sent but not yet confirmed."""
        return self.published - self.confirmed - len(self._acked_above)

    def _no_progress(self, what: str) -> None:
        raise PublishError(
            f"no publisher confirm from {self._where()} for {self.timeout:g} s while {what} "
            f"({self.in_flight} of {self.published} messages unconfirmed)"
        )

    def _where(self) -> str:
        return self.address.redacted() if self.address else "the broker"

    # ------------------------------------------------------------------ I/O
    def _write(self, data: bytes | bytearray | memoryview) -> None:
        sock = self._sock
        if sock is None:
            raise PublishError("not connected")
        try:
            sock.sendall(data)
        except TimeoutError:
            raise PublishError(
                f"{self._where()} accepted no data for {self.timeout:g} s "
                "(flow control or a resource alarm?)"
            ) from None
        except OSError as exc:
            # the broker may have said why before closing: report that instead
            self._pump_after_error()
            raise ConnectionLost(f"connection to {self._where()} lost: {exc}") from None
        self._last_send = time.monotonic()

    def _pump_after_error(self) -> None:
        try:
            self._pump(time.monotonic() + 0.5)
        except PublishError:
            raise
        except Exception:  # noqa: BLE001 - the original error is reported by the caller
            pass

    def _recv(self, deadline: float | None) -> bool:
        """Read available bytes into the buffer; block until ``deadline`` (None: don't)."""
        sock = self._sock
        if sock is None:
            raise PublishError("not connected")
        if deadline is None:
            try:
                if isinstance(sock, ssl.SSLSocket):
                    # TLS records: no MSG_DONTWAIT; a readable socket means a record is
                    # arriving, so recv() waits at most for the rest of it
                    if not sock.pending() and not select.select([sock], [], [], 0)[0]:
                        return False
                    data = sock.recv(1 << 16)
                else:
                    data = sock.recv(1 << 16, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError):
                return False
            except OSError as exc:
                raise ConnectionLost(f"connection to {self._where()} lost: {exc}") from None
        else:
            while True:
                now = time.monotonic()
                remaining = deadline - now
                if remaining <= 0:
                    return False
                wait = remaining
                if self._heartbeat:
                    wait = min(wait, self._heartbeat / 2)
                    if now - self._last_send >= self._heartbeat / 2:
                        self._write(HEARTBEAT_FRAME)
                if isinstance(sock, ssl.SSLSocket) and sock.pending():
                    break  # decrypted bytes already waiting in the TLS layer
                readable, _, _ = select.select([sock], [], [], wait)
                if readable:
                    break
            try:
                data = sock.recv(1 << 16)
            except OSError as exc:
                raise ConnectionLost(f"connection to {self._where()} lost: {exc}") from None
        if not data:
            raise ConnectionLost(f"connection to {self._where()} closed by the broker")
        self._buf += data
        return True

    def _pump(self, deadline: float | None) -> bool:
        """Read and handle incoming frames; True if any bytes arrived."""
        if not self._recv(deadline):
            return False
        self._process()
        return True

    def _process(self) -> None:
        buf = self._buf
        pos = 0
        end = len(buf)
        while end - pos >= 8:
            ftype, channel, size = _UNPACK_HEAD(buf, pos)
            stop = pos + 8 + size
            if stop > end:
                break
            if ftype == 1 and size == 13 and buf[pos + 7:pos + 11] in (_ACK, _NACK):
                tag, bits = _UNPACK_TAG(buf, pos + 11)
                if buf[pos + 10] == 0x50:
                    self._on_ack(tag, bool(bits & 1))
                else:
                    self._on_nack(tag)
            elif ftype != 8:
                try:
                    _, _, value = frame.unmarshal(bytes(buf[pos:stop]))
                except UnmarshalingException as exc:
                    raise PublishError(f"bad frame from {self._where()}: {exc}") from None
                self._on_frame(channel, value)
            pos = stop
        if pos:
            del buf[:pos]

    def _on_ack(self, tag: int, multiple: bool) -> None:
        if multiple:
            if tag > self.confirmed:
                self.confirmed = tag
                if self._acked_above:
                    self._acked_above = {t for t in self._acked_above if t > tag}
        elif tag == self.confirmed + 1:
            self.confirmed = tag
        elif tag > self.confirmed:
            self._acked_above.add(tag)
        above = self._acked_above
        while above and (self.confirmed + 1) in above:
            self.confirmed += 1
            above.discard(self.confirmed)

    def _on_nack(self, tag: int) -> None:
        raise PublishError(
            f"{self._where()} nacked message #{tag} (it was not stored; the task fails so "
            "Spark can retry it)"
        )

    def _on_frame(self, channel: int, value: Any) -> None:
        if isinstance(value, commands.Basic.Return):
            self._on_return(value)
        elif isinstance(value, header.ContentHeader | ContentBody):
            pass  # the content of a returned message (drop mode): not needed
        elif isinstance(value, commands.Connection.Close):
            self._reply_close_ok(0)
            kind = ConnectionLost if value.reply_code in RETRYABLE_CLOSE_CODES else PublishError
            raise kind(
                f"{self._where()} closed the connection: {value.reply_code} {value.reply_text}"
            )
        elif isinstance(value, commands.Channel.Close):
            self._reply_close_ok(channel)
            raise PublishError(
                f"{self._where()} closed the channel: {value.reply_code} {value.reply_text}"
            )
        elif isinstance(value, commands.Connection.Blocked):
            log.warning("%s blocked publishing: %s", self._where(), value.reason)
        elif isinstance(value, commands.Connection.Unblocked):
            log.info("%s unblocked publishing", self._where())
        else:
            self._rpc_replies.append(value)

    def _on_return(self, ret: commands.Basic.Return) -> None:
        exchange, key = ret.exchange or "", ret.routing_key or ""
        reply = f"{ret.reply_code} {ret.reply_text}"
        self.last_return = (exchange, key, reply)
        if self.on_unroutable == "drop":
            self.returned += 1
            return
        where = "the default exchange (no queue of that name)" if exchange == "" else \
            f"exchange {exchange!r}"
        raise UnroutableError(
            f"amqpq sink: unroutable row: {where} has no binding for routing key {key!r} "
            f"({reply} from {self._where()}); bind a queue, or set onUnroutable=drop to count "
            "such rows instead of failing", exchange, key)

    def _reply_close_ok(self, channel: int) -> None:
        try:
            ok = commands.Connection.CloseOk() if channel == 0 else commands.Channel.CloseOk()
            self._send_method(channel, ok)
        except Exception:  # noqa: BLE001 - we fail anyway
            pass

    def _send_method(self, channel: int, method: Frame) -> None:
        if self._sock is None:
            raise PublishError("not connected")
        self._write(frame.marshal(method, channel))

    def _expect(self, kind: type[Frame], deadline: float) -> Frame:
        """Wait for the reply ``kind`` to an RPC (raises PublishError on anything else)."""
        while not self._rpc_replies:
            if not self._pump(deadline):
                raise PublishError(f"timed out waiting for {kind.__name__} from {self._where()}")
        value = self._rpc_replies.popleft()
        if not isinstance(value, kind):
            raise PublishError(f"expected {kind.__name__}, got {type(value).__name__}")
        return value
