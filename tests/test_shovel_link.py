"""The shovel link's pieces without a broker: the coalescing writer (one write per loop turn,
order kept, flushed on drain and close) and the in-order settling of source deliveries (one
multiple ack per run, nacks in between, never a multiple ack over a nacked delivery)."""

from __future__ import annotations

import asyncio
from typing import Any

from shovel.link import Settler
from shovel.transport import CoalescingWriter


class FakeWriter:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.drained = 0

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    async def drain(self) -> None:
        self.drained += 1

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> Any:
        return f"info:{name}"


def test_coalescing_writer() -> None:
    async def run() -> FakeWriter:
        inner = FakeWriter()
        w = CoalescingWriter(inner)  # type: ignore[arg-type]
        w.write(b"a")
        w.write(b"b")
        assert inner.writes == []  # nothing before the loop turns
        await asyncio.sleep(0)
        assert inner.writes == [b"ab"]
        w.write(b"c")
        await w.drain()  # drain flushes first
        assert inner.writes == [b"ab", b"c"] and inner.drained == 1
        w.write(b"d")
        w.close()
        assert inner.writes[-1] == b"d" and inner.closed
        assert w.get_extra_info("peername") == "info:peername"  # the rest is delegated
        return inner

    asyncio.run(run())


class FakeChannel:
    is_closed = False

    def __init__(self) -> None:
        self.frames: list[tuple[str, int, bool]] = []

    async def basic_ack(self, tag: int, multiple: bool = False, wait: bool = True) -> None:
        self.frames.append(("ack", tag, multiple))

    async def basic_nack(self, tag: int, multiple: bool = False, requeue: bool = True,
                         wait: bool = True) -> None:
        self.frames.append(("nack", tag, requeue))


def test_acker_settles_in_order() -> None:
    async def run() -> list[tuple[str, int, bool]]:
        ch = FakeChannel()
        acker = Settler(ch)  # type: ignore[arg-type]
        for tag in range(1, 8):
            acker.received(tag)
        acker.ack(2)  # 1 not settled yet: nothing may go out
        await acker.drain()
        assert ch.frames == []
        acker.ack(1)
        acker.ack(3)
        acker.nack(4)
        acker.ack(5)
        acker.ack(7)  # 6 missing: 7 waits
        await acker.drain()
        assert ch.frames == [("ack", 3, True), ("nack", 4, True), ("ack", 5, True)]
        acker.ack(6)
        await acker.drain()
        return ch.frames

    assert asyncio.run(run())[-1] == ("ack", 7, True)
