"""Message groups (``x-group-by``): each key's messages go to one consumer at a time in publish
order, different keys in parallel; requeues go back ahead of their key's later messages; TTL,
limits, paging, quorum queues, Basic.Get and the argument checks, on the sans-IO queue with
fake consumers (:mod:`tests.queue_features.support`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amqp_common.errors import PreconditionFailed
from broker.broker import Broker
from broker.config import BrokerConfig
from broker.environment import BrokerEnvironment
from management.group_stats import message_groups_json
from queue_store.consumer import Consumer
from queue_store.dedup_queue import DeduplicatingQueue
from queue_store.grouped_queue import GroupedDeduplicatingQueue, GroupedQueue
from queue_store.message_groups import GET_HOLDER, key_function, normal_key
from queue_store.outcomes import REJECTED, Settlement
from queue_store.queue import Queue
from queue_store.variable_queue import VariableQueue
from tests.queue_features.support import (
    FakeChannel,
    World,
    death_view,
    dlx_setup,
    make_message,
    x_death,
)


@pytest.fixture
def world() -> World:
    """One vhost whose timers run on a fake clock."""
    return World()


def grouped(world: World, name: str = "g", **args: Any) -> GroupedQueue:
    q = world.declare(name, **{"x-group-by": "header:k", **args})
    assert isinstance(q, GroupedQueue)
    return q


def pub(world: World, key: str | None, body: str, queue: str = "g", **props: Any) -> None:
    headers = {"k": key} if key is not None else {}
    assert world.publish(queue, body.encode(), headers=headers, **props) != []


def publish_all(world: World, spec: str, queue: str = "g") -> None:
    """``"a1 b1 a2"``: key ``a`` body ``a1``, ... (the key is the body's letter)."""
    for body in spec.split():
        pub(world, body[0], body, queue)


def got(ch: FakeChannel, tag: str | None = None) -> list[str]:
    return [b.decode() for b in ch.bodies(tag)]


def settle_all(consumer_channel: FakeChannel, tag: str, outcome: Settlement) -> None:
    """Settle every delivery ``tag`` got (as a channel close or Nack multiple does)."""
    deliveries = [(qm, q, c) for c, qm, q in consumer_channel.deliveries if c.tag == tag]
    deliveries[0][1].settle(deliveries, outcome)
    consumer_channel.deliveries = [d for d in consumer_channel.deliveries if d[0].tag != tag]


def ack(ch: FakeChannel, body: str) -> None:
    for i, (c, qm, q) in enumerate(ch.deliveries):
        if qm.message.body == body.encode():
            del ch.deliveries[i]
            q.settle([(qm, q, c)], Settlement.ACK)
            return
    raise AssertionError(f"{body} was not delivered")


def requeue(ch: FakeChannel, body: str) -> None:
    for i, (c, qm, q) in enumerate(ch.deliveries):
        if qm.message.body == body.encode():
            del ch.deliveries[i]
            q.settle([(qm, q, c)], Settlement.REQUEUE)
            return
    raise AssertionError(f"{body} was not delivered")


# ---- declaring ---------------------------------------------------------------------------


def test_group_queues_are_their_own_class_and_others_stay_plain(world: World) -> None:
    assert type(world.declare("plain")) is Queue
    assert type(world.declare("d", **{"x-message-deduplication": True})) is DeduplicatingQueue
    assert type(grouped(world)) is GroupedQueue
    assert type(world.declare("rk", **{"x-group-by": "routing-key"})) is GroupedQueue
    both = world.declare("gd", **{"x-group-by": "routing-key", "x-message-deduplication": True})
    assert type(both) is GroupedDeduplicatingQueue


WHAT = "invalid arg '{}' for queue 'g' in vhost '/': {}"


@pytest.mark.parametrize(("args", "key", "reason"), [
    ({"x-group-by": "body"}, "x-group-by",
     "\"unsupported group-by 'body': expected routing-key or header:<name>\""),
    ({"x-group-by": "header:"}, "x-group-by",
     "\"unsupported group-by 'header:': expected routing-key or header:<name>\""),
    ({"x-group-by": "header:" + "h" * 256}, "x-group-by",
     f"\"unsupported group-by 'header:{'h' * 256}': expected routing-key or header:<name>\""),
    ({"x-group-by": 5}, "x-group-by", "{unacceptable_type,signedint}"),
    ({"x-max-priority": 5, "x-group-by": "routing-key"}, "x-group-by",
     "{incompatible_with,'x-max-priority'}"),
    ({"x-group-prefetch": 1}, "x-group-prefetch", "group_prefetch_but_no_group_by_defined"),
    ({"x-group-by": "routing-key", "x-group-prefetch": -1}, "x-group-prefetch",
     "{value_negative,-1}"),
    ({"x-group-by": "routing-key", "x-group-prefetch": "1"}, "x-group-prefetch",
     '"expected integer, got longstr"'),
])
def test_bad_arguments_are_406_with_a_rabbitmq_style_text(
        world: World, args: dict[str, Any], key: str, reason: str) -> None:
    with pytest.raises(PreconditionFailed) as err:
        world.declare("g", **args)
    assert str(err.value) == WHAT.format(key, reason)
    assert "g" not in world.vhost.queues


def test_priority_zero_and_quorum_queues_are_accepted(world: World) -> None:
    assert isinstance(world.declare("g", **{"x-group-by": "routing-key",
                                            "x-max-priority": 0}), GroupedQueue)
    q = world.vhost.declare_queue("qq", durable=True, arguments={
        "x-queue-type": "quorum", "x-group-by": "header:k", "x-group-prefetch": 2})
    assert isinstance(q, GroupedQueue) and q.quorum


def test_redeclare_must_keep_the_group_arguments(world: World) -> None:
    grouped(world)
    assert isinstance(world.declare("g", **{"x-group-by": b"header:k"}), GroupedQueue)
    with pytest.raises(PreconditionFailed) as err:
        world.declare("g", **{"x-group-by": "routing-key"})
    assert str(err.value) == ("inequivalent arg 'x-group-by' for queue 'g' in vhost '/':"
                              " received 'routing-key' but current is 'header:k'")
    with pytest.raises(PreconditionFailed):
        world.declare("g")
    with pytest.raises(PreconditionFailed):
        world.declare("g", **{"x-group-by": "header:k", "x-group-prefetch": 1})


def test_key_functions() -> None:
    by_header = key_function("header:JMSXGroupID")
    m = make_message("rk", headers={"JMSXGroupID": bytearray(b"order-1")})
    assert by_header(m) == "order-1" == normal_key("order-1")
    assert by_header(make_message("rk")) is None
    assert by_header(make_message("rk", headers={"other": 1})) is None
    assert normal_key([1, 2]) == "[1, 2]" and normal_key(7) == 7
    assert key_function("routing-key")(m) == "rk"


_VALUES = st.one_of(st.text(max_size=20), st.integers(-2**31, 2**31 - 1), st.booleans(),
                   st.none(), st.binary(max_size=10).map(bytearray),
                   st.lists(st.integers(0, 100), max_size=3),
                   st.dictionaries(st.sampled_from(["x", "k"]), st.text(max_size=5), max_size=2))


@settings(max_examples=300, deadline=None)
@given(headers=st.dictionaries(st.sampled_from(["k", "a", "kk", "K", "x-k"]), _VALUES,
                               max_size=4),
       content_type=st.sampled_from([None, "application/json"]),
       content_encoding=st.sampled_from([None, "gzip"]))
def test_the_header_key_read_from_raw_bytes_equals_the_decoded_one(
        headers: dict[str, Any], content_type: str | None, content_encoding: str | None) -> None:
    m = make_message("rk", headers=headers, content_type=content_type,
                     content_encoding=content_encoding, message_id="m1", delivery_mode=2)
    decoded = make_message("rk", headers=headers)
    expected = normal_key((decoded.headers or {}).get("k"))
    assert key_function("header:k")(m) == expected


# ---- the dispatch rule -------------------------------------------------------------------


def test_a_key_is_held_by_one_consumer_and_freed_when_all_its_messages_are_acked(
        world: World) -> None:
    q = grouped(world)
    a, b = FakeChannel(), FakeChannel()
    world.consume("g", "A", prefetch=10, channel=a)
    world.consume("g", "B", prefetch=10, channel=b)
    b.open = False
    publish_all(world, "a1 a2")  # A holds key a
    a.open, b.open = False, True
    publish_all(world, "a3 b1 b2 a4")
    assert got(b) == ["b1", "b2"] and q.message_count == 2  # a3, a4 wait for A
    a.open = True
    q.dispatch()
    assert got(a) == ["a1", "a2", "a3", "a4"]  # the holder takes its key's later ones
    for body in ("a1", "a2", "a3"):
        ack(a, body)
    a.open = False
    publish_all(world, "a5")
    assert got(b) == ["b1", "b2"]  # a4 is still unacked: A holds key a
    ack(a, "a4")  # now key a is free: work moves to whoever has capacity
    assert got(b) == ["b1", "b2", "a5"]


def test_a_busy_key_does_not_block_other_keys(world: World) -> None:
    grouped(world)
    a, b = FakeChannel(), FakeChannel()
    world.consume("g", "A", prefetch=1, channel=a)
    publish_all(world, " ".join(f"a{i}" for i in range(1, 1001)) + " b1 c1 b2")
    world.consume("g", "B", prefetch=1, channel=b)
    assert got(a) == ["a1"] and got(b) == ["b1"]  # b1 found behind 999 messages of key a
    ack(b, "b1")
    assert got(b) == ["c1"]
    ack(b, "c1")
    assert got(b) == ["b2"]
    ack(b, "b2")
    assert got(b) == [] and b.deliveries == []  # only key a is left, and A holds it
    ack(a, "a1")
    assert got(a) == ["a2"]


def test_a_requeued_message_goes_back_ahead_of_its_keys_later_messages(world: World) -> None:
    grouped(world)
    a, b = FakeChannel(), FakeChannel()
    world.consume("g", "A", prefetch=1, channel=a)
    world.consume("g", "B", prefetch=1, channel=b)
    b.open = False
    publish_all(world, "a1 a2 a3")
    b.open = True
    publish_all(world, "b1")
    assert (got(a), got(b)) == (["a1"], ["b1"])
    requeue(a, "a1")  # released, and a1 is the next of key a
    assert got(a) == ["a1"]
    assert a.deliveries[0][1].redelivered
    ack(a, "a1")
    assert got(a) == ["a2"]


def test_a_closed_channel_returns_its_messages_in_order(world: World) -> None:
    q = grouped(world)
    a, b = FakeChannel(), FakeChannel()
    ca = world.consume("g", "A", prefetch=3, channel=a)
    world.consume("g", "B", prefetch=3, channel=b)
    b.open = False
    publish_all(world, "a1 a2 a3")
    a.open, b.open = False, True
    publish_all(world, "b1 b2")
    assert (got(a), got(b)) == (["a1", "a2", "a3"], ["b1", "b2"])
    settle_all(b, "B", Settlement.ACK)
    settle_all(a, "A", Settlement.REQUEUE)  # A's channel closes: requeue, then cancel
    q.remove_consumer(ca)
    assert got(b) == ["a1", "a2", "a3"]
    assert all(qm.redelivered for _, qm, _ in b.deliveries)


def test_messages_without_the_header_are_not_grouped(world: World) -> None:
    grouped(world)
    a, b = FakeChannel(), FakeChannel()
    world.consume("g", "A", prefetch=2, channel=a)
    world.consume("g", "B", prefetch=2, channel=b)
    for i in range(4):
        pub(world, None, f"n{i}")
    assert sorted(got(a) + got(b)) == ["n0", "n1", "n2", "n3"]
    assert got(a) and got(b)  # both took some: no key, no holder
    assert world.queue("g").group_stats()["keys"] == 0


def test_basic_get_holds_the_key_until_settled(world: World) -> None:
    q = grouped(world)
    publish_all(world, "a1 a2 b1")
    first = q.get()
    assert first is not None and first.message.body == b"a1"
    second = q.get()
    assert second is not None and second.message.body == b"b1"  # key a is held
    assert q.get() is None
    assert q.message_count == 1
    q.settle([(first, q, None)], Settlement.ACK)
    third = q.get(no_ack=True)
    assert third is not None and third.message.body == b"a2"
    assert q.groups.keys_held_by(GET_HOLDER) == 1  # b, until b1 is settled
    q.settle([(second, q, None)], Settlement.REQUEUE)
    again = q.get(no_ack=True)
    assert again is not None and again.message.body == b"b1" and again.redelivered


def test_group_prefetch_limits_unacked_messages_per_key(world: World) -> None:
    grouped(world, **{"x-group-prefetch": 1})
    a, b = FakeChannel(), FakeChannel()
    world.consume("g", "A", prefetch=10, channel=a)
    publish_all(world, "a1 a2 b1 b2 c1")
    assert got(a) == ["a1", "b1", "c1"]  # one per key
    world.consume("g", "B", prefetch=10, channel=b)
    assert got(b) == []  # every key is held
    requeue(a, "a1")  # a1 first again, to the next consumer in turn: order holds whatever A does
    assert got(a) == ["b1", "c1", "a1"] and got(b) == []  # A's turn: B came after it
    ack(a, "b1")
    assert "b2" in got(a) + got(b)


def test_no_ack_consumers_do_not_hold_keys(world: World) -> None:
    q = grouped(world)
    a, b = FakeChannel(), FakeChannel()
    world.consume("g", "A", channel=a, no_ack=True)
    publish_all(world, "a1 a2")
    assert got(a) == ["a1", "a2"]
    assert q.groups.held == {} and q.unacked_count == 0
    world.consume("g", "B", prefetch=5, channel=b)
    a.open = False
    publish_all(world, "a3")
    assert got(b) == ["a3"]


def test_a_cancelled_holder_keeps_its_keys_until_its_deliveries_are_settled(
        world: World) -> None:
    q = grouped(world)
    a, b = FakeChannel(), FakeChannel()
    ca = world.consume("g", "A", prefetch=5, channel=a)
    publish_all(world, "a1")
    world.consume("g", "B", prefetch=5, channel=b)
    q.remove_consumer(ca)  # Basic.Cancel: a1 is still A's to ack
    publish_all(world, "a2 b1")
    assert got(b) == ["b1"]
    assert [h[0].tag for h in q.group_stats()["holders"] if h[1]] == ["B", "A"]
    ack(a, "a1")
    assert got(b) == ["b1", "a2"]
    assert ca not in q.groups.held and ca not in q.groups.gone


def test_single_active_consumer_and_groups(world: World) -> None:
    grouped(world, **{"x-single-active-consumer": True})
    a, b = FakeChannel(), FakeChannel()
    world.consume("g", "A", prefetch=10, channel=a)
    world.consume("g", "B", prefetch=10, channel=b)
    publish_all(world, "a1 b1 a2")
    assert got(a) == ["a1", "b1", "a2"] and got(b) == []


def test_purge_drops_ready_messages_and_keeps_held_keys(world: World) -> None:
    q = grouped(world)
    a, b = FakeChannel(), FakeChannel()
    world.consume("g", "A", prefetch=1, channel=a)
    publish_all(world, "a1 a2 b1 b2")
    assert q.purge() == 3  # a2, b1, b2
    assert got(a) == ["a1"] and q.message_count == 0
    world.consume("g", "B", prefetch=5, channel=b)
    publish_all(world, "a3 b3")
    assert got(b) == ["b3"]  # a is still A's
    ack(a, "a1")
    assert "a3" in got(a) + got(b)


def test_dedup_and_groups_together(world: World) -> None:
    world.declare("g", **{"x-group-by": "header:k", "x-message-deduplication": True})
    for body in ("1", "1", "2"):
        world.publish("g", body.encode(), headers={"k": "a", "x-deduplication-header": body})
    a = FakeChannel()
    world.consume("g", "A", prefetch=5, channel=a)
    assert got(a) == ["1", "2"]


# ---- TTL, limits, dead lettering ---------------------------------------------------------


def test_messages_of_a_held_key_expire_and_are_dead_lettered(world: World) -> None:
    q = dlx_setup(world, "g", **{"x-group-by": "header:k", "x-message-ttl": 1000})
    a = FakeChannel()
    world.consume("g", "A", prefetch=1, channel=a)
    publish_all(world, "a1 a2 a3")
    world.advance(500)
    publish_all(world, "b1")  # A is full: waits
    world.advance(600)  # a2, a3 are past their TTL, b1 is not
    assert q.message_count == 1
    dead = world.drain("dead")
    assert [m.body for m in dead] == [b"a2", b"a3"]
    assert death_view(x_death(dead[0])[0])["reason"] == "expired"
    ack(a, "a1")
    assert got(a) == ["b1"]
    assert q.unacked_count == 1 and q.message_count == 0
    world.advance(2000)
    assert world.drain("dead") == []  # an unacked message does not expire


def test_per_message_expiration_behind_the_head_is_dropped_at_dispatch(world: World) -> None:
    q = grouped(world)
    a = FakeChannel()
    pub(world, "a", "a1")
    pub(world, "b", "b1", expiration="100")
    world.advance(200)  # b1 is not at the head: it stays until its key is dispatched
    assert q.message_count == 2
    world.consume("g", "A", prefetch=5, channel=a)
    assert got(a) == ["a1"] and q.message_count == 0


def test_drop_head_drops_the_oldest_whatever_its_key(world: World) -> None:
    q = dlx_setup(world, "g", **{"x-group-by": "header:k", "x-max-length": 2})
    publish_all(world, "a1 b1 a2 b2")
    assert [m.body for m in world.drain("dead")] == [b"a1", b"b1"]
    assert q.message_count == 2
    a = FakeChannel()
    world.consume("g", "A", prefetch=5, channel=a)
    assert got(a) == ["a2", "b2"]


def test_reject_publish_counts_grouped_messages(world: World) -> None:
    q = grouped(world, **{"x-max-length": 2, "x-overflow": "reject-publish"})
    publish_all(world, "a1 b1")
    assert world.publish("g", b"c1", headers={"k": "c"}) == [REJECTED]
    assert q.message_count == 2 and q.groups.key_count == 2


def test_quorum_delivery_limit_releases_the_key(world: World) -> None:
    world.exchange("dlx", "fanout")
    world.declare("dead")
    world.bind("dead", "dlx")
    q = world.vhost.declare_queue("qq", durable=True, arguments={
        "x-queue-type": "quorum", "x-group-by": "header:k", "x-delivery-limit": 0,
        "x-dead-letter-exchange": "dlx"})
    a = FakeChannel()
    world.consume("qq", "A", prefetch=1, channel=a)
    publish_all(world, "a1 a2", queue="qq")
    requeue(a, "a1")  # over the limit: dead-lettered, and key a is free again
    assert [m.body for m in world.drain("dead")] == [b"a1"]
    assert got(a) == ["a2"]
    assert q.groups.held == {a.deliveries[0][0]: 1}


# ---- paged out, stats ----------------------------------------------------------------------


def test_paged_out_messages_keep_the_order_of_their_keys(world: World, tmp_path: Path) -> None:
    q = grouped(world)
    q.groups.inner = VariableQueue(tmp_path / "g.delta", ram_messages=4, read_batch=3,
                                   beta_messages=0)  # past q4: straight to delta
    q.groups.stage_messages = 5
    keys = "abc"
    for i in range(60):
        pub(world, keys[i % 3], f"{keys[i % 3]}{i:02d}")
    assert q.groups.inner.delta_count > 0  # part of the backlog is on disk
    a, b = FakeChannel(), FakeChannel()
    world.consume("g", "A", prefetch=1, channel=a)
    world.consume("g", "B", prefetch=1, channel=b)
    seen: dict[str, list[int]] = {k: [] for k in keys}
    while a.deliveries or b.deliveries:
        for ch in (a, b):
            if ch.deliveries:
                body = ch.deliveries[0][1].message.body.decode()
                seen[body[0]].append(int(body[1:]))
                ack(ch, body)
    assert all(seen[k] == sorted(seen[k]) and len(seen[k]) == 20 for k in keys)
    assert q.message_count == 0


def test_group_stats(world: World) -> None:
    q = grouped(world)
    a, b = FakeChannel(), FakeChannel()
    ca = world.consume("g", "A", prefetch=3, channel=a)
    cb = world.consume("g", "B", prefetch=3, channel=b)
    b.open = False
    publish_all(world, "a1 a2 b1 c1 d1 e1")
    stats = q.group_stats()
    assert stats["group_by"] == "header:k"
    assert stats["keys"] == 5 and stats["keys_held"] == 2
    assert stats["holders"] == [(ca, 2, 3), (cb, 0, 0)]


def test_a_held_keys_backlog_beyond_the_window_is_paged_out_not_blocking(
        world: World, tmp_path: Path) -> None:
    q = grouped(world)
    made: list[VariableQueue] = []

    def spill() -> VariableQueue:
        vq = VariableQueue(tmp_path / f"spill{len(made)}.delta", ram_messages=0, read_batch=4,
                           beta_messages=0)
        made.append(vq)
        return vq

    q.groups.stage_messages, q.groups.spill_factory, q.groups.spill_keep = 10, spill, 4
    a, b = FakeChannel(), FakeChannel()
    world.consume("g", "A", prefetch=1, channel=a)
    publish_all(world, " ".join(f"a{i:03d}" for i in range(200)) + " b1 c1")
    world.consume("g", "B", prefetch=1, channel=b)
    assert got(b) == ["b1"]  # behind 199 messages of a held key, 10 staged at most
    assert made and made[0].delta_count > 0  # key a's backlog went to a spill file
    assert q.groups.staged - q.groups.spilled <= 10
    ack(b, "b1")
    assert got(b) == ["c1"]
    ack(b, "c1")
    requeue(a, "a000")  # back ahead of the paged-out ones
    order = []
    for _ in range(200):
        ch = a if a.deliveries else b
        body = got(ch)[0]
        order.append(body)
        ack(ch, body)
    assert order == [f"a{i:03d}" for i in range(200)]
    assert q.message_count == 0 and q.groups.spilled == 0
    assert all(vq._fd < 0 or vq.delta_count == 0 for vq in made)
    assert not any(p.stat().st_size for p in tmp_path.glob("spill*.delta"))


def test_spill_files_of_a_durable_queue_with_persistent_messages(tmp_path: Path) -> None:
    broker = Broker(BrokerConfig(data_dir=tmp_path), BrokerEnvironment(storage=True))
    vhost = broker.vhosts["/"]
    q = vhost.declare_queue("g", durable=True, arguments={"x-group-by": "header:k"})
    assert isinstance(q, GroupedQueue) and vhost.storage is not None
    q.groups.stage_messages, q.groups.spill_keep = 10, 4
    a, b = FakeChannel(), FakeChannel()
    q.add_consumer(Consumer("A", b"A", a, q, False, False, 1))
    for i in range(100):
        q.publish(make_message("g", f"a{i:03d}".encode(), headers={"k": "a"}, delivery_mode=2))
    q.publish(make_message("g", b"b1", headers={"k": "b"}, delivery_mode=2))
    broker.after_batch()
    q.add_consumer(Consumer("B", b"B", b, q, False, False, 1))
    assert got(b) == ["b1"]
    assert list(vhost.storage.paging_dir.glob("*.1000.delta"))  # key a's spill file
    ack(b, "b1")
    order = []
    while a.deliveries or b.deliveries:
        ch = a if a.deliveries else b
        order.append(got(ch)[0])
        ack(ch, order[-1])
    assert order == [f"a{i:03d}" for i in range(100)]
    assert not list(vhost.storage.paging_dir.glob("*.1000.delta"))  # drained: deleted


def test_management_message_groups_object(world: World) -> None:
    q = grouped(world)
    plain = world.declare("plain")
    a = FakeChannel()
    world.consume("g", "A", prefetch=5, channel=a)
    publish_all(world, "a1 a2 b1")
    a.open = False
    publish_all(world, "c1 d1")
    assert q.get() is not None  # Basic.Get holds key c
    shown = message_groups_json(q, lambda c: {"channel": c.tag})
    assert shown == {
        "group_by": "header:k", "keys": 4, "keys_held": 3,
        "consumers": [
            {"consumer_tag": "A", "channel_details": {"channel": "A"}, "keys": 2, "unacked": 3},
            {"consumer_tag": None, "channel_details": None, "keys": 1, "unacked": 1}]}
    assert message_groups_json(plain, lambda c: {}) is None


def test_consumer_priorities_pick_who_takes_free_keys(world: World) -> None:
    grouped(world)
    low, high = FakeChannel(), FakeChannel()
    world.consume("g", "low", prefetch=5, priority=0, channel=low)
    world.consume("g", "high", prefetch=2, priority=5, channel=high)
    publish_all(world, "a1 b1 c1 a2")
    assert got(high) == ["a1", "b1"]  # the higher priority first, while it has room
    assert got(low) == ["c1"]  # a2: key a is high's, and high is full
    ack(high, "b1")
    assert got(high) == ["a1", "a2"]


def test_free_keys_go_to_consumers_in_turn(world: World) -> None:
    """Issue #34: idle consumers with room for everything; keys published in blocks. The turn
    passes only when a consumer takes a free key, so the keys spread round-robin."""
    grouped(world)
    a, b, c = FakeChannel(), FakeChannel(), FakeChannel()
    world.consume("g", "A", prefetch=100, channel=a)
    world.consume("g", "B", prefetch=100, channel=b)
    publish_all(world, "a1 a2 a3 b1 b2 b3 c1 c2 c3 d1 d2 d3")
    assert got(a) == ["a1", "a2", "a3", "c1", "c2", "c3"]
    assert got(b) == ["b1", "b2", "b3", "d1", "d2", "d3"]
    world.consume("g", "C", prefetch=0, channel=c)
    publish_all(world, "e1 e2 f1 g1 h1 a4")
    assert got(a)[6:] == ["e1", "e2", "h1", "a4"]  # a4: key a is still A's
    assert got(b)[6:] == ["f1"] and got(c) == ["g1"]  # C joined the turn after B


def test_keys_spread_when_a_backlog_meets_consumers(world: World) -> None:
    """Messages published before dispatch can run (a consumer that comes back from flow
    control): the free keys still go round."""
    grouped(world)
    a, b = FakeChannel(), FakeChannel()
    world.consume("g", "A", prefetch=0, channel=a)
    world.consume("g", "B", prefetch=0, channel=b)
    a.open = b.open = False
    publish_all(world, "a1 a2 b1 b2 c1 c2 d1 d2")
    a.open = b.open = True
    world.queue("g").dispatch()
    assert sorted(got(a) + got(b)) == ["a1", "a2", "b1", "b2", "c1", "c2", "d1", "d2"]
    assert len({body[0] for body in got(a)}) == 2 and len({body[0] for body in got(b)}) == 2


def test_a_holder_takes_its_keys_waiting_messages_before_a_free_key(world: World) -> None:
    grouped(world)
    a, b = FakeChannel(), FakeChannel()
    world.consume("g", "A", prefetch=2, channel=a)
    world.consume("g", "B", prefetch=2, channel=b)
    b.open = False
    publish_all(world, "a1 a2 a3 b1")
    assert got(a) == ["a1", "a2"]  # full; a3 and the free key b wait
    ack(a, "a1")
    assert got(a) == ["a2", "a3"]  # its own key first, not b1
    b.open = True
    world.queue("g").dispatch()
    assert got(b) == ["b1"]


def test_free_keys_go_round_the_highest_priority_consumers_with_room(world: World) -> None:
    grouped(world)
    h1, h2, low = FakeChannel(), FakeChannel(), FakeChannel()
    world.consume("g", "H1", prefetch=2, priority=5, channel=h1)
    world.consume("g", "H2", prefetch=2, priority=5, channel=h2)
    world.consume("g", "L", prefetch=10, priority=0, channel=low)
    publish_all(world, "a1 b1 c1 d1 e1 f1 a2")
    assert got(h1) == ["a1", "c1"] and got(h2) == ["b1", "d1"]
    assert got(low) == ["e1", "f1"]  # a2 waits: key a is H1's, and H1 is full


def test_group_prefetch_with_keys_in_turn(world: World) -> None:
    grouped(world, **{"x-group-prefetch": 1})
    a, b = FakeChannel(), FakeChannel()
    world.consume("g", "A", prefetch=10, channel=a)
    world.consume("g", "B", prefetch=10, channel=b)
    publish_all(world, "a1 a2 b1 b2 c1")
    assert got(a) == ["a1", "c1"] and got(b) == ["b1"]
    ack(a, "a1")  # key a is free again: the next free key goes to the next in turn, B
    assert got(a) == ["c1"] and got(b) == ["b1", "a2"]
    ack(b, "b1")  # key b is free: A's turn
    assert got(a) == ["c1", "b2"] and got(b) == ["a2"]
