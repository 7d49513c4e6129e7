"""Dead lettering: x-death records, dead-letter routing key, cycles."""

from __future__ import annotations

import datetime

from pamqp import commands

from queue_store.dead_letter import dead_letter_message
from queue_store.message import Message
from queue_store.outcomes import Settlement
from tests.queue_features.support import (
    World,
    contents,
    death_view,
    dlx_setup,
    make_message,
    x_death,
)

# ================================================================================================
# Dead lettering: x-death, routing key, cycles
# ================================================================================================


def test_x_death_of_a_rejected_message(world: World) -> None:
    world.exchange("ex", "direct")
    dlx_setup(world)
    world.bind("q", "ex", "k")
    world.publish("k", b"m", exchange="ex", headers={"app": "kept"})
    world.consume("q", "c")
    world.settle(0, requeue=False)
    [dead] = world.drain("dead")
    headers = dead.headers
    assert headers["app"] == "kept"
    [death] = headers["x-death"]
    assert death_view(death) == {"count": 1, "reason": "rejected", "queue": "q",
                                 "exchange": "ex", "routing-keys": ["k"]}
    assert isinstance(death["time"], datetime.datetime)
    assert (headers["x-first-death-reason"], headers["x-first-death-queue"],
            headers["x-first-death-exchange"]) == ("rejected", "q", "ex")
    # 3.13 adds x-last-death-* (3.10 does not)
    assert (headers["x-last-death-reason"], headers["x-last-death-queue"],
            headers["x-last-death-exchange"]) == ("rejected", "q", "ex")
    # republished to the dead-letter exchange with the original routing key
    assert (dead.exchange, dead.routing_key) == ("dlx", "k")


def test_rejected_with_requeue_is_not_dead_lettered(world: World) -> None:
    dlx_setup(world)
    world.publish("q", b"m")
    world.consume("q", "c", prefetch=1)
    world.settle(0, requeue=True)
    assert world.queue("dead").message_count == 0
    assert len(world.channel.deliveries) == 2
    assert world.channel.deliveries[1][1].redelivered


def test_dead_letter_routing_key_replaces_the_routing_key(world: World) -> None:
    world.exchange("dlx", "direct")
    world.declare("dead")
    world.declare("other")
    world.bind("dead", "dlx", "dead-key")
    world.bind("other", "dlx", "q")
    world.declare("q", **{"x-dead-letter-exchange": "dlx",
                          "x-dead-letter-routing-key": "dead-key"})
    world.publish("q", b"m")
    world.consume("q", "c")
    world.settle(0, requeue=False)
    assert world.queue("other").message_count == 0
    [dead] = world.drain("dead")
    assert dead.routing_key == "dead-key"
    # x-death records the routing keys the message died with, not the new one
    assert x_death(dead)[0]["routing-keys"] == ["q"]


def test_dead_letter_to_the_default_exchange(world: World) -> None:
    world.declare("dead")
    world.declare("q", **{"x-dead-letter-exchange": "",
                          "x-dead-letter-routing-key": "dead", "x-message-ttl": 10})
    world.publish("q", b"m")
    world.advance(11)
    [dead] = world.drain("dead")
    assert x_death(dead)[0]["reason"] == "expired"
    assert dead.exchange == ""


def test_missing_dead_letter_exchange_drops_the_message(world: World) -> None:
    q = world.declare("q", **{"x-dead-letter-exchange": "nowhere", "x-message-ttl": 10})
    world.publish("q", b"m")
    world.advance(11)
    assert q.message_count == 0


def two_rejecting_queues(world: World) -> None:
    """q1 -dlx1-> q2 -dlx2-> q1, messages published to q1 through direct exchange ``ex``."""
    world.exchange("ex", "direct")
    world.exchange("dlx1", "fanout")
    world.exchange("dlx2", "fanout")
    world.declare("q1", **{"x-dead-letter-exchange": "dlx1"})
    world.declare("q2", **{"x-dead-letter-exchange": "dlx2"})
    world.bind("q1", "ex", "k")
    world.bind("q2", "dlx1")
    world.bind("q1", "dlx2")


def reject_head(world: World, queue: str) -> Message:
    """Take the head of ``queue`` with Basic.Get and reject it without requeue."""
    q = world.queue(queue)
    qm = q.get()
    assert qm is not None
    q.settle([(qm, q, None)], Settlement.REJECT)
    return qm.message


def test_repeat_deaths_increment_count_and_move_to_the_front(world: World) -> None:
    two_rejecting_queues(world)
    world.publish("k", b"m", exchange="ex")
    reject_head(world, "q1")
    reject_head(world, "q2")
    reject_head(world, "q1")
    [message] = world.drain("q2")
    deaths = x_death(message)
    assert [death_view(d) for d in deaths] == [
        # the (q1, rejected) record keeps its first exchange and routing keys
        {"count": 2, "reason": "rejected", "queue": "q1", "exchange": "ex", "routing-keys": ["k"]},
        {"count": 1, "reason": "rejected", "queue": "q2", "exchange": "dlx1",
         "routing-keys": ["k"]},
    ]
    headers = message.headers
    assert (headers["x-first-death-queue"], headers["x-first-death-reason"],
            headers["x-first-death-exchange"]) == ("q1", "rejected", "ex")
    # 3.13: x-last-death-* follow the latest death (the message came to q1 through dlx2)
    assert (headers["x-last-death-queue"], headers["x-last-death-reason"],
            headers["x-last-death-exchange"]) == ("q1", "rejected", "dlx2")


