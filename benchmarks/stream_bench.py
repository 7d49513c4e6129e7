"""Benchmark of stream queues, amqpq beside RabbitMQ (the reference on 127.0.0.1:5672, when up).

On demand only (never part of the test run)::

    python -m benchmarks.stream_bench                        # 1,000,000 messages, 10 s live
    python -m benchmarks.stream_bench --backlog 200000 --duration 5 --no-rabbitmq

1. *Publish*: ``--backlog`` 200-byte messages to one stream with confirms (a raw pipelined
   connection, ``--batch`` unconfirmed at most). Reported: msg/s.
2. *Catch-up read*: a consumer from ``first`` (prefetch 1,000, acks every 500) reads them all.
   Reported: msg/s.
3. *Live latency while an old reader catches up*: a publisher in its own process sends
   ``--rate`` msg/s for ``--duration`` s, each body carrying its send time; a live consumer
   (``x-stream-offset: next``, another process) records arrival − send. Run twice: alone,
   and while a third process reads the whole backlog from ``first`` (on amqpq those reads
   happen in a worker thread, so the live consumer should not wait for the disk). Reported:
   p50/p99/max ms of each run.

``--generator``: issue #32's case instead (what the three above missed; see
:mod:`benchmarks.stream_gen`): an independent generator process publishes ``--backlog``
persistent messages with a *sliding* confirm window of ``--batch`` and reads them back from
``first`` with prefetch 1,000 and multiple acks (after every socket read, or every
``--ack-every``), amqpq and RabbitMQ alternating ``--reps`` times; medians, ratios, and the
broker's CPU ms per 1,000 messages::

    python -m benchmarks.stream_bench --generator --backlog 300000 --reps 3
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import struct
import time
from typing import Any

import pika
from pamqp import commands

from benchmarks.brokers import Amqpq, RabbitMQ, port_open
from benchmarks.stream_gen import run_case
from tests.support.wire import Client, body_frame, publish_head

STREAM = "bench.stream"
_TS = struct.Struct(">d")


def _conn(port: int) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port,
                                                             heartbeat=0))


def publish(port: int, n: int, batch: int) -> float:
    """``n`` messages with confirms over a raw pipelined connection, ``batch`` in flight at
    most (one window, then wait for its confirms); msg/s."""
    conn = _conn(port)
    conn.channel().queue_declare(STREAM, durable=True, arguments={"x-queue-type": "stream"})
    conn.close()
    client = Client(port, timeout=120)
    client.channel(1)
    client.confirm_select()
    one = publish_head("", STREAM, 200) + body_frame(b"x" * 200)
    t0 = time.monotonic()
    sent = 0
    while sent < n:
        k = min(batch, n - sent)
        client.sock.sendall(one * k)
        sent += k
        while True:  # Basic.Ack (multiple) up to what was sent
            ack = client.expect(1, commands.Basic.Ack)
            if ack.delivery_tag >= sent:
                break
    rate = n / (time.monotonic() - t0)
    client.close()
    return rate


def read_all(port: int, n: int, out: Any = None) -> float:
    """Read ``n`` messages from ``first``; msg/s (also put on ``out``). Acks stop ``prefetch``
    short of ``n``, so nothing is in flight past it when the connection closes (pika rejects
    what it buffered then, and a stream refuses rejects)."""
    conn = _conn(port)
    ch = conn.channel()
    ch.basic_qos(prefetch_count=1000)
    got = [0]

    def on_message(c: Any, method: Any, _p: Any, _b: bytes) -> None:
        got[0] += 1
        if got[0] % 500 == 0 and got[0] <= n - 1000:
            c.basic_ack(method.delivery_tag, multiple=True)

    ch.basic_consume(STREAM, on_message, arguments={"x-stream-offset": "first"})
    t0 = time.monotonic()
    deadline = t0 + 600
    while got[0] < n and time.monotonic() < deadline:
        conn.process_data_events(0.05)
    rate = got[0] / (time.monotonic() - t0)
    conn.close()
    if out is not None:
        out.put(rate)
    return rate


def live_consumer(port: int, expected: int, seconds: float, out: Any, ready: Any) -> None:
    conn = _conn(port)
    ch = conn.channel()
    ch.basic_qos(prefetch_count=1000)
    lat: list[float] = []

    def on_message(c: Any, method: Any, _p: Any, body: bytes) -> None:
        lat.append((time.time() - _TS.unpack_from(body)[0]) * 1000)
        c.basic_ack(method.delivery_tag)

    ch.basic_consume(STREAM, on_message, arguments={"x-stream-offset": "next"})
    ready.set()
    deadline = time.monotonic() + seconds + 10
    while len(lat) < expected and time.monotonic() < deadline:
        conn.process_data_events(0.01)
    conn.close()
    out.put(lat)


def paced_publisher(port: int, rate: int, seconds: float) -> None:
    conn = _conn(port)
    ch = conn.channel()
    pad = b"x" * (200 - _TS.size)
    t0 = time.monotonic()
    for i in range(int(rate * seconds)):
        wait = t0 + i / rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        ch.basic_publish("", STREAM, _TS.pack(time.time()) + pad)
    conn.close()


def latency(port: int, rate: int, seconds: float, old_reader_of: int) -> dict[str, float]:
    ctx = mp.get_context("spawn")
    out, ready = ctx.Queue(), ctx.Event()
    expected = int(rate * seconds)
    consumer = ctx.Process(target=live_consumer, args=(port, expected, seconds, out, ready))
    consumer.start()
    ready.wait(30)
    time.sleep(0.5)
    reader = None
    if old_reader_of:
        reader = ctx.Process(target=read_all, args=(port, old_reader_of))
        reader.start()
        time.sleep(0.2)
    publisher = ctx.Process(target=paced_publisher, args=(port, rate, seconds))
    publisher.start()
    lat = sorted(out.get(timeout=seconds + 60))
    for p in (publisher, consumer, reader):
        if p is not None:
            p.join(120)
    if not lat:
        return {"received": 0}
    return {"received": len(lat), "p50_ms": round(lat[len(lat) // 2], 2),
            "p99_ms": round(lat[int(len(lat) * 0.99)], 2), "max_ms": round(lat[-1], 2)}


def run_one(port: int, args: argparse.Namespace) -> dict[str, Any]:
    res: dict[str, Any] = {"publish_rate": round(publish(port, args.backlog, args.batch))}
    res["read_rate"] = round(read_all(port, args.backlog))
    res["live_alone"] = latency(port, args.rate, args.duration, 0)
    res["live_with_old_reader"] = latency(port, args.rate, args.duration, args.backlog)
    conn = _conn(port)
    conn.channel().queue_delete(STREAM)
    conn.close()
    return res


def generator(args: argparse.Namespace) -> dict[str, Any]:
    """Issue #32's case, amqpq and RabbitMQ alternating; medians and amqpq/RabbitMQ ratios."""
    runs: dict[str, list[dict[str, float]]] = {"amqpq": [], "rabbitmq": []}
    rabbit = None
    if not args.no_rabbitmq and port_open(5672):
        rabbit = RabbitMQ()
        rabbit.start()
    for rep in range(args.reps):
        broker = Amqpq()
        broker.start()
        try:
            runs["amqpq"].append(run_case(broker.port, broker.pids, f"{STREAM}.{rep}",
                                          args.backlog, args.batch, 1000, args.ack_every))
        finally:
            broker.stop()
        if rabbit is not None:
            runs["rabbitmq"].append(run_case(5672, rabbit.pids, f"{STREAM}.{rep}",
                                             args.backlog, args.batch, 1000, args.ack_every))
        print(json.dumps({k: v[-1] for k, v in runs.items() if v}), flush=True)
    out: dict[str, Any] = {"runs": runs}
    for name, rs_ in runs.items():
        if rs_:
            out[name] = {k: sorted(r[k] for r in rs_)[len(rs_) // 2] for k in rs_[0]}
    if runs["rabbitmq"]:
        out["ratio"] = {k: round(out["amqpq"][k] / out["rabbitmq"][k], 2)
                        for k in ("publish_rate", "read_rate")}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backlog", type=int, default=1_000_000)
    p.add_argument("--batch", type=int, default=1000)
    p.add_argument("--rate", type=int, default=1000)
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--no-rabbitmq", action="store_true")
    p.add_argument("--generator", action="store_true",
                   help="issue #32's case (independent generator, sliding confirm window)")
    p.add_argument("--reps", type=int, default=3, help="--generator: repetitions")
    p.add_argument("--ack-every", type=int, default=0,
                   help="--generator: ack (multiple) every N deliveries; 0: every read")
    args = p.parse_args()
    if args.generator:
        print(json.dumps(generator(args), indent=2))
        return
    out: dict[str, Any] = {}
    broker = Amqpq()
    broker.start()
    try:
        out["amqpq"] = run_one(broker.port, args)
    finally:
        broker.stop()
    if not args.no_rabbitmq:
        if port_open(5672):
            out["rabbitmq"] = run_one(5672, args)
        else:
            out["rabbitmq"] = "not running on 127.0.0.1:5672"
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
