"""asyncio edge of the broker: listeners, transports, timers, shutdown, ``main()``.

The AMQP side's event loop lives here: this module opens the AMQP and AMQPS listeners (on
the addresses :func:`broker.listeners.bind_all` picks) and owns their transports; the
connection, assembler and channel below it are sans-IO. (``tls.py`` builds the SSL context
and reads a transport's peer certificate; ``management/app.py`` opens the HTTP listeners,
started from here.) Each TCP connection gets an :class:`AMQPProtocol` that feeds a sans-IO
:class:`~amqp_server.connection.Connection` and writes its output once per event-loop turn
(``loop.call_soon``), however many frames were queued in between. Transport back-pressure
(``pause_writing``) stops deliveries to that connection until its buffer drains.

Closing without a reset (RabbitMQ's ``rabbit_reader`` does the same): once a connection is
over (Close-Ok sent or received, our Close unanswered for 3 s, a frame error, a bad header...),
its pending output is written and followed by a FIN (``write_eof``; not over TLS), and the
socket is still read, every byte dropped, until the client closes it or
:attr:`BrokerServer.closing_timeout` (:data:`CLOSING_TIMEOUT`, 3 s) passes; only then is the
transport closed (aborted after the timeout). Closing a socket with unread bytes in its
receive buffer, or that bytes still reach, makes the kernel send RST, and a client that
pipelined publishes and Close (Node's amqplib) would get ECONNRESET instead of Close-Ok.

Shutdown (SIGINT/SIGTERM): stop listening, close every connection with 320
CONNECTION_FORCED, wait briefly for the clients' CloseOk, exit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gc
import importlib.metadata
import logging
import resource
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from amqp_server import conf_file, tls
from amqp_server.cluster import options as cluster_options
from amqp_server.cluster.membership import ClusterError
from amqp_server.cluster.node import NodeRuntime, start_node
from amqp_server.connection import Connection
from amqp_server.node_maintenance import LocalMaintenance, SupervisorListeners
from amqp_server.workers import supervisor
from amqp_server.workers.runtime import WorkerRuntime
from broker import log_setup
from broker.broker import Broker
from broker.cluster_identity import adopt_cluster_id, forget_saved_cluster_id
from broker.config import BrokerConfig
from broker.environment import BrokerEnvironment, ResourceProbes
from broker.listeners import ListenError, bind_all, format_host
from broker.persistence import DEFINITIONS_FILE, recover_messages
from broker.private_files import private_dir, restrict_umask
from federation import start_for_server as start_federation
from management import options as management
from management import stop_management
from management.prometheus import options as prometheus
from management.prometheus import stop_prometheus
from shovel import start_for_server as start_shovels

log = logging.getLogger("amqpq.server")

FULL_GC_EVERY = 100  # middle-generation collections per full one (CPython's default: 10)
# net new tracked objects per young collection (CPython's default: 700): what a publish keeps
# until its confirm (a quorum queue's commit a round trip later, ~1,000 in flight) dies
# before a collection walks it
YOUNG_GC_EVERY = 10_000

WRITE_BUFFER_HIGH = 4 * 1024 * 1024  # bytes buffered per socket before deliveries pause
WRITE_BUFFER_LOW = 1 * 1024 * 1024
SHUTDOWN_GRACE = 2.0  # seconds to wait for CloseOk at shutdown
# seconds a finished connection's socket is still read (and dropped) for the client to close
# it, after our FIN (RabbitMQ: min(heartbeat, 30 s); 3 s is CLOSE_OK_TIMEOUT's value)
CLOSING_TIMEOUT = 3.0


class AMQPProtocol(asyncio.Protocol):
    """One client socket bound to one sans-IO :class:`Connection`."""

    def __init__(self, broker_server: BrokerServer) -> None:
        self.server = broker_server
        self.transport: asyncio.Transport | None = None
        self.conn: Connection | None = None
        self._flush_scheduled = False
        self._loop = asyncio.get_running_loop()
        self._linger: asyncio.TimerHandle | None = None  # set once the connection is over

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH, low=WRITE_BUFFER_LOW)
        peer = transport.get_extra_info("peername")
        peer_addr = (str(peer[0]), int(peer[1])) if peer else None
        local = transport.get_extra_info("sockname")
        local_addr = (str(local[0]), int(local[1])) if isinstance(local, tuple) else None
        self.conn = Connection(self.server.broker, peer_addr, local=local_addr)
        self.conn.peer_cn = tls.peer_common_name(transport)
        self.conn.on_output = self._schedule_flush
        self.conn.on_block = self._set_reading_blocked
        self.server.protocols.add(self)

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        """Write pending output; hang up (:meth:`_hang_up`) when the connection is done."""
        self._flush_scheduled = False
        conn, transport = self.conn, self.transport
        if (conn is None or transport is None or transport.is_closing()
                or self._linger is not None):
            return
        data = conn.data_to_send()
        if data:
            transport.write(data)
        if conn.closed:
            self._hang_up(transport)

    def _hang_up(self, transport: asyncio.Transport) -> None:
        """The connection is over: a FIN after the output written so far, then the socket is
        read (bytes dropped: the connection is CLOSED) until the client closes it
        (``eof_received`` closes the transport) or ``closing_timeout`` passes."""
        self._linger = self._loop.call_later(self.server.closing_timeout, self._linger_over)
        transport.resume_reading()
        if transport.can_write_eof():
            transport.write_eof()

    def _linger_over(self) -> None:
        """The client kept the socket open past the closing timeout: drop it (RST if it still
        sends; a write buffer it does not read would keep ``close()`` waiting)."""
        if self.transport is not None:
            self.transport.abort()

    def _set_reading_blocked(self, blocked: bool) -> None:
        if self.transport is None or self.transport.is_closing() or self._linger is not None:
            return
        if blocked:
            self.transport.pause_reading()
        else:
            self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        conn = self.conn
        if conn is None:
            return
        conn.receive_data(data)
        if conn.closed:
            self._schedule_flush()

    def pause_writing(self) -> None:
        if self.conn is not None:
            self.conn.pause_writing()

    def resume_writing(self) -> None:
        if self.conn is not None:
            self.conn.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.protocols.discard(self)
        if self._linger is not None:
            self._linger.cancel()
        if self.conn is not None:
            self.conn.connection_lost()
        self.transport = None

    def tick(self) -> None:
        if self.conn is None:
            return
        self.conn.tick()
        if self.conn.closed:
            self._schedule_flush()


class BrokerServer:
    """Listeners and timers around one :class:`Broker`.

    The broker is built with this event loop's environment: its clock (``loop.time``), one
    loop timer armed for the earliest broker deadline, fsyncs in the default executor,
    storage in ``config.data_dir`` and the real memory and disk probes.

    Args:
        config: host, port (0 picks a free port; see :attr:`port` after :meth:`start`).

    Raises:
        RuntimeError: constructed outside a running event loop.
    """

    def __init__(self, config: BrokerConfig) -> None:
        shared_dir = Path(config.data_dir)
        if config.worker_index:  # worker i > 0 of several: its queues in a folder of its own
            config = dataclasses.replace(config,
                                         data_dir=shared_dir / f"worker-{config.worker_index}")
        self.config = config
        loop = asyncio.get_running_loop()
        self.env = BrokerEnvironment(clock=loop.time, wakeup=self._arm_timers,
                                     run_blocking=self._run_sync, storage=True,
                                     resources=ResourceProbes())
        self.broker = Broker(config, self.env)
        self.workers: WorkerRuntime | None = None
        if config.worker_index is not None and not config.cluster_etcd:
            assert config.worker_run_dir is not None
            self.workers = WorkerRuntime(self.broker, config.worker_index, config.workers,
                                         config.worker_run_dir)
            if config.worker_index and self.broker.topology is not None:
                # the definitions are worker 0's to write; the others read them at start
                self.broker.topology.path = shared_dir / DEFINITIONS_FILE
                self.broker.topology.read_only = True
        self.protocols: set[AMQPProtocol] = set()
        self.closing_timeout = CLOSING_TIMEOUT  # s a finished connection waits for the client
        self.port = config.port
        self._servers: list[asyncio.base_events.Server] = []  # AMQP and AMQPS, every host
        self._ticker: asyncio.Task[None] | None = None
        self._timer_handle: asyncio.TimerHandle | None = None
        self.tls_port = 0
        self._timer_when: float | None = None
        self._tls_context: Any = None
        self._handoff: socket.socket | None = None
        self._cluster_id: asyncio.Task[Any] | None = None  # a cluster node's adoption of it
        self._supervisor: Any = None  # a cluster node's worker: its link to the supervisor

    async def start(self) -> None:
        """Recover state from the data dir, then listen.

        Raises:
            OSError: the port is taken; ValueError: the saved definitions are unreadable.
        """
        private_dir(Path(self.config.data_dir))
        topology, alarms = self.broker.topology, self.broker.alarms
        assert topology is not None and alarms is not None  # storage and resources are on
        if self.config.cluster_etcd:  # a cluster node: etcd, its index, node links
            self.workers = await start_node(self.broker, self.config)
        topology.load()
        if self.broker.cluster is not None:  # its id comes from the cluster's state
            forget_saved_cluster_id(self.broker)
        counts = recover_messages(self.broker)
        if self.workers is not None:  # every topology change so far, links to the others
            await self.workers.start()
        if self.broker.cluster is None and not self.config.worker_index:
            await adopt_cluster_id(self.broker, Path(self.config.data_dir))  # applied at once
        topology.save_if_changed()
        log.info("recovered %d messages in %d durable queues (%d damaged records skipped)",
                 counts["messages"], counts["queues"], counts["skipped"])
        management.load_definitions(self.broker, self.config)  # --definitions FILE
        alarms.check()  # an alarm already due blocks the first publishers, as RabbitMQ
        try:
            if self.config.worker_handoff_fd is not None:  # the supervisor accepts for us
                if self.config.tls.enabled:
                    self.tls_port = self.config.tls.port
                    self._tls_context = tls.make_context(self.config.tls)
                self._take_handoffs(self.config.worker_handoff_fd)
            else:
                self.port = await self._listen(self.config.port)
            if self.config.tls.enabled and self.config.worker_handoff_fd is None:
                self.tls_port = await self._listen(self.config.tls.port,
                                                   tls.make_context(self.config.tls))
                log.info("amqpq AMQPS listening on %s port %d",
                         ", ".join(self.config.listen_hosts), self.tls_port)
            if not self.config.worker_index:  # one management API: worker 0 serves it
                self.management = await management.start_for_server(self.broker, self.config,
                                                                    self.port)
                self.prometheus = await prometheus.start_for_server(self.broker, self.config,
                                                                    self.port)
        except BaseException:
            await stop_management(getattr(self, "management", None))
            for server in self._servers:
                server.close()
            raise
        self._ticker = asyncio.create_task(self._tick_loop())
        if not self.config.worker_index:  # dynamic shovels: worker 0 runs them (docs/shovel.md)
            self.shovels = start_shovels(self.broker, self.config, self.port)
            self.federation = start_federation(self.broker, self.config, self.port)
        # what exists now (modules, recovered topology) lives as long as the process: moved out
        # of the collector's generations, so full collections under load do not walk it
        gc.collect()
        gc.freeze()
        # a backlog is a few tracked objects per message, and a full collection walks them
        # all: at CPython's default (one per 10 middle ones, once the old generation grew by
        # 25%) a growing 100,000-message backlog cost a third of a quorum queue leader's CPU
        # (py-spy; benchmarks.quorum_bench publish 25.5k -> 33.9k msg/s at 100). Garbage here
        # is freed by reference counting; cycles still go, a little later. Young collections
        # every 10,000 (not 700): a quorum queue leader's CPU per message -10%
        # (quorum_bench --cpu-only; its young collections walked the ~1,000 publishes
        # waiting for their commit, 350 us each).
        gc.set_threshold(YOUNG_GC_EVERY, 10, FULL_GC_EVERY)
        if isinstance(self.workers, NodeRuntime):  # drain closes the client listeners
            await self.workers.maintenance.attach(self)
        elif self.broker.cluster is None and not self.config.worker_index:
            # no cluster: drain/revive of this broker, by its one process or its worker 0
            # (with --workers N the supervisor's listeners, node_maintenance)
            self.broker.maintenance = LocalMaintenance(self.broker, Path(self.config.data_dir))
            await self.broker.maintenance.attach(
                self if self.workers is None else SupervisorListeners(self.workers.links.send_hub))
        if self.broker.cluster is not None:  # registered: the other nodes link to this one
            self.broker.cluster.info["amqp_port"] = self.port
            await self.broker.cluster.register()
            # proposed through etcd when the cluster has none yet (broker.cluster_identity)
            self._cluster_id = asyncio.create_task(
                adopt_cluster_id(self.broker, Path(self.config.data_dir)))
            if self.config.worker_run_dir is not None:  # a worker of a node of several
                self._supervisor = await supervisor.report_ready(self.config.worker_run_dir,
                                                                 self.config.worker_index or 0)
                if isinstance(self.workers, NodeRuntime) and self.workers.maintenance.suspended:
                    self._ask_supervisor(("listen", False))  # still drained (attach)
        elif self.workers is not None:
            self.workers.ready()
        log.info("amqpq listening on %s port %d (data dir %s)",
                 ", ".join(self.config.listen_hosts), self.port, self.config.data_dir)

    async def suspend_listeners(self) -> None:
        """Maintenance (``amqpqctl drain``): close the AMQP and AMQPS listening sockets (a
        worker of a cluster node: ask its supervisor to close them); connections already
        open are the caller's to close."""
        self._ask_supervisor(("listen", False))
        servers, self._servers = self._servers, []
        for server in servers:
            server.close()  # not waited for: the open connections are closed after this
        log.warning("client listeners closed (maintenance mode)")

    async def resume_listeners(self) -> None:
        """``amqpqctl revive``: listen again on the AMQP (and AMQPS) ports (a worker of a
        cluster node: its supervisor does)."""
        if self._supervisor is not None:
            self._ask_supervisor(("listen", True))
            return
        if self._servers:
            return
        await self._listen(self.port)
        if self.tls_port:
            await self._listen(self.tls_port, tls.make_context(self.config.tls))
        log.warning("client listeners open again on port %d", self.port)

    def _ask_supervisor(self, record: tuple[Any, ...]) -> None:
        """A worker of a cluster node of several: send ``record`` to its supervisor
        (:mod:`amqp_server.workers.supervisor`); otherwise nothing."""
        link = self._supervisor
        if link is not None:
            link.outbox.control(record)
            link.schedule()

    async def _listen(self, port: int, ssl: Any = None) -> int:
        """One listener per address of the config (same port); returns the port.

        Raises:
            OSError: an address given by --host cannot be bound (strerror names it).
        """
        loop = asyncio.get_running_loop()

        async def bind(host: str, port: int) -> int:
            server = await loop.create_server(lambda: AMQPProtocol(self), host, port,
                                              ssl=ssl, backlog=1024)
            self._servers.append(server)
            return int(server.sockets[0].getsockname()[1])

        return await bind_all(bind, self.config.listen_hosts, port, self.config.optional_hosts)

    def _take_handoffs(self, fd: int) -> None:
        """``--workers N``: take the client sockets the supervisor accepted and hands over
        (one byte each, ``p`` AMQP or ``s`` AMQPS, with the descriptor)."""
        loop = asyncio.get_running_loop()
        channel = socket.socket(fileno=fd)
        channel.setblocking(False)
        self._handoff = channel

        def receive() -> None:
            while True:
                try:
                    kinds, fds, _, _ = socket.recv_fds(channel, 64, 64)
                except (BlockingIOError, InterruptedError):
                    return
                except OSError as exc:
                    log.error("connection hand-over from the supervisor failed: %s", exc)
                    loop.remove_reader(fd)
                    return
                if not kinds and not fds:  # the supervisor is gone
                    loop.remove_reader(fd)
                    return
                for kind, client_fd in zip(kinds, fds, strict=False):
                    sock = socket.socket(fileno=client_fd)
                    ssl = self._tls_context if kind == ord("s") else None
                    loop.create_task(self._accepted(sock, ssl))

        loop.add_reader(fd, receive)

    async def _accepted(self, sock: socket.socket, ssl: Any) -> None:
        try:
            await asyncio.get_running_loop().connect_accepted_socket(
                lambda: AMQPProtocol(self), sock, ssl=ssl)
        except (OSError, ConnectionError) as exc:  # TLS handshake failed, peer gone...
            log.info("handed-over connection failed: %s", exc)
            sock.close()

    def _run_sync(self, work: Callable[[], None], done: Callable[[], None]) -> None:
        """Group commit: fsync in a worker thread, then ``done`` on the loop."""
        loop = asyncio.get_running_loop()

        def finished(fut: asyncio.Future[None]) -> None:
            error = fut.exception()
            if error is not None and not isinstance(error, OSError):
                log.error("fsync round failed: %r", error)
                error = OSError(0, repr(error))
            done(error)  # type: ignore[arg-type]

        loop.run_in_executor(None, work).add_done_callback(finished)

    def _arm_timers(self, when: float) -> None:
        """Keep one loop timer armed for the broker's earliest deadline (queue TTL etc.)."""
        if self._timer_when is not None and self._timer_when <= when:
            return
        if self._timer_handle is not None:
            self._timer_handle.cancel()
        self._timer_when = when
        self._timer_handle = asyncio.get_running_loop().call_at(when, self._run_timers)

    def _run_timers(self) -> None:
        self._timer_handle = None
        self._timer_when = None
        try:
            self.broker.timers.run_due()
        except Exception:
            log.exception("timer callback failed")
        nxt = self.broker.timers.next_deadline()
        if nxt is not None:
            self._arm_timers(nxt)

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            for proto in list(self.protocols):
                try:
                    proto.tick()
                except Exception:
                    log.exception("tick failed")
            try:  # a failure is logged: the tick goes on next second
                self.broker.tick()  # retries a failed definitions save, alarms, fsync round
                if self.workers is not None:
                    self.workers.tick()
            except Exception:
                log.exception("tick failed")

    async def stop(self) -> None:
        """Close listeners, then every connection with 320 CONNECTION_FORCED."""
        if getattr(self, "shovels", None) is not None:
            await self.shovels.stop()
        if getattr(self, "federation", None) is not None:
            await self.federation.stop()
        await stop_management(getattr(self, "management", None))
        await stop_prometheus(getattr(self, "prometheus", None))
        if self._cluster_id is not None:
            self._cluster_id.cancel()
        if self.broker.cluster is not None:  # leave at once (the lease is revoked)
            if self.workers is not None:
                self.workers.close()
            await self.broker.cluster.stop()
        for server in self._servers:
            server.close()
        if self._ticker is not None:
            self._ticker.cancel()
        for proto in list(self.protocols):
            if proto.conn is not None:
                proto.conn.close(
                    320, "CONNECTION_FORCED - broker forced connection closure with reason "
                    "'shutdown'"
                )
                proto.flush()
        deadline = asyncio.get_running_loop().time() + SHUTDOWN_GRACE
        while self.protocols and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        for proto in list(self.protocols):
            if proto.transport is not None:
                proto.transport.abort()
        for server in self._servers:
            await server.wait_closed()
        self.broker.save_topology()
        self.broker.durability.flush_writes()
        if self.workers is not None:
            self.workers.close()
        for vhost in self.broker.vhosts.values():
            if vhost.storage is not None:
                vhost.storage.close()
        log.info("amqpq stopped")


