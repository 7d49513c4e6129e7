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
        self.made: list[tuple[str, str]] = []
        self.removed: list[str] = []

    def make_queue(self, name: str, vhost_name: str, **kwargs: Any) -> Queue:
        self.made.append((vhost_name, name))
        return LOCAL_QUEUES.make_queue(name, vhost_name, **kwargs)

    def queue_removed(self, q: Queue) -> None:
        self.removed.append(q.name)


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
    assert rec.made == [("v", "q")]
    vh.queue_unused(q)  # auto-delete
    assert rec.removed == ["q"]


def test_every_vhost_of_a_broker_uses_the_runtime_plugged_in_once() -> None:
    broker = Broker()
    later = broker.add_vhost("later")
    rec = Recording()
    broker.queue_factory.plug(rec)
    broker.vhosts["/"].declare_queue("a")
    later.declare_queue("b")
    broker.add_vhost("new").declare_queue("c")  # created after the plug
    assert rec.made == [("/", "a"), ("later", "b"), ("new", "c")]
    broker.delete_vhost("new")
    assert rec.removed == ["c"]
    with pytest.raises(RuntimeError):
        broker.queue_factory.plug(Recording())


def test_an_unplugged_broker_factory_is_local() -> None:
    f = BrokerQueues()
    q = f.make_queue("q", "/", durable=False, exclusive=False, auto_delete=False,
                     exclusive_owner=None, arguments={}, settings=None, vhost=None)
    assert type(q) is Queue and not f.plugged
