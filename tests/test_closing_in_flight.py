"""Closing with data in flight ends with a FIN, never a reset (issue #34).

A client that pipelines thousands of publishes and Connection.Close among them (Node's
amqplib "find high watermark" test does) must read Close-Ok and then EOF; a close the
server starts (a frame error, 505 on an unexpected frame, a forced close) must reach a
client that keeps sending as Close and then EOF. What RabbitMQ's reader does: after
Close/Close-Ok, frames are ignored and the socket is read until the peer closes or a closing
timeout passes, so the kernel never closes a socket with unread bytes (which sends RST).

Raw sockets against an in-process :class:`BrokerServer` (its timeouts are shortened here).
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from pamqp import commands, frame

from amqp_server import connection as connection_module
from amqp_server.server import BrokerServer
from broker.config import BrokerConfig
from tests.support.wire import Client, publish_bytes

PUBLISH = publish_bytes("", "nowhere", b"x" * 100)  # unroutable: dropped, nothing to store
CLOSE = frame.marshal(commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0), 0)
CLOSE_OK = frame.marshal(commands.Connection.CloseOk(), 0)


def _serve(tmp_path: Path, check: Callable[[BrokerServer], None],
           closing_timeout: float = 3.0) -> BrokerServer:
    async def main() -> BrokerServer:
        server = BrokerServer(BrokerConfig(hosts=("127.0.0.1",), port=0, data_dir=tmp_path))
        server.closing_timeout = closing_timeout
        await server.start()
        try:
            await asyncio.to_thread(check, server)
        finally:
            await server.stop()
        return server

    return asyncio.run(main())


def _read_until(c: Client, kind: type, timeout: float = 10.0) -> object:
    """Frames until one of ``kind`` on channel 0 (others skipped)."""
    deadline = time.monotonic() + timeout
    while True:
        ch, m = c.read_frame(deadline)
        if ch == 0 and isinstance(m, kind):
            return m


def _read_eof(c: Client, timeout: float = 10.0) -> bytes:
    """What the broker sends until EOF (b'' from recv); a reset raises ConnectionResetError."""
    c.sock.settimeout(timeout)
    rest = b""
    while True:
        data = c.sock.recv(1 << 16)
        if not data:
            return rest
        rest += data


class Sender(threading.Thread):
    """Keeps writing publishes on channel 1 until stopped; records a write error."""

    def __init__(self, c: Client) -> None:
        super().__init__(daemon=True)
        self.c = c
        self.lock = threading.Lock()  # whole frames only: the main thread writes too
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.sent = 0

    def run(self) -> None:
        batch = PUBLISH * 50
        try:
            while not self.stop.is_set():
                with self.lock:
                    self.c.sock.sendall(batch)
                self.sent += 50
        except OSError as exc:
            self.error = exc

    def send(self, data: bytes) -> None:
        with self.lock:
            self.c.sock.sendall(data)


@pytest.mark.parametrize("n", [2000, 20000])
def test_close_among_pipelined_publishes_gets_close_ok_then_eof(tmp_path: Path, n: int) -> None:
    seen: dict[str, object] = {}

    def check(server: BrokerServer) -> None:
        c = Client(server.port)
        c.channel(1)
        # one write: publishes, Connection.Close before they end, more publishes after it
        c.sock.sendall(PUBLISH * (n * 3 // 4) + CLOSE + PUBLISH * (n // 4))
        seen["reply"] = _read_until(c, commands.Connection.CloseOk)
        seen["rest"] = _read_eof(c)
        c.sock.close()

    _serve(tmp_path, check)
    assert isinstance(seen["reply"], commands.Connection.CloseOk)
    assert seen["rest"] == b""


def test_client_that_does_not_hang_up_is_closed_after_the_closing_timeout(
        tmp_path: Path) -> None:
    seen: dict[str, object] = {}

    def check(server: BrokerServer) -> None:
        c = Client(server.port)
        c.channel(1)
        c.sock.sendall(PUBLISH * 100 + CLOSE + PUBLISH * 100)
        _read_until(c, commands.Connection.CloseOk)
        assert _read_eof(c) == b""  # our write side is shut: EOF at once
        time.sleep(0.1)
        seen["after eof"] = len(server.protocols)
        deadline = time.monotonic() + 5
        while server.protocols and time.monotonic() < deadline:
            time.sleep(0.05)
        seen["after timeout"] = len(server.protocols)
        c.sock.close()

    _serve(tmp_path, check, closing_timeout=0.5)
    assert seen == {"after eof": 1, "after timeout": 0}


def _bad_frame_end() -> bytes:
    """A heartbeat frame whose end octet is wrong: 501 FRAME_ERROR, the stream is lost."""
    return struct.pack(">BHI", 8, 0, 0) + b"\x00"


def _body_without_method() -> bytes:
    """A body frame on an open channel with no Basic.Publish before it: 505."""
    return struct.pack(">BHI", 3, 1, 1) + b"x\xce"


def _close_while_sending(server: BrokerServer, provoke: bytes, answer: bool
                         ) -> dict[str, object]:
    """A client keeps publishing, sends ``provoke`` (a connection error), reads the
    broker's Close, answers Close-Ok if ``answer``, and reads to EOF while it still sends."""
    seen: dict[str, object] = {}
    c = Client(server.port)
    c.channel(1)
    sender = Sender(c)
    sender.start()
    time.sleep(0.2)
    sender.send(provoke)
    close = _read_until(c, commands.Connection.Close)
    seen["code"] = close.reply_code  # type: ignore[attr-defined]
    if answer:
        time.sleep(0.2)  # publishes after the broker's Close are ignored
        sender.send(CLOSE_OK)
    seen["rest"] = _read_eof(c)  # without Close-Ok: EOF after the frame error or timeout
    time.sleep(0.2)  # still sending after the EOF
    sender.stop.set()
    sender.join(10)
    seen["sender error"] = sender.error
    c.sock.close()
    return seen


