"""A real etcd (Debian's ``etcd-server``, ``make etcd-deps``) on free loopback ports, for the
cluster tests, run as amqpq's docs/cluster.md tells operators to: TLS with client
certificates (``--client-cert-auth``) and etcd's auth enabled, amqpq's user ``amqpq`` holding
a role limited to the ``/amqpq/`` prefix. :data:`ETCD` is None when etcd is not installed
(the tests skip).

The certificates (a CA, etcd's server certificate, the nodes' client certificate) are made
once per test session (:func:`certificates`); users and roles are set up through etcd's gRPC
auth API (aetcd's generated stubs), so ``etcdctl`` is not needed.

Source: https://etcd.io/docs/v3.4/op-guide/security/,
https://etcd.io/docs/v3.4/op-guide/authentication/.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.broker_process import free_port
from tests.support.certs import OPENSSL, make_ca, make_leaf

ETCD = shutil.which("etcd") if OPENSSL else None  # (its certificates need openssl)
USER = "amqpq"  # amqpq's etcd user and role (readwrite on /amqpq/)
PREFIX = b"/amqpq/"
CLIENT_CN = "amqpq-test-node"  # not a user: a certificate alone authenticates as nobody

_certs: Path | None = None


def certificates() -> Path:
    """The session's directory with ``ca.pem``, ``server.pem``/``.key`` (127.0.0.1) and
    ``client.pem``/``.key`` (CN :data:`CLIENT_CN`); made on first use, removed at exit."""
    global _certs
    if _certs is None:
        d = Path(tempfile.mkdtemp(prefix="amqpq-etcd-certs-"))  # 0700
        atexit.register(shutil.rmtree, d, True)
        make_ca(d)
        make_leaf(d, "server", "etcd-server")
        make_leaf(d, "client", CLIENT_CN)
        _certs = d
    return _certs


@dataclass
class Etcd:
    """A running etcd (:func:`running_etcd`).

    Attributes:
        url: its client URL (``https://127.0.0.1:PORT``).
        args: the ``--cluster-etcd*`` options a node needs to use it.
        password_file: amqpq's password (0600); ``root_password``: etcd's root user's.
    """

    url: str
    certs: Path
    password_file: Path
    root_password: str
    token_ttl: int | None
    directory: Path
    peer_port: int
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def args(self) -> tuple[str, ...]:
        return ("--cluster-etcd", self.url,
                "--cluster-etcd-cacert", str(self.certs / "ca.pem"),
                "--cluster-etcd-cert", str(self.certs / "client.pem"),
                "--cluster-etcd-key", str(self.certs / "client.key"),
                "--cluster-etcd-user", USER,
                "--cluster-etcd-password-file", str(self.password_file))

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def start(self) -> None:
        """Start etcd (again, on the same data and ports) and wait until it listens."""
        assert ETCD is not None
        peer = f"http://127.0.0.1:{self.peer_port}"
        log = self.directory / "etcd.log"
        ttl = () if self.token_ttl is None else ("--auth-token-ttl", str(self.token_ttl))
        self.proc = subprocess.Popen(
            [ETCD, "--data-dir", str(self.directory / "data"),
             "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"default={peer}",
             "--cert-file", str(self.certs / "server.pem"),
             "--key-file", str(self.certs / "server.key"),
             "--client-cert-auth", "--trusted-ca-file", str(self.certs / "ca.pem"), *ttl],
            stdout=open(log, "ab"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                assert self.proc.poll() is None and time.monotonic() < deadline, \
                    log.read_text()[-2000:]
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None

    def restart(self) -> None:
        """Stop and start etcd: it forgets every auth token it issued (nodes must
        authenticate again) and every watch breaks."""
        self.stop()
        self.start()

    def channel(self, client_cert: bool = True) -> Any:
        """A blocking gRPC channel to etcd over TLS (with the client certificate or not)."""
        import grpc

        c = self.certs
        creds = grpc.ssl_channel_credentials(
            (c / "ca.pem").read_bytes(),
            (c / "client.key").read_bytes() if client_cert else None,
            (c / "client.pem").read_bytes() if client_cert else None)
        return grpc.secure_channel(f"127.0.0.1:{self.port}", creds)

    def enable_auth(self) -> None:
        """Users ``root`` (role root) and ``amqpq`` (role amqpq: readwrite on ``/amqpq/``),
        then ``auth enable``: what docs/cluster.md does with etcdctl."""
        from aetcd import rpc

        password = self.password_file.read_text().strip()
        with self.channel() as ch:
            auth = rpc.AuthStub(ch)
            calls = [
                (auth.UserAdd, rpc.AuthUserAddRequest(name="root", password=self.root_password)),
                (auth.UserGrantRole, rpc.AuthUserGrantRoleRequest(user="root", role="root")),
                (auth.RoleAdd, rpc.AuthRoleAddRequest(name=USER)),
                (auth.RoleGrantPermission, rpc.AuthRoleGrantPermissionRequest(
                    name=USER, perm=rpc.Permission(permType=rpc.Permission.READWRITE,
                                                   key=PREFIX, range_end=prefix_end(PREFIX)))),
                (auth.UserAdd, rpc.AuthUserAddRequest(name=USER, password=password)),
                (auth.UserGrantRole, rpc.AuthUserGrantRoleRequest(user=USER, role=USER)),
                (auth.AuthEnable, rpc.AuthEnableRequest()),
            ]
            for call, request in calls:
                call(request, timeout=10, wait_for_ready=True)


def write_secret(path: Path, secret: str) -> None:
    """``secret`` and a line break into ``path``, readable by its owner only (0600)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secret + "\n")


def prefix_end(prefix: bytes) -> bytes:
    """etcd's range end of every key starting with ``prefix`` (its last byte + 1)."""
    return prefix[:-1] + bytes([prefix[-1] + 1])


@contextlib.contextmanager
def running_etcd(directory: Path, token_ttl: int | None = None) -> Iterator[Etcd]:
    """etcd with its data in ``directory``, TLS and auth on (see the module docstring);
    ``token_ttl``: its ``--auth-token-ttl`` (s; default etcd's 300). Stopped after."""
    assert ETCD is not None
    directory.mkdir(parents=True, exist_ok=True)
    password_file = directory / "etcd-amqpq.password"
    write_secret(password_file, secrets.token_hex(12))
    etcd = Etcd(f"https://127.0.0.1:{free_port()}", certificates(), password_file,
                secrets.token_hex(12), token_ttl, directory, free_port())
    etcd.start()
    try:
        etcd.enable_auth()
        yield etcd
    finally:
        etcd.stop()
