"""Delayed messages (the ``rabbitmq-delayed-message-exchange`` plugin's API), sans-IO on a fake
clock: the ``x-delay`` header, due order, routing with the bindings at due time, mandatory,
exchange delete, the on-disk log and its recovery.

Source: https://github.com/rabbitmq/rabbitmq-delayed-message-exchange (README,
``rabbit_exchange_type_delayed_message.erl``, ``rabbit_delayed_message_utils.erl``).
"""

from __future__ import annotations

import decimal
from pathlib import Path
from typing import Any

import pytest
from conftest import FakeClock

from amqp_common.errors import CommandInvalid, PreconditionFailed
from amqp_common.timers import Timers
from exchanges.binding import Destination
from exchanges.delayed import delay_ms
from queue_store.delay_index import DelayIndex
from queue_store.delayed_log import DelayedLog
from queue_store.durability import Durability
from queue_store.outcomes import NEEDS_SYNC, ROUTED, UNROUTABLE
from queue_store.storage import VhostStorage
from tests.queue_features.support import World, make_message
from vhosts.delayed import recover_delayed
from vhosts.vhost import VirtualHost

DELAYED = {"x-delayed-type": "direct"}


def world(**args: Any) -> World:
    w = World()
    w.exchange("dx", "x-delayed-message", arguments=args or dict(DELAYED))
    w.declare("q")
    w.bind("q", "dx", "k")
    return w


def publish(w: World, body: bytes, delay: Any = None, rk: str = "k",
            mandatory: bool = False, exchange: str = "dx", **props: Any) -> int:
    headers = {} if delay is None else {"x-delay": delay}
    message = make_message(rk, body, exchange, headers=headers or None, **props)
    return w.vhost.publish(w.vhost.exchange(exchange), message, mandatory=mandatory)


# ---- declare ---------------------------------------------------------------------------


def test_declare_without_delayed_type_is_406_with_the_plugins_text() -> None:
    w = World()
    with pytest.raises(PreconditionFailed) as err:
        w.exchange("dx", "x-delayed-message")
    assert err.value.reply_text == ("PRECONDITION_FAILED - Invalid argument, 'x-delayed-type' "
                                    "must be an existing exchange type")
    with pytest.raises(CommandInvalid):  # check_type/1: an unknown type is 503
        w.exchange("dx", "x-delayed-message", arguments={"x-delayed-type": "nope"})
    assert "dx" not in w.vhost.exchanges


@pytest.mark.parametrize("value, expected", [
    (5000, 5000), ("250", 250), (b"250", 250), (12.9, 12), (decimal.Decimal("7.5"), 7),
    (0, 0), (-5, 0), ("abc", 0), ("-10", 0), (True, 0), (None, 0), ([1], 0),
])
def test_x_delay_header_values(value: Any, expected: int) -> None:
    assert delay_ms({"x-delay": value}) == expected
    assert delay_ms(None) == 0 and delay_ms({}) == 0


# ---- holding and delivering -----------------------------------------------------------


def test_message_is_held_until_due_then_routed_with_negative_x_delay() -> None:
    w = world()
    assert publish(w, b"later", 1000) == ROUTED
    assert w.queue("q").message_count == 0
    assert len(w.vhost.exchange("dx").delayed) == 1
    w.advance(999)
    assert w.queue("q").message_count == 0
    w.advance(1)
    [m] = w.drain("q")
    assert m.body == b"later"
    assert m.headers == {"x-delay": -1000}  # the plugin's swap_delay_header/1
    assert len(w.vhost.exchange("dx").delayed) == 0


@pytest.mark.parametrize("delay", [None, 0, -100, "soon"])
def test_absent_zero_negative_or_bad_x_delay_routes_now(delay: Any) -> None:
    w = world()
    assert publish(w, b"now", delay) == ROUTED
    assert w.bodies("q") == [b"now"]
    assert len(w.vhost.exchange("dx").delayed) == 0


def test_due_order_and_publish_order_among_equal_due_times() -> None:
    w = world()
    for body, delay in ((b"c", 3000), (b"a1", 1000), (b"b", 2000), (b"a2", 1000),
                        (b"d", 2500), (b"a3", 1000)):
        publish(w, body, delay)
    w.advance(2000)
    assert w.bodies("q") == [b"a1", b"a2", b"a3", b"b"]
    w.advance(5000)
    assert w.bodies("q") == [b"d", b"c"]


def test_routed_with_the_bindings_as_they_are_at_due_time() -> None:
    w = world()
    w.declare("other")
    publish(w, b"x", 500, rk="later-key")  # no binding for this key yet
    w.bind("other", "dx", "later-key")
    w.vhost.unbind(Destination("queue", "q"), "dx", "k")
    w.advance(500)
    assert w.bodies("other") == [b"x"] and w.bodies("q") == []


