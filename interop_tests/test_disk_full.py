"""Disk full while writing, against a broker process whose data dir is a small tmpfs.

A pika publisher with confirms streams persistent messages until the file system is full:
the broker blocks it (Connection.Blocked), holds the confirms of what it could not write,
keeps serving, and takes publishes again once there is room (the tmpfs is grown). After a
``kill -9`` and a restart every confirmed message is there exactly once.

Needs root (to mount a tmpfs); skipped otherwise. These tests start their own broker
processes, so they ignore ``AMQPQ_TEST_URL``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pika = pytest.importorskip("pika")
from pika import exceptions as pika_exc  # noqa: E402

from tests.support.broker_process import BrokerProcess  # noqa: E402
from tests.support.cluster import wait_until  # noqa: E402

pytestmark = pytest.mark.own_broker  # never uses the broker under test (conftest.py)

QUEUE = "diskfull.q"
LATER = "diskfull.declared-while-full"
BODY = 16 * 1024  # bytes per message
DISK = "8m"  # tmpfs size
BROKER: dict[str, Any] = {"fresh_port": True, "log_level": "info", "management": True}


def _mount(where: Path, size: str, remount: bool = False) -> subprocess.CompletedProcess[str]:
    opts = f"remount,size={size}" if remount else f"size={size}"
    return subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where)],
                          capture_output=True, text=True, check=False)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """An 8 MiB tmpfs mounted at a fresh folder (unmounted afterwards)."""
    where = tmp_path / "disk"
    where.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = _mount(where, DISK)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


def _params(bp: BrokerProcess, blocked_timeout: float) -> pika.ConnectionParameters:
    return pika.ConnectionParameters(
        host="127.0.0.1", port=bp.port, credentials=pika.PlainCredentials("guest", "guest"),
        connection_attempts=1, socket_timeout=5, stack_timeout=10,
        blocked_connection_timeout=blocked_timeout, heartbeat=0)


def _publish(ch: object, i: int) -> None:
    ch.basic_publish(  # type: ignore[attr-defined]
        exchange="", routing_key=QUEUE, body=str(i).encode().ljust(BODY, b"."),
        properties=pika.BasicProperties(delivery_mode=2, message_id=str(i)), mandatory=True)


def _publisher(bp: BrokerProcess, blocked_timeout: float
               ) -> tuple[pika.BlockingConnection, object]:
    """A connection that gives up after ``blocked_timeout`` s blocked, and a confirm-mode
    channel with the durable queue declared."""
    conn = pika.BlockingConnection(_params(bp, blocked_timeout))
    ch = conn.channel()
    ch.queue_declare(QUEUE, durable=True)
    ch.confirm_delivery()
    return conn, ch


def _close(conn: pika.BlockingConnection) -> None:
    with contextlib.suppress(Exception):
        if conn.is_open:
            conn.close()


def test_disk_full_blocks_publisher_and_loses_no_confirmed_message(
        small_disk: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # --disk-free-limit 0: no early alarm from the free-space check, so writes hit ENOSPC
    bp = BrokerProcess(small_disk / "data", tmp_path / "broker.log", **BROKER,
                       args=("--disk-free-limit", "0"))
    bp.start()
    try:
        conn, ch = _publisher(bp, blocked_timeout=3)
        confirmed: list[int] = []
        stopped_by: Exception | None = None
        for i in range(2 * 8 * 1024 * 1024 // BODY):  # twice what the disk holds
            try:
                _publish(ch, i)
            except (pika_exc.AMQPError, OSError) as exc:
                stopped_by = exc
                break
            confirmed.append(i)
        _close(conn)
        assert stopped_by is not None, "the disk never filled up"
        # pika gives up on a connection that stays blocked (Connection.Blocked received)
        assert isinstance(stopped_by, pika_exc.ConnectionBlockedTimeout), repr(stopped_by)
        assert "Connection.Blocked(['reason=low on disk'])" in caplog.text
        assert 50 < len(confirmed) < 8 * 1024 * 1024 // BODY
        assert bp.proc is not None and bp.proc.poll() is None, bp.log()
        assert "write failed" in bp.log()

        # others are still served while the disk is full: a consumer sees the queue, and a
        # durable queue can be declared (its definition is saved once there is room)
        conn = pika.BlockingConnection(_params(bp, blocked_timeout=30))
        ok = conn.channel().queue_declare(QUEUE, durable=True, passive=True)
        assert ok.method.message_count >= len(confirmed)
        conn.channel().queue_declare(LATER, durable=True)
        _close(conn)
        time.sleep(1.5)  # a tick: the definitions file cannot be rewritten now
        assert bp.log().count("could not save definitions") == 1  # said once, not every tick
        assert not (small_disk / "data" / "definitions.json.tmp").exists()

        # room again: the next publish is confirmed within a few ticks
        grown = _mount(small_disk, "64m", remount=True)
        assert grown.returncode == 0, grown.stderr
        conn, ch = _publisher(bp, blocked_timeout=30)
        started = time.monotonic()
        _publish(ch, 1_000_000)
        confirmed.append(1_000_000)
        assert time.monotonic() - started < 10
        _close(conn)

        definitions = small_disk / "data" / "definitions.json"  # saved at a tick with room
        wait_until(lambda: LATER in definitions.read_text(), f"{LATER} in {definitions}")
        bp.kill()  # kill -9
        bp.start()
        conn = pika.BlockingConnection(_params(bp, blocked_timeout=30))
        ch = conn.channel()
        seen: list[int] = []
        while True:
            method, props, body = ch.basic_get(QUEUE, auto_ack=True)
            if method is None:
                break
            assert body == props.message_id.encode().ljust(BODY, b".")
            seen.append(int(props.message_id))
        _close(conn)
        assert len(seen) == len(set(seen)), "a message came back twice"
        missing = sorted(set(confirmed) - set(seen))
        assert not missing, f"{len(missing)} confirmed messages lost: {missing[:10]}"
        conn = pika.BlockingConnection(_params(bp, blocked_timeout=30))
        conn.channel().queue_declare(LATER, durable=True, passive=True)  # survived too
        _close(conn)
    finally:
        bp.kill()


def test_publisher_blocked_at_once_when_free_space_is_below_the_limit(
        small_disk: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # the default disk_free_limit (50 MB) is more than the whole 8 MiB disk
    bp = BrokerProcess(small_disk / "data", tmp_path / "broker.log", **BROKER)
    bp.start()
    try:
        conn, ch = _publisher(bp, blocked_timeout=2)
        with pytest.raises(pika_exc.ConnectionBlockedTimeout):
            for i in range(10):
                _publish(ch, i)
        assert "Connection.Blocked(['reason=low on disk'])" in caplog.text
        assert "write failed" not in bp.log()  # blocked before the disk ran out
    finally:
        bp.kill()
