"""Disk full while writing: publishers are blocked, nothing confirmed is lost.

Faults are injected at the system-call boundary of :mod:`queue_store.disk_writes`: a
:class:`FullDisk` lets through a byte budget (the last write that crosses it is short, as
write(2) is on a file system that fills up) and then fails with ENOSPC. A failing fsync is
injected in :mod:`queue_store.durability`. ``interop_tests/test_disk_full.py`` does the same
against a broker process on a real, small tmpfs.

Reference: https://www.rabbitmq.com/docs/disk-alarms, /docs/connection-blocked,
/docs/confirms (a nack means the broker did not take responsibility).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import DEFAULT_CAPABILITIES, Client, methods
from pamqp import commands
from test_recovery import PERSISTENT, crash, pmsg, start

import queue_store.disk_writes as disk_writes
import queue_store.durability as durability_mod
from broker.alarms import Alarms
from broker.broker import Broker
from broker.config import BrokerConfig
from broker.environment import BrokerEnvironment, ResourceProbes
from broker.persistence import TopologyStore
from queue_store.backing import QueuedMessage
from queue_store.disk_writes import WriteErrors, write_buffer
from queue_store.msg_store import MessageStore
from queue_store.variable_queue import VariableQueue

PERSISTENT_PROPS = commands.Basic.Properties(delivery_mode=2)


class FullDisk:
    """Stands in for ``os`` in :mod:`queue_store.disk_writes`: ``room`` bytes (None:
    unlimited) are written, then ENOSPC."""

    def __init__(self) -> None:
        self.room: int | None = None
        self.refused = 0  # writes that failed

    def _take(self, data: Any) -> int:
        if self.room is None:
            return len(data)
        if self.room == 0:
            self.refused += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = min(self.room, len(data))
        self.room -= n
        return n

    def write(self, fd: int, data: Any) -> int:
        return os.write(fd, bytes(data[:self._take(data)]))

    def pwrite(self, fd: int, data: Any, offset: int) -> int:
        return os.pwrite(fd, bytes(data[:self._take(data)]), offset)


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> FullDisk:
    fake = FullDisk()
    monkeypatch.setattr(disk_writes, "os", SimpleNamespace(write=fake.write, pwrite=fake.pwrite))
    return fake


def start_with_alarms(data_dir: Path) -> tuple[Broker, TopologyStore, Alarms]:
    """A broker with the alarms wired as the server's are (``env.resources``): plenty of
    free space, memory never short, so only failed writes set the disk alarm."""
    broker, topology, _ = start(
        data_dir, BrokerConfig(memory_high_watermark=1 << 60, disk_free_limit=0),
        BrokerEnvironment(resources=ResourceProbes(rss=lambda: 0, disk_free=lambda: 1 << 40)))
    assert broker.alarms is not None
    return broker, topology, broker.alarms


def acks(frames: list) -> list[tuple[str, int, bool]]:
    return [(type(f).__name__, f.delivery_tag, f.multiple) for _, f in frames
            if isinstance(f, commands.Basic.Ack | commands.Basic.Nack)]


def blocking(frames: list) -> list[str]:
    return [type(m).__name__ for m in methods(frames)
            if isinstance(m, commands.Connection.Blocked | commands.Connection.Unblocked)]


def persistent_client(broker: Broker, queue: str = "dq") -> Client:
    caps = {**DEFAULT_CAPABILITIES, "connection.blocked": True}
    c = Client(broker).handshake(client_properties={"capabilities": caps}).open_channel(1)
    c.declare_queue(1, queue, durable=True)
    c.call(1, commands.Confirm.Select(), commands.Confirm.SelectOk)
    return c


def crash_and_drain(data_dir: Path, broker: Broker, topology: TopologyStore
                    ) -> tuple[list[bytes], int]:
    """``kill -9`` after the current batch, restart, Basic.Get everything from "dq": the
    bodies in order and the number of damaged records recovery skipped."""
    crash(broker, topology)
    restarted, _, counts = start(data_dir)
    q = restarted.vhosts["/"].queues["dq"]
    got = []
    while (qm := q.get()) is not None:
        got.append(qm.message.body)
    return got, counts["skipped"]


# ---- short writes ----------------------------------------------------------------------------


def test_short_write_leaves_exactly_the_unwritten_rest_buffered(
        tmp_path: Path, disk: FullDisk) -> None:
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        buffer = bytearray(b"0123456789abcdef")
        disk.room = 10
        error = write_buffer(fd, buffer)
        assert error is not None and error.errno == errno.ENOSPC
        assert bytes(buffer) == b"abcdef"
        assert (tmp_path / "f").read_bytes() == b"0123456789"
        disk.room = None  # space freed
        assert write_buffer(fd, buffer) is None
        assert buffer == bytearray()
        assert (tmp_path / "f").read_bytes() == b"0123456789abcdef"
    finally:
        os.close(fd)


def test_message_store_keeps_every_record_through_a_full_disk(
        tmp_path: Path, disk: FullDisk) -> None:
    store = MessageStore(tmp_path / "ms")
    store.recover()
    disk.room = 5_000  # a few records fit, one is cut short
    ids = [store.write(pmsg(bytes([i]) * 1_000)) for i in range(20)]
    assert store.flush() is not None
    assert disk.refused >= 1
    # every message is still readable (from the file or from RAM)
    assert [store.read(i).body for i in ids] == [bytes([i]) * 1_000 for i in range(20)]
    disk.room = None
    assert store.flush() is None
    store.sync()
    # a fresh process finds every record whole, none written twice
    again = MessageStore(tmp_path / "ms")
    assert again.recover() == 0
    assert sorted(again.index) == ids
    assert all(again.retain(i) for i in ids)
    assert [again.read(i).body for i in ids] == [bytes([i]) * 1_000 for i in range(20)]
    again.close()
    store.close()


# ---- the broker --------------------------------------------------------------------------------


def test_disk_full_blocks_publishers_and_holds_confirms_until_writes_succeed(
        tmp_path: Path, disk: FullDisk) -> None:
    broker, topology, alarms = start_with_alarms(tmp_path)
    c = persistent_client(broker)
    topology.save_if_changed()
    out = c.publish(1, "", "dq", b"before", PERSISTENT_PROPS)
    assert acks(out) == [("Ack", 1, False)]  # the disk has room: confirmed

    disk.room = 0
    out = []
    for i in range(5):
        out += c.publish(1, "", "dq", f"m{i}".encode(), PERSISTENT_PROPS)
    assert acks(out) == []  # not on disk: not confirmed
    assert alarms.disk and broker.alarms_active
    assert blocking(out) == ["Blocked"]
    assert methods(out, commands.Connection.Blocked)[0].reason == "low on disk"

    broker.durability.maybe_sync()  # a tick while still full changes nothing
    assert acks(c.read()) == []

    disk.room = None  # space freed
    broker.durability.maybe_sync()  # the next tick retries the writes, then fsyncs
    out = c.read()
    assert acks(out) == [("Ack", 6, True)]
    assert blocking(out) == ["Unblocked"]
    assert not alarms.disk

    # kill -9 now: every confirmed message is there, once
    got, skipped = crash_and_drain(tmp_path, broker, topology)
    assert got == [b"before"] + [f"m{i}".encode() for i in range(5)]
    assert skipped == 0


def test_kill_while_disk_full_loses_only_unconfirmed_messages(
        tmp_path: Path, disk: FullDisk) -> None:
    broker, topology, _ = start_with_alarms(tmp_path)
    c = persistent_client(broker)
    topology.save_if_changed()
    confirmed = []
    disk.room = 3_000  # room for some records, not all
    for i in range(40):
        body = f"m{i:02d}".encode() * 20
        if acks(c.publish(1, "", "dq", body, PERSISTENT_PROPS)):
            confirmed.append(body)
    assert 0 < len(confirmed) < 40
    # "kill -9" with the disk still full (the unwritten records die with the process)
    got, _ = crash_and_drain(tmp_path, broker, topology)
    assert got[:len(confirmed)] == confirmed  # every confirmed one, in order, once
    assert len(set(got)) == len(got)


def test_failed_fsync_nacks_the_publishes_it_covered_and_keeps_them_queued(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broker, _, alarms = start_with_alarms(tmp_path)
    c = persistent_client(broker)
    real = durability_mod.sync_fds
    failures = [OSError(errno.EIO, "fsync: I/O error")]

    def flaky(fds: list[int]) -> None:
        if failures:
            raise failures.pop()
        real(fds)

    monkeypatch.setattr(durability_mod, "sync_fds", flaky)
    out = c.publish(1, "", "dq", b"a", PERSISTENT_PROPS)
    assert acks(out) == [("Nack", 1, False)]
    assert alarms.disk  # publishers blocked until a round succeeds
    out = c.publish(1, "", "dq", b"b", PERSISTENT_PROPS)
    assert acks(out) == [("Ack", 2, False)]
    assert not alarms.disk
    ok = c.declare_queue(1, "dq", durable=True, passive=True)
    assert ok.message_count == 2  # the nacked message stays queued (the publisher may resend)


def test_transient_publishes_are_confirmed_while_the_disk_is_full(
        tmp_path: Path, disk: FullDisk) -> None:
    broker, _, _ = start_with_alarms(tmp_path)
    c = persistent_client(broker)
    c.declare_queue(1, "tq")
    disk.room = 0
    out = c.publish(1, "", "tq", b"t")  # transient: nothing to write
    assert acks(out) == [("Ack", 1, False)]


# ---- the paging file ----------------------------------------------------------------------------


def test_paging_file_full_keeps_messages_in_ram_in_order(tmp_path: Path, disk: FullDisk) -> None:
    errors = WriteErrors()
    changes: list[bool] = []
    errors.on_change = changes.append
    vq = VariableQueue(tmp_path / "p.delta", ram_messages=4, read_batch=3, errors=errors,
                       beta_messages=0)  # straight to delta
    disk.room = 300  # a few paged records fit
    for i in range(30):
        vq.append(QueuedMessage(i, pmsg(f"body-{i}".encode() * 5, properties_raw=PERSISTENT)))
    vq.flush()
    assert errors.active and changes == [True]
    out = []
    while (qm := vq.popleft()) is not None:
        out.append(qm.seq)
    assert out == list(range(30))
    assert not errors.active and changes == [True, False]
    vq.close()


def test_beta_body_file_full_keeps_bodies_in_ram_in_order(tmp_path: Path,
                                                          disk: FullDisk) -> None:
    errors = WriteErrors()
    changes: list[bool] = []
    errors.on_change = changes.append
    vq = VariableQueue(tmp_path / "p.delta", ram_messages=4, read_batch=3, errors=errors)
    disk.room = 300  # a few beta bodies fit
    for i in range(30):
        vq.append(QueuedMessage(i, pmsg(f"body-{i}".encode() * 5, properties_raw=PERSISTENT)))
    assert vq.state_counts()["beta"] == 26
    vq.q3.flush()
    assert errors.active and changes == [True]
    out = []
    while (qm := vq.popleft()) is not None:
        out.append((qm.seq, qm.message.body))
    assert out == [(i, f"body-{i}".encode() * 5) for i in range(30)]
    assert not errors.active and changes == [True, False]
    vq.close()


# ---- the free-space alarm ------------------------------------------------------------------------


def test_disk_alarm_follows_free_space_and_failed_writes(tmp_path: Path) -> None:
    free = [100 * 10**6]
    changes: list[bool] = []
    alarms = Alarms(tmp_path, watermark=1 << 60, disk_free_limit=50 * 10**6,
                    on_change=changes.append, rss=lambda: 0, disk_free=lambda: free[0])
    alarms.check()
    assert alarms.active == [] and changes == []
    free[0] = 49 * 10**6  # below disk_free_limit (bytes)
    alarms.check()
    assert alarms.active == ["disk"] and changes == [True]
    free[0] = 100 * 10**6
    alarms.check()
    assert alarms.active == [] and changes == [True, False]
    alarms.write_failed(True)  # ENOSPC with free space left (another process filled it...)
    assert alarms.active == ["disk"] and changes == [True, False, True]
    alarms.check()  # the free-space check alone does not clear it
    assert alarms.active == ["disk"]
    alarms.write_failed(False)
    assert alarms.active == [] and changes == [True, False, True, False]
