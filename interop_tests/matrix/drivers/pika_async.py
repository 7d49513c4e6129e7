"""pika.SelectConnection and pika.adapters.asyncio_connection.AsyncioConnection.

The connection's ioloop runs in a background thread; every driver call is scheduled onto it
(``add_callback_threadsafe`` / ``call_soon_threadsafe``) and waits for the library's callback
(Declare-Ok, Consume-Ok, Get-Ok/Get-Empty, ...) through a ``concurrent.futures.Future``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from interop_tests.matrix.driver import WAIT, ChannelError, Driver, returned
from interop_tests.matrix.drivers import pika_common

CALL_TIMEOUT = 15.0


class _PikaAsyncDriver(Driver):
    mechanisms = ("PLAIN",)

    def __init__(self) -> None:
        super().__init__()
        self.conn = None
        self.ch = None
        self.thread: threading.Thread | None = None
        self._pending: Future | None = None
        self._get_future: Future | None = None
        self._closed: Future = Future()
        self._channel_closed: Future | None = None

    # -- the loop thread ---------------------------------------------------------------------
    def _make_connection(self, params, on_open, on_open_error, on_close) -> None:
        raise NotImplementedError

    def _run_loop(self) -> None:
        raise NotImplementedError

    def _schedule(self, fn: Callable[[], None]) -> None:
        raise NotImplementedError

    def _stop_loop(self) -> None:
        raise NotImplementedError

    def _submit(self, start: Callable[[Future], None], timeout: float = CALL_TIMEOUT) -> Any:
        """Run ``start(future)`` on the loop thread; wait for the future it resolves."""
        fut: Future = Future()

        def run() -> None:
            self._pending = fut
            try:
                start(fut)
            except Exception as exc:  # e.g. ChannelWrongStateError
                if not fut.done():
                    fut.set_exception(self._closed_by_broker() or exc)

        self._schedule(run)
        return fut.result(timeout)

    def _now(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn()`` on the loop thread, return its result (no broker reply awaited)."""
        return self._submit(lambda fut: fut.set_result(fn()))

    def _closed_by_broker(self) -> ChannelError | None:
        """The broker's Channel.Close of the current channel, if it closed it: a call made
        after it (pika says only "channel is closed") reports that error, like the other
        clients do."""
        fut = self._channel_closed
        if fut is not None and fut.done():
            reason = fut.result()
            if getattr(reason, "reply_code", 0) not in (0, 200):
                return ChannelError(reason.reply_code, reason.reply_text)
        return None

    @staticmethod
    def _resolve(fut: Future, value: Any = None) -> None:
        if not fut.done():
            fut.set_result(value)

    # -- connection ----------------------------------------------------------------------------
    def connect(self, url, *, heartbeat=None, mechanism="PLAIN", confirms=False):
        self.confirm_mode = confirms
        opened: Future = Future()

        def on_open(conn):
            self._resolve(opened, conn)

        def on_open_error(_conn, error):
            if not opened.done():
                opened.set_exception(ConnectionError(f"open failed: {error!r}"))
            self._stop_loop()

        def on_close(_conn, reason):
            self._resolve(self._closed, reason)
            if self._pending is not None and not self._pending.done():
                self._pending.set_exception(ConnectionError(f"connection closed: {reason!r}"))
            self._stop_loop()

        params = pika_common.parameters(url, heartbeat)
        started = threading.Event()

        def main() -> None:
            self._make_connection(params, on_open, on_open_error, on_close)
            started.set()
            self._run_loop()

        self.thread = threading.Thread(target=main, name=f"{self.name}-ioloop", daemon=True)
        self.thread.start()
        started.wait(CALL_TIMEOUT)
        opened.result(CALL_TIMEOUT)
        self.open_channel()

    def open_channel(self, channel_number: int | None = None):
        def start(fut: Future) -> None:
            def on_channel_open(ch):
                ch.add_on_close_callback(self._on_channel_close)
                ch.add_on_return_callback(self._on_return)
                ch.add_on_cancel_callback(self._on_cancel)
                ch.add_callback(self._on_get_empty, [self._spec().Basic.GetEmpty],
                                one_shot=False)
                if self.confirm_mode:
                    ch.confirm_delivery(self._on_confirm, callback=lambda _f: fut.set_result(ch))
                else:
                    fut.set_result(ch)

            self.conn.channel(channel_number, on_open_callback=on_channel_open)

        self._channel_closed = Future()
        self.ch = self._submit(start)

    @staticmethod
    def _spec():
        from pika import spec

        return spec

    def _on_channel_close(self, ch, reason):
        if ch is not self.ch:
            return
        if self._channel_closed is not None:
            self._resolve(self._channel_closed, reason)
        code = getattr(reason, "reply_code", 0)
        text = getattr(reason, "reply_text", str(reason))
        for fut in (self._pending, self._get_future):
            if fut is not None and not fut.done():
                fut.set_exception(ChannelError(code, text))

    def _on_return(self, _ch, method, _props, body):
        self.returns.append(returned(reply_code=method.reply_code, reply_text=method.reply_text,
                                     exchange=method.exchange, routing_key=method.routing_key,
                                     body=body))

    def _on_cancel(self, method_frame):
        self.server_cancels.append(method_frame.method.consumer_tag)

    def _on_confirm(self, method_frame):
        method = method_frame.method
        self.confirms.confirm(method.delivery_tag, method.multiple,
                              isinstance(method, self._spec().Basic.Ack))

    def _on_get_empty(self, _frame):
        if self._get_future is not None:
            self._resolve(self._get_future, None)

    def negotiated(self):
        return pika_common.negotiated(self.conn)

    def server_properties(self):
        return pika_common.server_properties(self.conn)

    def is_open(self):
        return self.conn is not None and self.conn.is_open

    def open_numbered_channel(self, number):
        self.open_channel(number)
        return self.ch.channel_number

    def close_channel(self):
        self._now(self.ch.close)
        self._channel_closed.result(CALL_TIMEOUT)

    def close(self):
        self._now(self.conn.close)
        self._closed.result(CALL_TIMEOUT)
        if self.thread is not None:
            self.thread.join(CALL_TIMEOUT)

    def update_secret(self, new_secret, reason):
        self._submit(lambda fut: self.conn.update_secret(
            new_secret, reason, callback=lambda frame: self._resolve(fut, frame)))

    def shutdown(self):
        try:
            if self.is_open():
                self.close()
        except Exception:
            pass
        if self.thread is not None and self.thread.is_alive():
            try:
                self._schedule(self._stop_loop)
            except RuntimeError:  # the loop stopped and closed meanwhile (refused connect)
                pass
            self.thread.join(5)

    # -- methods -------------------------------------------------------------------------------
    def _rpc(self, method: str, *args, **kwargs) -> Any:
        return self._submit(
            lambda fut: getattr(self.ch, method)(
                *args, callback=lambda frame: self._resolve(fut, frame), **kwargs))

    def queue_declare(self, name, *, passive=False, durable=False, exclusive=False,
                      auto_delete=False, arguments=None):
        ok = self._rpc("queue_declare", name, passive=passive, durable=durable,
                       exclusive=exclusive, auto_delete=auto_delete, arguments=arguments).method
        return ok.queue, ok.message_count, ok.consumer_count

    def exchange_declare(self, name, kind, *, passive=False):
        self._rpc("exchange_declare", name, kind, passive=passive)

    def queue_bind(self, queue, exchange, routing_key, arguments=None):
        self._rpc("queue_bind", queue, exchange, routing_key, arguments)

    def queue_unbind(self, queue, exchange, routing_key, arguments=None):
        self._rpc("queue_unbind", queue, exchange, routing_key, arguments)

    def exchange_unbind(self, destination, source, routing_key):
        self._rpc("exchange_unbind", destination, source, routing_key)

    def queue_delete(self, name, *, if_unused=False, if_empty=False):
        return self._rpc("queue_delete", name, if_unused=if_unused,
                         if_empty=if_empty).method.message_count

    def queue_purge(self, name):
        return self._rpc("queue_purge", name).method.message_count

    def tx_select(self):
        self._rpc("tx_select")

    def tx_commit(self):
        self._rpc("tx_commit")

    def tx_rollback(self):
        self._rpc("tx_rollback")

    def recover(self):
        self._rpc("basic_recover", requeue=True)

    def qos(self, prefetch_count):
        self._rpc("basic_qos", prefetch_count=prefetch_count)

    def publish(self, exchange, routing_key, body, *, properties=None, mandatory=False):
        props = pika_common.properties(properties)

        def do() -> None:
            self.ch.basic_publish(exchange, routing_key, body, props, mandatory)
            if self.confirm_mode:
                self.confirms.published()

        self._now(do)

    def get(self, queue, *, no_ack=False):
        def start(fut: Future) -> None:
            self._get_future = fut

            def on_get_ok(_ch, method, props, body):
                self._resolve(fut, pika_common.message(method, props, body,
                                                       message_count=method.message_count))

            self.ch.basic_get(queue, on_get_ok, auto_ack=no_ack)

        return self._submit(start)

    def ack(self, delivery_tag, multiple=False):
        self._now(lambda: self.ch.basic_ack(delivery_tag, multiple))

    def nack(self, delivery_tag, multiple=False, requeue=True):
        self._now(lambda: self.ch.basic_nack(delivery_tag, multiple, requeue))

    def reject(self, delivery_tag, requeue=True):
        self._now(lambda: self.ch.basic_reject(delivery_tag, requeue))

    def consume(self, queue, *, no_ack=False):
        def on_message(_ch, method, props, body):
            self.deliveries.append(pika_common.message(method, props, body))

        def start(fut: Future) -> None:
            tag = self.ch.basic_consume(queue, on_message, auto_ack=no_ack,
                                        callback=lambda _frame: self._resolve(fut, tag))

        return self._submit(start)

    def cancel(self, consumer_tag):
        self._submit(lambda fut: self.ch.basic_cancel(
            consumer_tag, callback=lambda _frame: self._resolve(fut)), timeout=WAIT)


class PikaSelectDriver(_PikaAsyncDriver):
    name = "pika_select"

    def _make_connection(self, params, on_open, on_open_error, on_close):
        import pika

        self.conn = pika.SelectConnection(params, on_open_callback=on_open,
                                          on_open_error_callback=on_open_error,
                                          on_close_callback=on_close)

    def _run_loop(self):
        self.conn.ioloop.start()

    def _schedule(self, fn):
        self.conn.ioloop.add_callback_threadsafe(fn)

    def _stop_loop(self):
        self.conn.ioloop.stop()


class PikaAsyncioDriver(_PikaAsyncDriver):
    name = "pika_asyncio"

    def _make_connection(self, params, on_open, on_open_error, on_close):
        from pika.adapters.asyncio_connection import AsyncioConnection

        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        self.conn = AsyncioConnection(params, on_open_callback=on_open,
                                      on_open_error_callback=on_open_error,
                                      on_close_callback=on_close, custom_ioloop=self.loop)

    def _run_loop(self):
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    def _schedule(self, fn):
        self.loop.call_soon_threadsafe(fn)

    def _stop_loop(self):
        self.loop.stop()
