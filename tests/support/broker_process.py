"""An amqpq broker as a subprocess (``python -m amqp_server``): start it, wait until it
listens, stop, kill -9 and restart it on the same data directory.

The one place that knows how the test suites, the interop suite, the fuzz/soak scripts and the
benchmarks run a broker of their own::

    with BrokerProcess(tmp_path / "data") as broker:      # started, stopped at the end
        pika.BlockingConnection(pika.URLParameters(broker.url))

    broker = BrokerProcess(tmp_path / "data", tmp_path / "broker.log", fresh_port=True)
    broker.start(); broker.kill(); broker.start()           # kill -9, recover, new port
    assert broker.stop() == 0                               # SIGTERM: clean exit

    amqpq = broker_fixture(scope="module", args=("--max-connections", "5"))  # a pytest fixture

Ports: by default the broker picks a free port itself (``--port 0``) and :meth:`start` reads it
from the ``amqpq: listening on amqp://HOST:PORT`` line it prints once every listener is up
(management API included), so there is no window in which another process can take it.
Restarts reuse that port (``fresh_port=True``: a new one each start); ``port=N`` fixes it.
A TLS listener (``--ssl-cert`` among ``args``) is waited for too; its port is ``tls_port``.

Output: the broker's stderr and stdout both go to ``log_path`` (a start header before each
start), and :meth:`log` gives its tail for assertion messages. A start that fails or times out
raises :class:`BrokerStartError` with that tail.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_LINE = "amqpq: listening on"
START_TIMEOUT = 20.0  # seconds until the listening line
STOP_TIMEOUT = 10.0  # seconds SIGTERM may take before SIGKILL
LOG_TAIL = 6000  # characters of the log in error messages

_LISTENING = re.compile(r"amqpq: listening on (amqps?)://(\S+):(\d+)")


class BrokerStartError(RuntimeError):
    """The broker exited or did not print its listening line in time (log tail included)."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` right now (for a second listener such as management)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def broker_env() -> dict[str, str]:
    """The environment for a broker subprocess: ours, with the repository on PYTHONPATH."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)}


def broker_command(port: int, data_dir: Path | str, *,
                   hosts: Sequence[str] | None = ("127.0.0.1",), log_level: str = "warning",
                   management: bool | int = False, args: Sequence[str] = (),
                   python: str = sys.executable) -> list[str]:
    """The command line of ``python -m amqp_server``.

    Args:
        port: the AMQP port (0: any free port).
        hosts: the ``--host`` values; None gives none (the broker's default, both loopbacks).
        management: False adds ``--no-management``; True keeps the broker's default; a number
            is the ``--management-port``.
        args: more options, appended as they are (``--ssl-*``, ``--definitions``, ...).
            Without ``--prometheus-port`` among them, ``--no-prometheus`` is added (a restart
            on a fixed AMQP port would otherwise take the Prometheus default, 15692).
    """
    cmd = [python, "-m", "amqp_server",
           *[arg for host in hosts or () for arg in ("--host", host)],
           "--port", str(port), "--data-dir", str(data_dir), "--log-level", log_level]
    if management is False:
        cmd.append("--no-management")
    elif management is not True:
        cmd += ["--management-port", str(management)]
    if "--prometheus-port" not in args and "--no-prometheus" not in args:
        cmd.append("--no-prometheus")
    return [*cmd, *args]


class BrokerProcess:
    """One broker subprocess on one data directory, started and stopped as often as wanted.

    Args:
        data_dir: the ``--data-dir``; None makes a temporary one, removed by :meth:`close`.
        log_path: where stdout and stderr go; default ``<data_dir>.log`` next to it.
        port: a fixed AMQP port; None lets the broker pick one at the first start.
        fresh_port: with ``port=None``, let the broker pick a new port at every start.
        hosts, log_level, management, args, python: see :func:`broker_command`.
        start_timeout: seconds :meth:`start` waits for the listening line(s).
    """

    def __init__(self, data_dir: Path | None = None, log_path: Path | None = None, *,
                 port: int | None = None, fresh_port: bool = False,
                 hosts: Sequence[str] | None = ("127.0.0.1",), log_level: str = "warning",
                 management: bool | int = False, args: Sequence[str] = (),
                 python: str = sys.executable, start_timeout: float = START_TIMEOUT) -> None:
        self._owned_dir: Path | None = None
        if data_dir is None:
            self._owned_dir = Path(tempfile.mkdtemp(prefix="amqpq-test-"))
            data_dir = self._owned_dir / "data"
        self.data_dir = data_dir
        self.log_path = log_path or data_dir.with_name(data_dir.name + ".log")
        self.fixed_port = port
        self.fresh_port = fresh_port
        self.hosts = tuple(hosts) if hosts is not None else None
        self.log_level = log_level
        self.management = management
        self.args = tuple(args)
        self.python = python
        self.start_timeout = start_timeout
        self.port = port or 0  # the AMQP port; known once started
        self.tls_port = 0  # the AMQPS port, when args configure TLS
        self.proc: subprocess.Popen[str] | None = None
        self.starts = 0

    # ---- where it is -----------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``amqp://guest:guest@127.0.0.1:PORT/%2F``."""
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    @property
    def management_port(self) -> int | None:
        """The ``--management-port`` given, if one was."""
        return None if isinstance(self.management, bool) else self.management

    @property
    def pid(self) -> int:
        """The process id of the running broker."""
        assert self.proc is not None, "not started"
        return self.proc.pid

    def alive(self) -> bool:
        """Whether the broker process is running."""
        return self.proc is not None and self.proc.poll() is None

    # ---- life cycle ------------------------------------------------------------------------

    def start(self) -> BrokerProcess:
        """Start the broker and wait until it listens; returns ``self``.

        Raises:
            BrokerStartError: it exited first, or did not listen within ``start_timeout``.
        """
        assert not self.alive(), "already running"
        self.starts += 1
        port = self.fixed_port or (0 if self.fresh_port or not self.port else self.port)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "a") as log:
            log.write(f"\n==== start #{self.starts} on port {port or 'any'} ====\n")
            log.flush()
            self.proc = subprocess.Popen(
                broker_command(port, self.data_dir, hosts=self.hosts, log_level=self.log_level,
                               management=self.management, args=self.args, python=self.python),
                stdout=subprocess.PIPE, stderr=log, text=True, cwd=REPO_ROOT, env=broker_env())
        self._wait_listening(self.proc)
        return self

    def _wait_listening(self, proc: subprocess.Popen[str]) -> None:
        lines: queue.Queue[str | None] = queue.Queue()
        waiting = threading.Event()
        waiting.set()

        def pump() -> None:  # read stdout to the end so the broker never blocks on it
            assert proc.stdout is not None
            with open(self.log_path, "a") as log:
                for line in proc.stdout:
                    log.write(line)
                    log.flush()
                    if waiting.is_set():
                        lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        want = {"amqp"} | ({"amqps"} if any(a.startswith("--ssl-cert") for a in self.args)
                           else set())
        deadline = time.monotonic() + self.start_timeout
        try:
            while want:
                try:
                    line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    self.kill()
                    raise BrokerStartError(f"broker not listening within "
                                           f"{self.start_timeout:.0f} s\n{self.log()}") from None
                if line is None:
                    proc.wait(timeout=5)
                    raise BrokerStartError(f"broker exited with {proc.returncode} before "
                                           f"listening\n{self.log()}")
                if (m := _LISTENING.search(line)) is not None:
                    scheme, port = m.group(1), int(m.group(3))
                    if scheme == "amqp":
                        self.port = port
                    else:
                        self.tls_port = port
                    want.discard(scheme)
        finally:
            waiting.clear()

    def stop(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """SIGTERM (clients get 320 CONNECTION_FORCED), wait; SIGKILL if it takes longer than
        ``timeout``. Returns the exit status (None when it had to be killed or never ran)."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self) -> None:
        """kill -9 (no shutdown at all), and reap the process."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def restart(self, kill: bool = False) -> BrokerProcess:
        """Stop (SIGTERM, or SIGKILL with ``kill``) and start again on the same data dir."""
        if kill:
            self.kill()
        else:
            self.stop()
        return self.start()

    def close(self) -> None:
        """Stop the broker and remove the temporary data directory, if it made one."""
        self.stop()
        if self._owned_dir is not None:
            shutil.rmtree(self._owned_dir, ignore_errors=True)

    def __enter__(self) -> BrokerProcess:
        return self if self.alive() else self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- what it said ----------------------------------------------------------------------

    def log_text(self, tail: int | None = None) -> str:
        """The log (stderr and stdout of every start), or its last ``tail`` characters."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return text[-tail:] if tail else text

    def log(self, tail: int = LOG_TAIL) -> str:
        """The log's tail, headed for an assertion message."""
        text = self.log_text(tail)
        return "broker log (tail):\n" + text if text else "<no broker log>"


@contextlib.contextmanager
def running(data_dir: Path | None = None, log_path: Path | None = None,
            **options: Any) -> Iterator[BrokerProcess]:
    """A started :class:`BrokerProcess` (``options`` as its keyword arguments), stopped after."""
    with BrokerProcess(data_dir, log_path, **options) as broker:
        yield broker


def broker_fixture(*, scope: str = "function", start: bool = True, name: str | None = None,
                   **options: Any) -> Callable[..., Iterator[BrokerProcess]]:
    """A pytest fixture giving a :class:`BrokerProcess` on a data dir of its own (under the
    test's temporary directory), started unless ``start=False``, stopped at teardown::

        broker = broker_fixture(scope="module", log_level="info")
    """
    import pytest

    @pytest.fixture(scope=scope, name=name)  # type: ignore[call-overload]
    def fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
        base = tmp_path_factory.mktemp("amqpq")
        broker = BrokerProcess(base / "data", base / "broker.log", **options)
        try:
            if start:
                broker.start()
            yield broker
        finally:
            broker.close()

    return fixture  # type: ignore[no-any-return]
