"""Sans-IO AMQP 0-9-1 server connection: bytes in, bytes out, no sockets.

Theory of operation
-------------------
``receive_data(bytes)`` feeds the connection; ``data_to_send()`` returns what to write;
``closed`` (state CLOSED) says the transport should be closed once what is pending is
written.
``on_output`` (set by the transport) is called when output becomes pending, so the transport
writes once per event-loop turn however many frames were queued, including frames queued by
*other* connections' publishes. Time comes from an injected ``clock`` (seconds), and
``tick()`` does heartbeats and close timeouts, so all of it is testable without a network.

States (spec 2.2.4, 4.2.2); channel 0's handshake methods are handled in
:mod:`amqp_server.handshake` (:data:`~amqp_server.handshake.TRANSITIONS`)::

    AWAITING_HEADER --header--> START_OK --Connection.StartOk--> TUNE_OK --TuneOk--> OPEN_WAIT
    OPEN_WAIT --Connection.Open--> OPEN --Connection.UpdateSecret--> OPEN
    any --Connection.Close (CloseOk sent) / CloseOk--> CLOSED
    any --hard error--> CLOSING (Connection.Close sent; only Close/CloseOk read) --> CLOSED
    any --socket lost, heartbeat or handshake timeout, bad header or frame--> CLOSED

In CLOSED every byte read is dropped: the transport writes what is pending, sends a FIN (not over
TLS) and keeps reading until the client closes or a closing timeout passes (``server.py``), so a
client that pipelined frames after its Close gets Close-Ok and EOF, not a reset.

Everything the connection holds (channels, exclusive queues) is released on leaving for
CLOSING or CLOSED. A wrong protocol header is answered with ``AMQP\\x00\\x00\\x09\\x01``
and the socket closed.
Errors raised while handling a frame become Channel.Close (soft) or Connection.Close (hard)
here, in one place (:meth:`Connection._fail`); anything else becomes 541 INTERNAL_ERROR.

Source: AMQP 0-9-1 spec sections 2.2-2.3, 4.2; RabbitMQ ``rabbit_reader``.
"""

from __future__ import annotations

import itertools
import logging
import struct
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pamqp import commands

from amqp_common import framing
from amqp_common.errors import (
    AMQPError,
    ChannelError,
    CommandInvalid,
    ConnectionAccessRefused,
    FrameError,
    InternalError,
    NotAllowed,
    PreconditionFailed,
    UnexpectedFrame,
)
from amqp_server import connection_log
from amqp_server.assembler import CHECKED_PROPERTIES, check_content_properties, decode_method
from amqp_server.assembler import NO_PROPERTIES as _NO_PROPERTIES
from amqp_server.channel import OUTPUT_LIMIT, Channel
from amqp_server.handshake import TRANSITIONS, State, server_properties
from broker.broker import Broker
from queue_store.queue import Queue

if TYPE_CHECKING:
    from vhosts.vhost import VirtualHost

log = logging.getLogger("amqpq.connection")

HANDSHAKE_TIMEOUT = 10.0  # seconds (RabbitMQ's handshake_timeout)
CLOSE_OK_TIMEOUT = 3.0  # seconds to wait for Connection.CloseOk after our Close

_method_index = struct.Struct(">I")
_frame_head = struct.Struct(">BHI")  # a frame's type, channel and payload size
_FUSED = framing.FRAME_PUBLISH
_ACK = framing.FRAME_ACK
_ACK_IDS = b"\x00\x3c\x00\x50"  # Basic.Ack's class and method ids (for errors)
_OPEN = State.OPEN
_serials = itertools.count(1)


