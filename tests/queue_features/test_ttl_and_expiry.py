"""Message TTL (x-message-ttl, expiration) and queue expiry (x-expires)."""

from __future__ import annotations

import pytest
from pamqp import commands

from tests.queue_features.support import (
    World,
    contents,
    death_view,
    dlx_setup,
    text,
    x_death,
)

# ================================================================================================
# Message TTL (x-message-ttl, expiration)
# ================================================================================================


def test_queue_ttl_expires_message_and_dead_letters_it_with_reason_expired(world: World) -> None:
    q = dlx_setup(world, **{"x-message-ttl": 100})
    world.publish("q", b"hello")
    world.advance(99)
    assert q.message_count == 1
    assert world.queue("dead").message_count == 0
    world.advance(2)
    assert q.message_count == 0
    [dead] = world.drain("dead")
    assert dead.body == b"hello"
    [death] = x_death(dead)
    assert death_view(death) == {"count": 1, "reason": "expired", "queue": "q", "exchange": "",
                                 "routing-keys": ["q"]}
    assert dead.expiration is None  # no per-message TTL: no original-expiration either


def test_per_message_expiration_dead_letters_with_original_expiration(world: World) -> None:
    dlx_setup(world)
    world.publish("q", b"m", expiration="50")
    world.advance(49)
    assert world.queue("q").message_count == 1
    world.advance(2)
    [dead] = world.drain("dead")
    [death] = x_death(dead)
    assert death["reason"] == "expired"
    assert text(death["original-expiration"]) == "50"
    # the dead-lettered copy loses its expiration (it must not expire again downstream)
    assert dead.properties.expiration is None


@pytest.mark.parametrize(("queue_ttl", "expiration", "expires_after_ms"), [
    (100, "1000", 100),
    (1000, "30", 30),
    (100, "100", 100),
])
def test_the_lower_of_queue_ttl_and_message_expiration_applies(
        world: World, queue_ttl: int, expiration: str, expires_after_ms: int) -> None:
    q = dlx_setup(world, **{"x-message-ttl": queue_ttl})
    world.publish("q", b"m", expiration=expiration)
    world.advance(expires_after_ms - 1)
    assert q.message_count == 1
    world.advance(2)
    assert q.message_count == 0
    [dead] = world.drain("dead")
    # original-expiration is the message's own property, not the effective TTL
    assert text(x_death(dead)[0]["original-expiration"]) == expiration


def test_messages_expire_only_at_the_head_of_the_queue(world: World) -> None:
    q = dlx_setup(world)
    world.publish("q", b"long", expiration="10000")
    world.publish("q", b"short", expiration="10")
    world.advance(50)
    # classic queues expire from the head: "short" waits behind an unexpired message
    assert q.message_count == 2
    assert world.queue("dead").message_count == 0
    assert world.get("q").body == b"long"
    world.advance(0)
    assert q.message_count == 0
    assert [m.body for m in world.drain("dead")] == [b"short"]


def test_expired_messages_are_not_delivered_to_a_late_consumer(world: World) -> None:
    dlx_setup(world, **{"x-message-ttl": 100})
    world.publish("q", b"old")
    world.advance(150)
    world.publish("q", b"new")
    world.consume("q", "c")
    assert world.channel.bodies() == [b"new"]
    assert [m.body for m in world.drain("dead")] == [b"old"]


def test_expired_message_without_dead_letter_exchange_is_dropped(world: World) -> None:
    q = world.declare("q", **{"x-message-ttl": 10})
    world.publish("q", b"m")
    world.advance(11)
    assert q.message_count == 0
    assert world.get("q") is None


def test_ttl_zero_expires_at_once_when_no_consumer_can_take_it(world: World) -> None:
    q = dlx_setup(world, **{"x-message-ttl": 0})
    world.publish("q", b"nobody")  # no consumer
    assert q.message_count == 0
    world.consume("q", "c", prefetch=1)
    world.channel.open = False  # a consumer exists but cannot take a message now
    world.publish("q", b"blocked")
    assert q.message_count == 0
    assert world.channel.bodies() == []
    assert [m.body for m in world.drain("dead")] == [b"nobody", b"blocked"]


