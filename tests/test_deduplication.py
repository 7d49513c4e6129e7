"""Message deduplication (the ``rabbitmq-message-deduplication`` plugin's API): the duplicates
cache, the ``x-message-deduplication`` exchange, queues with ``x-message-deduplication``, and
what a publisher sees (confirms acked, mandatory duplicates not returned).

Source: https://github.com/noxdafox/rabbitmq-message-deduplication (README; exchange
``validate/1`` texts).
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Client, FakeClock, channel_close, methods
from pamqp import commands

from amqp_common.dedup_cache import (
    DedupCache,
    dedup_key,
    message_dedup_key,
    message_ttl_override,
    ttl_override,
)
from amqp_common.errors import PreconditionFailed
from exchanges.binding import Binding, Destination
from exchanges.deduplication import DeduplicationExchange, DuplicateMessage
from queue_store.dedup_queue import DeduplicatingQueue
from queue_store.outcomes import DUPLICATE, ROUTED, UNROUTABLE, Settlement
from queue_store.queue import Queue
from tests.queue_features.support import World, make_message

Q1, Q2 = Destination("queue", "q1"), Destination("queue", "q2")


def dedup(key: Any, **headers: Any) -> dict[str, Any]:
    return {"x-deduplication-header": key, **headers}


# ---- the cache ---------------------------------------------------------------------------


def test_cache_reports_duplicates_until_evicted_lru() -> None:
    cache = DedupCache(2)
    assert cache.insert("a") and cache.insert("b")
    assert not cache.insert("a")  # a duplicate, and now the most recently used
    assert cache.insert("c")  # full: "b", the least recently used, goes
    assert "b" not in cache and "a" in cache and "c" in cache
    assert len(cache) == 2
    assert cache.insert("b")


def test_cache_ttl_with_injected_clock() -> None:
    clock = FakeClock()
    cache = DedupCache(10, ttl_ms=1000, clock=clock)
    assert cache.insert("a")
    clock.advance(0.999)
    assert not cache.insert("a")  # still there; a hit does not extend the deadline
    clock.advance(0.002)
    assert "a" not in cache
    assert cache.insert("a")
    assert cache.insert("b", ttl_ms=5000)  # per-entry TTL overrides the cache's
    clock.advance(2)
    assert "a" not in cache and "b" in cache


def test_cache_without_ttl_or_size_keeps_until_removed() -> None:
    cache = DedupCache(None)
    for i in range(1000):
        assert cache.insert(i)
    assert len(cache) == 1000 and not cache.insert(0)
    assert cache.remove(0) and not cache.remove(0)
    assert cache.insert(0)
    cache.clear()
    assert len(cache) == 0


@pytest.mark.parametrize("size, ttl", [(0, None), (-1, None), (1, 0)])
def test_cache_refuses_non_positive_limits(size: int, ttl: int | None) -> None:
    with pytest.raises(ValueError):
        DedupCache(size, ttl)


def test_keys_and_ttl_headers() -> None:
    assert dedup_key(None) is None and dedup_key({}) is None
    assert dedup_key({"x-deduplication-header": None}) is None
    assert dedup_key(dedup(b"k")) == dedup_key(dedup("k")) == "k"
    assert dedup_key(dedup(7)) == 7
    assert dedup_key(dedup({"a": [1]})) == repr({"a": [1]})
    assert ttl_override({"x-cache-ttl": 500}) == 500
    assert ttl_override({"x-cache-ttl": "500"}) == 500
    assert ttl_override({"x-cache-ttl": 0}) is None
    assert ttl_override({"x-cache-ttl": "soon"}) is None
    assert ttl_override({"x-cache-ttl": True}) is None


@pytest.mark.parametrize("headers, key, ttl", [
    (None, None, None),
    ({}, None, None),
    ({"other": "x"}, None, None),
    (dedup("k"), "k", None),
    (dedup(7), 7, None),
    (dedup(None), None, None),
    (dedup({"a": [1]}), repr({"a": [1]}), None),
    ({"a": 1, "b": [1, "x"], "c": {"d": 2.5}, **dedup("k"), "x-cache-ttl": "500"}, "k", 500),
    (dedup("k", **{"x-cache-ttl": 500}), "k", 500),
    (dedup("k", **{"x-cache-ttl": "soon"}), "k", None),
])
def test_message_keys_read_from_raw_properties(headers: Any, key: Any, ttl: Any) -> None:
    """What the exchange and queue read straight from the property bytes equals what the
    decoded headers give, with other properties before the headers too."""
    for extra in ({}, {"content_type": "text/plain", "content_encoding": "gzip"}):
        message = make_message("rk", b"m", "", headers=headers, **extra)
        assert message_dedup_key(message) == key == dedup_key(message.headers)
        assert message_ttl_override(message) == ttl


# ---- the exchange's routing table --------------------------------------------------------


def test_exchange_routes_like_fanout_and_drops_duplicates() -> None:
    x = DeduplicationExchange({"x-cache-size": 10})
    x.add_binding(_binding(Q1, "a"))
    x.add_binding(_binding(Q2, "b"))
    assert x.route("whatever", dedup("m1")) == {Q1, Q2}
    with pytest.raises(DuplicateMessage):
        x.route("other", dedup("m1"))
    assert x.duplicates == 1
    # no header: routed every time, nothing recorded
    assert x.route("k", {}) == x.route("k", None) == {Q1, Q2}
    assert len(x.cache) == 1


def test_exchange_ttl_argument_and_header() -> None:
    clock = FakeClock()
    x = DeduplicationExchange({"x-cache-size": "10", "x-cache-ttl": 1000}, clock=clock)
    x.add_binding(_binding(Q1))
    x.route("", dedup("a"))
    x.route("", dedup("b", **{"x-cache-ttl": 10_000}))
    clock.advance(2)
    assert x.route("", dedup("a")) == {Q1}  # expired: routed again
    with pytest.raises(DuplicateMessage):
        x.route("", dedup("b"))


@pytest.mark.parametrize("arguments, text", [
    ({}, "Missing or invalid argument, 'x-cache-size' must be an integer greater than 0"),
    ({"x-cache-size": 0}, "Missing or invalid argument, 'x-cache-size' must be an integer "
                          "greater than 0"),
    ({"x-cache-size": "ten"}, "Missing or invalid argument, 'x-cache-size' must be an "
                              "integer greater than 0"),
    ({"x-cache-size": 5, "x-cache-ttl": -1},
     "Invalid argument, 'x-cache-ttl' must be an integer greater than 0"),
    ({"x-cache-size": 5, "x-cache-persistence": "cloud"},
     "Invalid argument, 'x-cache-persistence' must be either 'disk' or 'memory'"),
])
def test_exchange_arguments_are_checked(arguments: dict[str, Any], text: str) -> None:
    with pytest.raises(PreconditionFailed) as err:
        DeduplicationExchange(arguments)
    assert err.value.reply_text == f"PRECONDITION_FAILED - {text}"


def test_disk_persistence_is_accepted() -> None:
    assert DeduplicationExchange({"x-cache-size": 1, "x-cache-persistence": "disk"}
                                 ).persistence == "disk"


def _binding(dest: Destination, key: str = "") -> Binding:
    return Binding("dx", dest, key, {})


# ---- through the vhost's publish pipeline --------------------------------------------------


def dedup_world(**x_args: Any) -> World:
    world = World()
    world.exchange("dx", "x-message-deduplication", arguments={"x-cache-size": 10, **x_args})
    world.declare("q")
    world.bind("q", "dx")
    return world


def vpublish(world: World, exchange: str, key: Any = None, body: bytes = b"m",
             routing_key: str = "", **headers: Any) -> int:
    if key is not None:
        headers["x-deduplication-header"] = key
    message = make_message(routing_key, body, exchange, headers=headers or None)
    x = world.vhost.exchange(exchange) if exchange else None
    return world.vhost.publish(x, message)


def test_publish_pipeline_routes_the_first_only() -> None:
    world = dedup_world()
    assert vpublish(world, "dx", "k", b"1") == ROUTED
    assert vpublish(world, "dx", "k", b"2") == DUPLICATE
    assert vpublish(world, "dx", None, b"3") == ROUTED
    assert vpublish(world, "dx", None, b"4") == ROUTED
    assert world.bodies("q") == [b"1", b"3", b"4"]


def test_duplicate_does_not_go_to_the_alternate_exchange() -> None:
    world = dedup_world(**{"alternate-exchange": "ae"})
    world.exchange("ae", "fanout")
    world.declare("unrouted")
    world.bind("unrouted", "ae")
    vpublish(world, "dx", "k")
    assert vpublish(world, "dx", "k") == DUPLICATE
    assert world.queue("unrouted").message_count == 0


def test_duplicate_behind_an_exchange_binding() -> None:
    world = dedup_world()
    world.exchange("front", "fanout")
    world.bind_x("dx", "front")
    assert vpublish(world, "front", "k") == ROUTED
    assert vpublish(world, "front", "k") == DUPLICATE  # dropped on the only way on
    world.declare("side")
    world.bind("side", "front")
    assert vpublish(world, "front", "k") == ROUTED  # another way reached a queue
    assert world.queue("q").message_count == 1
    assert world.queue("side").message_count == 1


def test_cc_keys_do_not_make_the_message_its_own_duplicate() -> None:
    world = dedup_world()
    assert vpublish(world, "dx", "k", CC=["a", "b"]) == ROUTED
    assert world.queue("q").message_count == 1


def test_unroutable_without_bindings_stays_unroutable() -> None:
    world = World()
    world.exchange("dx", "x-message-deduplication", arguments={"x-cache-size": 1})
    assert vpublish(world, "dx", "k") == UNROUTABLE
    assert vpublish(world, "dx", "k") == DUPLICATE


# ---- queue-level deduplication ------------------------------------------------------------


def dedup_queue(world: World, name: str = "dq", **args: Any) -> Queue:
    q = world.declare(name, **{"x-message-deduplication": True, **args})
    assert isinstance(q, DeduplicatingQueue)
    return q


def to_dq(world: World, key: str | None, body: bytes = b"m") -> int:
    """Publish to the queue ``dq`` through the default exchange."""
    return vpublish(world, "", key, body, routing_key="dq")


def test_ordinary_queues_are_plain() -> None:
    world = World()
    assert type(world.declare("plain")) is Queue
    assert type(world.declare("off", **{"x-message-deduplication": False})) is Queue


def test_queue_drops_a_duplicate_of_a_message_it_holds() -> None:
    world = World()
    q = dedup_queue(world)
    assert to_dq(world, "k", b"1") == ROUTED
    assert to_dq(world, "k", b"2") == ROUTED  # routed, dropped
    assert to_dq(world, None, b"3") == ROUTED
    assert q.message_count == 2 and q.duplicates == 1
    assert world.bodies("dq") == [b"1", b"3"]  # no-ack get: gone, key forgotten
    assert to_dq(world, "k", b"4") == ROUTED
    assert world.bodies("dq") == [b"4"]


def test_queue_forgets_on_ack_not_on_requeue() -> None:
    world = World()
    q = dedup_queue(world)
    to_dq(world, "k", b"1")
    qm = q.get(no_ack=False)
    assert qm is not None
    to_dq(world, "k", b"2")  # still held (unacked)
    q.settle([(qm, q, None)], Settlement.REQUEUE)
    to_dq(world, "k", b"3")  # requeued: still held
    assert q.message_count == 1
    qm = q.get(no_ack=False)
    q.settle([(qm, q, None)], Settlement.ACK)
    to_dq(world, "k", b"4")
    assert world.bodies("dq") == [b"4"]


def test_queue_forgets_on_purge_expiry_and_drop_head() -> None:
    world = World()
    q = dedup_queue(world, **{"x-message-ttl": 1000, "x-max-length": 1})
    to_dq(world, "a")
    q.purge()
    to_dq(world, "a")
    assert q.message_count == 1
    world.advance(1500)  # expired
    assert q.message_count == 0
    to_dq(world, "a")
    to_dq(world, "b")  # x-max-length 1: "a" dropped from the head
    to_dq(world, "a")
    assert q.message_count == 1 and world.bodies("dq") == [b"m"]
    assert len(q.dedup) == 0


def test_queue_reject_publish_does_not_keep_the_key() -> None:
    world = World()
    q = dedup_queue(world, **{"x-max-length": 1, "x-overflow": "reject-publish"})
    to_dq(world, "a", b"1")
    to_dq(world, "b", b"2")  # refused: full
    assert "b" not in q.dedup
    world.get("dq")
    to_dq(world, "b", b"3")
    assert world.bodies("dq") == [b"3"]


def test_queue_cache_size_and_ttl_arguments() -> None:
    world = World()
    q = dedup_queue(world, **{"x-cache-size": 1, "x-cache-ttl": 1000})
    to_dq(world, "a")
    to_dq(world, "b")  # evicts "a"
    to_dq(world, "a")  # so "a" gets in again
    assert q.message_count == 3
    world.advance(1500)
    to_dq(world, "a")  # "a"'s key expired
    assert q.message_count == 4


@pytest.mark.parametrize("args, text", [
    ({"x-message-deduplication": "yes"},
     "invalid arg 'x-message-deduplication' for queue 'dq' in vhost '/': "
     "{unacceptable_type,longstr}"),
    ({"x-message-deduplication": True, "x-cache-size": 0},
     "invalid arg 'x-cache-size' for queue 'dq' in vhost '/': {value_zero,0}"),
    ({"x-message-deduplication": True, "x-cache-ttl": -5},
     "invalid arg 'x-cache-ttl' for queue 'dq' in vhost '/': {value_negative,-5}"),
])
def test_queue_arguments_are_checked(args: dict[str, Any], text: str) -> None:
    with pytest.raises(PreconditionFailed) as err:
        World().declare("dq", **args)
    assert err.value.reply_text == f"PRECONDITION_FAILED - {text}"


def test_quorum_queues_deduplicate_too() -> None:
    world = World()
    q = world.vhost.declare_queue("qq", durable=True, arguments={
        "x-queue-type": "quorum", "x-message-deduplication": True})
    vpublish(world, "", "k", routing_key="qq")
    vpublish(world, "", "k", routing_key="qq")
    assert q.message_count == 1


# ---- what a publisher sees (sans-IO broker) ------------------------------------------------


def wire_setup(client: Client, **x_args: Any) -> None:
    client.declare_exchange(1, "dx", "x-message-deduplication",
                            arguments={"x-cache-size": 100, **x_args})
    client.declare_queue(1, "q")
    client.bind(1, "q", "dx")
    client.call(1, commands.Confirm.Select(), commands.Confirm.SelectOk)


def props(key: str) -> commands.Basic.Properties:
    return commands.Basic.Properties(headers={"x-deduplication-header": key})


def test_duplicates_are_acked_and_not_returned(client: Client) -> None:
    wire_setup(client)
    out = []
    for body in (b"1", b"2", b"3"):
        out += client.publish(1, "dx", "", body, props("k"), mandatory=True)
    out += client.publish(1, "dx", "", b"4", props("other"), mandatory=True)
    assert methods(out, commands.Basic.Return) == []
    assert methods(out, commands.Basic.Nack) == []
    acks = methods(out, commands.Basic.Ack)
    assert max(a.delivery_tag for a in acks) == 4
    ok = client.declare_queue(1, "q", passive=True)
    assert ok.message_count == 2


def test_unroutable_non_duplicate_is_still_returned(client: Client) -> None:
    client.declare_exchange(1, "dx", "x-message-deduplication", arguments={"x-cache-size": 5})
    out = client.publish(1, "dx", "", b"1", props("k"), mandatory=True)
    assert len(methods(out, commands.Basic.Return)) == 1
    out = client.publish(1, "dx", "", b"1", props("k"), mandatory=True)
    assert methods(out, commands.Basic.Return) == []  # the duplicate is dropped


def test_bad_exchange_arguments_close_the_channel_406(client: Client) -> None:
    out = client.send(1, commands.Exchange.Declare(exchange="dx",
                                                   exchange_type="x-message-deduplication"))
    close = channel_close(out)
    assert close.reply_code == 406
    assert close.reply_text == ("PRECONDITION_FAILED - Missing or invalid argument, "
                                "'x-cache-size' must be an integer greater than 0")


def test_queue_level_over_the_wire(client: Client) -> None:
    client.declare_queue(1, "dq", arguments={"x-message-deduplication": True})
    client.call(1, commands.Confirm.Select(), commands.Confirm.SelectOk)
    out = []
    for body in (b"1", b"2"):
        out += client.publish(1, "", "dq", body, props("k"), mandatory=True)
    assert methods(out, commands.Basic.Return) == []
    assert len(methods(out, commands.Basic.Ack)) >= 1
    assert client.declare_queue(1, "dq", passive=True).message_count == 1