class Connection:
    """One client connection, sans-IO.

    Args:
        broker: shared broker state.
        peer: (host, port) of the client, for the loopback-only rule; None in tests.
        clock: monotonic time source in seconds.
        local: (host, port) the client connected to, for the log's connection name;
            None: the first listen address and the AMQP port.
    """

    # slots: more than 30 instance attributes leave CPython's shared-key instance dicts, which
    # makes every attribute access on the hot path slower
    __slots__ = ("broker", "peer", "local", "_logged_accept", "clock", "state", "reader",
                 "frame_max", "channel_max", "heartbeat", "channels", "exclusive_queues",
                 "confirms_dirty", "client_properties", "user", "peer_cn", "vhost_name",
                 "vhost", "writable", "on_output", "on_block", "has_published", "blocked",
                 "output", "_throttled", "_header_buf", "auth_mechanism",
                 "created_at", "last_received", "last_sent", "_close_deadline", "serial", "_held",
                 "_flow_paused", "_reading_paused", "_frame", "_held_frame", "recv_oct",
                 "recv_cnt", "send_oct", "send_cnt", "__weakref__")

    def __init__(
        self,
        broker: Broker,
        peer: tuple[str, int] | None = None,
        clock: Callable[[], float] = time.monotonic,
        local: tuple[str, int] | None = None,
    ) -> None:
        cfg = broker.config
        self.broker = broker
        self.peer = peer
        self.local = local or (cfg.host, cfg.port)
        self._logged_accept = False
        self.clock = clock
        self.state = State.AWAITING_HEADER
        self.reader = framing.FrameReader(cfg.frame_max)
        self.frame_max = cfg.frame_max
        self.channel_max = cfg.channel_max
        self.heartbeat = cfg.heartbeat
        self.channels: dict[int, Channel] = {}
        self.exclusive_queues: list[Queue] = []
        self.confirms_dirty: set[Channel] = set()
        self.client_properties: dict[str, Any] = {}
        self.user: str | None = None
        self.peer_cn: str | None = None  # verified TLS client certificate CN (EXTERNAL)
        self.vhost_name = ""
        self.vhost: VirtualHost | None = None  # set by Connection.Open, with vhost_name
        self.writable = True
        self.on_output: Callable[[], None] | None = None
        self.on_block: Callable[[bool], None] | None = None  # pause/resume reading
        self.has_published = False
        self.blocked = False
        # bytes for the transport not yet taken by data_to_send (add with send_frame; read
        # its length to know how much waits)
        self.output = bytearray()
        self._throttled = False
        self._header_buf = b""
        self.auth_mechanism = "PLAIN"  # the SASL mechanism of Connection.StartOk
        # bytes and reads received, bytes and writes handed to the transport (the management
        # API's recv_oct/recv_cnt/send_oct/send_cnt, RabbitMQ's socket statistics)
        self.recv_oct = self.recv_cnt = self.send_oct = self.send_cnt = 0
        now = clock()
        self.created_at = now
        self.last_received = now
        self.last_sent = now
        self._close_deadline: float | None = None
        self.serial = next(_serials)  # names the connection to other workers
        # frames read while a topology change is with the other workers (None: not waiting)
        self._held: list[tuple[int, int, bytes]] | None = None
        self._flow_paused = False  # a link to another worker is full (set_flow)
        self._reading_paused = False  # what on_block was last told
        self._frame = b""  # the method frame being handled (its ids name a deferred error)
        self._held_frame = b""  # the frame whose handling is suspended
        broker.connections.add(self)
        broker.message_totals.connections_opened += 1

    # ---- output --------------------------------------------------------------------------

    def send_frame(self, data: bytes) -> None:
        """Queue ``data`` (whole frames) for the transport: one buffer per connection, taken
        whole by :meth:`data_to_send`; ``on_output`` hears when it stops being empty."""
        out = self.output
        if out:
            out += data
            return
        out += data
        if self.on_output is not None:
            self.on_output()

    def send_frames(self, frames: list[bytes]) -> None:
        """:meth:`send_frame` of several frames."""
        self.send_frame(b"".join(frames))

    def output_full(self) -> bool:
        """True when OUTPUT_LIMIT bytes wait in the output buffer: deliveries pause until
        :meth:`data_to_send` takes them (so a backlog is not copied into RAM at once)."""
        if len(self.output) < OUTPUT_LIMIT:
            return False
        self._throttled = True
        return True

    def data_to_send(self) -> bytes:
        """All pending output bytes (and clears them). Deliveries paused by a full output
        buffer resume here, so the next call may have more."""
        if not self.output:
            return b""
        data = bytes(self.output)
        self.output.clear()
        self.send_oct += len(data)
        self.send_cnt += 1
        self.last_sent = self.clock()
        if self._throttled and self.writable:
            self._throttled = False
            self._dispatch_consumers()
        return data

    # ---- input ---------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        """Process bytes from the client; replies become pending output."""
        if self.state is State.CLOSED:
            return
        self.recv_oct += len(data)
        self.recv_cnt += 1
        self.last_received = self.clock()
        if self.state is State.AWAITING_HEADER:
            if not self._logged_accept and data:
                self._logged_accept = True
                connection_log.accepting(self)
            data = self._receive_header(data)
            if not data:
                return
        try:
            frames = self.reader.read(data)
        except FrameError as exc:
            frames = []
            self._fail(0, exc)
            self._terminate()  # the stream cannot be resynchronised
        if self._held is not None:  # suspended: these wait their turn
            self._held.extend(frames)
            return
        self._process(frames)

    def _process(self, frames: list[tuple[Any, ...]]) -> None:
        """Handle frames from :meth:`FrameReader.read <amqp_common.framing.FrameReader.read>`:
        a fused publish goes straight to its channel's :meth:`Channel.publish` when the
        channel takes it as the frames would reach it (open, nothing half-assembled),
        else as its three frames; the fused publishes that follow it on that channel go
        the same way without asking again (a publish that fails raises, which ends the run:
        nothing else a publish does closes the channel or suspends the connection); a
        Basic.Ack goes straight to :meth:`Channel.ack` the same way, and so do the acks
        right after it on that channel."""
        channels = self.channels
        i, n = 0, len(frames)
        while i < n:
            if self.state is not _OPEN and self.state is State.CLOSED:
                break
            if self._held is not None:  # a handler suspended the connection
                self._held.extend(frames[i:])
                break
            item = frames[i]
            i += 1
            channel = item[1]
            if item[0] == _FUSED:  # a whole publish (method, header, one body frame)
                ch = channels.get(channel)
                if (ch is None or ch.closing or self.state is not _OPEN
                        or not self.has_published or ch.assembler.pending is not None):
                    frames[i - 1:i] = framing.unfuse(item)  # frame by frame, as sent
                    n += 2
                    i -= 1
                    continue
                publish = ch.publish
                try:  # this publish, and those right after it on the same channel
                    while True:
                        props = item[5]
                        # forwarded as is: a bad one stops here (one seen before is good)
                        if props != _NO_PROPERTIES and props not in CHECKED_PROPERTIES:
                            check_content_properties(props)
                        publish(item[2], item[3], props, item[6], item[4])
                        if i == n:
                            break
                        item = frames[i]
                        # only an error (raised: the channel closes) ends what let it in
                        if item[0] != _FUSED or item[1] != channel or self._held is not None:
                            break
                        i += 1
                except AMQPError as exc:
                    self._fail(channel, exc, framing.PUBLISH_PREFIX)
                except Exception as exc:
                    log.exception("internal error on channel %d", channel)
                    self._fail(0, InternalError(f"{type(exc).__name__}: {exc}"),
                               framing.PUBLISH_PREFIX)
                continue
            if item[0] == _ACK:  # a Basic.Ack, read by hand
                ch = channels.get(channel)
                if (ch is None or ch.closing or self.state is not _OPEN
                        or ch.assembler.pending is not None):
                    frames[i - 1:i] = framing.unfuse(item)  # as any method frame
                    i -= 1
                    continue
                ack = ch.ack
                try:  # this ack, and those right after it on the same channel
                    while True:
                        ack(item[2], item[3])
                        if i == n:
                            break
                        item = frames[i]
                        if item[0] != _ACK or item[1] != channel or self._held is not None:
                            break
                        i += 1
                except AMQPError as exc:
                    self._fail(channel, exc, _ACK_IDS)
                except Exception as exc:
                    log.exception("internal error on channel %d", channel)
                    self._fail(0, InternalError(f"{type(exc).__name__}: {exc}"), _ACK_IDS)
                continue
            ftype, _, payload = item
            try:
                self._frame = payload
                self._handle_frame(ftype, channel, payload)
            except AMQPError as exc:
                self._fail(channel, exc, payload)
            except Exception as exc:
                log.exception("internal error on channel %d", channel)
                self._fail(0, InternalError(f"{type(exc).__name__}: {exc}"), payload)
        self.flush_confirms()
        self.broker.after_batch()

    def suspend(self) -> None:
        """Read no further frame until :meth:`resume` (a topology change or a Basic.Get is
        with another worker: what the client sent after it must see its effect)."""
        if self._held is None:
            self._held = []
            self._held_frame = self._frame
            self._update_reading()

    def resume(self, ch: Channel, then: Callable[[], None]) -> None:
        """Run ``then`` (the rest of channel ``ch``'s suspended method: errors it raises
        close the channel or connection as if raised while reading its frame), then process
        the frames held meanwhile.

        When ``ch`` closed while the answer was on its way (a channel error such as the
        consumer timeout, a forced Connection.Close, the socket lost), ``then`` still runs,
        so what the answer brought lands on the channel, but nothing it sends reaches the
        client (spec 2.2.4: nothing after Channel.Close but its CloseOk) and the channel is
        released again: a message fetched for it goes back to its queue (redelivered), a
        consumer subscribed for it is cancelled at the queue, as RabbitMQ's queue does for a
        channel process that is gone; an exclusive queue declared for a connection that
        closed meanwhile is deleted, as its other exclusive queues were."""
        held, self._held = self._held, None
        everything = self.state is not _OPEN  # the connection closed: nothing more to send
        gone = everything or ch.closing
        mark = len(self.output)
        frame = self._held_frame
        try:
            then()
        except AMQPError as exc:
            self._fail(ch.number, exc, frame)
        except Exception as exc:
            log.exception("internal error on channel %d", ch.number)
            self._fail(0, InternalError(f"{type(exc).__name__}: {exc}"), frame)
        if gone:
            self._unsend(mark, None if everything else ch.number)
            ch.release()
            if everything:  # an exclusive queue declared for it goes with the connection
                self._release()
        if self.state is State.CLOSED:
            return
        self._update_reading()
        self._process(held or [])

    def _unsend(self, mark: int, channel: int | None) -> None:
        """Drop the frames queued on ``channel`` (None: every frame) since the output held
        ``mark`` bytes (whole frames: type, channel, size, payload, frame end)."""
        out = self.output
        tail = bytes(out[mark:])
        del out[mark:]
        if channel is None:
            return
        i = 0
        while i < len(tail):
            _, number, size = _frame_head.unpack_from(tail, i)
            end = i + 8 + size
            if number != channel:
                out += tail[i:end]
            i = end

    def flush_confirms(self) -> None:
        """Send coalesced Basic.Ack/Nack for every channel with newly settled confirms."""
        if self.confirms_dirty:
            for ch in self.confirms_dirty:
                ch.flush_confirms()
            self.confirms_dirty.clear()

    def _receive_header(self, data: bytes) -> bytes:
        buf = self._header_buf + data
        if len(buf) < 8:
            if any(h.startswith(buf) for h in framing.ACCEPTED_HEADERS):
                self._header_buf = buf
                return b""
        if buf[:8] not in framing.ACCEPTED_HEADERS:
            # spec 4.2.2: answer with the header we support, then close
            self.send_frame(framing.PROTOCOL_HEADER)
            self._terminate(connection_log.bad_header(buf[:8]), logging.ERROR)
            return b""
        self._header_buf = b""
        self.state = State.START_OK
        self.send_frame(framing.method_frame(0, commands.Connection.Start(
            version_major=0,
            version_minor=9,
            server_properties=server_properties(self.broker.config, self.broker.cluster),
            mechanisms="PLAIN AMQPLAIN EXTERNAL" if self.peer_cn else "PLAIN AMQPLAIN",
            locales="en_US",
        )))
        return buf[8:]

    def _handle_frame(self, ftype: int, channel: int, payload: bytes) -> None:
        if ftype == framing.FRAME_METHOD:
            if channel:
                self._channel_method(channel, payload)
            else:
                self._connection_method(decode_method(payload))
        elif ftype == framing.FRAME_HEARTBEAT:
            if channel:
                raise FrameError(f"heartbeat frame on channel {channel}")
        else:
            ch = self.channels.get(channel)
            if ch is None or self.state is not State.OPEN:
                if self.state is State.CLOSING:
                    return
                if self.state is not State.OPEN:
                    raise UnexpectedFrame("content frame before the connection is open")
                raise UnexpectedFrame("expected method frame, got non method frame instead")
            if ch.closing:
                return
            if ftype == framing.FRAME_BODY:
                ch.assembler.body_frame(payload)
            else:
                ch.assembler.header_frame(payload)

    def _channel_method(self, number: int, payload: bytes) -> None:
        if self.state is not State.OPEN:
            if self.state is State.CLOSING:
                return
            raise CommandInvalid("channel method before connection.open")
        ch = self.channels.get(number)
        if ch is not None and not ch.closing:
            ch.assembler.method_frame(payload)
            return
        method = decode_method(payload)
        if ch is not None:  # closing: only Close and CloseOk matter (spec 2.2.4)
            if isinstance(method, commands.Channel.CloseOk):
                del self.channels[number]
            elif isinstance(method, commands.Channel.Close):
                ch.send(commands.Channel.CloseOk())
            return
        if not isinstance(method, commands.Channel.Open):
            raise ChannelError("expected 'channel.open'")
        # RabbitMQ counts open channels against channel_max; any number 1..65535 is valid
        # (rabbit_reader:create_channel/2; aiormq opens channel 65535 with channel_max 2047)
        if self.channel_max and len(self.channels) >= self.channel_max:
            raise NotAllowed(
                f"number of channels opened ({len(self.channels)}) has reached the "
                f"negotiated channel_max ({self.channel_max})"
            )
        limit = self.broker.limits.user(self.user or "", "max-channels")
        workers = self.broker.workers  # --workers N: the others' channels count too
        if limit is not None and sum(
                len(c.channels) for c in self.broker.connections if c.user == self.user
        ) + (0 if workers is None else workers.elsewhere("channels_by_user", self.user)
             ) >= limit:
            raise NotAllowed(f"number of channels opened for user '{self.user}' has reached "
                             f"the maximum allowed user limit of ({limit})")
        ch = self.channels[number] = Channel(self, number)
        ch.send(commands.Channel.OpenOk())

    def first_publish(self) -> None:
        """The connection's first publish (the channel tells): publishers are blocked by an
        alarm from then on (RabbitMQ blocks a connection once it publishes, not before)."""
        self.has_published = True
        if self.broker.alarms_active:
            self.set_blocked(True, self.broker.alarm_reason)

    def forget_channel(self, number: int) -> None:
        ch = self.channels.pop(number, None)
        if ch is not None:
            self.confirms_dirty.discard(ch)

    # ---- channel 0 -----------------------------------------------------------------------

    def _connection_method(self, method: Any) -> None:
        """A channel-0 method: Close/CloseOk in any state, else :data:`TRANSITIONS`.

        Raises:
            ChannelError (504): a handshake method once open ("unexpected method in
                connection state running", RabbitMQ's text).
            CommandInvalid (503): a method out of turn during the handshake.
        """
        kind = type(method)
        if kind is commands.Connection.Close:
            self.send_frame(framing.method_frame(0, commands.Connection.CloseOk()))
            self._terminate()
            return
        if kind is commands.Connection.CloseOk:
            self._terminate()
            return
        state = self.state
        step = TRANSITIONS.get((state, kind))
        if step is not None:
            handler, next_state = step
            handler(self, method)
            self.state = next_state
        elif state is State.CLOSING:
            return  # only Close/CloseOk matter once our Close is sent (spec 2.2.4)
        elif state is State.OPEN:
            raise ChannelError("unexpected method in connection state running")
        else:
            raise CommandInvalid(f"unexpected method {method.name} in state {state.value}")

    def set_blocked(self, blocked: bool, reason: str = "low on memory") -> None:
        """Resource alarm: block (Connection.Blocked, stop reading) a publishing connection,
        or unblock it. https://www.rabbitmq.com/docs/connection-blocked"""
        if blocked == self.blocked or self.state is not State.OPEN:
            return
        if blocked and not self.has_published:
            return
        self.blocked = blocked
        if self.client_capability("connection.blocked"):
            method = (commands.Connection.Blocked(reason=reason) if blocked
                      else commands.Connection.Unblocked())
            self.send_frame(framing.method_frame(0, method))
        self._update_reading()

    def set_flow(self, paused: bool) -> None:
        """``--workers N``: a link this worker forwards publishes on is full: stop reading
        from publishing clients until it drains (RabbitMQ's ``credit_flow`` blocking a
        reader), so a backlog waits in the clients' sockets, not in this worker's RAM."""
        self._flow_paused = paused and self.has_published
        self._update_reading()

    def _update_reading(self) -> None:
        """Tell the transport to read or not: not while blocked by an alarm, suspended, or
        held back by a full link."""
        paused = (self.blocked or self._held is not None or self._flow_paused) and (
            self.state is not State.CLOSING)  # a CloseOk must still be read
        if paused != self._reading_paused and self.on_block is not None:
            self._reading_paused = paused
            self.on_block(paused)

    def client_capability(self, name: str) -> bool:
        caps = self.client_properties.get("capabilities") or {}
        return bool(caps.get(name)) if isinstance(caps, dict) else False

    # ---- errors and closing --------------------------------------------------------------

    def _fail(self, channel: int, exc: AMQPError, payload: bytes = b"") -> None:
        """Turn ``exc`` into Channel.Close or Connection.Close (the only place that does)."""
        class_id, method_id = exc.class_id, exc.method_id
        if not class_id and len(payload) >= 4 and not isinstance(exc, FrameError):
            class_id, method_id = struct.unpack_from(">HH", payload)
        if not (exc.is_soft and channel in self.channels) and self.state not in (
                State.CLOSING, State.CLOSED):
            connection_log.connection_error(self, channel, exc, class_id, method_id)
        if isinstance(exc, ConnectionAccessRefused):
            if not self.client_capability("authentication_failure_close"):
                self._terminate()  # RabbitMQ closes the socket without a word
                return
            class_id = method_id = 0
        ch = self.channels.get(channel) if channel else None
        if exc.is_soft and ch is not None:
            if ch.closing:  # our Channel.Close is sent: one is all (spec 2.2.4, RabbitMQ)
                return
            connection_log.channel_error(self, channel, exc, class_id, method_id)
            ch.release()
            ch.send(commands.Channel.Close(
                reply_code=int(exc.code), reply_text=exc.reply_text,
                class_id=class_id, method_id=method_id,
            ))
            self.confirms_dirty.discard(ch)
            return
        self.close(int(exc.code), exc.reply_text, class_id, method_id)

    def close(self, code: int, text: str, class_id: int = 0, method_id: int = 0) -> None:
        """Server-initiated Connection.Close (e.g. 320 CONNECTION_FORCED at shutdown): to
        CLOSING, everything released, CloseOk awaited for :data:`CLOSE_OK_TIMEOUT` s."""
        if self.state in (State.CLOSING, State.CLOSED):
            return
        log.debug("closing connection (%s): %s", connection_log.connection_name(self), text)
        if self.state is State.AWAITING_HEADER:
            self._terminate()
            return
        self.send_frame(framing.method_frame(0, commands.Connection.Close(
            reply_code=code, reply_text=text, class_id=class_id, method_id=method_id
        )))
        self.state = State.CLOSING
        self._release()
        self._close_deadline = self.clock() + CLOSE_OK_TIMEOUT
        self._update_reading()

    @property
    def closed(self) -> bool:
        """True once the transport should close (after writing what is pending)."""
        return self.state is State.CLOSED

    def _terminate(self, reason: str | None = None, level: int = logging.INFO) -> None:
        """To CLOSED: release what is still held; the transport closes after writing.
        Logs ``closing AMQP connection (...)`` at ``level``, with ``reason`` when given
        (nothing for a socket that sent no byte)."""
        if self.state is State.CLOSED:
            return
        if self.state is not State.CLOSING:
            self._release()
        self.state = State.CLOSED
        if self._logged_accept:
            connection_log.closing(self, reason, level)

    def _release(self) -> None:
        """Free everything the connection holds: channels (requeue), exclusive queues."""
        channels = list(self.channels.values())
        self.channels.clear()
        for ch in channels:
            ch.release()
        for q in self.exclusive_queues:
            if self.vhost is not None:
                self.vhost.remove_queue(q)
        self.exclusive_queues.clear()
        self.confirms_dirty.clear()
        if self in self.broker.connections:
            self.broker.connections.discard(self)
            self.broker.message_totals.connection_closed(self.vhost_name, self.recv_oct,
                                                         self.send_oct)

    def connection_lost(self) -> None:
        """The socket is gone (whatever the state): release everything."""
        if self.state is State.CLOSING:  # our Close was sent: the client may just hang up
            self._terminate()
        elif self.state is not State.CLOSED:
            self._terminate("client unexpectedly closed TCP connection", logging.WARNING)

    # ---- time ----------------------------------------------------------------------------

    def tick(self, now: float | None = None) -> None:
        """Heartbeats and timeouts; call about once a second.

        Sends a heartbeat after ``heartbeat / 2`` seconds without output; closes (``closed``)
        after two heartbeat intervals without input, when the handshake takes longer than
        10 s, or when Connection.CloseOk does not come within 3 s; closes a channel whose
        oldest unacknowledged delivery is older than the consumer timeout (406, RabbitMQ's
        ``consumer_timeout``, 30 min by default).
        """
        now = self.clock() if now is None else now
        state = self.state
        if state is State.CLOSED:
            return
        if state is State.CLOSING:
            if self._close_deadline is not None and now >= self._close_deadline:
                self._terminate()
            return
        if state is not State.OPEN:
            if now - self.created_at > HANDSHAKE_TIMEOUT:
                self._terminate("{handshake_timeout,frame_header}", logging.ERROR)
            return
        timeout = self.broker.config.consumer_timeout
        if timeout:
            for ch in list(self.channels.values()):
                if ch.ack_overdue(now, timeout / 1000.0):
                    self._fail(ch.number, PreconditionFailed(
                        f"delivery acknowledgement on channel {ch.number} timed out. Timeout "
                        f"value used: {timeout} ms. This timeout value can be configured, see "
                        "consumers doc guide to learn more"))
        hb = self.heartbeat
        if not hb:
            return
        if now - self.last_received > 2 * hb:
            self._terminate(f"missed heartbeats from client, timeout: {hb}s", logging.ERROR)
            return
        if now - self.last_sent >= hb / 2 and not self.output:
            self.send_frame(framing.HEARTBEAT_FRAME)

    # ---- flow ----------------------------------------------------------------------------

    def pause_writing(self) -> None:
        """The transport's buffer is full: stop dispatching deliveries to this connection."""
        self.writable = False

    def resume_writing(self) -> None:
        """The transport drained: let this connection's consumers take messages again."""
        self.writable = True
        self._throttled = False
        self._dispatch_consumers()

    def _dispatch_consumers(self) -> None:
        for ch in list(self.channels.values()):
            for queue in {c.queue for c in ch.consumers.values()}:
                queue.dispatch()