def test_ttl_zero_is_delivered_when_a_consumer_can_take_it_at_once(world: World) -> None:
    dlx_setup(world, **{"x-message-ttl": 0})
    world.consume("q", "c")
    world.publish("q", b"now")
    assert world.channel.bodies() == [b"now"]
    assert world.queue("dead").message_count == 0


def test_expiration_zero_is_delivered_when_a_consumer_can_take_it_at_once(world: World) -> None:
    dlx_setup(world)
    world.consume("q", "c")
    world.publish("q", b"now", expiration="0")
    assert world.channel.bodies() == [b"now"]
    assert world.queue("dead").message_count == 0


def test_requeued_message_keeps_its_original_deadline(world: World) -> None:
    dlx_setup(world, **{"x-message-ttl": 100})
    world.consume("q", "c", prefetch=1)
    world.publish("q", b"m")
    world.channel.open = False
    world.advance(60)
    world.settle(0, requeue=True)  # back in the queue; nobody can take it now
    world.advance(39)
    assert world.queue("q").message_count == 1
    world.advance(2)
    assert world.queue("q").message_count == 0
    assert [m.body for m in world.drain("dead")] == [b"m"]


def test_get_ok_message_count_excludes_expired_message_behind_the_head(wired) -> None:
    broker, clock, wire = wired
    wire.send(1, commands.Queue.Declare(queue="q"))
    wire.publish(1, "", "q", b"long", expiration="10000")
    wire.publish(1, "", "q", b"short", expiration="10")
    clock.now += 0.05
    broker.timers.run_due(clock.now)
    [(get_ok, _, body)] = contents(wire.send(1, commands.Basic.Get(queue="q", no_ack=True)))
    assert body == b"long"
    assert get_ok.message_count == 0


# ================================================================================================
# Queue expiry (x-expires)
# ================================================================================================


def test_x_expires_deletes_an_unused_queue(world: World) -> None:
    world.declare("q", **{"x-expires": 1000})
    world.publish("q", b"m")
    world.advance(999)
    assert "q" in world.vhost.queues
    world.advance(2)
    assert "q" not in world.vhost.queues


def test_x_expires_does_not_dead_letter_the_messages_of_the_expired_queue(world: World) -> None:
    dlx_setup(world, **{"x-expires": 100})
    world.publish("q", b"m")
    world.advance(101)
    assert "q" not in world.vhost.queues
    assert world.queue("dead").message_count == 0


def test_x_expires_is_reset_by_a_redeclare(world: World) -> None:
    world.declare("q", **{"x-expires": 1000})
    world.advance(600)
    world.declare("q", **{"x-expires": 1000})
    world.advance(600)
    assert "q" in world.vhost.queues
    world.advance(401)
    assert "q" not in world.vhost.queues


def test_x_expires_is_reset_by_a_passive_declare(world: World) -> None:
    world.declare("q", **{"x-expires": 1000})
    world.advance(600)
    world.vhost.declare_queue("q", passive=True)
    world.advance(600)
    assert "q" in world.vhost.queues
    world.advance(401)
    assert "q" not in world.vhost.queues


def test_x_expires_is_reset_by_basic_get(world: World) -> None:
    world.declare("q", **{"x-expires": 1000})
    world.advance(600)
    assert world.get("q") is None  # an empty Basic.Get counts as use too
    world.advance(600)
    assert "q" in world.vhost.queues
    world.advance(401)
    assert "q" not in world.vhost.queues


def test_x_expires_never_deletes_a_queue_with_consumers(world: World) -> None:
    world.declare("q", **{"x-expires": 1000})
    consumer = world.consume("q", "c")
    world.advance(5000)
    assert "q" in world.vhost.queues
    world.queue("q").remove_consumer(consumer)  # unused from now on
    world.advance(999)
    assert "q" in world.vhost.queues
    world.advance(2)
    assert "q" not in world.vhost.queues
