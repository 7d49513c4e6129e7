"""A broker subprocess (:class:`tests.support.broker_process.BrokerProcess`) with /proc
readings of its memory (RSS) and open file descriptors, and a raw-socket client past the
handshake; used by the stalled-reader test and the soak."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from tests.support import wire
from tests.support.broker_process import BrokerProcess

CAPABILITIES = {"authentication_failure_close": True, "publisher_confirms": True,
                "basic.nack": True, "consumer_cancel_notify": True, "connection.blocked": True}


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` (VmRSS)."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


class Broker(BrokerProcess):
    """A running broker process (warning log, no management API, ``args`` added) with /proc
    readings; ``stop()`` (SIGTERM, then SIGKILL) when done."""

    def __init__(self, data_dir: Path, *args: str, start_timeout: float = 20.0) -> None:
        super().__init__(data_dir, data_dir.parent / f"broker-{data_dir.name}.log", args=args,
                         start_timeout=start_timeout)
        self.start()

    def rss(self) -> int:
        return rss_bytes(self.pid)

    def fds(self) -> int:
        return fd_count(self.pid)


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
    client = wire.Client(port, timeout=timeout, heartbeat=heartbeat, frame_max=frame_max,
                         capabilities=CAPABILITIES)
    client.channel(1)
    return client.sock


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