def test_a_different_reason_in_the_same_queue_is_a_new_record(world: World) -> None:
    # q1 (ttl) -> q2 -> q1 -> (expires) q2: deaths are kept per (queue, reason)
    world.declare("q1", **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "q2",
                           "x-message-ttl": 50})
    world.declare("q2", **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "q1"})
    world.publish("q1", b"m")
    reject_head(world, "q1")
    reject_head(world, "q2")
    world.advance(51)  # expires in q1; q2's rejection is in the cycle, so it is delivered
    [message] = world.drain("q2")
    assert [(d["queue"], d["reason"], d["count"]) for d in x_death(message)] == [
        ("q1", "expired", 1), ("q2", "rejected", 1), ("q1", "rejected", 1)]


def test_expiry_after_a_rejection_in_the_same_queue_is_an_automatic_cycle(world: World) -> None:
    # rejected in q -> back to q by its own routing key (allowed), then expires in q: the
    # latest hop q -> q is automatic, so 3.13 drops it (is_cycle_v2 / is_cycle_v1 agree)
    q = world.declare("q", **{"x-dead-letter-exchange": "", "x-message-ttl": 50})
    world.publish("q", b"m")
    reject_head(world, "q")
    assert q.message_count == 1
    world.advance(51)
    assert q.message_count == 0


def test_repeat_death_keeps_the_first_death_time() -> None:
    first = datetime.datetime(2024, 1, 1, 12, 0, 0, tzinfo=datetime.UTC)
    later = first + datetime.timedelta(minutes=5)
    message = make_message("q", b"m")
    once, _ = dead_letter_message(message, "rejected", "q", "", None, now=first)
    twice, _ = dead_letter_message(once, "rejected", "q", "", None, now=later)
    [death] = x_death(twice)
    assert death["count"] == 2
    assert death["time"] == first


def test_expired_dead_letter_cycle_is_dropped(world: World) -> None:
    # q dead-letters to the default exchange with its own name as routing key: a loop
    q = world.declare("q", **{"x-dead-letter-exchange": "", "x-message-ttl": 10})
    world.publish("q", b"m")
    world.advance(11)
    assert q.message_count == 0
    world.advance(100)
    assert q.message_count == 0


def test_expired_cycle_through_two_queues_is_dropped_on_return(world: World) -> None:
    world.declare("q1", **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "q2",
                           "x-message-ttl": 10})
    world.declare("q2", **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "q1",
                           "x-message-ttl": 10})
    world.publish("q1", b"m")
    world.advance(11)
    assert (world.queue("q1").message_count, world.queue("q2").message_count) == (0, 1)
    world.advance(11)  # expires in q2; q1 is in its history without a rejection: dropped
    assert (world.queue("q1").message_count, world.queue("q2").message_count) == (0, 0)


def test_rejected_dead_letter_loop_is_allowed(world: World) -> None:
    world.declare("q", **{"x-dead-letter-exchange": ""})
    world.publish("q", b"m")
    reject_head(world, "q")
    reject_head(world, "q")
    [message] = world.drain("q")
    assert [(d["queue"], d["reason"], d["count"]) for d in x_death(message)] == [
        ("q", "rejected", 2)]


def test_expired_after_rejection_in_the_cycle_is_not_dropped(world: World) -> None:
    # q1 (reject) -> q2 (expire) -> q1: a rejection in the cycle, so it is delivered
    world.declare("q1", **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "q2"})
    world.declare("q2", **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "q1",
                           "x-message-ttl": 10})
    world.publish("q1", b"m")
    reject_head(world, "q1")
    world.advance(11)
    [message] = world.drain("q1")
    assert [(d["queue"], d["reason"]) for d in x_death(message)] == [
        ("q2", "expired"), ("q1", "rejected")]


def test_x_death_on_the_wire(wired) -> None:
    _, _, wire = wired
    wire.send(1, commands.Exchange.Declare(exchange="dlx", exchange_type="fanout"))
    wire.send(1, commands.Queue.Declare(queue="dead"))
    wire.send(1, commands.Queue.Bind(queue="dead", exchange="dlx"))
    wire.send(1, commands.Queue.Declare(queue="q", arguments={"x-dead-letter-exchange": "dlx"}))
    wire.publish(1, "", "q", b"m", expiration="60000")
    [(get_ok, _, _)] = contents(wire.send(1, commands.Basic.Get(queue="q")))
    wire.send(1, commands.Basic.Reject(delivery_tag=get_ok.delivery_tag, requeue=False))
    [(_, props, body)] = contents(wire.send(1, commands.Basic.Get(queue="dead", no_ack=True)))
    assert body == b"m"
    assert props.expiration is None
    [death] = props.headers["x-death"]
    assert {k: v for k, v in death.items() if k != "time"} == {
        "count": 1, "reason": "rejected", "queue": "q", "exchange": "",
        "routing-keys": ["q"], "original-expiration": "60000"}
    assert isinstance(death["time"], datetime.datetime)


def test_x_death_field_types_on_the_wire(wired) -> None:
    _, _, wire = wired
    wire.send(1, commands.Queue.Declare(queue="dead"))
    wire.send(1, commands.Queue.Declare(queue="q", arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"}))
    wire.publish(1, "", "q", b"m")
    [(get_ok, _, _)] = contents(wire.send(1, commands.Basic.Get(queue="q")))
    wire.send(1, commands.Basic.Reject(delivery_tag=get_ok.delivery_tag, requeue=False))
    before = len(wire.raw)
    wire.send(1, commands.Basic.Get(queue="dead", no_ack=True))
    header = wire.raw[before + 1]  # GetOk, then the content header frame
    assert b"\x04timeT" in header  # timestamp
    assert b"\x05countl" in header  # long
