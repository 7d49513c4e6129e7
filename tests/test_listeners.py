"""Listen addresses: both loopbacks by default, ``--host`` exactly as given (several allowed),
one port for every address, and one line naming the address that cannot be bound.

Why: a Node.js 17+ or Java client resolving ``localhost`` to ::1 got ECONNREFUSED from a
broker listening on 127.0.0.1 only (issue 14); RabbitMQ listens on every interface.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
from pathlib import Path

import pytest

from amqp_server.server import BrokerServer, parse_args
from broker.config import BrokerConfig
from broker.listeners import ListenError, bind_all
from management.app import management_port
from tests.support.broker_process import broker_command


def _ipv6_loopback() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


needs_ipv6 = pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here")


def _first_bytes(host: str, port: int, request: bytes, size: int) -> bytes:
    """What ``host:port`` answers to ``request`` (first ``size`` bytes; b"" when it cannot
    be reached)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(3)
            s.connect((host, port))
            s.sendall(request)
            return s.recv(size)
    except OSError:
        return b""


def _speaks_amqp(host: str, port: int) -> bool:
    """True when ``host:port`` answers a protocol header with Connection.Start."""
    frame = _first_bytes(host, port, b"AMQP\x00\x00\x09\x01", 7)
    return frame[:3] == b"\x01\x00\x00"  # a method frame on channel 0


def _http_ok(host: str, port: int) -> bool:
    return _first_bytes(host, port, b"GET /api/overview HTTP/1.0\r\n\r\n", 12).startswith(
        b"HTTP/1.")


def _serve(config: BrokerConfig, check: object) -> None:
    """Start a BrokerServer, run ``check(server)`` in a thread (blocking sockets), stop."""

    async def main() -> None:
        server = BrokerServer(config)
        await server.start()
        try:
            await asyncio.to_thread(check, server)  # type: ignore[arg-type]
        finally:
            await server.stop()

    asyncio.run(main())


@needs_ipv6
def test_default_listens_on_both_loopbacks_on_one_port(tmp_path: Path) -> None:
    config = parse_args(["--port", "0", "--data-dir", str(tmp_path)])  # management on too
    seen: dict[str, bool] = {}

    def check(server: BrokerServer) -> None:
        seen["v4"] = _speaks_amqp("127.0.0.1", server.port)
        seen["v6"] = _speaks_amqp("::1", server.port)
        http = management_port(server.management)
        seen["http v4"] = _http_ok("127.0.0.1", http)
        seen["http v6"] = _http_ok("::1", http)

    _serve(config, check)
    assert seen == {"v4": True, "v6": True, "http v4": True, "http v6": True}


@needs_ipv6
def test_explicit_host_keeps_its_meaning(tmp_path: Path) -> None:
    config = BrokerConfig(hosts=("127.0.0.1",), port=0, data_dir=tmp_path)
    seen: dict[str, bool] = {}

    def check(server: BrokerServer) -> None:
        seen["v4"] = _speaks_amqp("127.0.0.1", server.port)
        seen["v6"] = _speaks_amqp("::1", server.port)

    _serve(config, check)
    assert seen == {"v4": True, "v6": False}


def test_host_option_may_be_repeated() -> None:
    assert parse_args(["--host", "127.0.0.1", "--host", "::1"]).hosts == ("127.0.0.1", "::1")
    assert parse_args(["--host", "::"]).hosts == ("::",)
    assert parse_args([]).hosts is None
    assert parse_args([]).listen_hosts == ("127.0.0.1", "::1")


def test_a_defaulted_address_that_fails_is_skipped_a_given_one_is_not() -> None:
    bound: list[tuple[str, int]] = []

    async def bind(host: str, port: int) -> int:
        if host == "::1":
            raise OSError(99, "Cannot assign requested address")
        bound.append((host, port or 4242))
        return port or 4242

    port = asyncio.run(bind_all(bind, ("127.0.0.1", "::1"), 0, optional=("::1",)))
    assert (port, bound) == (4242, [("127.0.0.1", 4242)])
    with pytest.raises(ListenError) as err:
        asyncio.run(bind_all(bind, ("127.0.0.1", "::1"), 5000))
    assert err.value.strerror == "[::1]:5000: Cannot assign requested address"


def test_port_zero_binds_every_address_to_the_first_ones_port() -> None:
    asked: list[int] = []

    async def bind(host: str, port: int) -> int:
        asked.append(port)
        return port or 6100

    assert asyncio.run(bind_all(bind, ("a", "b", "c"), 0)) == 6100
    assert asked == [0, 6100, 6100]


def test_a_taken_port_is_one_line_naming_the_address(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(broker_command(port, tmp_path, log_level="critical"),
                              capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"amqpq-server: cannot listen on 127.0.0.1:{port}: Address already in use"]
