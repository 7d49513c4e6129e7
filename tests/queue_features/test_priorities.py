"""Priority queues (x-max-priority) and consumer priorities (x-priority)."""

from __future__ import annotations

from pamqp import commands

from tests.queue_features.support import (
    World,
    methods,
)

# ================================================================================================
# Priority queues (x-max-priority)
# ================================================================================================


def test_priority_queue_delivers_higher_priority_first_fifo_within(world: World) -> None:
    world.declare("q", **{"x-max-priority": 5})
    for body, priority in ((b"a0", 0), (b"b3", 3), (b"c5", 5), (b"d3", 3), (b"e1", 1),
                           (b"f5", 5)):
        world.publish("q", body, priority=priority)
    world.publish("q", b"g-none")  # no priority property: 0
    assert world.bodies("q") == [b"c5", b"f5", b"b3", b"d3", b"e1", b"a0", b"g-none"]


def test_priority_above_max_is_capped_to_max(world: World) -> None:
    world.declare("q", **{"x-max-priority": 3})
    world.publish("q", b"three", priority=3)
    world.publish("q", b"nine", priority=9)  # same level as 3, so after "three"
    world.publish("q", b"two", priority=2)
    assert world.bodies("q") == [b"three", b"nine", b"two"]


def test_without_max_priority_the_priority_property_is_ignored(world: World) -> None:
    world.declare("q")
    world.publish("q", b"low", priority=0)
    world.publish("q", b"high", priority=9)
    assert world.bodies("q") == [b"low", b"high"]


def test_priority_order_to_a_consumer_and_after_requeue(world: World) -> None:
    world.declare("q", **{"x-max-priority": 10})
    world.publish("q", b"low", priority=1)
    world.publish("q", b"high", priority=8)
    world.consume("q", "c", prefetch=1)
    assert world.channel.bodies() == [b"high"]
    world.settle(0, requeue=True)  # back at its place: still first
    assert world.channel.bodies() == [b"high", b"high"]
    world.settle(1)
    assert world.channel.bodies() == [b"high", b"high", b"low"]


def test_priority_queue_drop_head_drops_the_next_message_to_deliver(world: World) -> None:
    world.declare("q", **{"x-max-priority": 5, "x-max-length": 2})
    world.publish("q", b"low", priority=1)
    world.publish("q", b"high", priority=5)
    world.publish("q", b"mid", priority=3)
    # the head (what would be delivered next) is dropped: here the highest priority one
    assert world.bodies("q") == [b"mid", b"low"]


# ================================================================================================
# Consumer priorities (x-priority)
# ================================================================================================


def test_higher_priority_consumer_gets_everything_while_it_can_take(world: World) -> None:
    world.declare("q")
    world.consume("q", "low", priority=1)
    world.consume("q", "high", priority=10)
    for i in range(3):
        world.publish("q", f"m{i}".encode())
    assert world.channel.bodies("high") == [b"m0", b"m1", b"m2"]
    assert world.channel.bodies("low") == []


def test_lower_priority_consumer_gets_messages_when_higher_is_blocked(world: World) -> None:
    world.declare("q")
    world.consume("q", "high", prefetch=1, priority=10)
    world.consume("q", "low", prefetch=10, priority=0)
    for i in range(3):
        world.publish("q", f"m{i}".encode())
    assert world.channel.bodies("high") == [b"m0"]
    assert world.channel.bodies("low") == [b"m1", b"m2"]
    world.settle(0)  # high acks: it can take again, and is preferred again
    world.publish("q", b"m3")
    assert world.channel.bodies("high") == [b"m0", b"m3"]


def test_negative_consumer_priority_ranks_below_the_default(world: World) -> None:
    world.declare("q")
    world.consume("q", "negative", priority=-5)
    world.consume("q", "default")
    world.publish("q", b"m")
    assert world.channel.bodies("default") == [b"m"]


def test_equal_priority_consumers_share_round_robin(world: World) -> None:
    world.declare("q")
    world.consume("q", "low", priority=0)
    world.consume("q", "a", priority=5)
    world.consume("q", "b", priority=5)
    for i in range(4):
        world.publish("q", f"m{i}".encode())
    assert world.channel.bodies("a") == [b"m0", b"m2"]
    assert world.channel.bodies("b") == [b"m1", b"m3"]
    assert world.channel.bodies("low") == []


def test_invalid_consumer_priority_is_refused(wired) -> None:
    _, _, wire = wired
    wire.send(1, commands.Queue.Declare(queue="q"))
    out = wire.send(1, commands.Basic.Consume(queue="q", arguments={"x-priority": "high"}))
    [close] = methods(out, commands.Channel.Close)
    assert close.reply_code == 406
    assert close.reply_text == ("PRECONDITION_FAILED - invalid arg 'x-priority' for queue 'q' "
                                "in vhost '/': \"expected integer, got longstr\"")
