"""Fixtures of the interoperability suite: real AMQP client libraries against a broker.

Which broker:

* ``AMQPQ_TEST_URL`` set (e.g. ``amqp://guest:guest@127.0.0.1:5672/%2F``): that broker, as is.
  This is how the suite is checked against the reference RabbitMQ, and how it runs
  differentially.
* otherwise: our broker, started once per session as ``python -m amqp_server`` on a free port
  with a temporary data directory (:class:`tests.support.broker_process.BrokerProcess`);
  skipped when ``amqp_server`` is not importable yet. ``AMQPQ_TEST_WORKERS=2`` runs it as
  ``--workers 2`` (connections spread over two worker processes). ``AMQPQ_TEST_CLUSTER=3``
  runs it as a cluster of three nodes joined through a real etcd; the tests use node n1.
  Both together (``AMQPQ_TEST_CLUSTER=3 AMQPQ_TEST_WORKERS=2``): three nodes of two worker
  processes each.

Tests that start broker processes of their own (kill -9, a tmpfs, users of their own) and
never use the broker under test are marked ``own_broker``: they run in the plain run only, not
again under ``AMQPQ_TEST_WORKERS`` or ``AMQPQ_TEST_CLUSTER`` (they would run the same there).

Tests never collide on a shared broker: every name they declare comes from ``unique_name``
(a uuid suffix), and they delete what they declare (or use exclusive/auto-delete queues).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from tests.support.broker_process import REPO_ROOT, BrokerProcess, BrokerStartError

ENV_URL = "AMQPQ_TEST_URL"
ENV_WORKERS = "AMQPQ_TEST_WORKERS"  # N: our broker runs as ``--workers N`` (CI runs 1 and 2)
ENV_CLUSTER = "AMQPQ_TEST_CLUSTER"  # N: our broker is N cluster nodes and etcd; tests use n1


@dataclass(frozen=True)
class AmqpParams:
    """The parts of an ``amqp://`` URL, decoded (``vhost`` is ``"/"`` for ``%2F``)."""

    host: str
    port: int
    vhost: str
    user: str
    password: str
    url: str


def parse_amqp_url(url: str) -> AmqpParams:
    parts = urlsplit(url)
    if parts.scheme != "amqp":
        raise ValueError(f"{ENV_URL} must be an amqp:// URL, got {url!r}")
    path = parts.path
    # RabbitMQ's URI spec: no path -> default vhost "/"; "/" -> vhost "" (empty); "/%2F" -> "/".
    vhost = "/" if path == "" else unquote(path[1:])
    return AmqpParams(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 5672,
        vhost=vhost,
        user=unquote(parts.username) if parts.username is not None else "guest",
        password=unquote(parts.password) if parts.password is not None else "guest",
        url=url,
    )


def _broker_importable() -> bool:
    try:
        return importlib.util.find_spec("amqp_server.server") is not None
    except ImportError:  # no amqp_server package at all, or its __init__ fails to import
        return False


def worker_args() -> tuple[str, ...]:
    """``("--workers", N)`` when ``AMQPQ_TEST_WORKERS`` asks for several, else ()."""
    workers = os.environ.get(ENV_WORKERS, "1")
    return ("--workers", workers) if workers != "1" else ()


