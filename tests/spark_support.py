"""Shared pieces of the Spark sink tests: amqpq broker processes on free ports, a queue
drainer, and the one local SparkSession every Spark test uses (``local[2, 2]``: two cores, one
task retry).

Imported by tests/test_spark_sink.py and tests/test_spark_sink_delivery.py; pytest does not
collect this module itself.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pika
import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
BROKER_START_TIMEOUT = 20.0

# ====================================================================== broker processes
@dataclass
class BrokerProcess:
    """An ``python -m amqp_server`` child process on a free port."""

    proc: subprocess.Popen[str]
    port: int
    data_dir: str
    management_port: int | None = None

    @property
    def uri(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    def channel(self) -> Any:
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", self.port))
        return conn.channel()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        shutil.rmtree(self.data_dir, ignore_errors=True)


def start_broker(*extra: str, management_port: int | None = None) -> BrokerProcess:
    """Start the broker on port 0 (it picks a free one) and wait for its 'listening' line.

    ``extra``: more command-line options (e.g. ``--ssl-*``); ``management_port``: serve the
    management HTTP API there.
    """
    data_dir = tempfile.mkdtemp(prefix="amqpq-spark-test-")
    if management_port is not None:
        extra = (*extra, "--management-port", str(management_port))
    proc = subprocess.Popen(
        [sys.executable, "-m", "amqp_server", "--host", "127.0.0.1", "--port", "0",
         "--data-dir", data_dir, "--log-level", "warning", *extra],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    found: list[int] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            m = re.search(r"listening on amqp://[^:]+:(\d+)", line)
            if m and not found:
                found.append(int(m.group(1)))
        # keep draining so the child never blocks on a full pipe

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + BROKER_START_TIMEOUT
    while not found and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    if not found:
        proc.kill()
        pytest.fail("amqpq broker did not start")
    return BrokerProcess(proc, found[0], data_dir, management_port)


@pytest.fixture(scope="module")
def amqpq_proc() -> Iterator[BrokerProcess]:
    """One broker process shared by this module's tests (names are unique per test)."""
    b = start_broker()
    yield b
    b.stop()


def drain(port: int, queue: str, expected: int, timeout: float = 20.0) -> list[tuple[Any, bytes]]:
    """Consume ``queue`` (auto-ack) until ``expected`` messages or 1 s of silence."""
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    ch = conn.channel()
    out: list[tuple[Any, bytes]] = []
    deadline = time.monotonic() + timeout
    for method, props, body in ch.consume(queue, auto_ack=True, inactivity_timeout=1.0):
        if method is None or time.monotonic() > deadline:
            break
        out.append((props, body))
        if len(out) >= expected:
            break
    ch.cancel()
    # anything more would be a duplicate: check the queue is now empty
    extra = ch.queue_declare(queue, passive=True).method.message_count
    conn.close()
    assert extra == 0, f"{extra} more messages than expected in {queue}"
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _java_available() -> bool:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return True
    return shutil.which("java") is not None


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A small local SparkSession (2 cores, 1 task retry) shared by every Spark test."""
    if not _java_available():
        pytest.skip("java not found (install OpenJDK 17 or set JAVA_HOME)")
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # workers find spark_sink and pyspark_amqpq (automatic registration) even when the
    # package is not installed
    paths = [str(REPO_ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    session = (
        SparkSession.builder.master("local[2, 2]")
        .appName("amqpq-spark-sink-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("FATAL")
    yield session
    session.stop()


def _df(spark: Any, n: int, partitions: int = 2) -> Any:
    from pyspark.sql import functions as F

    country = F.element_at(F.array(F.lit("FR"), F.lit("DE"), F.lit("US")),
                           (F.col("id") % 3 + 1).cast("int"))
    return spark.range(n, numPartitions=partitions).select(
        "id", country.alias("country"), (F.col("id") * 0.5).alias("amount"))
