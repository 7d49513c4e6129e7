"""``x-cache-persistence: disk`` on an ``x-message-deduplication`` exchange: the cache's keys
(with their remaining TTL) survive a restart; ``memory`` ones do not; the journal stays
bounded and goes with its exchange.

Source: https://github.com/noxdafox/rabbitmq-message-deduplication (README,
``x-cache-persistence``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import FakeClock

from amqp_common.timers import Timers
from exchanges.binding import Destination
from queue_store.durability import Durability
from queue_store.key_journal import KeyJournal
from queue_store.outcomes import DUPLICATE, ROUTED
from queue_store.storage import VhostStorage
from tests.queue_features.support import make_message
from vhosts.dedup_persistence import recover_dedup
from vhosts.vhost import VirtualHost


def start(path: Path, clock: FakeClock | None = None,
          **arguments: Any) -> tuple[VirtualHost, Durability]:
    """A vhost on ``path`` with exchange ``dd`` (fanout to queue ``q``), as after a restart
    (``clock``: its monotonic and wall clock; None: the machine's)."""
    durability = Durability()
    timers = Timers() if clock is None else Timers(clock, wall=clock)
    vh = VirtualHost("/", timers, VhostStorage(path, durability))
    vh.declare_exchange("dd", "x-message-deduplication", durable=True,
                        arguments={"x-cache-size": 100, **arguments})
    vh.declare_queue("q", durable=True)
    vh.bind(Destination("queue", "q"), "dd", "")
    recover_dedup(vh)
    return vh, durability


def send(vh: VirtualHost, key: Any, **headers: Any) -> int:
    message = make_message("", b"m", "dd", headers={"x-deduplication-header": key, **headers})
    return vh.publish(vh.exchange("dd"), message)


def test_disk_cache_survives_a_restart_with_its_ttls(tmp_path: Path) -> None:
    clock = FakeClock(1.7e9)
    vh, durability = start(tmp_path, clock, **{"x-cache-persistence": "disk"})
    for key in ("a", "b", 7, 2.5):
        assert send(vh, key) == ROUTED
    assert send(vh, "short", **{"x-cache-ttl": 1}) == ROUTED  # expires before the restart
    durability.flush_writes()  # what a kill -9 leaves
    clock.advance(0.01)
    vh2, _ = start(tmp_path, clock, **{"x-cache-persistence": "disk"})
    assert [send(vh2, k) for k in ("a", "b", 7, 2.5)] == [DUPLICATE] * 4
    assert send(vh2, "short") == ROUTED and send(vh2, "new") == ROUTED


def test_memory_cache_starts_empty_and_leaves_no_journal(tmp_path: Path) -> None:
    vh, durability = start(tmp_path)
    send(vh, "a")
    durability.flush_writes()
    assert not (tmp_path / "dedup").exists()
    vh2, _ = start(tmp_path)
    assert send(vh2, "a") == ROUTED


def test_deleting_the_exchange_removes_its_journal(tmp_path: Path) -> None:
    vh, durability = start(tmp_path, **{"x-cache-persistence": "disk"})
    send(vh, "a")
    durability.flush_writes()
    vh.delete_exchange("dd")
    assert [p for p in (tmp_path / "dedup").iterdir()] == []
    vh2, _ = start(tmp_path, **{"x-cache-persistence": "disk"})
    assert send(vh2, "a") == ROUTED


def test_journal_is_rewritten_when_it_grows(tmp_path: Path) -> None:
    journal = KeyJournal(tmp_path / "j.keys", size=10)
    for i in range(2 * 10 + 1025):
        journal.record(f"k{i}", 0)
    assert journal.needs_rewrite
    journal.flush()
    assert len(journal.load(0)) == 2 * 10 + 1025
    assert journal.rewrite([("k1", 0), ("k2", 0)])
    assert not journal.needs_rewrite and journal.load(0) == [("k1", 0), ("k2", 0)]
    data = (tmp_path / "j.keys").read_bytes()
    (tmp_path / "j.keys").write_bytes(data[:-2])  # a torn last record
    assert journal.load(0) == [("k1", 0)]
