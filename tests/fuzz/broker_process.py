"""A broker subprocess (``python -m amqp_server``) on a free port, with /proc readings of its
memory (RSS) and open file descriptors; used by the stalled-reader test and the soak."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
READY = "amqpq: listening on amqp://"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` (VmRSS)."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


class Broker:
    """A running broker process; ``stop()`` (SIGTERM, then SIGKILL) when done."""

    def __init__(self, data_dir: Path, *args: str, start_timeout: float = 20.0) -> None:
        self.port = free_port()
        self.log_path = data_dir.parent / f"broker-{self.port}.log"
        data_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
        self._log = open(self.log_path, "w")  # closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "amqp_server", "--host", "127.0.0.1", "--port",
             str(self.port), "--data-dir", str(data_dir), "--log-level", "warning",
             "--no-management", *args],
            stdout=subprocess.PIPE, stderr=self._log, text=True, cwd=ROOT, env=env)
        ready = threading.Event()

        def pump() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                if READY in line:
                    ready.set()

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + start_timeout
        while not ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"broker did not start:\n{self.log()}")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss(self) -> int:
        return rss_bytes(self.pid)

    def fds(self) -> int:
        return fd_count(self.pid)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        with contextlib.suppress(Exception):
            self._log.close()


@contextlib.contextmanager
def running(data_dir: Path, *args: str) -> Iterator[Broker]:
    broker = Broker(data_dir, *args)
    try:
        yield broker
    finally:
        broker.stop()


def connect(port: int, timeout: float = 10.0, heartbeat: int = 0,
            frame_max: int = 131072) -> socket.socket:
    """A blocking socket past the AMQP handshake (guest/guest, vhost /), channel 1 open."""
    from pamqp import commands

    from tests.fuzz import frames as F

    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    steps = F.handshake(heartbeat=heartbeat, frame_max=frame_max)
    sock.sendall(steps[0])
    read_until(sock, b"\x00\x0a\x00\x0a")  # Connection.Start
    sock.sendall(steps[1])
    read_until(sock, b"\x00\x0a\x00\x1e")  # Connection.Tune
    sock.sendall(steps[2])
    read_until(sock, b"\x00\x0a\x00\x29")  # Connection.OpenOk
    sock.sendall(F.method(1, commands.Channel.Open))
    read_until(sock, b"\x00\x14\x00\x0b")  # Channel.OpenOk
    return sock


def read_until(sock: socket.socket, marker: bytes, limit: int = 1 << 20) -> bytes:
    """Read until ``marker`` shows up (a method's class/method ids); raises on EOF."""
    buf = b""
    while marker not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed while waiting for {marker.hex()}: {buf[-200:]!r}")
        buf += chunk
        if len(buf) > limit:
            buf = buf[-limit:]
    return buf
