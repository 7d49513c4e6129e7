"""One AMQP 0-9-1 link: consume from a queue on one broker, publish each message to another
(or the same) broker, and settle the source as the ack mode says. The two ends are aiormq
connections (a well-kept asyncio AMQP client), so either end may be amqpq or any AMQP 0-9-1
broker, over ``amqp://`` or ``amqps://``.

Ack modes (RabbitMQ's): ``on-confirm`` acks a source delivery only once the destination has
confirmed the publish (publisher confirms), so nothing is lost when either broker dies: what
was not confirmed is still unacked at the source and redelivered (flagged redelivered) after
the link reconnects. ``on-publish`` acks once the publish is written; ``no-ack`` consumes
with ``no_ack``. A destination nack nacks the source delivery with requeue, as
``rabbit_amqp091_shovel`` does.

The hot path stays lean (it runs in the broker's own event loop): each delivery is published
through :class:`links.transport.BatchPublisher` (the publishes of a loop turn in one
write-queue item, no task or lock per message) and settled at the source by :class:`Settler`
(one multiple ack per run); the connections gather frames for ``WRITE_DELAY`` before one
``send``.

The link does not know about shovels: what to consume (:class:`Source`) and where and how
to publish (:class:`Target`, a function of the delivered message) are given, so federation
links can reuse it.

Source: https://www.rabbitmq.com/docs/shovel#ack-modes, ``rabbit_amqp091_shovel.erl``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import aiormq
from aiormq.abc import DeliveredMessage
from pamqp import commands as spec

from links.transport import BatchPublisher, CoalescingTransportFactory

log = logging.getLogger("amqpq.shovel")

T = TypeVar("T")

#: seconds a link's connection gathers frames before one ``send`` (links.transport): one
#: system call for the publishes (or acks) of many deliveries instead of about one each;
#: 2 ms adds little to a message's latency and nothing to throughput with a window of
#: hundreds of messages (measured: docs/shovel.md, "Throughput")
WRITE_DELAY = 0.002

#: publish target of one message: (exchange, routing key, properties)
Route = tuple[str, str, spec.Basic.Properties]


class LinkError(Exception):
    """The link stopped: a connection or channel closed, a declare failed. ``str()`` is the
    reason shown in the status; :attr:`cause` the exception behind it, when there was one
    (a federation link shows it in RabbitMQ's words)."""

    def __init__(self, text: str, cause: BaseException | None = None) -> None:
        super().__init__(text)
        self.cause = cause


@dataclass
class Source:
    """What the link consumes.

    Attributes:
        url: the aiormq URL of the source broker.
        setup: ``await setup(connection)`` opens a channel, declares what is needed and
            returns ``(channel, queue name, messages in it now)``.
        prefetch: Basic.Qos prefetch count (0: unlimited).
        no_ack: consume with ``no_ack`` (ack mode ``no-ack``).
        consumer_tag: the Basic.Consume tag ("": the broker names it).
        consume_arguments: Basic.Consume arguments (e.g. ``{"x-priority": -1}``).
        paused: set up without consuming; :meth:`Link.resume` starts the consumer (a
            federated queue consumes only while its local consumers wait).
    """

    url: str
    setup: Callable[[aiormq.abc.AbstractConnection],
                    Awaitable[tuple[aiormq.abc.AbstractChannel, str, int]]]
    prefetch: int = 1000
    no_ack: bool = False
    consumer_tag: str = ""
    consume_arguments: dict[str, object] | None = None
    paused: bool = False


@dataclass
class Target:
    """Where the link publishes.

    Attributes:
        url: the aiormq URL of the destination broker.
        setup: ``await setup(connection)`` opens the publishing channel (with publisher
            confirms when ``confirm``), declares what is needed and returns the channel.
        route: the exchange, routing key and properties for a delivered message, or None
            to drop it (settled at the source as if published: a federation link's
            ``max-hops`` and cycle check).
        confirm: wait for publisher confirms before settling (ack mode ``on-confirm``).
    """

    url: str
    setup: Callable[[aiormq.abc.AbstractConnection], Awaitable[aiormq.abc.AbstractChannel]]
    route: Callable[[DeliveredMessage], Route | None]
    confirm: bool = True


class Link:
    """Moves messages from ``source`` to ``target`` until a connection fails, or, with
    ``limit``, until that many messages were moved (or ``limit_from_length``: as many as the
    source queue held at start).

    Attributes:
        moved: messages settled at the source after their publish (count).
        received: deliveries taken from the source (count; ``received - moved`` is the
            in-flight window).
        queue_length_at_start: the source queue's message count when consuming began.
        source_connection, source_channel, queue: the source's connection, consuming
            channel and queue once set up (None before), for what a caller does beside
            the link on the same broker (a federated exchange's bindings).
        consuming: whether the source consumer is on (see :meth:`pause`).
        target_connection_name: the destination connection as the destination broker names
            it, ``client ip:port -> server ip:port`` (None before it is connected).
    """

    def __init__(self, source: Source, target: Target, *, limit: int | None = None,
                 limit_from_length: bool = False, name: str = "link",
                 on_running: Callable[[], None] | None = None) -> None:
        self.source, self.target = source, target
        self.limit, self.limit_from_length = limit, limit_from_length
        self.name = name
        self.on_running = on_running
        self.moved = 0
        self.queue_length_at_start = 0
        self.received = 0
        self._failed: asyncio.Future[None] | None = None
        self._done: asyncio.Future[None] | None = None
        self._acker: Settler | None = None
        self._publisher: BatchPublisher | None = None
        self.source_connection: aiormq.abc.AbstractConnection | None = None
        self.source_channel: aiormq.abc.AbstractChannel | None = None
        self.queue: str | None = None
        self.consuming = False
        self.target_connection_name: str | None = None
        self._on_message: Callable[[DeliveredMessage], Awaitable[None]] | None = None
        self._consumer_tag: str | None = None

    async def run(self) -> None:
        """Connect both ends, declare, consume; return when the limit is reached.

        Raises:
            LinkError: a connection, channel or declare failed (the reason).
        """
        loop = asyncio.get_running_loop()
        self._failed, self._done = loop.create_future(), loop.create_future()
        src = dest = None
        try:
            src = await _connect(self.source.url, "source")
            factory = CoalescingTransportFactory(WRITE_DELAY)
            dest = await _connect(self.target.url, "destination", factory)
            self.target_connection_name = _connection_name(factory)
            dest_ch = await _declaring(self.target.setup(dest), "destination")
            self.source_connection = src
            src_ch, queue, length = await _declaring(self.source.setup(src), "source")
            self.source_channel, self.queue = src_ch, queue
            self.queue_length_at_start = length
            if self.limit_from_length:
                self.limit = length
            if self.limit is not None and self.limit <= 0:
                return
            prefetch = self.source.prefetch
            if self.limit is not None:
                prefetch = min(prefetch or self.limit, self.limit)
            if not self.source.no_ack:
                await src_ch.basic_qos(prefetch_count=prefetch)

            self._acker = Settler(src_ch)
            self._publisher = BatchPublisher(dest_ch, self.target.confirm, self._fail)

            async def on_message(message: DeliveredMessage) -> None:
                self._forward(message)

            failed = self._failed

            def cancelled(frame: object) -> None:  # the source queue deleted, for example
                if not failed.done():
                    failed.set_exception(LinkError(
                        f"consumer cancelled by the source broker (queue '{queue}')"))

            src_ch.on_consumer_cancel_callbacks.add(cancelled)
            self._on_message = on_message
            if not self.source.paused:
                await self.resume()
            if self.on_running is not None:
                self.on_running()
            closers = [asyncio.ensure_future(_closed(c)) for c in (src, dest, src_ch, dest_ch)]
            try:
                done, _ = await asyncio.wait([self._failed, self._done, *closers],
                                             return_when=asyncio.FIRST_COMPLETED)
            finally:
                for c in closers:
                    c.cancel()
            if self._done.done() and not self._failed.done():
                await self._acker.drain()
                # a round trip on the channel: the broker has taken every ack sent before it
                # (frames queued without waiting would be lost with the connection's close)
                await src_ch.queue_declare(queue, passive=True)
                if not self._failed.done():
                    return
            for fut in done:
                exc = fut.exception()
                if exc is not None:
                    raise exc if isinstance(exc, LinkError) else LinkError(_why(exc), exc)
            raise LinkError("connection closed")
        except aiormq.exceptions.AMQPError as exc:
            raise LinkError(_why(exc), exc) from None
        except (TimeoutError, OSError) as exc:
            raise LinkError(_why(exc), exc) from None
        finally:
            for conn in (src, dest):
                if conn is not None and not conn.is_closed:
                    try:
                        await asyncio.wait_for(conn.close(), 5)
                    except Exception:  # noqa: BLE001 - closing a broken connection
                        pass

    async def resume(self) -> None:
        """Start consuming from the source (no-op when consuming or not yet set up).

        Raises:
            aiormq.exceptions.AMQPError: the source refused the Basic.Consume.
        """
        ch, on_message = self.source_channel, self._on_message
        if self.consuming or ch is None or on_message is None or self.queue is None:
            return
        self.consuming = True
        try:
            ok = await ch.basic_consume(self.queue, on_message, no_ack=self.source.no_ack,
                                        consumer_tag=self.source.consumer_tag or None,
                                        arguments=self.source.consume_arguments or None)
        except BaseException:
            self.consuming = False
            raise
        self._consumer_tag = ok.consumer_tag

    async def pause(self) -> None:
        """Stop consuming (Basic.Cancel); deliveries already received are still published
        and settled as the ack mode says."""
        ch, tag = self.source_channel, self._consumer_tag
        if not self.consuming or ch is None or tag is None:
            return
        self.consuming = False
        self._consumer_tag = None
        await ch.basic_cancel(tag)

    def fail(self, reason: str) -> None:
        """Stop the link: :meth:`run` raises :class:`LinkError` with ``reason``."""
        self._fail(LinkError(reason))

    def _forward(self, message: DeliveredMessage) -> None:
        """Publish one delivery and settle it at the source once the destination confirmed
        it (aiormq runs the consumer callback as a task per delivery, in delivery order, so
        publishes keep the source's order)."""
        assert self._failed is not None and self._done is not None
        tag = message.delivery.delivery_tag
        acker, publisher = self._acker, self._publisher
        assert acker is not None and publisher is not None
        no_ack = self.source.no_ack
        self.received += 1
        if not no_ack:
            acker.received(tag)
        if self.limit is not None and self.received > self.limit:  # prefetched past it
            if not no_ack:
                acker.nack(tag)
            return
        try:
            routed = self.target.route(message)
        except Exception as exc:  # noqa: BLE001 - the link fails with the reason
            self._fail(exc)
            return
        if routed is None:  # dropped (a federation link's max-hops / cycle check)
            if not no_ack:
                acker.ack(tag)
            return
        exchange, routing_key, properties = routed

        def done(acked: bool) -> None:
            if no_ack:
                pass
            elif acked:
                acker.ack(tag)
            else:  # a destination nack: requeued at the source
                acker.nack(tag)
                return
            self.moved += 1
            if self.limit is not None and self.moved >= self.limit and not self._done.done():
                self._done.set_result(None)

        publisher.publish(message.body, exchange, routing_key, properties, done)

    def _fail(self, exc: BaseException) -> None:
        assert self._failed is not None
        if not self._failed.done():
            self._failed.set_exception(exc if isinstance(exc, LinkError)
                                       else LinkError(_why(exc)))


class Settler:
    """Settles source deliveries in delivery order: one ``Basic.Ack(multiple)`` for each run
    of consecutive acked deliveries (per event-loop turn) and a ``Basic.Nack`` (requeue) for
    each refused one, in order, from one task at a time, so the source sees a few frames
    rather than one per message and a multiple ack never covers a nacked delivery."""

    def __init__(self, channel: aiormq.abc.AbstractChannel) -> None:
        self.channel = channel
        self.order: deque[int] = deque()
        self.settled: dict[int, bool] = {}  # tag -> acked (False: nack it)
        self.scheduled = False
        self.sending: asyncio.Task[None] | None = None

    def received(self, tag: int) -> None:
        self.order.append(tag)

    def ack(self, tag: int) -> None:
        self._settle(tag, True)

    def nack(self, tag: int) -> None:
        self._settle(tag, False)

    def _settle(self, tag: int, acked: bool) -> None:
        self.settled[tag] = acked
        if not self.scheduled:
            self.scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    async def drain(self) -> None:
        """Send what is settled now and wait until it is handed to the connection."""
        self._flush()
        while self.sending is not None and not self.sending.done():
            await asyncio.gather(self.sending, return_exceptions=True)

    def _flush(self) -> None:
        self.scheduled = False
        ops: list[tuple[bool, int]] = []  # (ack multiple up to, or nack) in order
        while self.order and self.order[0] in self.settled:
            tag = self.order.popleft()
            acked = self.settled.pop(tag)
            if acked and ops and ops[-1][0]:
                ops[-1] = (True, tag)
            else:
                ops.append((acked, tag))
        if ops:
            previous = self.sending
            self.sending = asyncio.ensure_future(self._send(previous, ops))

    async def _send(self, previous: asyncio.Task[None] | None,
                    ops: list[tuple[bool, int]]) -> None:
        if previous is not None:  # keep the frames in order across flushes
            await asyncio.gather(previous, return_exceptions=True)
        try:
            for acked, tag in ops:
                if acked:
                    await self.channel.basic_ack(tag, multiple=True, wait=False)
                else:
                    await self.channel.basic_nack(tag, requeue=True, wait=False)
        except Exception:  # noqa: BLE001 - the channel is gone: the source requeues them
            pass


def _connection_name(factory: CoalescingTransportFactory) -> str | None:
    """``client ip:port -> server ip:port`` of the factory's connection (IPv6 in
    brackets), as amqpq and RabbitMQ name a connection; None when unknown."""
    ends = []
    for addr in (factory.sockname, factory.peername):
        if not addr or len(addr) < 2:
            return None
        host = str(addr[0])
        ends.append(f"[{host}]:{addr[1]}" if ":" in host else f"{host}:{addr[1]}")
    return " -> ".join(ends)


async def _connect(url: str, end: str, factory: CoalescingTransportFactory | None = None
                   ) -> aiormq.abc.AbstractConnection:
    try:
        return await asyncio.wait_for(
            aiormq.connect(url, transport_factory=factory
                           or CoalescingTransportFactory(WRITE_DELAY)), 30)
    except (TimeoutError, aiormq.exceptions.AMQPError, OSError) as exc:
        raise LinkError(f"could not connect to {end}: {_why(exc)}", exc) from None


async def _declaring(step: Awaitable[T], end: str) -> T:
    try:
        return await step
    except (aiormq.exceptions.AMQPError, OSError) as exc:
        raise LinkError(f"{end} setup failed: {_why(exc)}", exc) from None


async def _closed(obj: aiormq.abc.AbstractConnection | aiormq.abc.AbstractChannel) -> None:
    """Wait until ``obj`` closes; raise LinkError with its reason."""
    try:
        await obj.closing
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - the close reason
        raise LinkError(_why(exc), exc) from None
    raise LinkError("connection closed")


async def _quietly(step: Awaitable[object]) -> None:
    try:
        await step
    except Exception:  # noqa: BLE001 - the channel is going away anyway
        pass


def _why(exc: BaseException) -> str:
    """A one-line reason without credentials (aiormq messages never hold the password;
    OSError texts name the address only)."""
    text = str(exc) or type(exc).__name__
    if isinstance(exc, ConnectionRefusedError):
        text = f"connection refused ({exc.strerror})"
    return " ".join(text.split())


def reason_of(exc: BaseException) -> str:
    """The status reason of a failed link."""
    return _why(exc)


__all__ = ["Link", "LinkError", "Route", "Source", "Target", "reason_of", "log"]
