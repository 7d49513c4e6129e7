"""The hook a vhost is built with to make its queues and hear of removed ones
(:mod:`vhosts.queue_factory`): the broker hands its factory to every vhost it creates, and a
worker or cluster runtime is plugged into it once."""

from __future__ import annotations

from typing import Any

import pytest

from broker.broker import Broker
from queue_store.grouped_queue import GroupedQueue
from queue_store.queue import Queue
from vhosts.queue_factory import LOCAL_QUEUES, BrokerQueues
from vhosts.vhost import VirtualHost


class Recording:
    def __init__(self) -> None:
        self.made: list[tuple[str, str, int | None]] = []
        self.removed: list[tuple[str, bool]] = []

    def make_queue(self, name: str, vhost_name: str, home: int | None = None,
                   **kwargs: Any) -> Queue:
        self.made.append((vhost_name, name, home))
        return LOCAL_QUEUES.make_queue(name, vhost_name, home, **kwargs)

    def queue_removed(self, q: Queue, everywhere: bool) -> None:
        self.removed.append((q.name, everywhere))


def test_a_vhost_builds_its_queues_locally_by_default() -> None:
    vh = VirtualHost("/")
    assert type(vh.declare_queue("q")) is Queue
    assert type(vh.declare_queue("g", arguments={"x-group-by": "routing-key"})) is GroupedQueue
    assert vh.delete_queue("q") == 0


def test_the_factory_a_vhost_is_built_with_makes_and_hears_of_removals() -> None:
    rec = Recording()
    vh = VirtualHost("v", queue_factory=rec)
    q = vh.declare_queue("q", auto_delete=True)
    vh.declare_queue("q", auto_delete=True)  # exists: not made again
    assert rec.made == [("v", "q", None)]
    vh.queue_unused(q)  # auto-delete: this process removed it by itself
    assert rec.removed == [("q", False)]


def test_an_ordered_record_says_where_a_queue_lives_and_that_it_goes_everywhere() -> None:
    """A declare record's home reaches the factory, and a Queue.Delete or QueueForget
    record's removal is one every worker makes (nobody is told); the factory reads no flag
    set around the call (#29)."""
    from broker import topology_records as tr

    broker = Broker()
    rec = Recording()
    broker.queue_factory.plug(rec)
    tr.apply_op(broker, tr.QueueDeclare("/", "q", True, False, False, {}, None, False, 3),
                lambda ref: None)
    tr.apply_op(broker, tr.QueueDeclare("/", "r", True, False, False, {}, None, False, 1),
                lambda ref: None)
    assert rec.made == [("/", "q", 3), ("/", "r", 1)]
    tr.apply_op(broker, tr.QueueDelete("/", "q", False, False, None), lambda ref: None)
    tr.apply_op(broker, tr.QueueForget("/", "r"), lambda ref: None)
    assert rec.removed == [("q", True), ("r", True)]


def test_every_vhost_of_a_broker_uses_the_runtime_plugged_in_once() -> None:
    broker = Broker()
    later = broker.add_vhost("later")
    rec = Recording()
    broker.queue_factory.plug(rec)
    broker.vhosts["/"].declare_queue("a")
    later.declare_queue("b")
    broker.add_vhost("new").declare_queue("c")  # created after the plug
    assert rec.made == [("/", "a", None), ("later", "b", None), ("new", "c", None)]
    broker.delete_vhost("new")  # every worker deletes the vhost
    assert rec.removed == [("c", True)]
    with pytest.raises(RuntimeError):
        broker.queue_factory.plug(Recording())


def test_an_unplugged_broker_factory_is_local() -> None:
    f = BrokerQueues()
    q = f.make_queue("q", "/", durable=False, exclusive=False, auto_delete=False,
                     exclusive_owner=None, arguments={}, settings=None, vhost=None)
    assert type(q) is Queue and not f.plugged
