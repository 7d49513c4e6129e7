"""kombu on py-amqp (``pyamqp://``): kombu's Connection, Exchange, Queue and Producer; the channel
is py-amqp's.

Library facts the driver follows:

* Publisher confirms are a per-connection transport option (``confirm_publish``): each publish
  then waits for its Basic.Ack and raises ``MessageNacked`` on a Basic.Nack.
* py-amqp has no Basic.Nack: kombu's ``Message.reject(requeue=...)``/``requeue()`` send
  Basic.Reject. The driver's single ``nack`` is that reject; ``nack(multiple=True)`` is
  unsupported.
* Heartbeats are the application's job: ``pump`` calls ``heartbeat_check()`` between
  ``drain_events`` slices, as kombu's consumers do.
"""

from __future__ import annotations

import time

from interop_tests.matrix.driver import ChannelError, Driver, Unsupported, msg, returned, text


class KombuDriver(Driver):
    name = "kombu"
    mechanisms = ("PLAIN", "AMQPLAIN")
    unsupported = {
        "update_secret": "py-amqp has no connection.update_secret (its spec lacks "
                         "Connection.UpdateSecret/UpdateSecret-Ok), nor has kombu",
    }

    def __init__(self) -> None:
        super().__init__()
        self.conn = None
        self.ch = None
        self.messages: dict[int, object] = {}

    def _call(self, fn, *args, **kwargs):
        from amqp.exceptions import ChannelError as AmqpChannelError

        try:
            return fn(*args, **kwargs)
        except AmqpChannelError as exc:
            raise ChannelError(exc.reply_code, exc.reply_text) from exc

    def connect(self, url, *, heartbeat=None, mechanism="PLAIN", confirms=False):
        import kombu

        self.confirm_mode = confirms
        self.conn = kombu.Connection(
            "pyamqp://" + url.split("://", 1)[1], heartbeat=heartbeat or 0,
            login_method=mechanism, connect_timeout=5,
            transport_options={"confirm_publish": confirms})
        self.conn.connect()
        self.open_channel()

    def open_channel(self):
        self.ch = self.conn.channel()
        self.messages.clear()

    def open_numbered_channel(self, number):
        # kombu's Connection.channel() takes no number: py-amqp's (the transport's) does.
        self.ch = self.conn.connection.channel(number)
        self.messages.clear()
        return self.ch.channel_id

    def negotiated(self):
        c = self.conn.connection
        return {"frame_max": c.frame_max, "channel_max": c.channel_max,
                "heartbeat": c.heartbeat}

    def server_properties(self):
        return text(dict(self.conn.connection.server_properties))

    def is_open(self):
        return self.conn is not None and self.conn.connected

    def close_channel(self):
        self.ch.close()

    def close(self):
        self.conn.release()

    # -- topology --------------------------------------------------------------------------
    def _queue(self, name, **kwargs):
        import kombu

        return kombu.Queue(name, channel=self.ch, durable=kwargs.pop("durable", False),
                           **kwargs)

    def queue_declare(self, name, *, passive=False, durable=False, exclusive=False,
                      auto_delete=False, arguments=None):
        q = self._queue(name, durable=durable, exclusive=exclusive, auto_delete=auto_delete,
                        queue_arguments=arguments)
        ok = self._call(q.queue_declare, passive=passive)
        return ok.queue, ok.message_count, ok.consumer_count

    def exchange_declare(self, name, kind, *, passive=False):
        import kombu

        self._call(kombu.Exchange(name, type=kind, channel=self.ch, durable=False).declare,
                   passive=passive)

    def queue_bind(self, queue, exchange, routing_key, arguments=None):
        self._call(self._queue(queue).bind_to, exchange, routing_key, arguments)

    def queue_unbind(self, queue, exchange, routing_key, arguments=None):
        import kombu

        self._call(self._queue(queue).unbind_from, kombu.Exchange(exchange), routing_key,
                   arguments)

    def exchange_unbind(self, destination, source, routing_key):
        import kombu

        self._call(kombu.Exchange(destination, channel=self.ch).unbind_from, source,
                   routing_key)

    def queue_delete(self, name, *, if_unused=False, if_empty=False):
        return self._call(self._queue(name).delete, if_unused=if_unused, if_empty=if_empty)

    def queue_purge(self, name):
        return self._call(self._queue(name).purge)

    # kombu does not wrap transactions or recover: py-amqp's channel does them.
    def tx_select(self):
        self._call(self.ch.tx_select)

    def tx_commit(self):
        self._call(self.ch.tx_commit)

    def tx_rollback(self):
        self._call(self.ch.tx_rollback)

    def recover(self):
        self._call(self.ch.basic_recover, requeue=True)

    # -- messages --------------------------------------------------------------------------
    def qos(self, prefetch_count):
        self._call(self.ch.basic_qos, 0, prefetch_count, False)

    def _on_return(self, exc, exchange, routing_key, message):
        self.returns.append(returned(reply_code=exc.reply_code, reply_text=exc.reply_text,
                                     exchange=exchange, routing_key=routing_key,
                                     body=message.body))

    def publish(self, exchange, routing_key, body, *, properties=None, mandatory=False):
        import kombu
        from amqp.exceptions import MessageNacked

        props = dict(properties or {})
        producer = kombu.Producer(self.ch, exchange=kombu.Exchange(exchange),
                                  on_return=self._on_return, auto_declare=False)
        try:
            self._call(producer.publish, body, routing_key=routing_key, mandatory=mandatory,
                       content_type=props.pop("content_type", "application/octet-stream"),
                       content_encoding="binary", delivery_mode=props.pop("delivery_mode", 1),
                       priority=props.pop("priority", 0), headers=props.pop("headers", None),
                       retry=False, **props)
        except MessageNacked:
            self.confirms.nacked += 1
            return
        if self.confirm_mode:
            self.confirms.acked += 1

    def _message(self, m) -> dict:
        info = m.delivery_info
        if m.delivery_tag:
            self.messages[m.delivery_tag] = m
        props = dict(m.properties)
        return msg(body=m.body, delivery_tag=m.delivery_tag, redelivered=info.get("redelivered"),
                   exchange=info.get("exchange"), routing_key=info.get("routing_key"),
                   message_count=info.get("message_count"),
                   properties={"content_type": m.content_type,
                               "delivery_mode": props.get("delivery_mode"),
                               "priority": props.get("priority"),
                               "message_id": props.get("message_id"),
                               "correlation_id": props.get("correlation_id"),
                               "user_id": props.get("user_id"),
                               "headers": m.headers},
                   consumer_tag=info.get("consumer_tag"))

    def get(self, queue, *, no_ack=False):
        m = self._call(self._queue(queue).get, no_ack=no_ack)
        return None if m is None else self._message(m)

    def ack(self, delivery_tag, multiple=False):
        m = self.messages.get(delivery_tag)
        if m is None:  # a tag this channel never got: straight to the channel
            self.ch.basic_ack(delivery_tag, multiple)
        else:
            m.ack(multiple=multiple)

    def nack(self, delivery_tag, multiple=False, requeue=True):
        if multiple:
            raise Unsupported("py-amqp has no basic.nack, so kombu cannot nack multiple "
                              "deliveries at once")
        self.messages[delivery_tag].reject(requeue=requeue)

    def reject(self, delivery_tag, requeue=True):
        self.messages[delivery_tag].reject(requeue=requeue)

    def consume(self, queue, *, no_ack=False):
        def on_message(raw):
            self.deliveries.append(self._message(self.ch.message_to_python(raw)))

        def on_cancel(consumer_tag):
            self.server_cancels.append(consumer_tag)

        return self._call(self._queue(queue).consume, callback=on_message, no_ack=no_ack,
                          on_cancel=on_cancel)

    def cancel(self, consumer_tag):
        self._call(self.ch.basic_cancel, consumer_tag)

    def pump(self, seconds):
        deadline = time.monotonic() + seconds
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self.conn.heartbeat_check()
            try:
                self.conn.drain_events(timeout=min(0.1, remaining))
            except TimeoutError:
                pass