def package_version() -> str:
    """The installed ``amqpq`` distribution's version (``0.1.0``), from its metadata;
    ``unknown`` when the package is not installed (run from a source tree)."""
    try:
        return importlib.metadata.version("amqpq")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def parse_args(argv: list[str] | None = None) -> BrokerConfig:
    """BrokerConfig from command-line arguments over ``--config FILE`` (rabbitmq.conf keys,
    :mod:`amqp_server.conf_file`); exits 2 with one line on a bad value, ``amqpq-server:
    FILE:LINE: ...`` for the file's; ``--version`` prints ``amqpq-server 0.1.0`` on stdout
    and exits 0."""
    return command_line(argv)[0]


def command_line(argv: list[str] | None = None) -> tuple[BrokerConfig, list[str]]:
    """:func:`parse_args`, and the config file's warnings (ignored keys) to log."""
    p = argparse.ArgumentParser(prog="amqpq-server", description="amqpq AMQP 0-9-1 broker")
    p.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    p.add_argument("--host", action="append", default=None, metavar="ADDRESS",
                   help="listen address, IPv4 or IPv6; repeat for several "
                        "(default: 127.0.0.1 and ::1)")
    p.add_argument("--port", type=int, default=5672, help="AMQP port (0: any free port)")
    p.add_argument("--data-dir", default="var", help="state directory (default ./var)")
    p.add_argument("--config", metavar="FILE", help="rabbitmq.conf-style file (default: "
                   "$RABBITMQ_CONFIG_FILE); command-line options override it")
    p.add_argument("--log-level", default="info", choices=list(log_setup.LEVELS),
                   help="console log level (none: no console log)")
    log_setup.add_arguments(p)
    p.add_argument("--heartbeat", type=int, default=60, help="heartbeat offered (s, 0 = off)")
    p.add_argument("--frame-max", type=int, default=131072, help="frame_max offered (bytes)")
    p.add_argument("--channel-max", type=int, default=2047, help="channel_max offered")
    p.add_argument("--consumer-timeout", type=int, default=1_800_000,
                   help="ms before an unacknowledged delivery closes its channel (0 = never)")
    p.add_argument("--max-connections", type=int, default=0,
                   help="open connections allowed (0 = no limit)")
    p.add_argument("--vm-memory-high-watermark", type=float, default=0.4,
                   help="memory alarm: fraction of RAM (<= 1) or bytes (> 1)")
    p.add_argument("--disk-free-limit", type=int, default=50_000_000,
                   help="disk alarm: bytes that must stay free in the data dir")
    p.add_argument("--workers", default="1", metavar="N",
                   help="worker processes sharing the port (a number or 'auto' = one per "
                        "core; default 1: this process alone)")
    cluster_options.add_arguments(p)
    p.add_argument("--worker-index", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--worker-count", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--worker-run-dir", default=None, help=argparse.SUPPRESS)
    p.add_argument("--worker-handoff-fd", type=int, default=None, help=argparse.SUPPRESS)
    management.add_arguments(p)
    prometheus.add_arguments(p)
    tls.add_arguments(p)
    a = p.parse_args(argv)
    try:
        conf = conf_file.from_option(a.config)
    except conf_file.ConfError as exc:
        print(f"amqpq-server: {exc}", file=sys.stderr)
        sys.exit(2)
    if conf is not None:  # the file's values become defaults: options given still win
        p.set_defaults(**conf.options)
        a = p.parse_args(argv)
    if not 0 <= a.port <= 65535:
        p.error(f"--port must be 0..65535, got {a.port}")
    if a.frame_max < 4096:
        p.error(f"--frame-max must be at least 4096 bytes, got {a.frame_max}")
    if not 1 <= a.channel_max <= 65535:
        p.error(f"--channel-max must be 1..65535, got {a.channel_max}")
    if a.heartbeat < 0:
        p.error(f"--heartbeat must be >= 0, got {a.heartbeat}")
    if a.vm_memory_high_watermark <= 0:
        p.error(f"--vm-memory-high-watermark must be > 0, got {a.vm_memory_high_watermark}")
    if a.consumer_timeout < 0 or a.max_connections < 0:
        p.error("--consumer-timeout and --max-connections must be >= 0")
    if a.disk_free_limit < 0:
        p.error(f"--disk-free-limit must be >= 0, got {a.disk_free_limit}")
    try:
        workers = supervisor.resolve_count(str(a.workers))
    except ValueError as exc:
        p.error(str(exc))
    cluster = cluster_options.from_args(a, p)
    if a.worker_index is not None:  # started by a supervisor: one of its workers
        workers = a.worker_count
    config = BrokerConfig(
        hosts=tuple(a.host) if a.host else conf and conf.hosts, port=a.port,
        data_dir=Path(a.data_dir), log=log_setup.from_args(a),
        heartbeat=a.heartbeat, frame_max=a.frame_max, channel_max=a.channel_max,
        memory_high_watermark=a.vm_memory_high_watermark, disk_free_limit=a.disk_free_limit,
        tls=tls.from_args(a, p), consumer_timeout=a.consumer_timeout,
        max_connections=a.max_connections, management=management.from_args(a, p),
        prometheus=prometheus.from_args(a, p), workers=workers, worker_index=a.worker_index,
        worker_run_dir=Path(a.worker_run_dir) if a.worker_run_dir else None,
        worker_handoff_fd=a.worker_handoff_fd, **cluster,
    )
    if conf is not None:
        conf.apply(config)
    return config, conf.warnings if conf else []


