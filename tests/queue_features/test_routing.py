"""Alternate exchanges, exchange-to-exchange routing, sender-selected distribution (CC/BCC)."""

from __future__ import annotations

from typing import Any

from pamqp import commands

from queue_store.queue import ACCEPTED
from tests.queue_features.support import (
    World,
)

# ================================================================================================
# Alternate exchanges and exchange-to-exchange routing
# ================================================================================================


def ae_setup(world: World, **main_args: Any) -> None:
    world.exchange("ae", "fanout")
    world.declare("unrouted")
    world.bind("unrouted", "ae")
    world.exchange("main", "direct", arguments=main_args)
    world.declare("routed")
    world.bind("routed", "main", "k")


def test_alternate_exchange_argument_takes_unroutable_messages(world: World) -> None:
    ae_setup(world, **{"alternate-exchange": "ae"})
    world.publish("k", b"routable", exchange="main")
    world.publish("other", b"unroutable", exchange="main")
    assert world.bodies("routed") == [b"routable"]
    [message] = world.drain("unrouted")
    # the message keeps the exchange and routing key it was published with
    assert (message.body, message.exchange, message.routing_key) == (
        b"unroutable", "main", "other")


def test_alternate_exchange_by_policy(world: World) -> None:
    ae_setup(world)
    world.publish("other", b"before", exchange="main")
    world.vhost.set_policy("ae", "^main$", {"alternate-exchange": "ae"}, apply_to="exchanges")
    world.publish("other", b"with-policy", exchange="main")
    world.vhost.clear_policy("ae")
    world.publish("other", b"after", exchange="main")
    assert world.bodies("unrouted") == [b"with-policy"]


def test_alternate_exchange_argument_wins_over_policy(world: World) -> None:
    ae_setup(world, **{"alternate-exchange": "ae"})
    world.exchange("ae2", "fanout")
    world.declare("unrouted2")
    world.bind("unrouted2", "ae2")
    world.vhost.set_policy("ae", "^main$", {"alternate-exchange": "ae2"})
    world.publish("other", b"m", exchange="main")
    assert (world.queue("unrouted").message_count, world.queue("unrouted2").message_count) == (
        1, 0)


def test_missing_alternate_exchange_routes_nowhere(world: World) -> None:
    world.exchange("main", "direct", arguments={"alternate-exchange": "missing"})
    assert world.publish("k", b"m", exchange="main") == []


def test_alternate_exchange_chain_with_a_cycle_terminates(world: World) -> None:
    world.exchange("a", "direct", arguments={"alternate-exchange": "b"})
    world.exchange("b", "direct", arguments={"alternate-exchange": "a"})
    assert world.publish("k", b"m", exchange="a") == []
    world.exchange("c", "direct", arguments={"alternate-exchange": "d"})
    world.exchange("d", "direct", arguments={"alternate-exchange": "e"})
    world.exchange("e", "fanout")
    world.declare("end")
    world.bind("end", "e")
    assert world.publish("k", b"m", exchange="c") == [ACCEPTED]


def test_exchange_to_exchange_binding_routes_by_the_binding_key(world: World) -> None:
    world.exchange("src", "topic")
    world.exchange("dst", "direct")
    world.bind_x("dst", "src", "orders.*")
    world.declare("q")
    world.bind("q", "dst", "orders.new")
    world.publish("orders.new", b"yes", exchange="src")
    world.publish("orders.old", b"no-dst-binding", exchange="src")
    world.publish("invoices.new", b"no-src-binding", exchange="src")
    assert world.bodies("q") == [b"yes"]


def test_exchange_to_exchange_cycle_delivers_once(world: World) -> None:
    world.exchange("x1", "fanout")
    world.exchange("x2", "fanout")
    world.bind_x("x2", "x1")
    world.bind_x("x1", "x2")
    world.declare("q")
    world.bind("q", "x2")
    world.bind("q", "x1")  # reachable two ways
    assert world.publish("k", b"m", exchange="x1") == [ACCEPTED]
    assert world.bodies("q") == [b"m"]
    assert world.publish("k", b"m", exchange="x2") == [ACCEPTED]


def test_internal_exchange_is_reachable_through_an_exchange_binding(world: World) -> None:
    world.exchange("front", "fanout")
    world.exchange("inner", "fanout", internal=True)
    world.bind_x("inner", "front")
    world.declare("q")
    world.bind("q", "inner")
    world.publish("k", b"m", exchange="front")
    assert world.bodies("q") == [b"m"]


def test_unroutable_through_exchange_binding_falls_back_to_alternate_exchange(
        world: World) -> None:
    world.exchange("ae", "fanout")
    world.declare("unrouted")
    world.bind("unrouted", "ae")
    world.exchange("front", "fanout")
    world.exchange("inner", "direct", arguments={"alternate-exchange": "ae"})
    world.bind_x("inner", "front")
    world.publish("nothing-bound", b"m", exchange="front")
    assert world.bodies("unrouted") == [b"m"]


# --- sender-selected distribution (CC / BCC) -------------------------------------------------


def test_cc_and_bcc_headers_add_routing_keys_and_bcc_is_removed(wired) -> None:
    broker, _, wire = wired
    for name in ("a", "b", "c", "d"):
        wire.send(1, commands.Queue.Declare(queue=name))
    wire.publish(1, "", "a", b"hi", headers={"CC": ["b"], "BCC": ["c"], "keep": 1})
    vhost = broker.vhosts["/"]
    assert vhost.queues["d"].message_count == 0
    got = {name: vhost.queues[name].get() for name in ("a", "b", "c")}
    assert all(qm is not None for qm in got.values())
    for qm in got.values():
        headers = qm.message.headers
        assert headers["CC"] == ["b"] and headers["keep"] == 1
        assert "BCC" not in headers
