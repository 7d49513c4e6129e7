"""Node.js amqplib, through ``interop_tests/matrix/node/driver.js`` (JSON lines on stdin/stdout).

The Node process owns the connection; a reader thread here routes replies (by request id) and
events (deliveries, returns, server cancels, confirms) into the driver's lists. Requests are
served one at a time in order, so the Python side stays synchronous like the other drivers.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import threading
from concurrent.futures import Future
from functools import cache
from pathlib import Path
from typing import Any

from interop_tests.matrix.driver import ChannelError, Driver, msg

NODE_DIR = Path(__file__).resolve().parent.parent / "node"
DRIVER_JS = NODE_DIR / "driver.js"
CALL_TIMEOUT = 30.0


@cache
def unavailable() -> str | None:
    """None when node and amqplib (npm install in interop_tests/matrix/node) are there."""
    node = shutil.which("node")
    if node is None:
        return "node is not on PATH (install Node.js >= 18, then make interop-deps)"
    probe = subprocess.run([node, "-e", "require.resolve('amqplib')"], cwd=NODE_DIR,
                           capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        return (f"amqplib is not installed in {NODE_DIR} "
                "(make interop-deps runs npm install there)")
    return None


def _decode(m: dict) -> dict:
    return msg(body=base64.b64decode(m["body"]), delivery_tag=m["delivery_tag"],
               redelivered=m["redelivered"], exchange=m["exchange"],
               routing_key=m["routing_key"], message_count=m["message_count"],
               properties=m["properties"], consumer_tag=m["consumer_tag"])


class NodeAmqplibDriver(Driver):
    name = "amqplib"
    mechanisms = ("PLAIN", "AMQPLAIN")
    unsupported = {
        "high_channel_number": "amqplib numbers channels itself (Connection.freshChannel: the "
                               "lowest free one); createChannel takes no channel number",
    }

    def __init__(self) -> None:
        super().__init__()
        self.proc: subprocess.Popen | None = None
        self.reader: threading.Thread | None = None
        self.pending: dict[int, Future] = {}
        self.next_id = 0
        self.lock = threading.Lock()
        self.ready: Future = Future()
        self.events: list[dict] = []  # every event, for debugging
        self.stderr = tempfile.TemporaryFile()

    # -- process and protocol ------------------------------------------------------------------
    def _start(self) -> None:
        self.proc = subprocess.Popen(["node", str(DRIVER_JS)], cwd=NODE_DIR,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, env={**os.environ})
        self.reader = threading.Thread(target=self._read, name="amqplib-reader", daemon=True)
        self.reader.start()
        self.ready.result(CALL_TIMEOUT)

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            obj = json.loads(line)
            if "id" in obj:
                fut = self.pending.pop(obj["id"], None)
                if fut is not None:
                    fut.set_result(obj)
                continue
            self._event(obj)
        gone = ConnectionError(f"node driver exited: {self._stderr_tail()}")
        if not self.ready.done():
            self.ready.set_exception(gone)
        for fut in list(self.pending.values()):
            if not fut.done():
                fut.set_exception(gone)

    def _event(self, ev: dict) -> None:
        self.events.append({k: v for k, v in ev.items() if k not in ("msg", "body")})
        kind = ev["event"]
        if kind == "ready":
            self.ready.set_result(ev)
        elif kind == "fatal":
            self.ready.set_exception(RuntimeError(ev["error"]))
        elif kind == "delivery":
            self.deliveries.append(_decode(ev["msg"]))
        elif kind == "return":
            self.returns.append({"reply_code": ev["reply_code"], "reply_text": ev["reply_text"],
                                 "exchange": ev["exchange"], "routing_key": ev["routing_key"],
                                 "body": base64.b64decode(ev["body"])})
        elif kind == "cancel":
            self.server_cancels.append(ev["tag"])
        elif kind == "confirm":
            with self.confirms.lock:
                if ev["ack"]:
                    self.confirms.acked += 1
                else:
                    self.confirms.nacked += 1

    def _stderr_tail(self) -> str:
        try:
            self.stderr.seek(0)
            return self.stderr.read()[-3000:].decode(errors="replace")
        except (OSError, ValueError):
            return ""

    def _call(self, op: str, timeout: float = CALL_TIMEOUT, **args: Any) -> Any:
        if self.proc is None:
            self._start()
        with self.lock:
            self.next_id += 1
            request_id = self.next_id
            fut: Future = Future()
            self.pending[request_id] = fut
            line = json.dumps({"id": request_id, "op": op, "args": args}) + "\n"
            assert self.proc.stdin is not None
            self.proc.stdin.write(line.encode())
            self.proc.stdin.flush()
        reply = fut.result(timeout)
        if reply["ok"]:
            return reply["result"]
        error = reply["error"]
        if error.get("kind") == "channel":
            raise ChannelError(error["code"], error["text"])
        raise RuntimeError(f"amqplib {op} failed: {error.get('message')}")

    # -- driver API ----------------------------------------------------------------------------
    def connect(self, url, *, heartbeat=None, mechanism="PLAIN", confirms=False):
        self.confirm_mode = confirms
        self._call("connect", url=url, heartbeat=heartbeat, mechanism=mechanism,
                   confirms=confirms)

    def extra_header_values(self):
        return {}  # JSON carries no decimal or timestamp: amqplib gets the portable set only

    def negotiated(self):
        return self._call("negotiated")

    def server_properties(self):
        return self._call("server_properties")

    def is_open(self):
        if self.proc is None or self.proc.poll() is not None:
            return False
        return self._call("is_open")

    def open_channel(self):
        self._call("open_channel")

    def close_channel(self):
        self._call("close_channel")

    def close(self):
        self._call("close")

    def callback_high_watermark(self, url: str) -> dict:
        """amqplib's callback API test "find high watermark" then "set high watermark" on
        connections of their own (driver.js ``callbackHighWatermark``): sends until the
        writer is full, then connection.close() with the publishes still queued. Returns
        ``{"find": {"baseline", "close_error", "error_events"}, "set": {"sent", "refused",
        "close_error", "error_events"}}``."""
        return self._call("callback_high_watermark", timeout=60, url=url)

    def update_secret(self, new_secret, reason):
        self._call("update_secret", new_secret=new_secret, reason=reason)

    def shutdown(self):
        if self.proc is None:
            return
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()  # driver.js closes the connection and exits
            self.proc.wait(10)
        except Exception:
            self.proc.kill()
            self.proc.wait(5)
        if self.reader is not None:
            self.reader.join(5)
        self.stderr.close()

    def queue_declare(self, name, *, passive=False, durable=False, exclusive=False,
                      auto_delete=False, arguments=None):
        queue, message_count, consumer_count = self._call(
            "queue_declare", name=name, passive=passive, durable=durable, exclusive=exclusive,
            auto_delete=auto_delete, arguments=arguments)
        return queue, message_count, consumer_count

    def exchange_declare(self, name, kind, *, passive=False):
        self._call("exchange_declare", name=name, kind=kind, passive=passive)

    def queue_bind(self, queue, exchange, routing_key, arguments=None):
        self._call("queue_bind", queue=queue, exchange=exchange, routing_key=routing_key,
                   arguments=arguments)

    def queue_unbind(self, queue, exchange, routing_key, arguments=None):
        self._call("queue_unbind", queue=queue, exchange=exchange, routing_key=routing_key,
                   arguments=arguments)

    def exchange_unbind(self, destination, source, routing_key):
        self._call("exchange_unbind", destination=destination, source=source,
                   routing_key=routing_key)

    def queue_delete(self, name, *, if_unused=False, if_empty=False):
        return self._call("queue_delete", name=name, if_unused=if_unused, if_empty=if_empty)

    def queue_purge(self, name):
        return self._call("queue_purge", name=name)

    def recover(self):
        self._call("recover")

    def qos(self, prefetch_count):
        self._call("qos", prefetch_count=prefetch_count)

    def publish(self, exchange, routing_key, body, *, properties=None, mandatory=False):
        self._call("publish", timeout=60, exchange=exchange, routing_key=routing_key,
                   body=base64.b64encode(body).decode(), properties=properties,
                   mandatory=mandatory)

    def get(self, queue, *, no_ack=False):
        m = self._call("get", timeout=60, queue=queue, no_ack=no_ack)
        return None if m is None else _decode(m)

    def ack(self, delivery_tag, multiple=False):
        self._call("ack", tag=delivery_tag, multiple=multiple)

    def nack(self, delivery_tag, multiple=False, requeue=True):
        self._call("nack", tag=delivery_tag, multiple=multiple, requeue=requeue)

    def reject(self, delivery_tag, requeue=True):
        self._call("reject", tag=delivery_tag, requeue=requeue)

    def consume(self, queue, *, no_ack=False):
        return self._call("consume", queue=queue, no_ack=no_ack)

    def cancel(self, consumer_tag):
        self._call("cancel", tag=consumer_tag)
