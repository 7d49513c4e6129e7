"""Shared pieces of the Spark sink tests: amqpq broker processes on free ports, a queue
drainer, and the one local SparkSession every Spark test uses (``local[2, 2]``: two cores, one
task retry).

Imported by tests/test_spark_sink.py and tests/test_spark_sink_delivery.py; pytest does not
collect this module itself.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

from tests.support.broker_process import BrokerProcess as SharedBrokerProcess
from tests.support.broker_process import free_port

__all__ = ["BrokerProcess", "start_broker", "amqpq_proc", "drain", "free_port", "spark", "_df"]

REPO_ROOT = Path(__file__).resolve().parent.parent


# ====================================================================== broker processes
class BrokerProcess(SharedBrokerProcess):
    """A broker subprocess (tests/support/broker_process.py) with the Spark tests' short-hands:
    ``uri`` and ``channel()``."""

    @property
    def uri(self) -> str:
        """``amqp://guest:guest@127.0.0.1:PORT/%2F``."""
        return self.url

    def channel(self) -> Any:
        """A pika channel on a new connection to the broker."""
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", self.port))
        return conn.channel()


def start_broker(*args: str, management_port: int | None = None) -> BrokerProcess:
    """A started broker on free ports, on a temporary data dir (:meth:`close` removes it).

    ``args``: more command-line options (e.g. ``--ssl-*``: then ``tls_port`` is set);
    ``management_port``: serve the management HTTP API there (default: none).
    """
    broker = BrokerProcess(args=args, management=False if management_port is None
                           else management_port)
    broker.start()
    return broker


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    """One broker with its management API shared by a module's tests (names are unique
    per test); a test module uses it as ``broker = spark_support.broker``."""
    b = start_broker(management_port=free_port())
    yield b
    b.close()


@pytest.fixture(scope="module")
def amqpq_proc() -> Iterator[BrokerProcess]:
    """One broker process shared by this module's tests (names are unique per test)."""
    b = start_broker()
    yield b
    b.close()


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
