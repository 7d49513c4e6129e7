"""aio-pika (high-level asyncio client): Connection/Channel/Queue/Exchange objects, its loop in
a thread. Acks go through the IncomingMessage objects (kept by delivery tag). aio-pika has no
API of its own for the broker's Basic.Cancel: the driver listens on the underlay aiormq
channel, as aio-pika's robust channel does itself.
"""

from __future__ import annotations

import time

from interop_tests.matrix.driver import NA, Driver, msg
from interop_tests.matrix.drivers.aiormq_driver import channel_error, url_with
from interop_tests.matrix.drivers.loop_thread import LoopThread


def incoming(m) -> dict:
    return msg(body=m.body, delivery_tag=m.delivery_tag, redelivered=m.redelivered,
               exchange=m.exchange, routing_key=m.routing_key, message_count=m.message_count,
               properties={"content_type": m.content_type, "delivery_mode": None if m.delivery_mode is None
                           else int(m.delivery_mode),
                           "priority": m.priority, "message_id": m.message_id,
                           "correlation_id": m.correlation_id, "user_id": m.user_id,
                           "headers": m.headers},
               consumer_tag=m.consumer_tag)


class AioPikaDriver(Driver):
    name = "aio_pika"
    mechanisms = ("PLAIN",)
    #: aio-pika connection class: ``aio_pika.connect`` here, ``connect_robust`` in the subclass.
    robust = False

    def __init__(self) -> None:
        super().__init__()
        self.lt: LoopThread | None = None
        self.conn = None
        self.ch = None
        self.messages: dict[int, object] = {}
        self.queues: dict[str, object] = {}
        self.closed_by = None  # the ChannelError the broker closed the current channel with

    def _run(self, coro, timeout: float = 30.0):
        from aiormq.exceptions import ChannelInvalidStateError

        try:
            return self.lt.run(coro, timeout)
        except ChannelInvalidStateError as exc:
            # A call made after the broker closed the channel: report that close (aio-pika runs
            # its close callbacks in a task, so give it a moment to record it).
            deadline = time.monotonic() + 1.0
            while self.closed_by is None and time.monotonic() < deadline:
                time.sleep(0.01)
            if self.closed_by is not None:
                raise self.closed_by from exc
            raise
        except Exception as exc:
            error = channel_error(exc)
            if error is not None:
                raise error from exc
            raise

    def _on_channel_close(self, _channel, exc) -> None:
        error = channel_error(exc) if exc is not None else None
        if error is not None:
            self.closed_by = error

    def connect(self, url, *, heartbeat=None, mechanism="PLAIN", confirms=False):
        import aio_pika

        self.confirm_mode = confirms
        self.lt = LoopThread("aio-pika")
        connect = aio_pika.connect_robust if self.robust else aio_pika.connect
        self.conn = self._run(connect(url_with(url, heartbeat=heartbeat), timeout=10))
        self.open_channel()

    def open_channel(self, channel_number: int | None = None):
        async def open_():
            ch = await self.conn.channel(channel_number=channel_number,
                                         publisher_confirms=self.confirm_mode,
                                         on_return_raises=False)
            ch.return_callbacks.add(self._on_return)
            ch.close_callbacks.add(self._on_channel_close)
            underlay = await ch.get_underlay_channel()
            underlay.on_consumer_cancel_callbacks.add(self._on_cancel)
            return ch

        self.closed_by = None
        self.ch = self._run(open_())
        self.messages.clear()
        self.queues.clear()

    def _on_return(self, _channel, message):
        # aio-pika's IncomingMessage of a return keeps exchange and routing key, not the
        # Basic.Return reply code and text.
        self.returns.append({"reply_code": NA, "reply_text": NA, "exchange": message.exchange,
                             "routing_key": message.routing_key, "body": message.body})

    def _on_cancel(self, frame):
        self.server_cancels.append(frame.consumer_tag)

    def _underlay(self):
        return self.conn.transport.connection

    def negotiated(self):
        tune = self._underlay().connection_tune
        return {"frame_max": tune.frame_max, "channel_max": tune.channel_max,
                "heartbeat": tune.heartbeat}

    def server_properties(self):
        from interop_tests.matrix.driver import text

        return text(dict(self._underlay().server_properties))

    def is_open(self):
        return self.conn is not None and not self.conn.is_closed

    def open_numbered_channel(self, number):
        self.open_channel(number)
        return self.ch.number

    def close_channel(self):
        self._run(self.ch.close())

    def close(self):
        self._run(self.conn.close())

    def update_secret(self, new_secret, reason):
        self._run(self.conn.update_secret(new_secret, reason=reason))

    def shutdown(self):
        super().shutdown()
        if self.lt is not None:
            self.lt.stop()

    async def _queue(self, name):
        queue = self.queues.get(name)
        if queue is None:
            queue = await self.ch.get_queue(name, ensure=False)
            self.queues[name] = queue
        return queue

    def queue_declare(self, name, *, passive=False, durable=False, exclusive=False,
                      auto_delete=False, arguments=None):
        queue = self._run(self.ch.declare_queue(name, passive=passive, durable=durable,
                                                exclusive=exclusive, auto_delete=auto_delete,
                                                arguments=arguments))
        self.queues[queue.name] = queue
        ok = queue.declaration_result
        return queue.name, ok.message_count, ok.consumer_count

    def exchange_declare(self, name, kind, *, passive=False):
        self._run(self.ch.declare_exchange(name, kind, passive=passive))

    def queue_bind(self, queue, exchange, routing_key, arguments=None):
        async def bind():
            q = await self._queue(queue)
            await q.bind(exchange, routing_key=routing_key, arguments=arguments)

        self._run(bind())

    def queue_unbind(self, queue, exchange, routing_key, arguments=None):
        async def unbind():
            q = await self._queue(queue)
            await q.unbind(exchange, routing_key=routing_key, arguments=arguments)

        self._run(unbind())

    def exchange_unbind(self, destination, source, routing_key):
        async def unbind():
            x = await self.ch.get_exchange(destination, ensure=False)
            await x.unbind(source, routing_key=routing_key)

        self._run(unbind())

    def queue_delete(self, name, *, if_unused=False, if_empty=False):
        async def delete():
            q = await self._queue(name)
            return await q.delete(if_unused=if_unused, if_empty=if_empty)

        return self._run(delete()).message_count

    def queue_purge(self, name):
        async def purge():
            q = await self._queue(name)
            return await q.purge()

        return self._run(purge()).message_count

    def tx_select(self):
        self.tx = self.ch.transaction()
        self._run(self.tx.select())

    def tx_commit(self):
        self._run(self.tx.commit())

    def tx_rollback(self):
        self._run(self.tx.rollback())

    def qos(self, prefetch_count):
        self._run(self.ch.set_qos(prefetch_count=prefetch_count))

    def publish(self, exchange, routing_key, body, *, properties=None, mandatory=False):
        import aio_pika
        from aio_pika.exceptions import DeliveryError

        async def publish():
            if exchange == "":
                target = self.ch.default_exchange
            else:
                target = await self.ch.get_exchange(exchange, ensure=False)
            return await target.publish(aio_pika.Message(body, **(properties or {})),
                                        routing_key=routing_key, mandatory=mandatory)

        try:
            self._run(publish())
        except DeliveryError:
            self.confirms.nacked += 1
            return
        if self.confirm_mode:  # acked (or returned, then acked: aiormq merges the two)
            self.confirms.acked += 1

    def _keep(self, m) -> dict:
        if m.delivery_tag:
            self.messages[m.delivery_tag] = m
        return incoming(m)

    def get(self, queue, *, no_ack=False):
        async def get():
            q = await self._queue(queue)
            return await q.get(no_ack=no_ack, fail=False)

        m = self._run(get())
        return None if m is None else self._keep(m)

    def _message_op(self, delivery_tag, op, **kwargs):
        m = self.messages.get(delivery_tag)
        if m is None:  # a tag this channel never got: straight to the underlay channel
            async def direct():
                underlay = await self.ch.get_underlay_channel()
                await getattr(underlay, f"basic_{op}")(delivery_tag, **kwargs)

            self._run(direct())
            return
        self._run(getattr(m, op)(**kwargs))

    def ack(self, delivery_tag, multiple=False):
        self._message_op(delivery_tag, "ack", multiple=multiple)

    def nack(self, delivery_tag, multiple=False, requeue=True):
        self._message_op(delivery_tag, "nack", multiple=multiple, requeue=requeue)

    def reject(self, delivery_tag, requeue=True):
        self._message_op(delivery_tag, "reject", requeue=requeue)

    def consume(self, queue, *, no_ack=False):
        async def on_message(message):
            self.deliveries.append(self._keep(message))

        async def consume():
            q = await self._queue(queue)
            return await q.consume(on_message, no_ack=no_ack)

        return self._run(consume())

    def cancel(self, consumer_tag):
        async def cancel():
            for q in self.queues.values():
                if consumer_tag in getattr(q, "_consumers", {}):
                    await q.cancel(consumer_tag)
                    return
            underlay = await self.ch.get_underlay_channel()
            await underlay.basic_cancel(consumer_tag)

        self._run(cancel())


class AioPikaRobustDriver(AioPikaDriver):
    """The same through ``aio_pika.connect_robust`` (RobustConnection and RobustChannel)."""

    name = "aio_pika_robust"
    robust = True
    # A RobustChannel restores itself after the broker's Channel.Close and may re-run the
    # interrupted call on the new channel: whether an asynchronous channel error reaches the
    # next call depends on timing.
    async_errors_reliable = False
