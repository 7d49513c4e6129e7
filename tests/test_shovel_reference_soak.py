"""The migration soak of issue #33 against the reference RabbitMQ 3.10.8 (``make
reference-rabbitmq``; skipped when it is not reachable; marked ``slow``, so only
``pytest -m 'slow and reference' tests/test_shovel_reference_soak.py`` runs it):

a RabbitMQ queue holding ``AMQPQ_SHOVEL_SOAK_MESSAGES`` (default 1,000,000) numbered
persistent messages is moved into amqpq by an on-confirm dynamic shovel defined on amqpq,
and amqpq is killed -9 twice on the way (restarted on the same data directory and ports; the
shovel is a stored runtime parameter and starts again by itself). At the end every number is
in amqpq's queue; a number present more than once is a message that amqpq had stored but
whose confirm (or the shovel's ack of it) had not reached RabbitMQ when amqpq died, so at
most ``src-prefetch-count`` per kill.

What the redelivered flag says: RabbitMQ hands the unacknowledged messages to the restarted
shovel with ``redelivered`` set, but a shovel forwards with ``Basic.Publish``, which has no
such flag, so both copies sit in amqpq's queue as new, never-delivered messages and a
consumer of amqpq sees neither flagged. RabbitMQ's own shovel does the same
(``rabbit_amqp091_shovel:forward`` publishes the payload and properties only). The test
records the flags and prints the figures (``-s``); it asserts what holds: every message
present, duplicates within the in-flight window of the kills, the shovel started again by
itself after each restart (its "is running" log line) and ``running`` at the end; the status
transitions seen by polling ``/api/shovels`` are in the printed figures.

Source: https://www.rabbitmq.com/docs/shovel#ack-modes; the issue's Tests section.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections import Counter
from typing import Any

import pika
import pytest
from pamqp import commands, frame, header
from pamqp.exceptions import UnmarshalingException

from tests import test_shovel
from tests.support.reference import REFERENCE_AMQP, require_reference
from tests.test_shovel import Node, wait_for
from tests.test_shovel_reference import ref_count, ref_delete_queues

#: messages moved (``AMQPQ_SHOVEL_SOAK_MESSAGES`` overrides)
MESSAGES = int(os.environ.get("AMQPQ_SHOVEL_SOAK_MESSAGES", "1000000"))
WINDOW = 1000  # src-prefetch-count: the most one kill can leave to be published twice
KILLS = 2

pytestmark = [pytest.mark.reference, pytest.mark.slow]


@pytest.fixture(scope="module", autouse=True)
def reference() -> None:
    require_reference("/api/shovels", "rabbitmq_shovel_management")


node = test_shovel.node  # the fixture: a broker process started in tmp_path


class StatusWatch:
    """Polls amqpq's ``/api/shovels`` every 0.2 s in a thread and keeps each change of the
    shovel's ``(state, reason)`` (``down`` while the API does not answer)."""

    def __init__(self, node: Node, name: str) -> None:
        self.node, self.name = node, name
        self.changes: list[tuple[float, str, str]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.started = time.monotonic()
        self.thread.start()

    def _run(self) -> None:
        last: tuple[str, str] | None = None
        while not self.stop.wait(0.2):
            try:
                status, rows = self.node.api("GET", "/api/shovels")
                row = next((r for r in rows or [] if r["name"] == self.name), None)
                now = ((row["state"], row.get("reason", "")) if status == 200 and row
                       else ("absent", ""))
            except OSError:
                now = ("down", "")
            if now != last:
                self.changes.append((time.monotonic() - self.started, *now))
                last = now

    def close(self) -> list[tuple[float, str, str]]:
        self.stop.set()
        self.thread.join(5)
        return self.changes


def fill_reference(queue: str, n: int, chunk: int = 5000) -> None:
    """Declare ``queue`` durable on the reference RabbitMQ and publish ``n`` persistent
    messages ``b"%07d" % i`` to it with publisher confirms, waiting for the last confirm.

    Raw frames over a socket (marshalled once with pamqp, the body appended per message):
    under load pika and aiormq publish under 1,000 msg/s, CPU-bound in the client, which
    makes a million take a quarter of an hour; this keeps up with RabbitMQ.

    Raises:
        RuntimeError: RabbitMQ nacked a publish.
        ConnectionError: it closed the connection.
    """
    sock = socket.create_connection(("127.0.0.1", 5672), timeout=60)
    buf = bytearray()

    def read() -> object:
        while True:
            if len(buf) >= 8:
                try:
                    used, _channel, value = frame.unmarshal(bytes(buf))
                except UnmarshalingException:  # an incomplete frame: read more
                    used = 0
                if used:
                    del buf[:used]
                    if isinstance(value, commands.Basic.Nack):
                        raise RuntimeError("RabbitMQ nacked a publish")
                    if isinstance(value, commands.Connection.Close):
                        raise ConnectionError(value.reply_text)
                    return value
            data = sock.recv(65536)
            if not data:
                raise ConnectionError("RabbitMQ closed the connection")
            buf.extend(data)

    try:
        sock.sendall(frame.marshal(header.ProtocolHeader(), 0))
        read()  # Connection.Start
        sock.sendall(frame.marshal(commands.Connection.StartOk(
            client_properties={}, mechanism="PLAIN", response="\0guest\0guest"), 0))
        tune = read()
        assert isinstance(tune, commands.Connection.Tune)
        sock.sendall(frame.marshal(commands.Connection.TuneOk(tune.channel_max,
                                                              tune.frame_max, 0), 0)
                     + frame.marshal(commands.Connection.Open("/"), 0))
        read()
        for step in (commands.Channel.Open(), commands.Queue.Declare(queue=queue, durable=True),
                     commands.Confirm.Select()):
            sock.sendall(frame.marshal(step, 1))
            read()
        head = (frame.marshal(commands.Basic.Publish(exchange="", routing_key=queue), 1)
                + frame.marshal(header.ContentHeader(
                    0, 7, commands.Basic.Properties(delivery_mode=2)), 1)
                + b"\x03\x00\x01\x00\x00\x00\x07")  # body frame: type, channel, size 7
        acked = 0

        def confirmed_up_to(tag: int) -> None:
            nonlocal acked
            while acked < tag:
                value = read()
                if isinstance(value, commands.Basic.Ack):
                    acked = value.delivery_tag
        for start in range(0, n, chunk):
            sock.sendall(b"".join(head + b"%07d\xce" % i
                                  for i in range(start, min(n, start + chunk))))
            confirmed_up_to(start - 4 * chunk)  # at most 5 chunks unconfirmed
        confirmed_up_to(n)
        sock.sendall(frame.marshal(commands.Connection.Close(200, "bye", 0, 0), 0))
        read()
    finally:
        sock.close()


def consume_all(url: str, queue: str, expected: int) -> list[tuple[bytes, bool]]:
    """``(body, redelivered)`` of the ``expected`` messages of ``queue``, consumed with
    prefetch and multiple acks (basic.get would take a round trip each)."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=2000)
    got: list[tuple[bytes, bool]] = []
    for method, _props, body in ch.consume(queue, inactivity_timeout=30):
        if method is None:
            break
        got.append((body, bool(method.redelivered)))
        if len(got) % 1000 == 0 or len(got) == expected:
            ch.basic_ack(method.delivery_tag, multiple=True)
        if len(got) == expected:
            break
    ch.cancel()
    conn.close()
    return got


@pytest.mark.timeout(600 + MESSAGES // 100)
def test_million_messages_from_rabbitmq_amqpq_killed_twice(node: Node) -> None:
    tag = uuid.uuid4().hex[:8]
    queue, name, n = f"shv-soak-{tag}", f"soak-{tag}", MESSAGES
    figures: dict[str, Any] = {"messages": n}
    watch: StatusWatch | None = None
    try:
        t0 = time.monotonic()
        fill_reference(queue, n)
        figures["fill_s"] = round(time.monotonic() - t0, 1)
        assert ref_count(queue) == n

        t0 = time.monotonic()
        watch = StatusWatch(node, name)
        assert node.api("PUT", f"/api/parameters/shovel/%2F/{name}", {"value": {
            "src-uri": REFERENCE_AMQP, "src-queue": queue, "dest-uri": "amqp://",
            "dest-queue": queue, "ack-mode": "on-confirm", "reconnect-delay": 1,
            "src-prefetch-count": WINDOW}})[0] == 201
        kills = []
        for threshold in (n // 10, n // 2):
            wait_for(lambda threshold=threshold: node.count(queue) > threshold,
                     timeout=120 + n // 200, what=f"more than {threshold} moved")
            kills.append((round(time.monotonic() - t0, 1), node.count(queue)))
            node.proc.kill()
            node.proc.start()  # same data dir, same AMQP and management ports
        figures["kills_at_s_count"] = kills
        wait_for(lambda: ref_count(queue) == 0 and node.count(queue) >= n,
                 timeout=120 + n // 100, what="every message in amqpq",
                 describe=lambda: f"rabbitmq {ref_count(queue)} amqpq {node.count(queue)}")
        figures["transfer_s"] = round(time.monotonic() - t0, 1)
        # stop the shovel so nothing arrives while the queue is read
        assert node.api("DELETE", f"/api/parameters/shovel/%2F/{name}")[0] == 204
        wait_for(lambda: node.shovels() == [], what="the shovel stopped")
        transitions = watch.close()
        figures["status"] = [(round(t, 1), state, reason[:80])
                             for t, state, reason in transitions]
        total = node.count(queue)

        t0 = time.monotonic()
        got = consume_all(node.url, queue, total)
        figures["read_s"] = round(time.monotonic() - t0, 1)
        assert len(got) == total
        copies = Counter(body for body, _ in got)
        flagged = sum(1 for _, redelivered in got if redelivered)
        later_flagged = later = 0
        seen: set[bytes] = set()
        for body, redelivered in got:
            if body in seen:
                later += 1
                later_flagged += redelivered
            seen.add(body)
        figures.update(total=total, duplicates=total - n,
                       numbers_twice_or_more=sum(1 for c in copies.values() if c > 1),
                       redelivered_flagged=flagged, later_copies=later,
                       later_copies_flagged=later_flagged)
        print(f"\nshovel soak figures: {figures}")

        assert set(copies) == {b"%07d" % i for i in range(n)}  # every number present
        assert total - n <= KILLS * WINDOW  # duplicates: at most the window per kill
        # the shovel started by itself after each restart, and was running at the end
        assert node.proc.log_text().count(f"Shovel '{name}' in vhost '/' is running") > KILLS
        assert [state for _, state, _ in transitions if state != "absent"][-1] == "running"
    finally:
        if watch is not None:
            watch.close()
        node.api("DELETE", f"/api/parameters/shovel/%2F/{name}")
        node.api("DELETE", f"/api/queues/%2F/{queue}")
        ref_delete_queues(queue)
