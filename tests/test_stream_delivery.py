"""A stream's deliveries to an AMQP channel (Channel.deliver_many, in batches): what the client
sees is what one delivery at a time gave: tags, offsets, properties, bodies of any size, the
prefetch of the consumer and of the channel. In-process broker (sans-IO), no sockets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pamqp import commands
from pamqp.body import ContentBody
from pamqp.header import ContentHeader

import queue_store.stream_queue as stream_queue
from broker.broker import Broker
from broker.config import BrokerConfig
from broker.environment import BrokerEnvironment
from management.serializers import UnackedTotals
from tests.conftest import Client

STREAM = {"x-queue-type": "stream"}


@pytest.fixture
def client(tmp_path: Path) -> Client:
    """A client of a broker with storage (the stream's chunks are written after each batch
    of input; fsyncs and chunk reads inline) past the handshake, channel 1 open."""
    broker = Broker(BrokerConfig(data_dir=tmp_path), BrokerEnvironment(storage=True))
    return Client(broker).handshake().open_channel()


def _deliveries(client: Client, frames: list[Any]) -> list[tuple[int, dict[str, Any], bytes]]:
    """(delivery tag, headers, body) of each whole delivery among ``frames``."""
    out: list[tuple[int, dict[str, Any], bytes]] = []
    tag, headers, body, size = 0, {}, b"", 0
    for _, f in frames:
        if isinstance(f, commands.Basic.Deliver):
            tag = f.delivery_tag
        elif isinstance(f, ContentHeader):
            headers, body, size = f.properties.headers or {}, b"", f.body_size
            if not size:
                out.append((tag, headers, body))
        elif isinstance(f, ContentBody):
            body += f.value
            if len(body) == size:
                out.append((tag, headers, body))
    return out


def _drain(client: Client) -> list[Any]:
    """Every frame the broker sends until it has nothing more (zero-delay dispatches run)."""
    frames: list[Any] = []
    while True:
        client.broker.timers.run_due()
        got = client.read()
        if not got:
            return frames
        frames += got


@pytest.mark.parametrize("tail", [10_000, 4])  # from the tail cache / from the segment file
def test_a_catch_up_read_gets_every_message_as_published(client: Client, tail: int,
                                                          monkeypatch: Any) -> None:
    monkeypatch.setattr(stream_queue, "TAIL_CACHE", tail)
    client.declare_queue(1, "s", durable=True, arguments=STREAM)
    bodies = [b"m%d" % i for i in range(300)]
    bodies[7] = b"L" * 10_000  # more than one frame at frame_max 4096 (the client's below)
    bodies[8] = b""
    for i, body in enumerate(bodies):
        props = commands.Basic.Properties(headers={"h": i} if i % 2 else None,
                                          content_type="text/plain" if i % 3 else None)
        client.publish(1, "", "s", body, props)
    reader = Client(client.broker).handshake(frame_max=4096).open_channel()
    reader.qos(1, 1000)
    frames = reader.consume(1, "s", arguments={"x-stream-offset": "first"}) + _drain(reader)
    got = _deliveries(reader, frames)
    assert [b for _, _, b in got] == bodies
    assert [t for t, _, _ in got] == list(range(1, 301))
    assert [h["x-stream-offset"] for _, h, _ in got] == list(range(300))
    assert [h.get("h") for _, h, _ in got] == [i if i % 2 else None for i in range(300)]


def test_deliveries_stop_at_the_channel_prefetch_and_go_on_after_acks(client: Client) -> None:
    client.declare_queue(1, "s", durable=True, arguments=STREAM)
    for i in range(50):
        client.publish(1, "", "s", b"m%d" % i)
    reader = Client(client.broker).handshake().open_channel()
    reader.qos(1, 20)  # the consumer's
    reader.qos(1, 7, global_=True)  # the channel's
    got = _deliveries(reader, reader.consume(1, "s", arguments={"x-stream-offset": "first"})
                      + _drain(reader))
    assert [t for t, _, _ in got] == list(range(1, 8))
    # what the HTTP API counts as unacknowledged (the bodies of the 7 deliveries)
    stream = client.broker.vhosts["/"].queues["s"]
    assert UnackedTotals.collect(client.broker).bytes_of(stream) == sum(
        len(b"m%d" % i) for i in range(7))
    got = _deliveries(reader, reader.ack(1, 5, multiple=True) + _drain(reader))
    assert [(t, b) for t, _, b in got] == [(t, b"m%d" % (t - 1)) for t in range(8, 13)]
