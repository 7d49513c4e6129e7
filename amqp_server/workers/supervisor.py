"""The supervisor of a multi-process broker (``amqpq-server --workers N``).

It starts N worker processes (``python -m amqp_server`` with the same options and
``--worker-index``) and stays out of the message path. It does four things:

* **accepts** AMQP (and AMQPS) connections on the broker's port and hands each socket to the
  next ready worker in turn (``SCM_RIGHTS`` over a socket pair per worker; TLS is the
  worker's): connections are spread evenly, where ``SO_REUSEPORT``'s hash can put most of a
  few connections on one worker, and a worker still recovering gets none;

* **orders topology**: workers send it their declares, binds and deletes
  (:mod:`amqp_server.workers.ops` records); it numbers each and sends it to every worker,
  and keeps the list, which a (re)started worker gets in full before it accepts clients;
* **introduces workers** to each other (``peer_up``: open your link to worker *j*);
* **restarts a worker that died** (after :data:`RESTART_DELAY`), having first told the others
  (an ordered ``worker_down`` record: they forget its non-durable queues and requeue what
  its consumers held).

It prints ``amqpq: listening on amqp://HOST:PORT`` once every worker is ready, and stops them
all on SIGTERM/SIGINT (each closes its connections as a single broker does).

**On a cluster node** (``--workers N`` with ``--cluster-etcd``: :mod:`amqp_server.cluster.
node`) it accepts, hands over and restarts only: each worker is a cluster member of its own,
ordered by etcd and linked to the others by node links, and tells the supervisor only that it
is ready (:func:`report_ready`), or to stop or start listening (``("listen", False)`` when
the node is drained for maintenance, ``("listen", True)`` at revive:
:mod:`amqp_server.cluster.maintenance`); the records, ``peer_up`` and ``synced`` it is sent
are ignored there, and its workers die with it (``PR_SET_PDEATHSIG``: :func:`die_with_parent`),
as the processes of one node do.

The record list grows with every topology change since start (a few hundred bytes each);
compacting it into a snapshot is left for later.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

from amqp_server.workers.link_codec import CONTROL, Outbox, RecordReader, read_control
from amqp_server.workers.links import LinkStream, hub_path
from broker.config import BrokerConfig
from broker.listeners import format_host
from broker.topology_records import WorkerDown, to_wire

log = logging.getLogger("amqpq.supervisor")

RESTART_DELAY = 0.5  # seconds before a dead worker is started again
STOP_TIMEOUT = 10.0  # seconds workers get to stop before SIGKILL


def listen_all(hosts: tuple[str, ...], port: int, optional: tuple[str, ...]
               ) -> list[socket.socket]:
    """Non-blocking listening sockets on ``port`` of every host (port 0: a free one, the
    same on every host); an ``optional`` host that cannot be bound is skipped.

    Raises:
        OSError: a host that is not optional cannot be bound.
    """
    socks: list[socket.socket] = []
    for host in hosts:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind((host, port))
            sock.listen(1024)
        except OSError:
            sock.close()
            if host in optional:
                continue
            for s in socks:
                s.close()
            raise
        sock.setblocking(False)
        port = port or sock.getsockname()[1]
        socks.append(sock)
    return socks


class _HubConn(asyncio.Protocol):
    def __init__(self, sup: Supervisor) -> None:
        self.sup = sup
        self.reader = RecordReader()
        self.transport: asyncio.Transport | None = None
        self.index = -1

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        for kind, body in self.reader.feed(data):
            if kind == CONTROL:
                self.sup.on_record(self, read_control(body))

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.sup.on_lost(self)

    def send(self, records: list[tuple[Any, ...]]) -> None:
        if self.transport is None:
            return
        box = Outbox()
        for record in records:
            box.control(record)
        self.transport.write(box.take())


class Supervisor:
    """Workers ``0..count-1`` of one broker.

    Args:
        argv: the command line the workers get (theirs plus ``--worker-*`` options).
        config: the parsed options (port, hosts, TLS) for the listening line.
        count: number of workers (>= 2).
    """

    def __init__(self, argv: list[str], config: BrokerConfig, count: int) -> None:
        self.argv = argv
        self.config = config
        self.count = count
        self.run_dir = Path(tempfile.mkdtemp(prefix="amqpq-workers-"))
        self.log: list[tuple[Any, ...]] = []  # every topology record so far, in order
        self.conns: dict[int, _HubConn] = {}
        self.ready: set[int] = set()
        self.procs: dict[int, asyncio.subprocess.Process] = {}
        self.stopping = False
        self.all_ready = asyncio.Event()
        self._listeners: list[socket.socket] = []
        self._handoff: dict[int, socket.socket] = {}  # worker -> our end of its socket pair
        self._next = 0  # round-robin position
        self.port = config.port
        self.tls_port = config.tls.port if config.tls.enabled else 0
        self.restarts = 0

    def worker_command(self, index: int, handoff_fd: int) -> list[str]:
        return [sys.executable, "-m", "amqp_server", *self.argv, "--port", str(self.port),
                *(["--ssl-port", str(self.tls_port)] if self.tls_port else []),
                "--worker-index", str(index), "--worker-count", str(self.count),
                "--worker-run-dir", str(self.run_dir), "--worker-handoff-fd", str(handoff_fd)]

    def _listen(self) -> None:
        """Open the AMQP (and AMQPS) listeners; accepted sockets go to the workers."""
        loop = asyncio.get_running_loop()
        cfg = self.config
        for tls, port in ((False, self.port), (True, self.tls_port)):
            if tls and not cfg.tls.enabled:
                continue
            socks = listen_all(cfg.listen_hosts, port, cfg.optional_hosts)
            if tls:
                self.tls_port = socks[0].getsockname()[1]
            else:
                self.port = socks[0].getsockname()[1]
            for sock in socks:
                loop.add_reader(sock.fileno(), self._accept, sock, tls)
            self._listeners.extend(socks)

    def set_listening(self, on: bool) -> None:
        """Open the client listeners again on the same ports (``on``), or close them
        (maintenance: clients connect to other nodes meanwhile); idempotent."""
        if on and not self._listeners:
            self._listen()
            log.warning("client listeners open again on port %d", self.port)
        elif not on and self._listeners:
            loop = asyncio.get_running_loop()
            for sock in self._listeners:
                loop.remove_reader(sock.fileno())
                sock.close()
            self._listeners = []
            log.warning("client listeners closed (maintenance mode)")

    def _accept(self, sock: socket.socket, tls: bool) -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of descriptors...: keep listening
                log.warning("accept failed: %s", exc)
                return
            try:
                self._hand_over(conn, tls)
            finally:
                conn.close()  # the worker has its own copy

    def _hand_over(self, conn: socket.socket, tls: bool) -> None:
        """Give ``conn`` to the next ready worker (round robin); with none, it is closed."""
        ready = sorted(i for i in self.ready if i in self._handoff)
        for _ in range(len(ready)):
            index = ready[self._next % len(ready)]
            self._next += 1
            try:
                socket.send_fds(self._handoff[index], [b"s" if tls else b"p"], [conn.fileno()])
                return
            except OSError as exc:
                log.warning("cannot hand a connection to worker %d: %s", index, exc)

    async def serve(self) -> int:
        loop = asyncio.get_running_loop()
        self._listen()
        server = await loop.create_unix_server(lambda: _HubConn(self), str(hub_path(self.run_dir)))
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        watchers = [asyncio.create_task(self._run_worker(i)) for i in range(self.count)]
        ready = asyncio.create_task(self.all_ready.wait())
        stopped = asyncio.create_task(stop.wait())
        await asyncio.wait([ready, stopped], return_when=asyncio.FIRST_COMPLETED)
        if self.all_ready.is_set():
            shown = format_host(self.config.host)
            print(f"amqpq: listening on amqp://{shown}:{self.port}", flush=True)
            if self.tls_port:
                print(f"amqpq: listening on amqps://{shown}:{self.tls_port}", flush=True)
            await stop.wait()
        self.stopping = True
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        done, pending = await asyncio.wait(watchers, timeout=STOP_TIMEOUT)
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        for task in pending:
            task.cancel()
        server.close()
        for sock in self._listeners:
            loop.remove_reader(sock.fileno())
            sock.close()
        shutil.rmtree(self.run_dir, ignore_errors=True)
        return 0

    async def _run_worker(self, index: int) -> None:
        while not self.stopping:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                proc = await asyncio.create_subprocess_exec(
                    *self.worker_command(index, theirs.fileno()), pass_fds=(theirs.fileno(),))
            finally:
                theirs.close()
            self._handoff[index] = ours
            self.procs[index] = proc
            code = await proc.wait()
            if self._handoff.get(index) is ours:
                del self._handoff[index]
            ours.close()
            if self.stopping:
                return
            log.error("worker %d (pid %d) exited with %s; restarting it", index, proc.pid, code)
            self.restarts += 1
            self.ready.discard(index)
            self.conns.pop(index, None)
            self._append(-1, 0, to_wire(WorkerDown(index)))
            await asyncio.sleep(RESTART_DELAY)

    def _append(self, origin: int, op_id: int, op: Any) -> None:
        """``op``: a record's wire form (:func:`broker.topology_records.to_wire`), passed on
        as it is (the supervisor never reads it)."""
        self.log.append(op)
        record = ("apply", origin, op_id, op)
        for conn in self.conns.values():
            conn.send([record])

    def on_record(self, conn: _HubConn, rec: tuple[Any, ...]) -> None:
        kind = rec[0]
        if kind == "hello":
            conn.index = int(rec[1])
            # the records so far, links to every worker that is ready, then "synced": the
            # newcomer accepts clients once it applied and linked all that; the others
            # link to it once it is ready (before, it is down to them: nothing is sent to
            # a worker still recovering)
            replay = [("apply", -1, 0, op) for op in self.log]
            peers = [("peer_up", other) for other in self.ready if other in self.conns]
            conn.send([*replay, *peers, ("synced",)])
            self.conns[conn.index] = conn
        elif kind == "submit":
            self._append(conn.index, rec[1], rec[2])
        elif kind == "listen":  # a cluster node drained (False) or revived (True)
            self.set_listening(bool(rec[1]))
        elif kind == "ready":
            self.ready.add(conn.index)
            for other, other_conn in self.conns.items():
                if other != conn.index:
                    other_conn.send([("peer_up", conn.index)])
            if len(self.ready) == self.count:
                self.all_ready.set()

    def on_lost(self, conn: _HubConn) -> None:
        if self.conns.get(conn.index) is conn:
            del self.conns[conn.index]


def run(argv: list[str], config: BrokerConfig, count: int) -> int:
    """Run ``count`` workers until SIGTERM/SIGINT; the exit status."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(Supervisor(argv, config, count).serve())
    return uvloop.run(Supervisor(argv, config, count).serve())


