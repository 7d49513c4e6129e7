"""A real etcd (Debian's ``etcd-server``, ``make etcd-deps``) on free loopback ports, for the
cluster tests; :data:`ETCD` is None when it is not installed (the tests skip)."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from tests.support.broker_process import free_port

ETCD = shutil.which("etcd")


@contextlib.contextmanager
def running_etcd(directory: Path) -> Iterator[str]:
    """Start etcd with its data in ``directory``; yields its client URL, stops it after."""
    assert ETCD is not None
    client, peer = free_port(), free_port()
    url = f"http://127.0.0.1:{client}"
    log = directory / "etcd.log"
    proc = subprocess.Popen(
        [ETCD, "--data-dir", str(directory / "data"), "--listen-client-urls", url,
         "--advertise-client-urls", url, "--listen-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"default=http://127.0.0.1:{peer}"],
        stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", client), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, log.read_text()[-2000:]
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
