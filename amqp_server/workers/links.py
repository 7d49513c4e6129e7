"""asyncio edge of the worker link: Unix sockets to the supervisor and between workers.

Each worker listens on ``RUN_DIR/w<index>.sock`` for links *from* the other workers and
opens one link *to* each of them (:class:`PeerLink`), so every direction between two workers
is one ordered byte stream: what worker A sends to B (publishes, settlements, cancels)
arrives in the order sent, and B's answers travel on B's own link to A. A link's output is
collected in an :class:`~amqp_server.workers.link_codec.Outbox` and written once per event
loop turn. The supervisor listens on ``RUN_DIR/hub.sock``; :class:`HubLink` is a worker's
link to it (topology records and worker up/down notices, :mod:`amqp_server.workers.supervisor`).

Everything received goes to ``on_records(peer_index, records)`` as whole records; this
module knows nothing of their meaning.

Before its hello, an inbound link is held short (the same for the node links of
:mod:`amqp_server.cluster.node_links`): each record of the hello may be at most
:data:`HELLO_MAX` bytes (a longer length prefix closes the link after its 4-byte header), the
hello must be over within ``hello_timeout`` seconds (:data:`HELLO_TIMEOUT`), at most
:data:`MAX_PENDING` links may be waiting for theirs, and a bad hello is one log line. Here the
hello is ``("hello", index)`` and nothing answers it: a worker link's trust is its Unix
socket's file permissions (the supervisor's run directory).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from amqp_server.workers.link_codec import CONTROL, LinkError, Outbox, RecordReader, read_control

log = logging.getLogger("amqpq.workers")

Records = list[tuple[int, bytes]]
CONGESTED = 8 * 1024 * 1024  # bytes buffered towards one peer before deliveries pause
#: bytes collected towards one peer that are written at once instead of at the end of the
#: turn: one loop turn may read megabytes from a publisher (32 reads of 256 KiB), and the
#: peer should start on the first of them while this worker parses the rest
WRITE_AT = 256 * 1024
#: a read at least this long may leave more waiting: the link is read again on the next loop
#: turn, after what this one's records caused was written (a consumer's deliveries), not in
#: the same turn (uvloop reads up to 32 times 256 KiB at once, and a consumer's output
#: past 1 MiB sends its queue's messages the long way, through the ready list)
READ_TURN = 64 * 1024
#: SO_SNDBUF asked for a Unix-socket link (the kernel doubles it, capped by
#: net.core.wmem_max): what the peer can read while this worker waits for a core
LINK_SNDBUF = 2 * 1024 * 1024
HELLO_MAX = 4096  # bytes: the longest record of a hello (either way)
HELLO_TIMEOUT = 5.0  # seconds an inbound link may take to complete its hello
MAX_PENDING = 64  # inbound links at once that have not completed their hello


def socket_path(run_dir: Path, index: int) -> Path:
    """Where worker ``index`` listens for links from the other workers."""
    return run_dir / f"w{index}.sock"


def hub_path(run_dir: Path) -> Path:
    """Where the supervisor listens for its workers."""
    return run_dir / "hub.sock"


class LinkStream(asyncio.Protocol):
    """One Unix socket carrying records both ways."""

    def __init__(self, on_records: Callable[[LinkStream, Records], None],
                 on_lost: Callable[[LinkStream], None],
                 on_full: Callable[[LinkStream, bool], None] | None = None,
                 on_made: Callable[[LinkStream], None] | None = None) -> None:
        self.on_records = on_records
        self.on_lost = on_lost
        self.on_full = on_full
        self.on_made = on_made
        self.reader = RecordReader()
        self.outbox = Outbox()
        self.transport: asyncio.Transport | None = None
        self.peer = -1  # the index of the worker at the other end, once it said hello
        self.hello: Any = None  # the hello in progress (an acceptor, or the dialler's wait)
        self.timer: asyncio.TimerHandle | None = None  # closes a link slow to say hello
        self.label = "worker link"  # for log lines
        self._scheduled = False
        self.paused = False  # the socket's write buffer is full

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.transport.set_write_buffer_limits(high=CONGESTED, low=CONGESTED // 2)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family == socket.AF_UNIX:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, LINK_SNDBUF)
        if self.on_made is not None:
            self.on_made(self)

    def name(self) -> str:
        """The other end, for log lines: its index once known, else its address."""
        if self.peer >= 0:
            return str(self.peer)
        peer = self.transport.get_extra_info("peername") if self.transport else None
        return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "a local socket"

    def data_received(self, data: bytes) -> None:
        try:
            records = self.reader.feed(data)
        except LinkError as exc:
            log.error("%s with %s broken: %s", self.label, self.name(), exc)
            if self.transport is not None:
                self.transport.abort()
            return
        if records:
            self.on_records(self, records)
        if len(data) >= READ_TURN and self.transport is not None:
            self.transport.pause_reading()
            asyncio.get_running_loop().call_soon(self._read_again)

    def _read_again(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.timer is not None:
            self.timer.cancel()
        self.on_lost(self)

    def pause_writing(self) -> None:
        self.paused = True
        if self.on_full is not None:
            self.on_full(self, True)

    def resume_writing(self) -> None:
        self.paused = False
        if self.on_full is not None:
            self.on_full(self, False)

    @property
    def congested(self) -> bool:
        """True when deliveries towards this peer should wait (bytes pile up)."""
        return self.paused or self.outbox.size > CONGESTED or self.transport is None

    def schedule(self) -> None:
        """Write the outbox at the end of this event-loop turn, or now when it holds
        :data:`WRITE_AT` bytes or more (the same byte stream either way)."""
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)
        elif self.outbox.size >= WRITE_AT:
            self._write()

    def flush(self) -> None:
        self._scheduled = False
        self._write()

    def _write(self) -> None:
        data = self.outbox.take()
        if data and self.transport is not None:
            self.transport.write(data)


class Links:
    """A worker's links: to the supervisor, from and to every other worker.

    Args:
        run_dir: the supervisor's directory of Unix sockets.
        index: this worker's index.
        on_records: ``(peer index, records)`` for records from another worker (``peer``
            -1 for the supervisor).
        on_peer_lost: ``(peer index)`` when the link *to* a worker closed.
        on_full: ``(True)`` when a link to a worker has more buffered than it takes, then
            ``(False)`` once every such link drained.
    """

    def __init__(self, run_dir: Path, index: int,
                 on_records: Callable[[int, Records], None],
                 on_peer_lost: Callable[[int], None],
                 on_full: Callable[[bool], None] | None = None) -> None:
        self.run_dir = run_dir
        self.index = index
        self.on_records = on_records
        self.on_peer_lost = on_peer_lost
        self.on_full = on_full
        self._full: set[int] = set()  # peers whose link is paused
        self.hub: LinkStream | None = None
        self.out: dict[int, LinkStream] = {}  # links to other workers, by index
        self._server: asyncio.base_events.Server | None = None
        self._inbound: set[LinkStream] = set()
        self._pending: set[LinkStream] = set()  # inbound links still in their hello
        self._full_logged = False  # MAX_PENDING reached was logged (until below it again)
        self.hello_timeout = HELLO_TIMEOUT
        self.label = "worker link"  # for log lines

    async def start(self) -> None:
        """Listen for the other workers, then connect to the supervisor and say hello."""
        loop = asyncio.get_running_loop()
        path = socket_path(self.run_dir, self.index)
        path.unlink(missing_ok=True)
        self._server = await loop.create_unix_server(self._inbound_stream, str(path))
        _, hub = await loop.create_unix_connection(
            lambda: LinkStream(self._hub_records, self._hub_lost), str(hub_path(self.run_dir)))
        self.hub = hub  # type: ignore[assignment]
        self.send_hub(("hello", self.index))

    def send_hub(self, record: tuple[object, ...]) -> None:
        hub = self.hub
        if hub is None:
            raise ConnectionError("the supervisor link is closed")
        hub.outbox.control(record)
        hub.schedule()

    def send_control(self, peer: int, record: tuple[Any, ...]) -> None:
        """Queue control ``record`` (a tuple of link values) for ``peer``, written at the end
        of this turn; dropped when its link is down (the peer-lost path handles its loss)."""
        out = self.out.get(peer)
        if out is not None:
            out.outbox.control(record)
            out.schedule()

    async def connect(self, peer: int) -> None:
        """Open the link to worker ``peer`` (after the supervisor said it is up) and say
        hello on it."""
        old = self.out.pop(peer, None)
        if old is not None and old.transport is not None:
            old.transport.abort()
        s = await self._dial(peer, lambda: LinkStream(
            self._outbound_records, self._outbound_lost, self._outbound_full))
        s.peer, s.label = peer, self.label
        s.reader.guarded, s.reader.guard_limit = 1, HELLO_MAX  # an answer to the hello
        try:
            await self._hello(s)
        except BaseException:
            if s.transport is not None:
                s.transport.abort()
            raise
        self.out[peer] = s

    async def _dial(self, peer: int, factory: Callable[[], LinkStream]) -> LinkStream:
        """A connected stream to ``peer`` (here: its Unix socket)."""
        _, stream = await asyncio.get_running_loop().create_unix_connection(
            factory, str(socket_path(self.run_dir, peer)))
        return stream  # type: ignore[return-value]

    async def _hello(self, stream: LinkStream) -> None:
        """Say hello on a link this worker opened (to ``stream.peer``); returns once records
        may follow. Raises OSError (ConnectionError) when the hello fails."""
        stream.outbox.control(("hello", self.index))
        stream.schedule()

    def _acceptor(self) -> Any:
        """The hello of an inbound link as a state machine: ``records`` (how many the other
        end sends before it is trusted), ``receive(record)`` -> a record to answer or None
        (raises LinkError to refuse), ``peer`` (its index once trusted, else None)."""
        return WorkerHello()

    def _inbound_stream(self) -> LinkStream:
        stream = LinkStream(self._inbound_records, self._inbound_lost, on_made=self._inbound_made)
        stream.label = self.label
        return stream

    def _inbound_made(self, stream: LinkStream) -> None:
        """An inbound link opened: held short until its hello is over (module docstring)."""
        if len(self._pending) >= MAX_PENDING:
            if not self._full_logged:
                self._full_logged = True
                log.warning("%d %ss have not completed their hello: refusing more until "
                            "they do or time out", len(self._pending), self.label)
            assert stream.transport is not None
            stream.transport.abort()
            return
        self._pending.add(stream)
        stream.hello = self._acceptor()
        stream.reader.guarded, stream.reader.guard_limit = stream.hello.records, HELLO_MAX
        stream.timer = asyncio.get_running_loop().call_later(
            self.hello_timeout, self._hello_late, stream)

    def _hello_late(self, stream: LinkStream) -> None:
        if stream.peer < 0 and stream.transport is not None:
            log.error("%s from %s closed: no hello within %.1f s", self.label, stream.name(),
                      self.hello_timeout)
            stream.transport.abort()

    def _accept_hello(self, stream: LinkStream, records: Records) -> Records | None:
        """Feed an inbound link's first records to its hello; the records after it (None:
        the link was refused and closed, one log line)."""
        try:
            while stream.hello.peer is None and records:
                (kind, body), records = records[0], records[1:]
                if kind != CONTROL:
                    raise LinkError(f"record kind {kind} before the hello")
                answer = stream.hello.receive(read_control(body))
                if answer is not None:
                    stream.outbox.control(answer)
                    stream.schedule()
        except Exception as exc:  # LinkError; anything else is a bug, still one line
            reason = str(exc)[:200] if isinstance(exc, LinkError) else type(exc).__name__
            log.error("%s from %s refused: %s", self.label, stream.name(), reason)
            if stream.transport is not None:
                stream.transport.abort()
            return None
        if stream.hello.peer is not None:
            stream.peer = stream.hello.peer
            stream.hello = None
            if stream.timer is not None:
                stream.timer.cancel()
            self._pending.discard(stream)
            self._inbound.add(stream)
        return records

    def _hub_records(self, stream: LinkStream, records: Records) -> None:
        self.on_records(-1, records)

    def _hub_lost(self, stream: LinkStream) -> None:
        self.hub = None
        log.error("the supervisor's link closed: this worker stops")
        asyncio.get_running_loop().call_soon(_stop_process)

    def _inbound_records(self, stream: LinkStream, records: Records) -> None:
        if stream.peer < 0:
            if stream.hello is None:  # refused at connection_made
                return
            rest = self._accept_hello(stream, records)
            if not rest:
                return
            records = rest
        self.on_records(stream.peer, records)

    def _inbound_lost(self, stream: LinkStream) -> None:
        self._inbound.discard(stream)
        self._pending.discard(stream)
        if len(self._pending) < MAX_PENDING:
            self._full_logged = False

    def _outbound_records(self, stream: LinkStream, records: Records) -> None:
        waiting = stream.hello
        if isinstance(waiting, asyncio.Future) and not waiting.done():
            waiting.set_result(records)  # the answer to this end's hello
            return
        log.error("unexpected records from worker %d on an outbound link", stream.peer)

    def _outbound_lost(self, stream: LinkStream) -> None:
        waiting = stream.hello
        if isinstance(waiting, asyncio.Future) and not waiting.done():
            waiting.set_exception(ConnectionError("the link closed during the hello"))
        if self.out.get(stream.peer) is stream:
            del self.out[stream.peer]
            self._outbound_full(stream, False)
            self.on_peer_lost(stream.peer)

    def _outbound_full(self, stream: LinkStream, full: bool) -> None:
        was = bool(self._full)
        if full:
            self._full.add(stream.peer)
        else:
            self._full.discard(stream.peer)
        if bool(self._full) != was and self.on_full is not None:
            self.on_full(bool(self._full))

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for s in [*self.out.values(), *self._inbound, *self._pending]:
            if s.transport is not None:
                s.transport.abort()
        if self.hub is not None and self.hub.transport is not None:
            self.hub.flush()
            self.hub.transport.close()


class WorkerHello:
    """A worker link's hello: one record, ``("hello", index)``, no answer (module docstring).
    Raises LinkError for anything else."""

    records = 1
    peer: int | None = None

    def receive(self, record: tuple[Any, ...]) -> None:
        if len(record) != 2 or record[0] != "hello" or type(record[1]) is not int \
                or record[1] < 0:
            raise LinkError("not a worker hello")
        self.peer = record[1]


def _stop_process() -> None:
    import os
    import signal
    os.kill(os.getpid(), signal.SIGTERM)