@pytest.mark.parametrize(("provoke", "answer", "code"), [
    (_bad_frame_end(), False, 501),  # a frame error: Close, then EOF
    (_body_without_method(), True, 505),  # Close, the client's Close-Ok, EOF
])
def test_an_error_while_the_client_keeps_sending_gets_close_then_eof(
        tmp_path: Path, provoke: bytes, answer: bool, code: int) -> None:
    seen: dict[str, object] = {}
    _serve(tmp_path, lambda server: seen.update(_close_while_sending(server, provoke, answer)))
    assert seen == {"code": code, "rest": b"", "sender error": None}


def test_close_ok_timeout_then_eof_while_the_client_keeps_sending(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connection_module, "CLOSE_OK_TIMEOUT", 0.5)
    seen: dict[str, object] = {}
    _serve(tmp_path, lambda server: seen.update(
        _close_while_sending(server, _body_without_method(), False)))
    assert seen == {"code": 505, "rest": b"", "sender error": None}


def test_shutdown_while_the_client_keeps_sending(tmp_path: Path) -> None:
    seen: dict[str, object] = {}
    ready = threading.Event()

    async def main() -> None:
        server = BrokerServer(BrokerConfig(hosts=("127.0.0.1",), port=0, data_dir=tmp_path))
        await server.start()

        def client() -> None:
            c = Client(server.port)
            c.channel(1)
            sender = Sender(c)
            sender.start()
            ready.set()
            close = _read_until(c, commands.Connection.Close)
            seen["code"] = close.reply_code  # type: ignore[attr-defined]
            sender.send(CLOSE_OK)
            try:
                seen["rest"] = _read_eof(c)
            except OSError as exc:
                seen["rest"] = exc
            sender.stop.set()
            sender.join(10)
            seen["sender error"] = sender.error
            c.sock.close()

        thread = threading.Thread(target=client)
        thread.start()
        await asyncio.to_thread(ready.wait, 10)
        await asyncio.sleep(0.2)
        await server.stop()
        await asyncio.to_thread(thread.join, 10)

    asyncio.run(main())
    assert seen == {"code": 320, "rest": b"", "sender error": None}


def test_a_socket_closed_by_a_peer_without_close_is_released(tmp_path: Path) -> None:
    seen: dict[str, object] = {}

    def check(server: BrokerServer) -> None:
        s = socket.create_connection(("127.0.0.1", server.port))
        s.sendall(b"AMQP\x00\x00\x09\x01")
        s.recv(4096)
        s.close()
        deadline = time.monotonic() + 5
        while server.protocols and time.monotonic() < deadline:
            time.sleep(0.05)
        seen["left"] = len(server.protocols)

    _serve(tmp_path, check)
    assert seen == {"left": 0}


def test_forced_close_while_the_client_keeps_sending(tmp_path: Path) -> None:
    """``amqpqctl close_connection`` / DELETE /api/connections/{name}: Connection.close(320)."""
    seen: dict[str, object] = {}

    async def main() -> None:
        server = BrokerServer(BrokerConfig(hosts=("127.0.0.1",), port=0, data_dir=tmp_path))
        await server.start()
        loop = asyncio.get_running_loop()

        def force() -> None:
            for conn in list(server.broker.connections):
                conn.close(320, "CONNECTION_FORCED - Closed via management plugin")

        def client() -> None:
            c = Client(server.port)
            c.channel(1)
            sender = Sender(c)
            sender.start()
            time.sleep(0.2)
            loop.call_soon_threadsafe(force)
            close = _read_until(c, commands.Connection.Close)
            seen["code"] = close.reply_code  # type: ignore[attr-defined]
            time.sleep(0.2)  # publishes after the broker's Close are ignored
            sender.send(CLOSE_OK)
            seen["rest"] = _read_eof(c)
            time.sleep(0.2)
            sender.stop.set()
            sender.join(10)
            seen["sender error"] = sender.error
            c.sock.close()

        try:
            await asyncio.to_thread(client)
        finally:
            await server.stop()

    asyncio.run(main())
    assert seen == {"code": 320, "rest": b"", "sender error": None}
