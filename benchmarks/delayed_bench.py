"""Benchmark of delayed messages (``x-delayed-message``): backlog memory and lateness.

On demand only (never part of the test run)::

    python -m benchmarks.delayed_bench                      # 1,000,000 held, 10,000/s due for 10 s
    python -m benchmarks.delayed_bench --backlog 200000 --rate 5000 --duration 5   # smaller

1. *Backlog*: a durable ``x-delayed-message`` exchange (``x-delayed-type: direct``) receives
   ``--backlog`` persistent 100-byte messages with ``x-delay`` one to two hours ahead (1,000
   distinct delays, so they spread over 1,000 one-second buckets). Reported: the broker's RSS
   (VmRSS) before and once the last publish is processed, and its peak (VmHWM).
2. *Lateness*, with that backlog still held: ``--rate`` messages per second fall due for
   ``--duration`` seconds. They are published ahead (in batches of 100, ``x-delay`` computed
   from the batch's send time, then a round trip), each body carrying its intended due time
   (wall-clock ms); a raw-socket consumer in another process (no-ack) records arrival − due.
   Because the broker reads a batch a little after it was sent, its own due time is at or
   after the intended one (by at most the batch's round trip, ``due_skew_p99_ms``): the
   figure is an upper bound of the lateness. Reported: p50/p99/max (ms).

RabbitMQ is not run: the reference broker here has no delayed-message plugin (the plugin
documents itself as unfit beyond a few hundred thousand delayed messages).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import struct
import time
from typing import Any

from pamqp import commands, frame, header

from benchmarks.brokers import Amqpq, status_kb
from tests.support.wire import Client, body_frame

EXCHANGE, QUEUE = "bench.delayed", "bench.delayed.q"
_DUE = struct.Struct(">Q")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Encoder:
    """Pre-encoded Basic.Publish + content header per x-delay value (cached)."""

    def __init__(self, body_size: int, persistent: bool) -> None:
        self.publish = frame.marshal(commands.Basic.Publish(exchange=EXCHANGE, routing_key="k"), 1)
        self.body_size = body_size
        self.persistent = persistent
        self._heads: dict[int, bytes] = {}

    def head(self, delay: int) -> bytes:
        out = self._heads.get(delay)
        if out is None:
            props = commands.Basic.Properties(headers={"x-delay": delay},
                                              delivery_mode=2 if self.persistent else 1)
            out = self.publish + frame.marshal(header.ContentHeader(0, self.body_size, props), 1)
            self._heads[delay] = out
        return out


def sync(client: Client) -> None:
    """A round trip: every publish sent before it has been processed by the broker."""
    client.call(1, commands.Queue.Declare(queue=QUEUE, passive=True), commands.Queue.DeclareOk)


def consumer_main(port: int, expected: int, time_limit: float, out: Any, ready: Any) -> None:
    """Consume ``expected`` messages (no-ack) and send arrival - due (ms) percentiles."""
    client = Client(port)
    client.channel(1)
    client.consume(QUEUE, no_ack=True, ctag="bench-delayed")
    ready.set()
    sock = client.sock
    sock.settimeout(1.0)
    data, client.buf = client.buf, b""
    hdr = struct.Struct(">BHI").unpack_from
    lates: list[int] = []
    deadline = time.monotonic() + time_limit
    while len(lates) < expected and time.monotonic() < deadline:
        try:
            chunk = sock.recv(1 << 18)
        except TimeoutError:
            continue
        arrived = now_ms()
        if not chunk:
            break
        data += chunk
        pos, end = 0, len(data)
        while end - pos >= 7:
            ftype, _ch, size = hdr(data, pos)
            if pos + 8 + size > end:
                break
            if ftype == 3 and size >= 8:
                lates.append(arrived - _DUE.unpack_from(data, pos + 7)[0])
            pos += 8 + size
        data = data[pos:]
    lates.sort()

    def pct(p: float) -> int | None:
        return lates[min(len(lates) - 1, int(p / 100 * len(lates)))] if lates else None

    out.put({"received": len(lates), "p50_ms": pct(50), "p99_ms": pct(99),
             "max_ms": lates[-1] if lates else None,
             "early": sum(1 for x in lates if x < 0)})
    client.close()


def run(backlog: int, rate: int, duration: float, lead: float) -> dict[str, Any]:
    broker = Amqpq()
    broker.start()
    pids = broker.pids
    result: dict[str, Any] = {"backlog": backlog, "rate": rate, "duration_s": duration}
    try:
        client = Client(broker.port)
        client.channel(1)
        client.call(1, commands.Exchange.Declare(
            exchange=EXCHANGE, exchange_type="x-delayed-message", durable=True,
            arguments={"x-delayed-type": "direct"}), commands.Exchange.DeclareOk)
        client.declare_queue(QUEUE)
        client.bind_many([(QUEUE, EXCHANGE, "k")])
        result["rss_start_mb"] = round(status_kb(pids, "VmRSS") / 1024, 1)

        # 1. the backlog, one to two hours ahead
        enc = Encoder(100, persistent=True)
        body = body_frame(b"b" * 100)
        batch = 1000
        chunks = [b"".join(enc.head(3_600_000 + ((j + i) % 1000) * 3600) + body
                           for i in range(batch)) for j in range(0, 1000, 100)]
        t0 = time.monotonic()
        sent = 0
        while sent < backlog:
            n = min(batch, backlog - sent)
            chunk = chunks[(sent // batch) % len(chunks)]
            client.sock.sendall(chunk if n == batch else
                                b"".join(enc.head(3_600_000) + body for _ in range(n)))
            sent += n
            if sent % 50_000 == 0:
                sync(client)
        sync(client)
        result["backlog_publish_s"] = round(time.monotonic() - t0, 1)
        time.sleep(2)
        result["rss_backlog_mb"] = round(status_kb(pids, "VmRSS") / 1024, 1)
        result["rss_peak_mb"] = round(status_kb(pids, "VmHWM") / 1024, 1)

        # 2. lateness: `rate` per second fall due for `duration` s, `lead` s from now
        n = int(rate * duration)
        queue_out: Any = mp.get_context("spawn").Queue()
        ready = mp.get_context("spawn").Event()
        con = mp.get_context("spawn").Process(
            target=consumer_main, args=(broker.port, n, lead + duration + 30, queue_out, ready))
        con.start()
        ready.wait(30)
        enc2 = Encoder(16, persistent=True)
        first_due = now_ms() + int(lead * 1000)
        t1 = time.monotonic()
        skews = []
        for start in range(0, n, 100):
            sent_at = now_ms()
            parts = []
            for i in range(start, min(start + 100, n)):
                due = first_due + (i * 1000) // rate
                parts.append(enc2.head(max(1, due - sent_at))
                             + body_frame(_DUE.pack(due) + b"p" * 8))
            client.sock.sendall(b"".join(parts))
            sync(client)  # the batch is processed: its due times are off by at most this
            skews.append(now_ms() - sent_at)
        skews.sort()
        result["due_skew_p99_ms"] = skews[int(0.99 * (len(skews) - 1))]
        result["lateness_publish_s"] = round(time.monotonic() - t1, 1)
        if now_ms() > first_due:
            result["warning"] = "publishing took longer than the lead: first messages late"
        result.update(queue_out.get(timeout=lead + duration + 60))
        con.join(10)
        result["rss_end_mb"] = round(status_kb(pids, "VmRSS") / 1024, 1)
        result["rss_peak_mb"] = round(status_kb(pids, "VmHWM") / 1024, 1)
        client.close()
    finally:
        broker.stop()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backlog", type=int, default=1_000_000)
    parser.add_argument("--rate", type=int, default=10_000, help="messages falling due per s")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of that rate")
    parser.add_argument("--lead", type=float, default=20.0,
                        help="seconds between the start of phase 2 and the first due time")
    args = parser.parse_args()
    print(json.dumps(run(args.backlog, args.rate, args.duration, args.lead), indent=1))


if __name__ == "__main__":
    main()
