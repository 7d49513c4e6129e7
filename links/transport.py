"""The shovel link's write path: aiormq connections that write coalesced (the frames written
within a short delay go out in one ``send`` instead of one each), and
:class:`BatchPublisher`, publishing many messages per write-queue item.

aiormq writes every frame (a publish, an ack) to its ``StreamWriter`` as it comes, and
asyncio sends each write at once when the socket buffer is empty: a shovel moving thousands of
messages a second made one system call per message and per ack (profiled: most of a link's
time on a loaded 2-core machine). aiormq's public extension point, a
:class:`aiormq.connection.TransportFactory`, gives it a writer that buffers ``write`` and
sends the buffer a fixed delay after its first write (or at the end of the loop turn), when
it is large, on ``drain`` and before ``close``. Order is kept (one buffer per connection,
flushed in order).

Source: aiormq ``TransportFactory`` (aiormq/connection.py), asyncio streams.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Any

from aiormq.abc import ChannelFrame
from aiormq.connection import TransportFactory
from aiormq.exceptions import AMQPConnectionError, DeliveryError
from pamqp import commands as spec
from pamqp import frame as pamqp_frame
from pamqp.body import ContentBody
from pamqp.header import ContentHeader
from yarl import URL


class CoalescingWriter:
    """A ``StreamWriter`` stand-in: ``write`` buffers; the buffer goes out ``delay`` seconds
    after the first buffered write (0: at the end of the loop turn), at once when it holds
    ``limit`` bytes, and on ``drain`` and ``close``; everything else is the wrapped
    writer's."""

    def __init__(self, writer: asyncio.StreamWriter, delay: float = 0.0,
                 limit: int = 65536) -> None:
        self._writer = writer
        self._buffer: list[bytes] = []
        self._size = 0
        self._delay, self._limit = delay, limit
        self._timer: asyncio.TimerHandle | asyncio.Handle | None = None

    def write(self, data: bytes) -> None:
        self._buffer.append(data)
        self._size += len(data)
        if self._size >= self._limit:
            self.flush()
        elif self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = (loop.call_later(self._delay, self.flush) if self._delay > 0
                           else loop.call_soon(self.flush))

    def flush(self) -> None:
        """Hand what is buffered to the transport (one ``send``)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._buffer and not self._writer.is_closing():
            data = b"".join(self._buffer)
            self._buffer.clear()
            self._writer.write(data)
        else:
            self._buffer.clear()
        self._size = 0

    async def drain(self) -> None:
        self.flush()
        await self._writer.drain()

    def close(self) -> None:
        self.flush()
        self._writer.close()

    def __getattr__(self, name: str) -> Any:  # transport, is_closing, wait_closed...
        return getattr(self._writer, name)


class CoalescingTransportFactory(TransportFactory):
    """TCP or TLS (``amqps``) connections whose writer is a :class:`CoalescingWriter`
    flushing ``delay`` seconds after its first buffered write (0: at the end of the loop
    turn)."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        #: (host, port) of the last connection's local and remote ends (None before one)
        self.sockname: tuple[Any, ...] | None = None
        self.peername: tuple[Any, ...] | None = None

    async def create(self, url: URL, **kwargs: Any
                     ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        provider = kwargs.pop("ssl_context_provider", None)
        ssl = None
        if url.scheme == "amqps" and provider is not None:
            ssl = await provider.get_context()
        try:
            reader, writer = await asyncio.open_connection(host=url.host, port=url.port,
                                                           ssl=ssl, **kwargs)
        except OSError as exc:
            raise AMQPConnectionError(*exc.args) from exc
        self.sockname = writer.get_extra_info("sockname")
        self.peername = writer.get_extra_info("peername")
        return reader, CoalescingWriter(writer, self.delay)  # type: ignore[return-value]


class BatchPublisher:
    """Publishes on an aiormq channel without ``basic_publish``'s per-message machinery (a
    lock, a timeout scope, a random ``message_id``, one write-queue item and a drain future
    per message, and a task awaiting each confirm): the publishes of one event-loop turn are
    marshalled with pamqp into one :class:`aiormq.abc.ChannelFrame` put on the connection's
    write queue, in call order.

    With ``confirm`` (the channel opened with ``publisher_confirms=True``), each publish takes
    the channel's next delivery tag and registers a Future in ``channel.confirmations``, which
    aiormq resolves on the broker's ``Basic.Ack`` / ``Basic.Nack`` (``multiple`` too); then
    ``done(True)`` (ack) or ``done(False)`` (nack) is called. Without ``confirm``,
    ``done(True)`` is called once the frames are on the write queue. A publish whose channel
    closed first is never answered (the caller fails on the close). Other confirm errors go
    to ``on_error``. Nothing else may publish on the channel (the delivery tags are counted
    here).

    Source: AMQP 0-9-1 section 4.2.6 (content frames), RabbitMQ publisher confirms
    (https://www.rabbitmq.com/docs/confirms#publisher-confirms); aiormq ``Channel``.
    """

    def __init__(self, channel: Any, confirm: bool,
                 on_error: Callable[[BaseException], None]) -> None:
        self.channel = channel
        self.confirm = confirm
        self.on_error = on_error
        self._frames: list[bytes] = []
        self._written: list[Callable[[bool], None]] = []  # no confirm: done on write
        self._scheduled = False
        self._sending: asyncio.Future[None] | None = None
        self._chunk = max(1, int(channel.max_content_size))
        #: marshalled Basic.Publish frames by (exchange, routing key): a shovel publishes
        #: to one or a few targets, and marshalling the method was a fifth of its CPU
        self._methods: dict[tuple[str, str], bytes] = {}

    def publish(self, body: bytes, exchange: str, routing_key: str,
                properties: spec.Basic.Properties, done: Callable[[bool], None]) -> None:
        """Queue one publish (Basic.Publish, header, body frames) for this loop turn."""
        number = self.channel.number
        frames = self._frames
        method = self._methods.get((exchange, routing_key))
        if method is None:
            if len(self._methods) >= 1024:
                self._methods.clear()
            method = self._methods[exchange, routing_key] = pamqp_frame.marshal(
                spec.Basic.Publish(exchange=exchange, routing_key=routing_key), number)
        frames.append(method)
        frames.append(pamqp_frame.marshal(ContentHeader(0, len(body), properties), number))
        for start in range(0, len(body), self._chunk):
            frames.append(pamqp_frame.marshal(
                ContentBody(body[start:start + self._chunk]), number))
        if self.confirm:
            channel = self.channel
            channel.delivery_tag += 1
            future = asyncio.get_running_loop().create_future()
            channel.confirmations[channel.delivery_tag] = future
            future.add_done_callback(partial(self._confirmed, done))
        else:
            self._written.append(done)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def _confirmed(self, done: Callable[[bool], None], future: asyncio.Future[Any]) -> None:
        if future.cancelled():
            return
        exc = future.exception()
        if exc is None:
            done(True)
        elif isinstance(exc, DeliveryError) and isinstance(exc.frame, spec.Basic.Nack):
            done(False)
        else:
            self.on_error(exc)

    def flush(self) -> None:
        """Put what this turn published on the write queue as one item."""
        self._scheduled = False
        if not self._frames:
            return
        item = ChannelFrame(payload=b"".join(self._frames), should_close=False)
        self._frames.clear()
        written, self._written = self._written, []
        queue = self.channel.write_queue
        if self._sending is None or self._sending.done():
            try:
                queue.put_nowait(item)
            except asyncio.QueueFull:
                self._sending = asyncio.ensure_future(self._put(None, item, written))
                return
            for done in written:
                done(True)
        else:  # an earlier item waits for room: keep the order
            self._sending = asyncio.ensure_future(self._put(self._sending, item, written))

    async def _put(self, previous: asyncio.Future[None] | None, item: ChannelFrame,
                   written: list[Callable[[bool], None]]) -> None:
        if previous is not None:
            await asyncio.gather(previous, return_exceptions=True)
        await self.channel.write_queue.put(item)
        for done in written:
            done(True)
