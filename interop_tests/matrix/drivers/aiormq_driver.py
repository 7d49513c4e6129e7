"""aiormq (the low-level asyncio client aio-pika is built on), its loop in a thread."""

from __future__ import annotations

from typing import Any

from interop_tests.matrix.driver import ChannelError, Driver, msg, returned, text
from interop_tests.matrix.drivers.loop_thread import LoopThread


def url_with(url: str, **query: Any) -> str:
    from yarl import URL

    return str(URL(url).update_query({k: str(v) for k, v in query.items() if v is not None}))


def channel_error(exc: BaseException) -> ChannelError | None:
    """aiormq raises ``ChannelNotFoundEntity(reply_text)`` etc. (code by class), or
    ``ChannelClosed(code, text)`` for codes without a class."""
    from aiormq import exceptions
    from aiormq.channel import EXCEPTION_MAPPING

    if not isinstance(exc, exceptions.ChannelClosed):
        return None
    for code, cls in EXCEPTION_MAPPING.items():
        if type(exc) is cls:
            return ChannelError(code, text(exc.args[0]) if exc.args else "")
    if len(exc.args) >= 2 and isinstance(exc.args[0], int):
        return ChannelError(exc.args[0], text(exc.args[1]))
    return ChannelError(0, repr(exc))


def props_of(properties: Any) -> dict:
    return {name: getattr(properties, name, None) for name in
            ("content_type", "delivery_mode", "priority", "message_id", "correlation_id",
             "user_id", "headers")}


def delivered(m: Any) -> dict:
    return msg(body=m.body, delivery_tag=m.delivery_tag, redelivered=m.redelivered,
               exchange=m.exchange, routing_key=m.routing_key, message_count=m.message_count,
               properties=props_of(m.header.properties), consumer_tag=m.consumer_tag)


class AiormqDriver(Driver):
    name = "aiormq"
    mechanisms = ("PLAIN",)

    def __init__(self) -> None:
        super().__init__()
        self.lt: LoopThread | None = None
        self.conn = None
        self.ch = None

    def _run(self, coro, timeout: float = 30.0):
        from aiormq.exceptions import ChannelInvalidStateError

        try:
            return self.lt.run(coro, timeout)
        except ChannelInvalidStateError as exc:
            # A call made after the broker closed the channel: report that close.
            closed = getattr(self.ch, "_close_exception", None)
            error = channel_error(closed) if closed is not None else None
            if error is not None:
                raise error from exc
            raise
        except Exception as exc:
            error = channel_error(exc)
            if error is not None:
                raise error from exc
            raise

    def connect(self, url, *, heartbeat=None, mechanism="PLAIN", confirms=False):
        import aiormq

        self.confirm_mode = confirms
        self.lt = LoopThread("aiormq")
        self.conn = self._run(aiormq.connect(url_with(url, heartbeat=heartbeat)))
        self.open_channel()

    def open_channel(self, channel_number: int | None = None):
        self.ch = self._run(self.conn.channel(channel_number=channel_number,
                                              publisher_confirms=self.confirm_mode,
                                              on_return_raises=False))
        self.ch.on_return_callbacks.add(self._on_return)
        self.ch.on_consumer_cancel_callbacks.add(self._on_cancel)

    def _on_return(self, message):
        frame = message.delivery
        self.returns.append(returned(reply_code=frame.reply_code, reply_text=frame.reply_text,
                                     exchange=frame.exchange, routing_key=frame.routing_key,
                                     body=message.body))

    def _on_cancel(self, frame):
        self.server_cancels.append(frame.consumer_tag)

    def negotiated(self):
        tune = self.conn.connection_tune
        return {"frame_max": tune.frame_max, "channel_max": tune.channel_max,
                "heartbeat": tune.heartbeat}

    def server_properties(self):
        return text(dict(self.conn.server_properties))

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

    def queue_declare(self, name, *, passive=False, durable=False, exclusive=False,
                      auto_delete=False, arguments=None):
        ok = self._run(self.ch.queue_declare(name, passive=passive, durable=durable,
                                             exclusive=exclusive, auto_delete=auto_delete,
                                             arguments=arguments))
        return ok.queue, ok.message_count, ok.consumer_count

    def exchange_declare(self, name, kind, *, passive=False):
        self._run(self.ch.exchange_declare(name, exchange_type=kind, passive=passive))

    def queue_bind(self, queue, exchange, routing_key, arguments=None):
        self._run(self.ch.queue_bind(queue, exchange, routing_key=routing_key,
                                     arguments=arguments))

    def queue_unbind(self, queue, exchange, routing_key, arguments=None):
        self._run(self.ch.queue_unbind(queue, exchange, routing_key=routing_key,
                                       arguments=arguments))

    def exchange_unbind(self, destination, source, routing_key):
        self._run(self.ch.exchange_unbind(destination, source, routing_key))

    def queue_delete(self, name, *, if_unused=False, if_empty=False):
        return self._run(self.ch.queue_delete(name, if_unused=if_unused,
                                              if_empty=if_empty)).message_count

    def queue_purge(self, name):
        return self._run(self.ch.queue_purge(name)).message_count

    def tx_select(self):
        self._run(self.ch.tx_select())

    def tx_commit(self):
        self._run(self.ch.tx_commit())

    def tx_rollback(self):
        self._run(self.ch.tx_rollback())

    def recover(self):
        self._run(self.ch.basic_recover(requeue=True))

    def qos(self, prefetch_count):
        self._run(self.ch.basic_qos(prefetch_count=prefetch_count))

    def publish(self, exchange, routing_key, body, *, properties=None, mandatory=False):
        from aiormq import spec
        from aiormq.exceptions import DeliveryError

        props = spec.Basic.Properties(**(properties or {}))
        try:
            result = self._run(self.ch.basic_publish(body, exchange=exchange,
                                                     routing_key=routing_key,
                                                     properties=props, mandatory=mandatory))
        except DeliveryError:
            self.confirms.nacked += 1
            return
        if self.confirm_mode:
            # Basic.Ack, or the returned message: aiormq resolves a returned publish with the
            # Basic.Return (the Ack that follows it is swallowed).
            self.confirms.acked += 1
            del result

    def get(self, queue, *, no_ack=False):
        from aiormq import spec

        m = self._run(self.ch.basic_get(queue, no_ack=no_ack))
        if isinstance(m.delivery, spec.Basic.GetEmpty):
            return None
        return delivered(m)

    def ack(self, delivery_tag, multiple=False):
        self._run(self.ch.basic_ack(delivery_tag, multiple=multiple))

    def nack(self, delivery_tag, multiple=False, requeue=True):
        self._run(self.ch.basic_nack(delivery_tag, multiple=multiple, requeue=requeue))

    def reject(self, delivery_tag, requeue=True):
        self._run(self.ch.basic_reject(delivery_tag, requeue=requeue))

    def consume(self, queue, *, no_ack=False):
        async def on_message(message):
            self.deliveries.append(delivered(message))

        ok = self._run(self.ch.basic_consume(queue, on_message, no_ack=no_ack))
        return ok.consumer_tag

    def cancel(self, consumer_tag):
        self._run(self.ch.basic_cancel(consumer_tag))
