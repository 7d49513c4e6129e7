"""Soak: many connections with consumers doing mixed publish/consume/ack against a broker
subprocess for a bounded time; checks memory stays flat, file descriptors come back to the
baseline and latency stays bounded. Prints one line of figures per interval and a verdict.

    python fuzz/soak.py --seconds 300 --connections 1000        # what ``make soak`` runs
    python fuzz/soak.py --seconds 30 --connections 200           # a quick look

Each connection (asyncio, raw pre-encoded frames, heartbeats off) opens channel 1, declares
queue ``soak.<i mod queues>``, sets prefetch 10 and consumes it with acks (every 4th
connection no-ack); every connection publishes to the next queue at ``rate / connections``
messages a second. A body carries (sequence, publish time): every message is checked to
arrive once, and its latency (publish -> delivery) is measured. Every ``--churn`` of the
connections is closed each interval (half with Connection.Close, half by aborting the TCP
connection) and replaced, so that descriptors are freed under load too.

Every interval (10 s) it samples the broker's RSS (/proc/<pid>/status) and descriptors
(/proc/<pid>/fd) and prints throughput and p50/p99/max latency. At the end it stops
publishing, waits for the queues to drain, closes every connection and checks:

* RSS: the mean of the last three samples is within max(20 %, 40 MiB) of the first samples
  after the ramp-up;
* descriptors: back to the baseline (+2) after the clients are gone;
* latency: every interval's p99 under ``--p99-limit`` seconds;
* messages: none lost, none duplicated (acked ones), the broker alive.

Exit status 0 when all hold, 1 otherwise. It never runs longer than --seconds + 90 s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import resource
import statistics
import struct
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pamqp import commands  # noqa: E402

from tests.fuzz import broker_process as BP  # noqa: E402
from tests.fuzz import frames as F  # noqa: E402

INTERVAL = 10.0
_head = struct.Struct(">BHI")
_body = struct.Struct(">QQ")  # sequence, publish time (ns, this process's monotonic clock)
DELIVER = b"\x00\x3c\x00\x3c"
CONSUME_OK = b"\x00\x3c\x00\x15"


@dataclass
class Stats:
    published: int = 0
    delivered: int = 0
    duplicates: int = 0
    errors: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)  # this interval
    seen: set[int] = field(default_factory=set)
    outstanding: set[int] = field(default_factory=set)
    connects: int = 0
    closes: int = 0


class Client:
    """One AMQP connection: consumer of ``queue``, publisher to ``target``."""

    def __init__(self, port: int, queue: str, target: str, no_ack: bool, stats: Stats,
                 seq: list[int]) -> None:
        self.port, self.queue, self.target, self.no_ack = port, queue, target, no_ack
        self.stats, self.seq = stats, seq
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.closing = False
        self.task: asyncio.Task[None] | None = None
        self.unacked = 0
        self.last_tag = 0

    async def start(self) -> None:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        steps = F.handshake(heartbeat=0)
        self.writer.write(steps[0])
        await self._until(b"\x00\x0a\x00\x0a")
        self.writer.write(steps[1])
        await self._until(b"\x00\x0a\x00\x1e")
        self.writer.write(steps[2] + F.method(1, commands.Channel.Open)
                          + F.method(1, commands.Queue.Declare, queue=self.queue)
                          + F.method(1, commands.Basic.Qos, prefetch_count=10)
                          + F.method(1, commands.Basic.Consume, queue=self.queue,
                                     no_ack=self.no_ack))
        await self._until(CONSUME_OK)
        self.stats.connects += 1
        self.task = asyncio.create_task(self._read_loop())

    async def _until(self, marker: bytes) -> None:
        """Read frames until a method frame starting with ``marker``."""
        assert self.reader is not None
        while True:
            ftype, _, payload = await self._frame()
            if ftype == 1 and payload.startswith(marker):
                return
            if ftype == 1 and payload[:4] in (b"\x00\x0a\x00\x32", b"\x00\x14\x00\x28"):
                raise ConnectionError(f"closed during setup: {payload[:80]!r}")

    async def _frame(self) -> tuple[int, int, bytes]:
        assert self.reader is not None
        head = await self.reader.readexactly(7)
        ftype, channel, size = _head.unpack(head)
        data = await self.reader.readexactly(size + 1)
        return ftype, channel, data[:-1]

    async def _read_loop(self) -> None:
        stats = self.stats
        tag = 0
        try:
            while True:
                ftype, _, payload = await self._frame()
                if ftype == 1:
                    if payload.startswith(DELIVER):
                        n = payload[4]
                        tag = struct.unpack_from(">Q", payload, 5 + n)[0]
                    elif payload[:4] in (b"\x00\x0a\x00\x32", b"\x00\x14\x00\x28"):
                        if not self.closing:
                            stats.errors.append(f"{self.queue}: broker closed: "
                                                f"{payload[6:80]!r}")
                        return
                elif ftype == 3:
                    seq, sent_ns = _body.unpack_from(payload)
                    now = time.monotonic_ns()
                    stats.latencies.append((now - sent_ns) / 1e9)
                    stats.delivered += 1
                    if seq in stats.seen:
                        stats.duplicates += 1
                    stats.seen.add(seq)
                    stats.outstanding.discard(seq)
                    if not self.no_ack:
                        self.unacked += 1
                        self.last_tag = tag
                        if self.unacked >= 4 or random.random() < 0.3:
                            self._ack()
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            if not self.closing:
                stats.errors.append(f"{self.queue}: connection lost")

    def _ack(self) -> None:
        if self.writer is not None and self.unacked and not self.closing:
            self.writer.write(F.method(1, commands.Basic.Ack, delivery_tag=self.last_tag,
                                       multiple=True))
            self.unacked = 0

    def publish(self, pad: bytes) -> None:
        if self.writer is None or self.closing:
            return
        seq = self.seq[0]
        self.seq[0] += 1
        body = _body.pack(seq, time.monotonic_ns()) + pad
        self.writer.write(F.publish(1, "", self.target, body))
        self.stats.published += 1
        self.stats.outstanding.add(seq)

    def tick(self) -> None:
        self._ack()  # acks left below the batch size

    async def close(self, abort: bool = False) -> None:
        self._ack()
        self.closing = True
        self.stats.closes += 1
        if self.writer is None:
            return
        if abort:
            self.writer.transport.abort()
        else:
            with contextlib.suppress(OSError):
                self.writer.write(F.method(0, commands.Connection.Close, reply_code=200))
                await asyncio.wait_for(self.writer.drain(), 5)
            await asyncio.sleep(0.05)
            self.writer.close()
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(BaseException):
                await self.task


def raise_fd_limit(want: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(want, soft)
    target = max(soft, min(target, 1 << 20))
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def soak(args: argparse.Namespace, broker: BP.Broker) -> bool:
    stats = Stats()
    seq = [0]
    queues = max(1, args.connections // 10)
    rng = random.Random(args.seed)

    def make(i: int) -> Client:
        return Client(broker.port, f"soak.{i % queues}", f"soak.{(i + 1) % queues}",
                      no_ack=i % 4 == 3, stats=stats, seq=seq)

    fd_baseline = broker.fds()
    rss_baseline = broker.rss()
    print(f"[soak] broker pid {broker.pid}: baseline RSS {rss_baseline / 2**20:.1f} MiB, "
          f"{fd_baseline} fds; {args.connections} connections, {queues} queues, "
          f"{args.rate} msg/s, {args.seconds:.0f} s", flush=True)
    clients: list[Client] = []
    t0 = time.monotonic()
    for start in range(0, args.connections, 100):
        batch = [make(i) for i in range(start, min(start + 100, args.connections))]
        await asyncio.gather(*(c.start() for c in batch))
        clients.extend(batch)
    print(f"[soak] {len(clients)} connections up in {time.monotonic() - t0:.1f} s; RSS "
          f"{broker.rss() / 2**20:.1f} MiB, {broker.fds()} fds", flush=True)
    pad = os.urandom(args.body)
    samples: list[tuple[float, int, int]] = []
    p99s: list[float] = []
    deadline = time.monotonic() + args.seconds
    next_sample = time.monotonic() + INTERVAL
    last_pub = last_del = 0
    credit = 0.0
    next_index = args.connections
    last = time.monotonic()
    while time.monotonic() < deadline:
        await asyncio.sleep(0.02)
        now = time.monotonic()
        credit += args.rate * (now - last)
        last = now
        while credit >= 1:
            credit -= 1
            rng.choice(clients).publish(pad[:rng.randint(0, args.body)])
        if time.monotonic() >= next_sample:
            next_sample += INTERVAL
            for c in clients:
                c.tick()
            lat = stats.latencies
            stats.latencies = []
            rss, fds = broker.rss(), broker.fds()
            samples.append((time.monotonic() - t0, rss, fds))
            p99 = pct(lat, 0.99)
            p99s.append(p99)
            print(f"[soak] t={samples[-1][0]:5.0f}s RSS {rss / 2**20:7.1f} MiB fds {fds:5d} "
                  f"pub {(stats.published - last_pub) / INTERVAL:6.0f}/s del "
                  f"{(stats.delivered - last_del) / INTERVAL:6.0f}/s latency p50 "
                  f"{pct(lat, 0.5) * 1000:6.1f} ms p99 {p99 * 1000:6.1f} ms max "
                  f"{(max(lat) if lat else 0) * 1000:6.1f} ms conns {len(clients)} "
                  f"errors {len(stats.errors)}", flush=True)
            last_pub, last_del = stats.published, stats.delivered
            churn = int(len(clients) * args.churn)
            for k in range(churn):  # replace some connections: unacked ones are requeued
                # (ack-mode ones only: what a no-ack consumer had in flight is lost by design)
                acking = [j for j, c in enumerate(clients) if not c.no_ack]
                victim = clients.pop(rng.choice(acking))
                await victim.close(abort=k % 2 == 1)
                fresh = make(next_index)
                next_index += 1
                await fresh.start()
                clients.append(fresh)
    # drain: everything published must arrive (requeued deliveries of closed ones too)
    drain_deadline = time.monotonic() + 30
    while stats.outstanding and time.monotonic() < drain_deadline:
        for c in clients:
            c.tick()
        await asyncio.sleep(0.2)
    lost = len(stats.outstanding)
    for c in clients:
        c.tick()
    await asyncio.sleep(0.5)
    rss_loaded = broker.rss()
    await asyncio.gather(*(c.close() for c in clients))
    fd_deadline = time.monotonic() + 15
    while broker.fds() > fd_baseline + 2 and time.monotonic() < fd_deadline:
        await asyncio.sleep(0.2)
    fds_after = broker.fds()
    rss_after = broker.rss()
    # verdict
    ok = True
    rss_values = [r for _, r, _ in samples]
    peak = max(rss_values + [rss_loaded])
    print(f"[soak] published {stats.published}, delivered {stats.delivered} (redeliveries "
          f"{stats.duplicates}), lost {lost}; connections opened {stats.connects}, closed "
          f"{stats.closes}; peak RSS {peak / 2**20:.1f} MiB, after close "
          f"{rss_after / 2**20:.1f} MiB; fds baseline {fd_baseline}, after close {fds_after}")
    if len(rss_values) >= 4:
        first = statistics.mean(rss_values[1:3])
        last = statistics.mean(rss_values[-3:])
        allowed = max(0.2 * first, 40 * 2**20)
        flat = last - first <= allowed
        print(f"[soak] memory: {first / 2**20:.1f} MiB after ramp-up -> {last / 2**20:.1f} "
              f"MiB at the end ({'flat' if flat else 'GROWING'}, allowed +"
              f"{allowed / 2**20:.0f} MiB)")
        ok &= flat
    else:
        print("[soak] memory: too few samples to judge (run >= 40 s)")
    if fds_after > fd_baseline + 2:
        print(f"[soak] FD LEAK: {fds_after - fd_baseline} descriptors not freed")
        ok = False
    worst = max(p99s) if p99s else 0.0
    print(f"[soak] latency: worst interval p99 {worst * 1000:.1f} ms (limit "
          f"{args.p99_limit * 1000:.0f} ms)")
    ok &= worst <= args.p99_limit
    if lost:
        print(f"[soak] LOST {lost} messages")
        ok = False
    if stats.errors:
        print(f"[soak] {len(stats.errors)} client errors, first: {stats.errors[:3]}")
        ok = False
    if not broker.alive():
        print("[soak] the broker died")
        ok = False
    print(f"[soak] {'PASS' if ok else 'FAIL'}", flush=True)
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--rate", type=int, default=2000, help="messages published a second")
    parser.add_argument("--body", type=int, default=512, help="largest padding per body")
    parser.add_argument("--churn", type=float, default=0.02,
                        help="fraction of connections replaced each interval")
    parser.add_argument("--p99-limit", type=float, default=1.0, help="seconds")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    limit = raise_fd_limit(args.connections * 2 + 256)  # the broker inherits it
    if limit < args.connections + 64:
        raise SystemExit(f"fd limit {limit} is too low for {args.connections} connections")
    with tempfile.TemporaryDirectory() as tmp, BP.running(Path(tmp) / "data") as broker:
        try:
            import uvloop
        except ImportError:
            runner = asyncio.run
        else:
            runner = uvloop.run
        try:
            ok = runner(asyncio.wait_for(soak(args, broker), args.seconds + 90))
        except TimeoutError:
            print("[soak] FAIL: did not finish in time")
            ok = False
        if not ok:
            print("[soak] broker log tail:\n" + broker.log()[-2000:])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
