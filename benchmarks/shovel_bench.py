"""Shovel throughput, on demand: an on-confirm dynamic shovel moving N persistent 200-byte
messages from a durable queue to a durable queue, timed from the ``PUT`` of the parameter
until the destination holds all N (passive declares every 0.1 s).

Pairs, in one run:

1. amqpq -> amqpq, the shovel in the source amqpq;
2. RabbitMQ -> amqpq, the shovel in amqpq (the migration case);
3. amqpq -> amqpq, RabbitMQ's own shovel (running in the reference RabbitMQ);
4. RabbitMQ -> amqpq, RabbitMQ's own shovel.

The reference RabbitMQ is the one ``make reference-rabbitmq`` starts (127.0.0.1:5672, HTTP
15672, shovel plugin enabled); without it only pair 1 runs.

    python -m benchmarks.shovel_bench                 # 100,000 messages per pair
    python -m benchmarks.shovel_bench --messages 20000 --prefetch 1000
    python -m benchmarks.shovel_bench --link-only     # the link alone, in this process

``--link-only`` runs :class:`links.link.Link` between two amqpq brokers in this process
(no broker shares its loop) and prints its rate, its CPU time per message and the median of
its in-flight window (received, not yet settled; sampled every 50 ms): a window far below
the prefetch with the CPU near a core means the link is CPU-bound, a full one that it waits
for confirms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiormq

from tests.support.broker_process import BrokerProcess, free_port
from tests.support.http import http as support_http

RABBIT_AMQP = "amqp://guest:guest@127.0.0.1:5672/%2F"
RABBIT_HTTP = "http://127.0.0.1:15672"


def http(base: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """:func:`tests.support.http.http`, with ``(0, None)`` when nothing listens."""
    try:
        return support_http(base, method, path, body)
    except OSError:
        return 0, None


async def fill(url: str, queue: str, n: int) -> None:
    """Declare ``queue`` (durable, emptied) and publish ``n`` persistent 200-byte messages
    with pipelined confirms."""
    conn = await aiormq.connect(url)
    ch = await conn.channel()
    await ch.queue_declare(queue, durable=True)
    await ch.queue_purge(queue)
    props = aiormq.spec.Basic.Properties(delivery_mode=2)
    body = b"x" * 200
    for start in range(0, n, 2000):
        await asyncio.gather(*(ch.basic_publish(body, routing_key=queue, properties=props)
                               for _ in range(min(2000, n - start))))
    await conn.close()


async def count(url: str, queue: str) -> int:
    conn = await aiormq.connect(url)
    try:
        ch = await conn.channel()
        ok = await ch.queue_declare(queue, passive=True)
        return int(ok.message_count or 0)
    except aiormq.exceptions.ChannelNotFoundEntity:
        return 0
    finally:
        await conn.close()


async def prepare_dest(url: str, queue: str) -> None:
    conn = await aiormq.connect(url)
    ch = await conn.channel()
    await ch.queue_declare(queue, durable=True)
    await ch.queue_purge(queue)
    await conn.close()


def run_pair(label: str, runner_http: str, src_url: str, src_uri: str, dest_url: str,
             dest_uri: str, n: int, prefetch: int) -> float:
    """Fill the source, start the shovel on ``runner_http``, wait; returns msg/s."""
    queue_src, queue_dst = "bench-shovel-src", "bench-shovel-dst"
    asyncio.run(fill(src_url, queue_src, n))
    asyncio.run(prepare_dest(dest_url, queue_dst))
    value = {"src-uri": src_uri, "src-queue": queue_src, "dest-uri": dest_uri,
             "dest-queue": queue_dst, "ack-mode": "on-confirm",
             "src-prefetch-count": prefetch}
    started = time.monotonic()
    status, _ = http(runner_http, "PUT", "/api/parameters/shovel/%2F/bench", {"value": value})
    assert status in (201, 204), status
    try:
        while asyncio.run(count(dest_url, queue_dst)) < n:
            time.sleep(0.1)
            if time.monotonic() - started > 1800:
                raise TimeoutError(label)
        elapsed = time.monotonic() - started
    finally:
        http(runner_http, "DELETE", "/api/parameters/shovel/%2F/bench")
    rate = n / elapsed
    print(f"{label:<58} {n:>9,} msgs {elapsed:8.2f} s {rate:>10,.0f} msg/s", flush=True)
    return rate


async def link_only(src_url: str, dest_url: str, n: int, prefetch: int) -> None:
    """Move ``n`` messages with a bare :class:`links.link.Link`; print rate, CPU per
    message (µs, this process) and the median in-flight window."""
    from links.link import Link, Source, Target

    await fill(src_url, "bench-link-src", n)
    await prepare_dest(dest_url, "bench-link-dst")

    async def source_setup(conn: Any) -> tuple[Any, str, int]:
        ch = await conn.channel()
        ok = await ch.queue_declare("bench-link-src", passive=True)
        return ch, "bench-link-src", int(ok.message_count or 0)

    async def target_setup(conn: Any) -> Any:
        return await conn.channel(publisher_confirms=True)

    link = Link(Source(src_url, source_setup, prefetch=prefetch),
                Target(dest_url, target_setup,
                       lambda m: ("", "bench-link-dst", m.header.properties)), limit=n)
    window: list[int] = []

    async def sample() -> None:
        while True:
            await asyncio.sleep(0.05)
            window.append(link.received - link.moved)

    sampler = asyncio.ensure_future(sample())
    cpu0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    await link.run()
    elapsed, cpu1 = time.monotonic() - t0, resource.getrusage(resource.RUSAGE_SELF)
    sampler.cancel()
    cpu = cpu1.ru_utime - cpu0.ru_utime + cpu1.ru_stime - cpu0.ru_stime
    print(f"link alone: {n:,} msgs {elapsed:.2f} s {n / elapsed:,.0f} msg/s, CPU "
          f"{cpu / n * 1e6:.0f} us/msg ({cpu / elapsed:.0%} of a core), in flight median "
          f"{statistics.median(window or [0]):.0f} of {prefetch}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--prefetch", type=int, default=1000)
    p.add_argument("--link-only", action="store_true",
                   help="run the link alone in this process between two amqpq brokers")
    a = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="shovel-bench-"))
    http_a, http_b = free_port(), free_port()
    a_proc = BrokerProcess(tmp / "a", tmp / "a.log", management=http_a)
    b_proc = BrokerProcess(tmp / "b", tmp / "b.log", management=http_b)
    a_proc.start()
    b_proc.start()
    results: dict[str, float] = {}
    try:
        a_url = f"amqp://guest:guest@127.0.0.1:{a_proc.port}/%2F"
        b_url = f"amqp://guest:guest@127.0.0.1:{b_proc.port}/%2F"
        a_http, b_http = f"http://127.0.0.1:{http_a}", f"http://127.0.0.1:{http_b}"
        if a.link_only:
            asyncio.run(link_only(a_url, b_url, a.messages, a.prefetch))
            return
        results["amqpq->amqpq (amqpq shovel)"] = run_pair(
            "1 amqpq -> amqpq, shovel in amqpq", a_http, a_url, "amqp://", b_url, b_url,
            a.messages, a.prefetch)
        if http(RABBIT_HTTP, "GET", "/api/shovels")[0] != 200:
            print("reference RabbitMQ (with rabbitmq_shovel) not reachable: pairs 2-4 "
                  "skipped (make reference-rabbitmq)")
            return
        results["rabbitmq->amqpq (amqpq shovel)"] = run_pair(
            "2 RabbitMQ -> amqpq, shovel in amqpq", b_http, RABBIT_AMQP, RABBIT_AMQP,
            b_url, "amqp://", a.messages, a.prefetch)
        results["amqpq->amqpq (RabbitMQ shovel)"] = run_pair(
            "3 amqpq -> amqpq, RabbitMQ's shovel", RABBIT_HTTP, a_url, a_url, b_url, b_url,
            a.messages, a.prefetch)
        results["rabbitmq->amqpq (RabbitMQ shovel)"] = run_pair(
            "4 RabbitMQ -> amqpq, RabbitMQ's shovel", RABBIT_HTTP, RABBIT_AMQP, "amqp://",
            b_url, b_url, a.messages, a.prefetch)
    finally:
        a_proc.close()
        b_proc.close()
        out = Path(__file__).parent / "results" / "shovel.json"
        if not a.link_only:
            out.write_text(json.dumps({"messages": a.messages, "prefetch": a.prefetch,
                                       "msg_per_s": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
