"""Quick transient publish -> consume (auto-ack) throughput, raw pre-encoded frames.

Usage: python benchmarks/quick_throughput.py [port] [count]   (bounded: count messages, 60 s)
Runs on demand only; prints msgs/s for publish and for delivery.
"""

from __future__ import annotations

import asyncio
import sys
import time

from pamqp import commands, frame, header
from pamqp.body import ContentBody

HEADER = b"AMQP\x00\x00\x09\x01"


async def handshake(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(HEADER)
    buf = b""

    async def read_method():
        nonlocal buf
        while True:
            try:
                used, ch, value = frame.unmarshal(buf)
            except Exception:
                buf += await reader.read(65536)
                continue
            buf = buf[used:]
            return value

    await read_method()  # Start
    writer.write(frame.marshal(commands.Connection.StartOk(
        client_properties={}, mechanism="PLAIN", response="\0guest\0guest"), 0))
    await read_method()  # Tune
    writer.write(frame.marshal(commands.Connection.TuneOk(2047, 131072, 0), 0))
    writer.write(frame.marshal(commands.Connection.Open("/"), 0))
    await read_method()  # OpenOk
    writer.write(frame.marshal(commands.Channel.Open(), 1))
    await read_method()
    writer.write(frame.marshal(commands.Queue.Declare(queue="bench.q", auto_delete=False), 1))
    await read_method()
    return reader, writer


async def main(port: int, count: int) -> None:
    cr, cw = await handshake(port)
    cw.write(frame.marshal(commands.Queue.Purge(queue="bench.q"), 1))
    cw.write(frame.marshal(commands.Basic.Consume(queue="bench.q", no_ack=True), 1))
    pr, pw = await handshake(port)
    body = b"x" * 200
    one = (frame.marshal(commands.Basic.Publish(exchange="", routing_key="bench.q"), 1)
           + frame.marshal(header.ContentHeader(0, len(body), commands.Basic.Properties()), 1)
           + frame.marshal(ContentBody(body), 1))
    deliver_size = None
    received = 0
    done = asyncio.Event()
    t0 = time.perf_counter()

    async def consume() -> None:
        nonlocal received, deliver_size
        # deliver frame ~ 8+4+1+len(ctag)+8+1+2+1+7 ; count by header frames instead
        buf = b""
        while received < count:
            data = await cr.read(1 << 20)
            if not data:
                break
            buf += data
            pos = 0
            while len(buf) - pos >= 7:
                size = int.from_bytes(buf[pos + 3:pos + 7], "big")
                if len(buf) - pos < size + 8:
                    break
                if buf[pos] == 2:
                    received += 1
                pos += size + 8
            buf = buf[pos:]
        done.set()

    task = asyncio.create_task(consume())
    batch = one * 500
    sent = 0
    while sent < count:
        pw.write(batch)
        sent += 500
        await pw.drain()
    t_pub = time.perf_counter() - t0
    try:
        await asyncio.wait_for(done.wait(), 60)
    except TimeoutError:
        pass
    t_all = time.perf_counter() - t0
    task.cancel()
    print(f"published {sent} in {t_pub:.2f}s = {sent / t_pub:,.0f} msg/s; "
          f"received {received} in {t_all:.2f}s = {received / t_all:,.0f} msg/s")


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 5672
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 200_000
    asyncio.run(main(port, count))