async def serve(config: BrokerConfig) -> None:
    """Run the broker until SIGINT/SIGTERM."""
    server = BrokerServer(config)
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    host = format_host(config.host)
    if config.worker_index is None:  # a worker's supervisor prints it for all
        print(f"amqpq: listening on amqp://{host}:{server.port}", flush=True)
        if server.tls_port:
            print(f"amqpq: listening on amqps://{host}:{server.tls_port}", flush=True)
    await stop.wait()
    await server.stop()


def raise_open_files_limit() -> None:
    """Raise the soft limit of open files to the hard one: every connection, durable queue
    index and recovered backlog holds a descriptor, and a 1,024 soft limit is reached by a
    thousand durable queues (RabbitMQ's packages raise it for the same reason:
    https://www.rabbitmq.com/docs/networking#open-file-handle-limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (OSError, ValueError) as exc:
            log.warning("open files limit stays %s: %s", soft, exc)
            return
        if target != soft:
            log.info("open files limit raised from %s to %s", soft, target)


def main(argv: list[str] | None = None) -> None:
    """Console entry point ``amqpq-server``."""
    config, warnings = command_line(argv)
    restrict_umask()  # data, logs, sockets: owner-only (before anything is created)
    try:
        log_setup.configure(config.log)  # console, --log-file, --log-format, categories
    except OSError as exc:
        print(f"amqpq-server: cannot open the log file: {exc}", file=sys.stderr)
        sys.exit(1)
    for warning in warnings:
        log.warning("%s", warning)
    raise_open_files_limit()
    if config.worker_index is not None and config.cluster_etcd:  # a node's processes
        supervisor.die_with_parent()  # die together (amqp_server.cluster.node)
    if config.workers > 1 and config.worker_index is None:
        args = list(sys.argv[1:] if argv is None else argv)
        sys.exit(supervisor.run(args, config, config.workers))
    try:
        import uvloop  # optional speed-up
    except ImportError:
        runner = asyncio.run
    else:
        runner = uvloop.run
    try:
        runner(serve(config))
    except ListenError as exc:
        print(f"amqpq-server: cannot listen on {exc.strerror}", file=sys.stderr)
        sys.exit(1)
    except OSError as exc:
        print(f"amqpq-server: {exc}", file=sys.stderr)
        sys.exit(1)
    except ValueError as exc:  # unreadable definitions (--definitions or the data dir's)
        print(f"amqpq-server: {exc}", file=sys.stderr)
        sys.exit(1)
    except ClusterError as exc:
        print(f"amqpq-server: {exc}", file=sys.stderr)
        sys.exit(1)