@pytest.fixture(scope="session")
def broker_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of the broker under test (see the module docstring)."""
    env_url = os.environ.get(ENV_URL)
    if env_url:
        yield env_url
        return

    # Importable from the repository root even when not installed into the venv.
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    if not _broker_importable():
        pytest.skip(
            f"amqp_server.server is not importable yet (broker not written); set {ENV_URL} "
            "to run the interop suite against another broker, e.g. the reference RabbitMQ"
        )

    base = tmp_path_factory.mktemp("amqpq")
    size = cluster_size()
    try:
        with (running_cluster(base, size) if size else
              BrokerProcess(base / "data", base / "broker.log", management=True,
                            args=worker_args())) as broker:  # started on entry
            yield broker.url
    except BrokerStartError as exc:
        pytest.fail(str(exc), pytrace=False)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "own_broker: starts broker processes of its own and never uses the broker "
        "under test; skipped under AMQPQ_TEST_WORKERS/AMQPQ_TEST_CLUSTER, where it would run "
        "exactly as in the plain run")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``own_broker`` tests run once per CI run (the plain one): the ``--workers 2`` and
    cluster runs change only the broker under test, which they do not use. In a cluster run
    a test's timeout counts its own run only (``func_only``): the first test to use the broker
    also waits for etcd and every node to start (three nodes of two workers: about 30 s on a
    busy machine), which :class:`BrokerProcess`'s start timeout bounds instead."""
    if not (worker_args() or cluster_size()):
        return
    if cluster_size():
        for item in items:
            marker = item.get_closest_marker("timeout")
            seconds = marker.args[0] if marker is not None and marker.args else \
                config.getini("timeout")
            item.add_marker(pytest.mark.timeout(float(seconds), func_only=True), append=False)
    mode = " ".join(m for m in (
        f"{ENV_CLUSTER}={cluster_size()}" if cluster_size() else "",
        f"{ENV_WORKERS}={os.environ.get(ENV_WORKERS)}" if worker_args() else "") if m)
    skip = pytest.mark.skip(reason=f"starts its own broker: runs in the plain run, not "
                                   f"again under {mode}")
    for item in items:
        if item.get_closest_marker("own_broker") is not None:
            item.add_marker(skip)


def cluster_size() -> int:
    """N of ``AMQPQ_TEST_CLUSTER=N``; 0 when our broker is not to run as a cluster."""
    return int(os.environ.get(ENV_CLUSTER) or 0)


@contextlib.contextmanager
def running_cluster(base: Path, size: int, *args: str) -> Iterator[BrokerProcess]:
    """etcd and nodes n1..n<size> (each with ``args`` too), data and logs under ``base``;
    yields n1, the node the tests talk to; stops every node, then etcd."""
    from tests.support.cluster import cluster_node
    from tests.support.etcd import ETCD, running_etcd

    if ETCD is None:
        pytest.skip(f"{ENV_CLUSTER}: etcd is not installed (make etcd-deps)")
    with running_etcd(base) as etcd, contextlib.ExitStack() as nodes:
        workers = int(os.environ.get(ENV_WORKERS) or 1)  # each node of that many processes
        started = [nodes.enter_context(cluster_node(base, f"n{i}", etcd, *args,
                                                    workers=workers))
                   for i in range(1, size + 1)]
        yield started[0]


@pytest.fixture(scope="session")
def amqp_params(broker_url: str) -> AmqpParams:
    """Host, port, vhost, user and password of the broker under test."""
    return parse_amqp_url(broker_url)


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """``unique_name("orders")`` -> ``"it.<test>.orders.<uuid hex>"``, unique on a shared broker."""
    test = request.node.name.split("[")[0].removeprefix("test_")[:40]

    def make(prefix: str = "x") -> str:
        return f"it.{test}.{prefix}.{uuid.uuid4().hex[:12]}"

    return make


# --- pika helpers shared by the pika test modules --------------------------------------------


def pika_parameters(broker_url: str):
    """``pika.URLParameters`` with small timeouts, so a silent broker fails fast."""
    import pika

    params = pika.URLParameters(broker_url)
    params.connection_attempts = 1
    params.socket_timeout = 5
    params.stack_timeout = 10
    params.blocked_connection_timeout = 30
    return params


#: the reference RabbitMQ the differential tests run the same script against
REFERENCE_URL = os.environ.get("AMQPQ_REFERENCE_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")


