"""Nodes of an amqpq cluster for the tests: broker processes joined through one etcd
(:mod:`tests.support.etcd`), each on free ports of its own, and a few helpers."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pika

from tests.support.broker_process import START_TIMEOUT, BrokerProcess, free_port
from tests.support.etcd import running_etcd

if TYPE_CHECKING:
    from tests.support.etcd import Etcd

WAIT = 15.0  # seconds any cluster-wide change may take to be seen


def cluster_node(base: Path, name: str, etcd: Etcd, *extra: str, workers: int = 1
                 ) -> BrokerProcess:
    """Node ``name`` (not started) of the cluster in ``etcd`` (its TLS and auth options):
    data in ``base/name``, management API on a free port; ``workers`` > 1: a node of that
    many worker processes (``--workers N``; a kill -9 of it kills them all), given 2 (N + 1)
    times the usual time to start (the supervisor and each worker are Python processes of
    their own: 40 s each on this machine under load)."""
    more = ("--workers", str(workers)) if workers > 1 else ()
    return BrokerProcess(base / name, base / f"{name}.log", management=free_port(),
                         log_level="info", start_timeout=START_TIMEOUT * (
                             2 * (workers + 1) if workers > 1 else 1),
                         args=("--node-name", name, *etcd.args, "--cluster-port", "0", *more,
                               *extra))


@contextmanager
def running_cluster(base: Path, etcd: Etcd, names: tuple[str, ...] = ("n1", "n2", "n3"),
                    workers: int = 1) -> Iterator[list[BrokerProcess]]:
    """Nodes ``names`` (:func:`cluster_node`, each of ``workers`` processes) started one
    after another, closed after."""
    started: list[BrokerProcess] = []
    try:
        for name in names:
            started.append(cluster_node(base, name, etcd, workers=workers).start())
        yield started
    finally:
        for node in started:
            node.close()


@contextmanager
def cluster_and_etcd(base: Path, *extra: str, names: tuple[str, ...] = ("n1", "n2", "n3"),
                     workers: int = 1) -> Iterator[dict[str, BrokerProcess]]:
    """A fresh etcd in ``base`` (:func:`tests.support.etcd.running_etcd`) and nodes ``names``
    (:func:`cluster_node` with options ``extra``, e.g. ``"--cluster-lease", "2"``, each of
    ``workers`` processes) joined through it, all started, by name; every node closed
    after, then etcd."""
    with running_etcd(base) as etcd:
        nodes = {name: cluster_node(base, name, etcd, *extra, workers=workers)
                 for name in names}
        try:
            for node in nodes.values():
                node.start()
            yield nodes
        finally:
            for node in nodes.values():
                node.close()


def api(node: BrokerProcess, path: str, method: str = "GET", body: Any = None) -> Any:
    """The node's management API answer to ``path`` (JSON), as guest."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{node.management_port}{path}", data=data,
                                 method=method)
    req.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    req.add_header("content-type", "application/json")
    with urllib.request.urlopen(req, timeout=10) as resp:
        raw = resp.read()
    return json.loads(raw) if raw else None


def connect(node: BrokerProcess) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", node.port, heartbeat=0, blocked_connection_timeout=30))


def wait_until(check: Callable[[], Any], what: str, timeout: float = WAIT) -> Any:
    """Poll ``check`` until it returns something true; fails naming ``what``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as exc:  # a node restarting, a connection refused...
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout} s (last: {last!r})")


def ctl(node: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """``amqpqctl ARGS`` against the node's management API."""
    return subprocess.run(
        [sys.executable, "-m", "amqpqctl", "--port", str(node.management_port), *args],
        capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[2])


QQ = {"x-queue-type": "quorum"}


def declare(node: BrokerProcess, *names: str, **arguments: object) -> None:
    """Declare durable quorum queues ``names`` (with ``arguments``) through ``node``."""
    conn = connect(node)
    ch = conn.channel()
    for name in names:
        ch.queue_declare(name, durable=True, arguments={**QQ, **arguments})
    conn.close()


def leaders(node: BrokerProcess, names: list[str]) -> dict[str, str]:
    """Each quorum queue's leader (node name) as ``node``'s API shows it."""
    return {n: api(node, f"/api/queues/%2F/{n}").get("leader") for n in names}


def all_in_sync(node: BrokerProcess, names: list[str]) -> bool:
    """Queues ``names`` have three in-sync replicas."""
    return all(len(api(node, f"/api/queues/%2F/{n}").get("in_sync") or []) == 3
               for n in names)


def everything_in_sync(node: BrokerProcess) -> bool:
    """Every quorum queue of the cluster has all its members in sync."""
    return all(len(q.get("in_sync") or []) == len(q.get("members") or [])
               for q in api(node, "/api/queues") if q.get("type") == "quorum")
