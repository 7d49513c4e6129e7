"""Single active consumer and consumer cancel notification (Basic.Cancel from the broker)."""

from __future__ import annotations

from typing import Any

from pamqp import commands

from broker.broker import Broker
from broker.config import BrokerConfig
from broker.environment import BrokerEnvironment
from tests.queue_features.support import (
    FakeClock,
    Wire,
    World,
    contents,
    methods,
)

# ================================================================================================
# Single active consumer
# ================================================================================================


def test_single_active_consumer_only_the_first_consumer_gets_messages(world: World) -> None:
    world.declare("q", **{"x-single-active-consumer": True})
    world.consume("q", "first")
    world.consume("q", "second")
    for i in range(4):
        world.publish("q", f"m{i}".encode())
    assert world.channel.bodies("first") == [b"m0", b"m1", b"m2", b"m3"]
    assert world.channel.bodies("second") == []


def test_single_active_consumer_next_in_line_takes_over_after_cancel(world: World) -> None:
    world.declare("q", **{"x-single-active-consumer": True})
    first = world.consume("q", "first", prefetch=1)
    world.consume("q", "second")
    world.consume("q", "third")
    for i in range(3):
        world.publish("q", f"m{i}".encode())
    # the active consumer is blocked by its prefetch; the others still get nothing
    assert world.channel.bodies("first") == [b"m0"]
    assert world.channel.bodies("second") == []
    q = world.queue("q")
    q.remove_consumer(first)
    # the hand-over waits until the old active consumer's delivery is settled, so the next
    # consumer sees the messages in order (what RabbitMQ shows pika, see the interop test)
    assert world.channel.bodies("second") == []
    world.settle(0, requeue=True)
    assert world.channel.bodies("second") == [b"m0", b"m1", b"m2"]
    assert world.channel.bodies("third") == []
    assert world.channel.deliveries[-3][1].redelivered


def sac_over_the_wire(wire: Wire) -> list[tuple[int, Any]]:
    """SAC queue; 'first' on channel 2 (prefetch 1) holds m1 unacked, 'second' on channel 3
    waits; m1..m3 published on channel 1. Returns what closing channel 2 produced."""
    wire.open(2).open(3)
    wire.send(1, commands.Queue.Declare(queue="q", arguments={"x-single-active-consumer": True}))
    wire.send(2, commands.Basic.Qos(prefetch_count=1))
    wire.send(2, commands.Basic.Consume(queue="q", consumer_tag="first"))
    wire.send(3, commands.Basic.Consume(queue="q", consumer_tag="second", no_ack=True))
    delivered = []
    for body in (b"m1", b"m2", b"m3"):
        delivered += contents(wire.publish(1, "", "q", body))
    assert [(d.consumer_tag, b) for d, _, b in delivered] == [("first", b"m1")]
    return wire.send(2, commands.Channel.Close(reply_code=200, reply_text="bye",
                                                       class_id=0, method_id=0))


def test_single_active_consumer_channel_close_hands_everything_over(wired) -> None:
    _, _, wire = wired
    out = sac_over_the_wire(wire)
    got = contents(out)
    assert sorted(b for _, _, b in got) == [b"m1", b"m2", b"m3"]
    assert {d.consumer_tag for d, _, _ in got} == {"second"}
    assert {b: d.redelivered for d, _, b in got} == {b"m1": True, b"m2": False, b"m3": False}


def test_single_active_consumer_channel_close_requeues_before_handing_over(wired) -> None:
    _, _, wire = wired
    out = sac_over_the_wire(wire)
    assert [b for _, _, b in contents(out)] == [b"m1", b"m2", b"m3"]


def test_without_single_active_consumer_consumers_share_round_robin(world: World) -> None:
    world.declare("q")
    world.consume("q", "a")
    world.consume("q", "b")
    for i in range(4):
        world.publish("q", f"m{i}".encode())
    assert world.channel.bodies("a") == [b"m0", b"m2"]
    assert world.channel.bodies("b") == [b"m1", b"m3"]


# ================================================================================================
# Consumer cancel notification
# ================================================================================================


def test_queue_delete_cancels_consumers_with_basic_cancel(wired) -> None:
    _, _, wire = wired
    wire.open(2)
    wire.send(1, commands.Queue.Declare(queue="q"))
    wire.send(1, commands.Basic.Consume(queue="q", consumer_tag="c1"))
    out = wire.send(2, commands.Queue.Delete(queue="q"))
    [cancel] = methods(out, commands.Basic.Cancel)
    assert cancel.consumer_tag == "c1"
    assert [ch for ch, f in out if isinstance(f, commands.Basic.Cancel)] == [1]
    assert methods(out, commands.Channel.Close) == []
    # the tag is free again on that channel
    wire.send(1, commands.Queue.Declare(queue="q2"))
    out = wire.send(1, commands.Basic.Consume(queue="q2", consumer_tag="c1"))
    assert len(methods(out, commands.Basic.ConsumeOk)) == 1


def test_no_basic_cancel_without_the_client_capability() -> None:
    clock = FakeClock()
    broker = Broker(BrokerConfig(), BrokerEnvironment(clock=clock))
    wire = Wire(broker, clock, capabilities={"publisher_confirms": True}).open(1)
    wire.send(1, commands.Queue.Declare(queue="q"))
    wire.send(1, commands.Basic.Consume(queue="q", consumer_tag="c1"))
    out = wire.send(1, commands.Queue.Delete(queue="q"))
    assert methods(out, commands.Basic.Cancel) == []
    assert len(methods(out, commands.Queue.DeleteOk)) == 1


def test_x_expires_deletion_cancels_nothing_and_drops_bindings(world: World) -> None:
    world.exchange("fan", "fanout")
    world.declare("q", **{"x-expires": 100})
    world.bind("q", "fan")
    world.advance(101)
    assert "q" not in world.vhost.queues
    assert world.vhost.bindings() == []
    assert world.publish("", b"m", exchange="fan") == []
