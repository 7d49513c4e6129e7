"""What a Broker gets at construction (BrokerEnvironment, BrokerConfig.management, its own
definition extras) and when it saves its definitions (only after a change, retried after a
failed write)."""

from __future__ import annotations

import datetime
import errno
from pathlib import Path

import pytest

import broker.persistence as persistence
from amqp_server.server import parse_args
from broker.broker import Broker
from broker.config import BrokerConfig, ManagementOptions
from broker.environment import BrokerEnvironment, ResourceProbes
from broker.persistence import DEFINITIONS_FILE
from queue_store.durability import run_inline
from queue_store.outcomes import Settlement
from tests.queue_features.support import make_message
from vhosts.definitions import export_definitions, import_definitions


def test_defaults_are_in_memory_without_alarms() -> None:
    broker = Broker(BrokerConfig())
    assert broker.topology is None and broker.alarms is None
    assert broker.durability.runner is run_inline
    assert broker.vhosts["/"].storage is None
    assert broker.save_topology() is False


def test_clock_and_wakeup_drive_the_timers() -> None:
    now = [100.0]
    woken: list[float] = []
    broker = Broker(BrokerConfig(), BrokerEnvironment(clock=lambda: now[0],
                                                      wakeup=woken.append))
    fired: list[str] = []
    broker.timers.call_later(5, lambda: fired.append("late"))
    broker.timers.call_later(2, lambda: fired.append("early"))
    assert woken == [105.0, 102.0]  # each new earliest deadline, seconds on the clock
    now[0] = 103.0
    assert broker.timers.run_due() == 1 and fired == ["early"]


def test_run_blocking_runs_the_fsync_rounds() -> None:
    rounds: list[str] = []

    def runner(work, done) -> None:  # type: ignore[no-untyped-def]
        rounds.append("round")
        run_inline(work, done)

    broker = Broker(BrokerConfig(), BrokerEnvironment(run_blocking=runner))
    confirmed: list[int] = []
    broker.durability.after_sync(lambda: confirmed.append(1))
    assert rounds == ["round"] and confirmed == [1]


def test_resources_give_alarms_that_block_on_a_failed_write(tmp_path: Path) -> None:
    free = [10**12]
    broker = Broker(BrokerConfig(data_dir=tmp_path, disk_free_limit=1000),
                    BrokerEnvironment(storage=True, resources=ResourceProbes(
                        rss=lambda: 0, disk_free=lambda: free[0])))
    assert broker.alarms is not None
    broker.durability.write_errors.on_change(True)  # what a failing write reports
    assert broker.alarms_active and broker.alarm_reason == "low on disk"
    broker.durability.write_errors.on_change(False)
    assert not broker.alarms_active
    free[0] = 10  # below disk_free_limit: the next tick sets the alarm
    broker.tick()
    assert broker.alarms.active == ["disk"] and broker.alarms_active


def test_definitions_are_exported_only_after_a_change(tmp_path: Path) -> None:
    broker = Broker(BrokerConfig(data_dir=tmp_path), BrokerEnvironment(storage=True))
    topology = broker.topology
    assert topology is not None
    assert broker.save_topology() and topology.exports == 1  # first save: the file
    for _ in range(10):  # idle ticks
        broker.tick()
    assert topology.exports == 1
    broker.vhosts["/"].declare_queue("q", durable=True)
    broker.after_batch()
    assert topology.exports == 2
    broker.after_batch()
    broker.tick()
    assert topology.exports == 2
    saved = (tmp_path / DEFINITIONS_FILE).read_text()
    assert '"name": "q"' in saved


def test_failed_save_is_retried_every_tick_and_logged_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    broker = Broker(BrokerConfig(data_dir=tmp_path), BrokerEnvironment(storage=True))
    broker.save_topology()
    real = persistence.write_atomically
    failing = [True]

    def full(path: Path, data: bytes) -> None:
        if failing[0]:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, data)

    monkeypatch.setattr(persistence, "write_atomically", full)
    broker.vhosts["/"].declare_queue("later", durable=True)
    with caplog.at_level("WARNING", logger="amqpq.persistence"):
        broker.after_batch()
        broker.tick()
        broker.tick()
        assert caplog.text.count("could not save definitions") == 1
        assert broker.topology is not None and broker.topology.pending
        failing[0] = False
        broker.tick()
    assert "definitions saved again" in caplog.text
    assert not broker.topology.pending
    assert "later" in (tmp_path / DEFINITIONS_FILE).read_text()


def test_vhost_metadata_belongs_to_its_broker() -> None:
    one, other = Broker(BrokerConfig()), Broker(BrokerConfig())
    import_definitions(one, {"vhosts": [{"name": "v", "description": "d", "tags": ["a"]}]})
    assert one.extras.metadata("v") == {"description": "d", "tags": ["a"]}
    assert other.extras.metadata("v") == {"description": "", "tags": []}
    one.delete_vhost("v")
    one.add_vhost("v")  # a new vhost of that name starts without the old metadata
    vhosts = {v["name"]: v for v in export_definitions(one)["vhosts"]}
    assert vhosts["v"]["metadata"] == {"description": "", "tags": []}


def test_management_options_are_a_config_field(tmp_path: Path) -> None:
    assert BrokerConfig().management == ManagementOptions()  # off when made in code
    defs = tmp_path / "defs.json"
    defs.write_text("{}")
    config = parse_args(["--port", "0", "--management-port", "0",
                         "--definitions", str(defs)])
    assert config.management == ManagementOptions(enabled=True, port=0, definitions=defs)
    assert parse_args(["--no-management"]).management.enabled is False


def test_wall_clock_follows_the_injected_clock() -> None:
    """Wall-clock time (x-death times, persisted expiry, stream timestamps) is the
    environment's wall clock read once, moved on by its monotonic clock."""
    now = [1000.0]
    broker = Broker(BrokerConfig(), BrokerEnvironment(clock=lambda: now[0],
                                                      wall=lambda: 1.7e9))
    timers = broker.timers
    assert timers.wall_ms() == 1_700_000_000_000
    now[0] += 61.5
    assert timers.wall_ms() == 1_700_000_061_500
    assert timers.from_wall_ms(1_700_000_061_500) == pytest.approx(now[0])
    vhost = broker.vhosts["/"]
    dead = vhost.declare_queue("dead")
    q = vhost.declare_queue("q", arguments={"x-dead-letter-exchange": "",
                                            "x-dead-letter-routing-key": "dead"})
    q.publish(make_message("q"))
    qm = q.get()
    q.settle([(qm, q, None)], Settlement.REJECT)
    death = dead.get(no_ack=True).message.headers["x-death"][0]
    assert death["time"] == datetime.datetime.fromtimestamp(1_700_000_061, datetime.UTC)
