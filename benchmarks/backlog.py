"""Backlog scenario: publish N transient 200-byte messages to one queue with no consumer,
record the broker's peak RSS, then drain with a no-ack consumer.

Usage: python benchmarks/backlog.py PORT BROKER_PID [N]   (on demand; bounded by N and 300 s)
"""

from __future__ import annotations

import asyncio
import sys
import time

from pamqp import commands, frame, header
from pamqp.body import ContentBody

from benchmarks.quick_throughput import handshake


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def hwm_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


async def main(port: int, pid: int, count: int) -> None:
    pr, pw = await handshake(port)
    pw.write(frame.marshal(commands.Queue.Purge(queue="bench.q"), 1))
    body = b"x" * 200
    one = (frame.marshal(commands.Basic.Publish(exchange="", routing_key="bench.q"), 1)
           + frame.marshal(header.ContentHeader(0, len(body), commands.Basic.Properties()), 1)
           + frame.marshal(ContentBody(body), 1))
    batch = one * 1000
    t0 = time.perf_counter()
    for _ in range(count // 1000):
        pw.write(batch)
        await pw.drain()
    # a synchronous round trip: everything before it was processed
    pw.write(frame.marshal(commands.Queue.Declare(queue="bench.q", passive=True), 1))
    deadline = time.time() + 300
    data = b""
    while b"\x00\x32\x00\x0b" not in data and time.time() < deadline:  # Queue.DeclareOk
        data += await pr.read(65536)
    t_pub = time.perf_counter() - t0
    print(f"published {count} in {t_pub:.1f}s = {count / t_pub:,.0f} msg/s; "
          f"RSS {rss_mb(pid):.0f} MB, peak {hwm_mb(pid):.0f} MB")
    cr, cw = await handshake(port)
    cw.write(frame.marshal(commands.Basic.Consume(queue="bench.q", no_ack=True), 1))
    got = 0
    buf = b""
    t1 = time.perf_counter()
    while got < count and time.perf_counter() - t1 < 300:
        chunk = await cr.read(1 << 20)
        if not chunk:
            break
        buf += chunk
        pos = 0
        while len(buf) - pos >= 7:
            size = int.from_bytes(buf[pos + 3:pos + 7], "big")
            if len(buf) - pos < size + 8:
                break
            if buf[pos] == 2:
                got += 1
            pos += size + 8
        buf = buf[pos:]
    t_drain = time.perf_counter() - t1
    print(f"drained {got} in {t_drain:.1f}s = {got / t_drain:,.0f} msg/s; "
          f"peak RSS {hwm_mb(pid):.0f} MB")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]),
                     int(sys.argv[3]) if len(sys.argv) > 3 else 1_000_000))
