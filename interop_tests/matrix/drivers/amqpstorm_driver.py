"""amqpstorm (thread-safe client with its own I/O thread).

Library facts the driver follows:

* A Basic.Return is not a callback: amqpstorm turns it into an ``AMQPMessageError`` ("Message
  not delivered: NO_ROUTE (312) to queue 'k' from exchange 'x'") raised by the publish (confirm
  mode) or the next call. The returned body is not kept (``NA``).
* A broker Basic.Cancel only removes the consumer tag from ``channel.consumer_tags`` (and logs a
  warning); the driver notices the tag disappear.
* Deliveries reach the callback in ``channel.process_data_events()``, called by ``pump``.
* ``basic.get`` is refused while the channel consumes.
* The I/O thread answers a broker Channel.Close (CloseOk) by itself, and RPCs are written
  without a look at the channel: after an asynchronous error the driver waits for the close
  before it sends anything more (``observe_async_error``).
"""

from __future__ import annotations

import re
import time

from interop_tests.matrix.driver import NA, WAIT, ChannelError, Driver, msg, text, wait_until
from interop_tests.matrix.drivers.aiormq_driver import url_with

RETURN_TEXT = re.compile(
    r"Message not delivered: (?P<text>.*) \((?P<code>\d+)\) to queue '(?P<key>.*)' "
    r"from exchange '(?P<exchange>.*)'$")
CLOSE_TEXT = re.compile(r"Channel \d+ was closed by remote server: (?P<text>.*)$", re.S)