async def report_ready(run_dir: Path, index: int) -> LinkStream:
    """A worker of a cluster node (module docstring): connect to the supervisor and say
    ``hello`` and ``ready`` (it hands this worker clients from then on); the records it sends
    back are ignored, and this process stops (SIGTERM) if the link closes. Returns the
    link (kept open as long as the worker runs).

    Raises:
        OSError: the supervisor's socket cannot be reached.
    """
    def lost(stream: LinkStream) -> None:
        log.error("the supervisor's link closed: this worker stops")
        os.kill(os.getpid(), signal.SIGTERM)

    _, stream = await asyncio.get_running_loop().create_unix_connection(
        lambda: LinkStream(lambda _s, _r: None, lost), str(hub_path(run_dir)))
    hub: LinkStream = stream  # type: ignore[assignment]
    hub.outbox.control(("hello", index))
    hub.outbox.control(("ready",))
    hub.schedule()
    return hub


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent() -> None:
    """This process gets SIGKILL when its parent (the supervisor) dies (Linux's
    ``prctl(PR_SET_PDEATHSIG)``; elsewhere nothing), and exits at once if the parent is
    already gone: a cluster node's processes die together."""
    import ctypes
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux
        return
    if os.getppid() == 1:
        os._exit(1)


def resolve_count(value: str) -> int:
    """``--workers`` value: a positive number or ``auto`` (the cores this process may use).

    Raises:
        ValueError: anything else (the CLI prints it on one line).
    """
    if value == "auto":
        return len(os.sched_getaffinity(0)) or 1
    try:
        n = int(value)
    except ValueError:
        raise ValueError(f"--workers must be a number or 'auto', got {value!r}") from None
    if not 1 <= n <= 256:
        raise ValueError(f"--workers must be 1..256, got {n}")
    return n
