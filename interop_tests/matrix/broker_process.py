"""An amqpq broker process of the test's own, restartable on the same port and data dir.

For tests that stop the broker under a client (the robust reconnect test): they cannot do that
to the shared session broker, nor to an external one (``AMQPQ_TEST_URL``).
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_LINE = "amqpq: listening on"
START_TIMEOUT = 20.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class BrokerProcess:
    def __init__(self, data_dir: Path, log_path: Path, port: int | None = None,
                 hosts: tuple[str, ...] | None = ("127.0.0.1",)) -> None:
        """``hosts``: the ``--host`` values; None starts it with none (both loopbacks)."""
        self.data_dir = data_dir
        self.hosts = hosts
        self.log_path = log_path
        self.port = port or free_port()
        self.proc: subprocess.Popen[str] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    def start(self) -> None:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.starts += 1
        deadline = time.monotonic() + START_TIMEOUT
        with open(self.log_path, "a") as log:
            log.write(f"\n==== start #{self.starts} on port {self.port} ====\n")
            log.flush()
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "amqp_server",
                 *[arg for host in self.hosts or () for arg in ("--host", host)],
                 "--port", str(self.port), "--data-dir", str(self.data_dir),
                 "--no-management", "--log-level", "info"],
                stdout=subprocess.PIPE, stderr=log, text=True, cwd=REPO_ROOT,
                env={**os.environ, "PYTHONPATH": os.pathsep.join(
                    p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)})
        lines: queue.Queue[str | None] = queue.Queue()
        proc = self.proc

        def pump() -> None:  # read stdout to the end so the broker never blocks on it
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.kill()
                raise RuntimeError(f"broker not listening within {START_TIMEOUT:.0f} s\n"
                                   f"{self.log()}") from None
            if line is None:
                proc.wait(timeout=5)
                raise RuntimeError(f"broker exited with {proc.returncode} before listening "
                                   f"(port {self.port} taken?)\n{self.log()}")
            if READY_LINE in line:
                return

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM (clients get 320 CONNECTION_FORCED), then wait; SIGKILL if it hangs."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def log(self) -> str:
        try:
            return "broker log (tail):\n" + self.log_path.read_text(errors="replace")[-6000:]
        except OSError:
            return "<no broker log>"