class AmqpstormDriver(Driver):
    name = "amqpstorm"
    mechanisms = ("PLAIN",)
    unsupported = {
        "update_secret": "amqpstorm has no connection.update_secret (its channel 0 does not "
                         "handle UpdateSecret-Ok)",
        "high_channel_number": "amqpstorm numbers channels itself: Connection.channel() takes "
                               "no channel number",
    }

    def __init__(self) -> None:
        super().__init__()
        self.conn = None
        self.ch = None
        self._consuming: set[str] = set()

    def _call(self, fn, *args, **kwargs):
        from amqpstorm import AMQPChannelError, AMQPMessageError

        try:
            return fn(*args, **kwargs)
        except AMQPMessageError as exc:  # a Basic.Return, surfaced by this call
            self._record_return(exc)
            return None
        except AMQPChannelError as exc:
            # The broker's Channel.Close, raised as is, or (a race in amqpstorm's
            # check_for_errors: the close lands between its two checks) as a bare "channel
            # closed" while the close's own exception waits in channel.exceptions.
            for candidate in (exc, *getattr(self.ch, "exceptions", ())):
                match = CLOSE_TEXT.match(str(candidate))
                code = getattr(candidate, "error_code", None)
                if match and code:
                    raise ChannelError(code, match.group("text")) from exc
            raise

    def observe_async_error(self, sync):
        """amqpstorm's I/O thread answers the broker's Channel.Close with CloseOk on its own,
        and its RPCs (``queue.declare``...) write without looking at the channel: a method
        written after that CloseOk reaches the broker on a channel number it has already
        forgotten, and the broker closes the connection (504 CHANNEL_ERROR - expected
        'channel.open', as RabbitMQ's rabbit_channel does), which the next ``open_channel``
        reports. Which of the two goes out first is up to thread scheduling (a flake under
        load). So wait (at most WAIT s) for the close the method before causes, raise its
        error, and send ``sync`` only on a channel still open."""
        wait_until(lambda: not self.ch.is_open, WAIT, time.sleep)
        self._call(self.ch.check_for_errors)
        return sync()

    def _record_return(self, exc) -> None:
        match = RETURN_TEXT.match(str(exc))
        if not match:
            raise exc
        self.returns.append({"reply_code": int(match.group("code")),
                             "reply_text": match.group("text"),
                             "exchange": match.group("exchange"),
                             "routing_key": match.group("key"), "body": NA})

    def connect(self, url, *, heartbeat=None, mechanism="PLAIN", confirms=False):
        import amqpstorm

        self.confirm_mode = confirms
        self.conn = amqpstorm.UriConnection(url_with(url, heartbeat=heartbeat, timeout=10))
        self.open_channel()

    def open_channel(self):
        self.ch = self.conn.channel(rpc_timeout=15)
        self._consuming.clear()
        if self.confirm_mode:
            self.ch.confirm_deliveries()

    def negotiated(self):
        return {"frame_max": self.conn.max_frame_size,
                "channel_max": self.conn._channel0.max_allowed_channels,
                "heartbeat": self.conn.parameters["heartbeat"]}

    def server_properties(self):
        return text(dict(self.conn.server_properties))

    def is_open(self):
        return self.conn is not None and self.conn.is_open

    def close_channel(self):
        self.ch.close()

    def close(self):
        self.conn.close()

    def queue_declare(self, name, *, passive=False, durable=False, exclusive=False,
                      auto_delete=False, arguments=None):
        ok = self._call(self.ch.queue.declare, name, passive=passive, durable=durable,
                        exclusive=exclusive, auto_delete=auto_delete, arguments=arguments)
        return text(ok["queue"]), ok["message_count"], ok["consumer_count"]

    def exchange_declare(self, name, kind, *, passive=False):
        self._call(self.ch.exchange.declare, name, kind, passive=passive)

    def queue_bind(self, queue, exchange, routing_key, arguments=None):
        self._call(self.ch.queue.bind, queue, exchange, routing_key, arguments=arguments)

    def queue_unbind(self, queue, exchange, routing_key, arguments=None):
        self._call(self.ch.queue.unbind, queue, exchange, routing_key, arguments=arguments)

    def exchange_unbind(self, destination, source, routing_key):
        self._call(self.ch.exchange.unbind, destination, source, routing_key)

    def queue_delete(self, name, *, if_unused=False, if_empty=False):
        return self._call(self.ch.queue.delete, name, if_unused=if_unused,
                          if_empty=if_empty)["message_count"]

    def queue_purge(self, name):
        return self._call(self.ch.queue.purge, name)["message_count"]

    def tx_select(self):
        self._call(self.ch.tx.select)

    def tx_commit(self):
        self._call(self.ch.tx.commit)

    def tx_rollback(self):
        self._call(self.ch.tx.rollback)

    def recover(self):
        self._call(self.ch.basic.recover, requeue=True)

    def qos(self, prefetch_count):
        self._call(self.ch.basic.qos, prefetch_count)

    def publish(self, exchange, routing_key, body, *, properties=None, mandatory=False):
        before = len(self.returns)
        result = self._call(self.ch.basic.publish, body, routing_key, exchange=exchange,
                            properties=dict(properties or {}), mandatory=mandatory)
        if not self.confirm_mode:
            return
        if result is True or len(self.returns) > before:  # a return is raised after its ack
            self.confirms.acked += 1
        elif result is False:
            self.confirms.nacked += 1

    def _message(self, m) -> dict:
        method = text(dict(m.method))
        props = text(dict(m.properties))
        return msg(body=m.body, delivery_tag=method.get("delivery_tag"),
                   redelivered=method.get("redelivered"), exchange=method.get("exchange"),
                   routing_key=method.get("routing_key"),
                   message_count=method.get("message_count"), properties=props,
                   consumer_tag=method.get("consumer_tag"))

    def get(self, queue, *, no_ack=False):
        m = self._call(self.ch.basic.get, queue, no_ack=no_ack, auto_decode=False)
        return None if m is None else self._message(m)

    def ack(self, delivery_tag, multiple=False):
        self._call(self.ch.basic.ack, delivery_tag, multiple=multiple)

    def nack(self, delivery_tag, multiple=False, requeue=True):
        self._call(self.ch.basic.nack, delivery_tag, multiple=multiple, requeue=requeue)

    def reject(self, delivery_tag, requeue=True):
        self._call(self.ch.basic.reject, delivery_tag, requeue=requeue)

    def consume(self, queue, *, no_ack=False):
        def on_message(message):
            self.deliveries.append(self._message(message))

        tag = text(self._call(self.ch.basic.consume, on_message, queue, no_ack=no_ack))
        self._consuming.add(tag)
        return tag

    def cancel(self, consumer_tag):
        self._consuming.discard(consumer_tag)
        self._call(self.ch.basic.cancel, consumer_tag)

    def pump(self, seconds):
        deadline = time.monotonic() + seconds
        while True:
            if self._consuming:
                self._call(self.ch.process_data_events, auto_decode=False)
                gone = self._consuming - {text(t) for t in self.ch.consumer_tags}
                for tag in sorted(gone):
                    self._consuming.discard(tag)
                    self.server_cancels.append(tag)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            time.sleep(min(0.01, remaining))
