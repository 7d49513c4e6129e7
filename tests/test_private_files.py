"""Nothing the broker writes can be read by other users of the machine.

A broker started with the usual umask (022) writes every kind of file it has: password hashes
(definitions.json), persistent messages small (queue index) and large (message store),
a stream's segments, a delayed exchange's log, a deduplication exchange's key journal, a paged
queue's overflow, its log file. Every file under the data directory, the data directory itself
and the log file must then give the group and others nothing (issue #28); a data directory an
older version made 0755 is closed at start.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pika
import pytest

from tests.support.broker_process import BrokerProcess, free_port
from tests.support.cluster import api, wait_until

pytestmark = pytest.mark.timeout(60)


@contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def _open_to_others(root: Path) -> list[str]:
    """Paths under ``root`` (itself included) with any group or other permission bit."""
    found = []
    for path in [root, *root.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        if mode & 0o077 and not path.is_symlink():
            found.append(f"{path.relative_to(root.parent)} {mode:04o}")
    return found


def _fill(b: BrokerProcess) -> None:
    api(b, "/api/users/alice", "PUT", {"password": "s3cret-password", "tags": "administrator"})
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port))
    ch = conn.channel()
    ch.confirm_delivery()
    persistent = pika.BasicProperties(delivery_mode=2)
    ch.queue_declare("durable", durable=True)
    for body in (b"small", b"x" * 100_000):  # queue index / message store
        ch.basic_publish("", "durable", body, persistent)
    ch.queue_declare("lazy", durable=True, arguments={"x-max-length-bytes": 10**9,
                                                      "x-queue-mode": "lazy"})
    ch.basic_publish("", "lazy", b"paged" * 1000, persistent)
    ch.queue_declare("stream", durable=True, arguments={"x-queue-type": "stream"})
    ch.basic_publish("", "stream", b"in a segment", persistent)
    ch.exchange_declare("delayed", "x-delayed-message", durable=True,
                        arguments={"x-delayed-type": "direct"})
    ch.queue_bind("durable", "delayed", "k")
    ch.basic_publish("delayed", "k", b"later", pika.BasicProperties(
        delivery_mode=2, headers={"x-delay": 600_000}))
    ch.exchange_declare("dedup", "x-message-deduplication", durable=True,
                        arguments={"x-cache-size": 100, "x-cache-persistence": "disk"})
    ch.queue_bind("durable", "dedup", "")
    ch.basic_publish("dedup", "", b"once", pika.BasicProperties(
        delivery_mode=2, headers={"x-deduplication-header": "k1"}))
    conn.close()


def test_every_file_the_broker_writes_is_private(tmp_path: Path) -> None:
    log_file = tmp_path / "logs" / "amqpq.log"
    with umask(0o022), BrokerProcess(tmp_path / "data", tmp_path / "out.log",
                                     management=free_port(),
                                     args=("--log-file", str(log_file))) as b:
        _fill(b)
        data = tmp_path / "data"
        wait_until(lambda: (data / "definitions.json").exists()
                   and "alice" in (data / "definitions.json").read_text(),
                   "alice in definitions.json")
        assert b.stop() == 0
    files = [p for p in data.rglob("*") if p.is_file()]
    kinds = {p.suffix or p.name for p in files}  # each kind above was really written
    assert {".json", ".idx", ".seg", ".segment", ".dseg", ".keys"} <= kinds, kinds
    assert _open_to_others(data) == []
    assert _open_to_others(log_file.parent) == [], "the log file"


def test_a_data_directory_open_to_others_is_closed_at_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    (data / "definitions.json").write_text("{}")
    (data / "definitions.json").chmod(0o644)  # as an older amqpq left it
    with BrokerProcess(data, tmp_path / "out.log", log_level="info") as b:
        assert stat.S_IMODE(data.stat().st_mode) == 0o700
        assert "was open to other users (mode 0755): now 0700" in b.log_text()
