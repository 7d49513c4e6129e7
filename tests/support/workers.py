"""Helpers for tests of ``amqpq-server --workers N``: connections placed on a given worker,
the worker a queue lives on, worker pids (tests/test_workers.py and friends)."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pika

from tests.support.broker_process import BrokerProcess, free_port

WAIT = 10.0  # seconds a change may take to reach the other worker
#: declare arguments that keep a classic queue on the worker of the connection declaring it
#: (RabbitMQ's client-local locator), for tests of a queue used from the other worker; without
#: them a transient queue lives where it is first used (amqp_server/workers/placement.py)
PIN = {"x-queue-master-locator": "client-local"}


@contextmanager
def running_workers(base: Path, *args: str, log_level: str = "warning"
                    ) -> Iterator[BrokerProcess]:
    """A broker with ``--workers 2`` (and ``args``), management API on a free port, data
    and log under ``base``; closed after."""
    proc = BrokerProcess(base / "data", base / "broker.log", management=free_port(),
                         log_level=log_level, args=("--workers", "2", *args))
    try:
        proc.start()
        yield proc
    finally:
        proc.close()


def api(broker: BrokerProcess, path: str) -> object:
    req = urllib.request.Request(f"http://127.0.0.1:{broker.management_port}{path}")
    req.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    with urllib.request.urlopen(req, timeout=5) as resp:
        return json.loads(resp.read())


def queue_info(broker: BrokerProcess, name: str) -> dict:
    info = api(broker, f"/api/queues/%2F/{name}")
    assert isinstance(info, dict)
    return info


def worker_of(broker: BrokerProcess, conn: pika.BlockingConnection) -> int:
    """The worker ``conn`` is on: where an exclusive queue it declares lives."""
    ch = conn.channel()
    name = ch.queue_declare("", exclusive=True).method.queue
    deadline = time.monotonic() + WAIT
    while True:
        try:
            return int(queue_info(broker, name)["worker"])
        except urllib.error.HTTPError:  # not on worker 0's list yet
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def connect_on(broker: BrokerProcess, worker: int) -> pika.BlockingConnection:
    """A connection that landed on ``worker`` (others opened on the way are closed)."""
    for _ in range(100):
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        if worker_of(broker, conn) == worker:
            return conn
        conn.close()
    raise AssertionError(f"no connection landed on worker {worker} in 100 tries")


def connected_pair(broker: BrokerProcess) -> Iterator[tuple[pika.BlockingConnection,
                                                           pika.BlockingConnection]]:
    """A connection on worker 0 and one on worker 1 (a ``pair`` fixture's body); both closed
    after."""
    a, b = connect_on(broker, 0), connect_on(broker, 1)
    yield a, b
    for conn in (a, b):
        if conn.is_open:
            conn.close()


def qname() -> str:
    return f"wq-{uuid.uuid4().hex[:8]}"


def worker_pids(supervisor_pid: int) -> list[int]:
    """The supervisor's children (from every /proc/PID/stat: a child spawned from another
    thread is not in the main thread's ``children`` list)."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == supervisor_pid:
                pids.append(int(d.name))
    return pids


def worker_pid(broker: BrokerProcess, index: int) -> int:
    """The pid of worker ``index`` of ``broker`` (``--workers N``)."""
    for pid in worker_pids(broker.pid):
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if b"--worker-index" in cmd and cmd[cmd.index(b"--worker-index") + 1] == b"%d" % index:
            return pid
    raise AssertionError(f"worker {index} not found")
