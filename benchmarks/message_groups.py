"""Message-group throughput: does a queue with ``x-group-by`` scale with its consumers?

Usage: python -m benchmarks.message_groups [--messages 2000] [--keys 1000] [--work-ms 5]
       [--consumers 1,2,4,8] [--prefetch 10] [--group-prefetch 0] [--plain]

A fresh amqpq process (free port, temporary data dir). For each consumer count N: the queue
is filled with ``--messages`` messages spread over ``--keys`` keys (header ``k``), then N
consumer processes (pika, prefetch ``--prefetch``), released together, each "process" every
message for ``--work-ms`` ms (a sleep) and ack it. Prints msg/s per N and the ratio to N x
one consumer's rate (the issue's target: >= 0.8 when keys >> consumers). ``--plain`` runs the
same against a queue without ``x-group-by`` for comparison.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import sys
import time
from typing import Any

import pika

from tests.support.broker_process import BrokerProcess

QUEUE = "bench.groups"


def _params(port: int) -> pika.ConnectionParameters:
    return pika.ConnectionParameters("127.0.0.1", port, heartbeat=0,
                                     credentials=pika.PlainCredentials("guest", "guest"))


def _consumer(port: int, prefetch: int, work_ms: float, total: int, done: Any, go: Any,
              ready: Any) -> None:
    conn = pika.BlockingConnection(_params(port))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=prefetch)
    ready.release()
    go.wait()
    for method, _props, _body in ch.consume(QUEUE, inactivity_timeout=0.05):
        if method is not None:
            time.sleep(work_ms / 1000)
            ch.basic_ack(method.delivery_tag)
            with done.get_lock():
                done.value += 1
        if done.value >= total:
            break
    conn.close()


def _fill(port: int, messages: int, keys: int, grouped: bool, group_prefetch: int) -> None:
    conn = pika.BlockingConnection(_params(port))
    ch = conn.channel()
    ch.queue_delete(QUEUE)
    args: dict[str, Any] = {}
    if grouped:
        args["x-group-by"] = "header:k"
        if group_prefetch:
            args["x-group-prefetch"] = group_prefetch
    ch.queue_declare(QUEUE, arguments=args)
    rnd = random.Random(1)
    for _ in range(messages):
        ch.basic_publish("", QUEUE, b"x" * 100,
                         pika.BasicProperties(headers={"k": f"key{rnd.randrange(keys)}"}))
    ch.queue_declare(QUEUE, passive=True)  # every publish is in
    conn.close()


def measure(port: int, n: int, args: argparse.Namespace, grouped: bool) -> float:
    """Messages per second with ``n`` consumers."""
    _fill(port, args.messages, args.keys, grouped, args.group_prefetch)
    ctx = mp.get_context("spawn")
    done, go, ready = ctx.Value("i", 0), ctx.Event(), ctx.Semaphore(0)
    procs = [ctx.Process(target=_consumer, args=(port, args.prefetch, args.work_ms,
                                                 args.messages, done, go, ready))
             for _ in range(n)]
    for p in procs:
        p.start()
    for _ in procs:
        ready.acquire()
    t0 = time.perf_counter()
    go.set()
    while done.value < args.messages:
        time.sleep(0.005)
    elapsed = time.perf_counter() - t0
    for p in procs:
        p.join(10)
    return args.messages / elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--work-ms", type=float, default=5.0)
    parser.add_argument("--consumers", default="1,2,4,8")
    parser.add_argument("--prefetch", type=int, default=10)
    parser.add_argument("--group-prefetch", type=int, default=0)
    parser.add_argument("--plain", action="store_true", help="also a queue without groups")
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.consumers.split(",")]
    with BrokerProcess() as broker:
        kinds = [("groups", True)] + ([("plain", False)] if args.plain else [])
        print(f"{args.messages} messages, {args.keys} keys, {args.work_ms} ms of work each,"
              f" prefetch {args.prefetch}, x-group-prefetch {args.group_prefetch}")
        for name, grouped in kinds:
            one = None
            for n in counts:
                rate = measure(broker.port, n, args, grouped)
                one = rate if n == 1 else one
                ratio = f"{rate / (n * one):.2f}" if one else "-"
                print(f"{name:6} consumers={n:2}  {rate:8.1f} msg/s  ratio to {n} x one: {ratio}")
                sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
