"""The shovel link's pieces without a broker: the coalescing writer (one write per loop turn,
order kept, flushed on drain and close) and the in-order settling of source deliveries (one
multiple ack per run, nacks in between, never a multiple ack over a nacked delivery)."""

from __future__ import annotations

import asyncio
from typing import Any

from links.link import Settler
from links.transport import CoalescingWriter


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


def test_coalescing_writer_delay_and_limit() -> None:
    async def run() -> None:
        inner = FakeWriter()
        w = CoalescingWriter(inner, delay=0.05, limit=10)  # type: ignore[arg-type]
        w.write(b"ab")
        await asyncio.sleep(0)
        assert inner.writes == []  # waits for the delay, not the end of the turn
        w.write(b"0123456789")  # the limit: out at once, in order
        assert inner.writes == [b"ab0123456789"]
        w.write(b"c")
        for _ in range(100):
            if inner.writes[-1] == b"c":
                break
            await asyncio.sleep(0.01)
        assert inner.writes == [b"ab0123456789", b"c"]

    asyncio.run(run())


class FakePublishChannel:
    """What BatchPublisher uses of an aiormq channel."""

    number = 3
    max_content_size = 4  # body frames of at most 4 bytes

    def __init__(self) -> None:
        self.delivery_tag = 0
        self.confirmations: dict[int, asyncio.Future[Any]] = {}
        self.write_queue: asyncio.Queue[Any] = asyncio.Queue()


def test_batch_publisher_frames_and_confirms() -> None:
    from aiormq.exceptions import DeliveryError
    from pamqp import commands as spec
    from pamqp import frame as pamqp_frame

    from links.transport import BatchPublisher

    async def run() -> None:
        ch = FakePublishChannel()
        results: list[tuple[str, bool]] = []
        errors: list[BaseException] = []
        pub = BatchPublisher(ch, True, errors.append)
        props = spec.Basic.Properties(delivery_mode=2)
        pub.publish(b"hello", "ex", "k1", props, lambda ok: results.append(("m1", ok)))
        pub.publish(b"", "", "q", props, lambda ok: results.append(("m2", ok)))
        pub.publish(b"x", "", "q", props, lambda ok: results.append(("m3", ok)))
        assert ch.write_queue.empty() and ch.delivery_tag == 3
        await asyncio.sleep(0)
        assert ch.write_queue.qsize() == 1  # one item for the turn
        payload = ch.write_queue.get_nowait().payload
        frames = []
        while payload:
            used, channel, frame = pamqp_frame.unmarshal(payload)
            payload = payload[used:]
            assert channel == 3
            frames.append(frame)
        names = [type(f).__name__ for f in frames]
        assert names == ["Publish", "ContentHeader", "ContentBody", "ContentBody",
                         "Publish", "ContentHeader", "Publish", "ContentHeader",
                         "ContentBody"]
        assert frames[0].exchange == "ex" and frames[0].routing_key == "k1"
        assert frames[2].value + frames[3].value == b"hello"
        assert frames[1].properties.message_id is None  # no id invented (RabbitMQ's shovel)
        assert results == []  # nothing settled before the broker answers
        ch.confirmations.pop(2).set_exception(DeliveryError(None, spec.Basic.Nack(2)))
        ch.confirmations.pop(1).set_result(spec.Basic.Ack(1))
        ch.confirmations.pop(3).cancel()  # the channel closed: never answered
        await asyncio.sleep(0)
        assert sorted(results) == [("m1", True), ("m2", False)] and errors == []

        unconfirmed = BatchPublisher(FakePublishChannel(), False, errors.append)
        unconfirmed.publish(b"x", "", "q", props, lambda ok: results.append(("m4", ok)))
        await asyncio.sleep(0)
        assert results[-1] == ("m4", True)  # on-publish: settled once written

    asyncio.run(run())