def url_for(which: str, broker_url: str) -> str:
    """The URL of a test parametrized over ``["amqpq", "rabbitmq"]``: the broker under test,
    or the reference RabbitMQ (a skip when the broker under test is the reference already;
    reachability is the caller's to check)."""
    if which == "amqpq":
        return broker_url
    if broker_url == REFERENCE_URL:
        pytest.skip("the broker under test is the reference already")
    return REFERENCE_URL


def process_connection(bp: BrokerProcess) -> object:
    """A ``pika.BlockingConnection`` to a broker process as guest, with small timeouts and
    no heartbeats (the kill -9 tests)."""
    import pika

    return pika.BlockingConnection(pika.ConnectionParameters(
        host="127.0.0.1", port=bp.port, credentials=pika.PlainCredentials("guest", "guest"),
        connection_attempts=1, socket_timeout=5, stack_timeout=10,
        blocked_connection_timeout=30, heartbeat=0))


def channel_with_exchange_type(url: str, type_name: str,
                               arguments: dict | None = None) -> tuple[object, object]:
    """``(connection, channel)`` to ``url`` in confirm mode, or a skip when the broker does
    not have exchange type ``type_name`` (RabbitMQ without the plugin: 503 unknown type) or
    does not answer. The caller closes the connection."""
    import pika
    from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker

    try:
        conn = pika.BlockingConnection(pika_parameters(url))
    except Exception as exc:
        pytest.skip(f"{url} not reachable: {exc!r}")
    ch = conn.channel()
    probe = f"probe-{type_name}-{uuid.uuid4().hex[:6]}"
    try:
        ch.exchange_declare(probe, type_name, auto_delete=True, arguments=arguments)
    except (ChannelClosedByBroker, ConnectionClosedByBroker) as exc:  # 503 closes the connection
        if conn.is_open:
            conn.close()
        pytest.skip(f"{type_name} not available on {url}: {exc.reply_text}")
    ch.exchange_delete(probe)
    ch.confirm_delivery()
    return conn, ch


@pytest.fixture
def pika_connect(broker_url: str) -> Iterator[Callable[[], object]]:
    """Factory of ``pika.BlockingConnection``s; every connection still open is closed at teardown."""
    import pika

    opened: list[pika.BlockingConnection] = []

    def connect() -> pika.BlockingConnection:
        conn = pika.BlockingConnection(pika_parameters(broker_url))
        opened.append(conn)
        return conn

    yield connect
    for conn in opened:
        if conn.is_open:
            try:
                conn.close()
            except Exception:  # best effort: the test's verdict is already in
                pass


class Cleanup:
    """Names of queues and exchanges a test declared; deleted at teardown over a fresh connection."""

    def __init__(self) -> None:
        self.queues: list[str] = []
        self.exchanges: list[str] = []

    def queue(self, name: str) -> str:
        self.queues.append(name)
        return name

    def exchange(self, name: str) -> str:
        self.exchanges.append(name)
        return name

    def run(self, broker_url: str) -> None:
        if not (self.queues or self.exchanges):
            return
        import pika
        from pika.exceptions import ChannelClosedByBroker

        conn = pika.BlockingConnection(pika_parameters(broker_url))
        try:
            channel = conn.channel()
            for kind, names in (("queue", self.queues), ("exchange", self.exchanges)):
                for name in names:
                    try:
                        if kind == "queue":
                            channel.queue_delete(name)
                        else:
                            channel.exchange_delete(name)
                    except ChannelClosedByBroker:
                        # e.g. 405: an exclusive queue of a connection not yet closed; it goes
                        # with its connection anyway.
                        channel = conn.channel()
        finally:
            if conn.is_open:
                conn.close()


@pytest.fixture
def cleanup(broker_url: str) -> Iterator[Cleanup]:
    """Register names with ``cleanup.queue(name)`` / ``cleanup.exchange(name)`` to delete them
    after the test (deleting a missing queue or exchange is not an error in AMQP 0-9-1)."""
    registry = Cleanup()
    yield registry
    registry.run(broker_url)