def test_underlying_topic_and_exchange_to_exchange_bindings() -> None:
    w = World()
    w.exchange("dx", "x-delayed-message", arguments={"x-delayed-type": "topic"})
    w.exchange("fan", "fanout")
    w.declare("eu")
    w.declare("all")
    w.bind("eu", "dx", "eu.#")
    w.bind_x("fan", "dx", "#")
    w.bind("all", "fan")
    publish(w, b"m", 100, rk="eu.fr")
    publish(w, b"n", 100, rk="us.ny")
    w.advance(100)
    assert w.bodies("eu") == [b"m"]
    assert w.bodies("all") == [b"m", b"n"]


def test_mandatory_publish_with_no_route_now_is_returned_not_held() -> None:
    w = world()
    assert publish(w, b"lost", 1000, rk="nobody", mandatory=True) == UNROUTABLE
    assert len(w.vhost.exchange("dx").delayed) == 0
    assert publish(w, b"kept", 1000, rk="nobody") == ROUTED  # not mandatory: held
    assert publish(w, b"ok", 1000, mandatory=True) == ROUTED
    assert len(w.vhost.exchange("dx").delayed) == 2


def test_deleting_the_exchange_drops_its_held_messages() -> None:
    w = world()
    publish(w, b"x", 1000)
    w.vhost.delete_exchange("dx")
    w.advance(5000)
    assert w.queue("q").message_count == 0
    w.exchange("dx", "x-delayed-message", arguments=dict(DELAYED))  # the same name, empty
    assert len(w.vhost.exchange("dx").delayed) == 0


def test_listing_and_cancel_by_id() -> None:
    w = world()
    for i, delay in enumerate((3000, 1000, 2000)):
        publish(w, f"m{i}".encode(), delay)
    holder = w.vhost.exchange("dx").delayed
    listed = holder.listing(0, 10)
    assert [m.body for _, _, m in listed] == [b"m1", b"m2", b"m0"]
    assert [m.body for _, _, m in holder.listing(1, 1)] == [b"m2"]
    assert holder.cancel(listed[0][0]) is True
    assert holder.cancel(listed[0][0]) is False and holder.cancel("junk") is False
    w.advance(10_000)
    assert w.bodies("q") == [b"m2", b"m0"]


def test_many_messages_due_at_once_are_delivered_in_batches() -> None:
    w = world()
    for i in range(4500):
        publish(w, str(i).encode(), 100 + i % 7)
    w.advance(200)  # BATCH per turn, the rest on the next turns (due "now")
    for _ in range(5):
        w.advance(0)
    got = w.drain("q")
    assert len(got) == 4500
    dues = [100 + int(m.body) % 7 for m in got]
    assert dues == sorted(dues)


# ---- the compact index -------------------------------------------------------------------


def test_index_orders_by_due_then_sequence_across_buckets() -> None:
    index = DelayIndex()
    entries = [(5500, 1), (1200, 2), (1200, 3), (999, 4), (5500, 5), (2000, 6)]
    for due, seq in entries:
        index.add(due, seq, seq * 10, 1)
    assert [e[:2] for e in index.entries()] == sorted(entries)
    assert [e[:2] for e in index.entries(2)] == sorted(entries)[2:]
    assert index.next_due() == 999
    index.add(1000, 7, 70, 1)  # into the open second
    assert [e[1] for e in index.pop_due(1200)] == [4, 7, 2, 3]
    assert index.remove(5500, 5) is not None and index.remove(5500, 5) is None
    assert [e[1] for e in index.pop_due(10_000)] == [6, 1]
    assert len(index) == 0 and index.next_due() is None


# ---- on disk -----------------------------------------------------------------------------


def storage_world(path: Path, clock: FakeClock) -> tuple[VirtualHost, Durability]:
    durability = Durability()
    vh = VirtualHost("/", Timers(clock=clock), VhostStorage(path, durability))
    return vh, durability


def test_persistent_message_on_durable_exchange_waits_for_fsync_and_survives(
        tmp_path: Path) -> None:
    clock = FakeClock()
    vh, durability = storage_world(tmp_path, clock)
    vh.declare_exchange("dx", "x-delayed-message", durable=True, arguments=dict(DELAYED))
    vh.declare_queue("q", durable=True)
    vh.bind(Destination("queue", "q"), "dx", "k")
    x = vh.exchange("dx")
    persistent = make_message("k", b"p", "dx", headers={"x-delay": 60_000}, delivery_mode=2)
    transient = make_message("k", b"t", "dx", headers={"x-delay": 60_000})
    assert vh.publish(x, persistent) == ROUTED | NEEDS_SYNC
    assert vh.publish(x, transient) == ROUTED
    for i in range(3):  # one cancelled below
        vh.publish(x, make_message("k", b"c%d" % i, "dx", headers={"x-delay": 30_000},
                                   delivery_mode=2))
    assert x.delayed.cancel(x.delayed.listing(0, 1)[0][0])
    durability.flush_writes()  # what a kill -9 leaves: written, not closed

    vh2, _ = storage_world(tmp_path, clock)  # a restart on the same files
    vh2.declare_exchange("dx", "x-delayed-message", durable=True, arguments=dict(DELAYED))
    vh2.declare_queue("q", durable=True)
    vh2.bind(Destination("queue", "q"), "dx", "k")
    assert recover_delayed(vh2) == 3  # the transient one and the cancelled one are gone
    holder = vh2.exchange("dx").delayed
    assert [m.body for _, _, m in holder.listing(0, 10)] == [b"c1", b"c2", b"p"]
    clock.advance(61)
    vh2.timers.run_due()
    q = vh2.queues["q"]
    assert [q.get(no_ack=True).message.body for _ in range(3)] == [b"c1", b"c2", b"p"]


