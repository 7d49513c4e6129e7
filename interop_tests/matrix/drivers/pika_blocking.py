"""pika.BlockingConnection."""

from __future__ import annotations

from typing import Any

from interop_tests.matrix.driver import ChannelError, Driver, returned
from interop_tests.matrix.drivers import pika_common


class PikaBlockingDriver(Driver):
    name = "pika_blocking"
    mechanisms = ("PLAIN",)

    def __init__(self) -> None:
        super().__init__()
        self.conn = None
        self.ch = None

    def connect(self, url, *, heartbeat=None, mechanism="PLAIN", confirms=False):
        import pika

        self.confirm_mode = confirms
        self.conn = pika.BlockingConnection(pika_common.parameters(url, heartbeat))
        self.open_channel()

    def open_channel(self, channel_number: int | None = None):
        self.ch = self.conn.channel(channel_number)
        self.ch.add_on_return_callback(self._on_return)
        self.ch.add_on_cancel_callback(self._on_cancel)
        if self.confirm_mode:
            self.ch.confirm_delivery()

    def _on_return(self, _ch, method, _props, body):
        self.returns.append(returned(reply_code=method.reply_code, reply_text=method.reply_text,
                                     exchange=method.exchange, routing_key=method.routing_key,
                                     body=body))

    def _on_cancel(self, method_frame):
        self.server_cancels.append(method_frame.method.consumer_tag)

    def _call(self, fn, *args, **kwargs):
        from pika.exceptions import ChannelClosedByBroker

        try:
            return fn(*args, **kwargs)
        except ChannelClosedByBroker as exc:
            raise ChannelError(exc.reply_code, exc.reply_text) from exc

    def negotiated(self):
        return pika_common.negotiated(self.conn._impl)

    def server_properties(self):
        return pika_common.server_properties(self.conn._impl)

    def is_open(self):
        return self.conn is not None and self.conn.is_open

    def open_numbered_channel(self, number):
        self.open_channel(number)
        return self.ch.channel_number

    def close_channel(self):
        self.ch.close()

    def close(self):
        self.conn.close()

    def update_secret(self, new_secret, reason):
        self.conn.update_secret(new_secret, reason)

    def queue_declare(self, name, *, passive=False, durable=False, exclusive=False,
                      auto_delete=False, arguments=None):
        ok = self._call(self.ch.queue_declare, name, passive=passive, durable=durable,
                        exclusive=exclusive, auto_delete=auto_delete, arguments=arguments).method
        return ok.queue, ok.message_count, ok.consumer_count

    def exchange_declare(self, name, kind, *, passive=False):
        self._call(self.ch.exchange_declare, name, kind, passive=passive)

    def queue_bind(self, queue, exchange, routing_key, arguments=None):
        self._call(self.ch.queue_bind, queue, exchange, routing_key, arguments)

    def queue_unbind(self, queue, exchange, routing_key, arguments=None):
        self._call(self.ch.queue_unbind, queue, exchange, routing_key, arguments)

    def exchange_unbind(self, destination, source, routing_key):
        self._call(self.ch.exchange_unbind, destination, source, routing_key)

    def queue_delete(self, name, *, if_unused=False, if_empty=False):
        return self._call(self.ch.queue_delete, name, if_unused=if_unused,
                          if_empty=if_empty).method.message_count

    def queue_purge(self, name):
        return self._call(self.ch.queue_purge, name).method.message_count

    def tx_select(self):
        self._call(self.ch.tx_select)

    def tx_commit(self):
        self._call(self.ch.tx_commit)

    def tx_rollback(self):
        self._call(self.ch.tx_rollback)

    def recover(self):
        self._call(self.ch.basic_recover, requeue=True)

    def qos(self, prefetch_count):
        self._call(self.ch.basic_qos, prefetch_count=prefetch_count)

    def publish(self, exchange, routing_key, body, *, properties=None, mandatory=False):
        from pika.exceptions import NackError, UnroutableError

        try:
            self._call(self.ch.basic_publish, exchange, routing_key, body,
                       pika_common.properties(properties), mandatory)
        except UnroutableError:
            # Confirm mode: the Basic.Return, then the Basic.Ack. The return also reaches the
            # on_return callback (dispatched by the next pump), so it is not recorded here.
            self.confirms.acked += 1
            return
        except NackError:
            self.confirms.nacked += 1
            return
        if self.confirm_mode:  # basic_publish returned: the broker acked it
            self.confirms.acked += 1

    def get(self, queue, *, no_ack=False):
        method, props, body = self._call(self.ch.basic_get, queue, auto_ack=no_ack)
        if method is None:
            return None
        return pika_common.message(method, props, body, message_count=method.message_count)

    def ack(self, delivery_tag, multiple=False):
        self.ch.basic_ack(delivery_tag, multiple)

    def nack(self, delivery_tag, multiple=False, requeue=True):
        self.ch.basic_nack(delivery_tag, multiple, requeue)

    def reject(self, delivery_tag, requeue=True):
        self.ch.basic_reject(delivery_tag, requeue)

    def consume(self, queue, *, no_ack=False):
        def on_message(_ch, method, props, body):
            self.deliveries.append(pika_common.message(method, props, body))

        return self._call(self.ch.basic_consume, queue, on_message, auto_ack=no_ack)

    def cancel(self, consumer_tag):
        self.ch.basic_cancel(consumer_tag)

    def pump(self, seconds: float) -> Any:
        self.conn.process_data_events(time_limit=seconds)
