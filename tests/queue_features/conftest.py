"""Fixtures of the queue feature tests: ``world`` (a vhost on a fake clock) and ``wired`` (a
broker with a sans-IO client on channel 1); the helpers are in :mod:`tests.queue_features.support`.
"""

from __future__ import annotations

import pytest

from broker.broker import Broker
from broker.config import BrokerConfig
from broker.environment import BrokerEnvironment
from tests.queue_features.support import FakeClock, Wire, World


@pytest.fixture
def world() -> World:
    """One vhost whose timers run on a fake clock."""
    return World()


@pytest.fixture
def wired() -> tuple[Broker, FakeClock, Wire]:
    """A broker on a fake clock and a client connected to it with channel 1 open."""
    clock = FakeClock()
    broker = Broker(BrokerConfig(), BrokerEnvironment(clock=clock))
    return broker, clock, Wire(broker, clock).open(1)