def test_non_durable_exchange_folder_is_removed_at_recovery(tmp_path: Path) -> None:
    clock = FakeClock()
    vh, durability = storage_world(tmp_path, clock)
    vh.declare_exchange("tmp", "x-delayed-message", arguments=dict(DELAYED))
    vh.publish(vh.exchange("tmp"), make_message("k", b"x", "tmp", headers={"x-delay": 10},
                                                delivery_mode=2))
    durability.flush_writes()
    vh2, _ = storage_world(tmp_path, clock)
    assert recover_delayed(vh2) == 0
    assert list((tmp_path / "delayed").iterdir()) == []


def test_log_segments_rotate_and_are_deleted_when_drained(tmp_path: Path) -> None:
    log = DelayedLog(tmp_path / "x", durable=True, segment_size=300)
    locs = [log.append(i, 1000 + i, 5, True, make_message("k", b"%0100d" % i))
            for i in range(1, 6)]
    log.flush()
    assert len(list((tmp_path / "x").glob("*.dseg"))) >= 3
    assert [log.read(loc, size)[0].body for loc, size in locs] == [b"%0100d" % i
                                                                for i in range(1, 6)]
    for loc, _ in locs:
        log.done(loc)
    log.flush()
    assert len(list((tmp_path / "x").glob("*.dseg"))) == 1  # only the current one
    log.close()
    again = DelayedLog(tmp_path / "x", durable=True)
    found: list[int] = []
    assert again.recover(lambda due, seq, loc, size: found.append(seq))[0] == 0


def test_torn_tail_is_skipped_at_recovery(tmp_path: Path) -> None:
    log = DelayedLog(tmp_path / "x", durable=True)
    log.append(1, 1000, 7, True, make_message("k", b"whole"))
    log.append(2, 1000, 7, True, make_message("k", b"torn"))
    log.close()
    seg = next((tmp_path / "x").glob("*.dseg"))
    seg.write_bytes(seg.read_bytes()[:-3])
    again = DelayedLog(tmp_path / "x", durable=True)
    found: list[tuple[int, int]] = []
    assert again.recover(lambda due, seq, loc, size: found.append((loc, size)))[0] == 1
    message, delay = again.read(*found[0])
    assert message.body == b"whole" and delay == 7


# ---- definitions -------------------------------------------------------------------------


def _doc(arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "exchanges": [{"name": "dx", "vhost": "/", "type": "x-delayed-message",
                       "durable": True, "auto_delete": False, "internal": False,
                       "arguments": arguments}],
        "queues": [{"name": "q", "vhost": "/", "durable": True, "auto_delete": False,
                    "arguments": {}}],
        "bindings": [{"source": "dx", "vhost": "/", "destination": "q",
                      "destination_type": "queue", "routing_key": "k", "arguments": {}}],
    }


def test_definitions_import_a_delayed_exchange_and_its_bindings() -> None:
    from broker.broker import Broker
    from broker.config import BrokerConfig
    from vhosts.definitions import export_definitions, import_definitions

    broker = Broker(BrokerConfig())
    import_definitions(broker, _doc(dict(DELAYED)))
    x = broker.vhosts["/"].exchange("dx")
    assert x.delayed is not None and len(x.bindings) == 1
    exported = export_definitions(broker)
    assert [e["arguments"] for e in exported["exchanges"] if e["name"] == "dx"] == [DELAYED]
    with pytest.raises(ValueError, match="x-delayed-type"):  # refused before any change
        import_definitions(Broker(BrokerConfig()), _doc({}))


def test_deleting_a_durable_delayed_exchange_removes_its_files(tmp_path: Path) -> None:
    clock = FakeClock()
    vh, durability = storage_world(tmp_path, clock)
    vh.declare_exchange("dx", "x-delayed-message", durable=True, arguments=dict(DELAYED))
    vh.publish(vh.exchange("dx"), make_message("k", b"x", "dx", headers={"x-delay": 10},
                                               delivery_mode=2))
    durability.flush_writes()
    vh.delete_exchange("dx")
    durability.maybe_sync()
    assert list((tmp_path / "delayed").iterdir()) == []
    clock.advance(1)
    assert vh.timers.run_due() == 0  # its timer went with it
    vh2, _ = storage_world(tmp_path, clock)
    vh2.declare_exchange("dx", "x-delayed-message", durable=True, arguments=dict(DELAYED))
    assert recover_delayed(vh2) == 0


def test_exchange_counts_a_held_message_once() -> None:
    w = world()
    publish(w, b"x", 100)
    publish(w, b"y", 100, rk="nobody", mandatory=True)  # returned: unroutable
    w.advance(100)
    x = w.vhost.exchange("dx")
    assert (x.published, x.unroutable) == (2, 1)
    assert w.bodies("q") == [b"x"]
