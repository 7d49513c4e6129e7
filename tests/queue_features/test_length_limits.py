"""Length limits: x-max-length, x-max-length-bytes and x-overflow."""

from __future__ import annotations

from pamqp import commands

from queue_store.queue import ACCEPTED, REJECTED
from tests.queue_features.support import (
    World,
    contents,
    death_view,
    dlx_setup,
    methods,
    x_death,
)

# ================================================================================================
# Length limits (x-max-length, x-max-length-bytes, x-overflow)
# ================================================================================================


def test_max_length_drop_head_dead_letters_the_oldest_with_reason_maxlen(world: World) -> None:
    q = dlx_setup(world, **{"x-max-length": 2})
    for body in (b"m1", b"m2", b"m3"):
        assert world.publish("q", body) == [ACCEPTED]
    assert q.message_count == 2
    [dead] = world.drain("dead")
    assert dead.body == b"m1"
    assert death_view(x_death(dead)[0]) == {"count": 1, "reason": "maxlen", "queue": "q",
                                            "exchange": "", "routing-keys": ["q"]}
    assert world.bodies("q") == [b"m2", b"m3"]


def test_max_length_bytes_counts_body_bytes_and_drops_from_the_head(world: World) -> None:
    q = dlx_setup(world, **{"x-max-length-bytes": 10})
    for body in (b"aaaa", b"bbbb", b"cccc"):
        world.publish("q", body)
    assert q.message_count == 2  # 12 bytes > 10: the oldest goes
    world.publish("q", b"0123456789")  # 18 bytes: both older ones go, 10 bytes stay
    assert world.bodies("q") == [b"0123456789"]
    dead = world.drain("dead")
    assert [m.body for m in dead] == [b"aaaa", b"bbbb", b"cccc"]
    assert [x_death(m)[0]["reason"] for m in dead] == ["maxlen"] * 3


def test_max_length_zero_drops_everything_without_a_consumer(world: World) -> None:
    q = world.declare("q", **{"x-max-length": 0})
    world.publish("q", b"m")
    assert q.message_count == 0


def test_max_length_counts_only_ready_messages(world: World) -> None:
    q = world.declare("q", **{"x-max-length": 1})
    world.consume("q", "c", prefetch=1)
    world.publish("q", b"m1")  # delivered, unacknowledged
    world.publish("q", b"m2")  # ready: 1 <= 1
    assert q.message_count == 1
    world.publish("q", b"m3")  # ready: 2 > 1, m2 dropped
    assert world.channel.bodies() == [b"m1"]
    assert world.bodies("q") == [b"m3"]


def test_reject_publish_refuses_new_messages_and_keeps_the_old_ones(world: World) -> None:
    q = dlx_setup(world, **{"x-max-length": 2, "x-overflow": "reject-publish"})
    assert world.publish("q", b"m1") == [ACCEPTED]
    assert world.publish("q", b"m2") == [ACCEPTED]
    assert world.publish("q", b"m3") == [REJECTED]
    assert q.message_count == 2
    assert world.queue("dead").message_count == 0  # reject-publish does not dead-letter
    assert world.bodies("q") == [b"m1", b"m2"]
    assert world.publish("q", b"m4") == [ACCEPTED]  # room again


def test_reject_publish_dlx_dead_letters_the_refused_message(world: World) -> None:
    q = dlx_setup(world, **{"x-max-length": 1, "x-overflow": "reject-publish-dlx"})
    assert world.publish("q", b"m1") == [ACCEPTED]
    assert world.publish("q", b"m2") == [REJECTED]
    assert q.message_count == 1
    [dead] = world.drain("dead")
    assert dead.body == b"m2"
    assert death_view(x_death(dead)[0]) == {"count": 1, "reason": "maxlen", "queue": "q",
                                            "exchange": "", "routing-keys": ["q"]}


def test_reject_publish_by_bytes(world: World) -> None:
    world.declare("q", **{"x-max-length-bytes": 5, "x-overflow": "reject-publish"})
    assert world.publish("q", b"abc") == [ACCEPTED]
    assert world.publish("q", b"def") == [REJECTED]  # 6 bytes would not fit
    assert world.publish("q", b"de") == [ACCEPTED]  # 5 bytes fit
    assert world.bodies("q") == [b"abc", b"de"]


def test_reject_publish_nacks_the_publisher_under_confirms(wired) -> None:
    broker, _, wire = wired
    wire.send(1, commands.Confirm.Select())
    wire.send(1, commands.Queue.Declare(queue="q", arguments={
        "x-max-length": 1, "x-overflow": "reject-publish"}))
    assert [a.delivery_tag for a in methods(wire.publish(1, "", "q", b"m1"),
                                            commands.Basic.Ack)] == [1]
    out = wire.publish(1, "", "q", b"m2")
    assert methods(out, commands.Basic.Ack) == []
    [nack] = methods(out, commands.Basic.Nack)
    assert nack.delivery_tag == 2
    assert broker.vhosts["/"].queues["q"].message_count == 1
    [(_, _, body)] = contents(wire.send(1, commands.Basic.Get(queue="q", no_ack=True)))
    assert body == b"m1"


def test_reject_publish_nack_has_rabbitmq_requeue_flag(wired) -> None:
    _, _, wire = wired
    wire.send(1, commands.Confirm.Select())
    wire.send(1, commands.Queue.Declare(queue="q", arguments={
        "x-max-length": 0, "x-overflow": "reject-publish"}))
    [nack] = methods(wire.publish(1, "", "q", b"m"), commands.Basic.Nack)
    assert nack.requeue is True


def test_reject_publish_still_delivers_to_the_other_queues(wired) -> None:
    broker, _, wire = wired
    wire.send(1, commands.Confirm.Select())
    wire.send(1, commands.Exchange.Declare(exchange="fan", exchange_type="fanout"))
    wire.send(1, commands.Queue.Declare(queue="full", arguments={
        "x-max-length": 0, "x-overflow": "reject-publish"}))
    wire.send(1, commands.Queue.Declare(queue="open"))
    wire.send(1, commands.Queue.Bind(queue="full", exchange="fan"))
    wire.send(1, commands.Queue.Bind(queue="open", exchange="fan"))
    out = wire.publish(1, "fan", "", b"m")
    assert len(methods(out, commands.Basic.Nack)) == 1
    queues = broker.vhosts["/"].queues
    assert (queues["full"].message_count, queues["open"].message_count) == (0, 1)
