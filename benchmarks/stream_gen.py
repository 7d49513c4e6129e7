"""The stream case of issue #32 item 3: an independent generator (its own process, raw
sockets, so the client costs little) against one broker, publish then catch-up read.

1. *Publish*: ``n`` persistent 200-byte messages to a fresh stream with confirms and a
   **sliding** window: at most ``window`` unconfirmed, topped up after every read of the
   socket (``stream_bench.publish`` waits for a whole window before sending the next one).
2. *Catch-up read*: one consumer from ``x-stream-offset: first``, prefetch ``prefetch``,
   acks with ``multiple`` — after every read of the socket (``ack_every`` 0) or every
   ``ack_every`` deliveries.

Reported per phase: msg/s and the broker's CPU seconds per 1,000 messages (utime+stime of
``pids``; less sensitive to the machine's load than msg/s). Used by
``python -m benchmarks.stream_bench --generator`` (medians of ``--reps``, amqpq and
RabbitMQ alternating); on demand only, never in the test run.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from typing import Any

from pamqp import commands

from benchmarks.brokers import cpu_seconds
from tests.support.wire import (
    Client,
    ConfirmTracker,
    PatternCounter,
    ack_frame,
    body_frame,
    body_frame_pattern,
    publish_head,
)

BODY = 200


def _publish(port: int, stream: str, n: int, window: int, out: Any) -> None:
    client = Client(port, timeout=120)
    client.channel(1)
    client.call(1, commands.Queue.Declare(queue=stream, durable=True,
                                          arguments={"x-queue-type": "stream"}),
                commands.Queue.DeclareOk)
    client.confirm_select()
    one = publish_head("", stream, BODY, persistent=True) + body_frame(b"x" * BODY)
    tracker = ConfirmTracker()
    if client.buf:
        tracker.feed(client.buf)
    sock = client.sock
    sent = 0
    t0 = time.monotonic()
    deadline = t0 + 600
    while tracker.confirmed < n and time.monotonic() < deadline:
        room = min(window - (sent - tracker.confirmed), n - sent)
        if room > 0:
            sock.sendall(one * room)
            sent += room
        data = sock.recv(1 << 16)
        if not data or tracker.error:
            raise RuntimeError(f"publisher: {tracker.error or 'connection closed'}")
        tracker.feed(data)
    elapsed = time.monotonic() - t0
    client.close()
    out.put(tracker.confirmed / elapsed)


def _read(port: int, stream: str, n: int, prefetch: int, ack_every: int, out: Any) -> None:
    client = Client(port, timeout=120)
    client.channel(1)
    client.qos(prefetch)
    client.call(1, commands.Basic.Consume(queue=stream, consumer_tag="gen",
                                          arguments={"x-stream-offset": "first"}),
                commands.Basic.ConsumeOk)
    counter = PatternCounter(body_frame_pattern(BODY))
    buf = bytearray(1 << 18)
    if client.buf:
        buf[:len(client.buf)] = client.buf
        counter.feed(buf, len(client.buf))
    sock = client.sock
    acked = 0
    t0 = time.monotonic()
    deadline = t0 + 600
    while counter.count < n and time.monotonic() < deadline:
        got = sock.recv_into(buf)
        if not got:
            raise RuntimeError("consumer: connection closed")
        counter.feed(buf, got)
        # tags are 1, 2, ... on the one channel: the count is the newest tag seen
        if counter.count - acked >= max(ack_every, 1):
            acked = counter.count
            sock.sendall(ack_frame(acked, multiple=True))
    elapsed = time.monotonic() - t0
    client.close()
    out.put(counter.count / elapsed)


def run_case(port: int, pids: list[int], stream: str, n: int, window: int = 1000,
             prefetch: int = 1000, ack_every: int = 0) -> dict[str, float]:
    """Publish then read ``n`` messages on ``stream`` (deleted after); msg/s and the broker's
    CPU ms per 1,000 messages of each phase."""
    ctx = mp.get_context("spawn")
    res: dict[str, float] = {}
    for phase, target, args in (("publish", _publish, (window,)),
                                ("read", _read, (prefetch, ack_every))):
        out = ctx.Queue()
        proc = ctx.Process(target=target, args=(port, stream, n, *args, out))
        cpu0 = cpu_seconds(pids)
        proc.start()
        res[f"{phase}_rate"] = round(out.get(timeout=900))
        proc.join(60)
        res[f"{phase}_cpu_ms_per_1k"] = round((cpu_seconds(pids) - cpu0) * 1e6 / n, 1)
    client = Client(port)
    client.channel(1)
    client.delete_queue(stream)
    client.close()
    return res
