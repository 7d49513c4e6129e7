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
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from amqp_server.workers.link_codec import CONTROL, LinkError, Outbox, RecordReader, read_control

log = logging.getLogger("amqpq.workers")

Records = list[tuple[int, bytes]]
CONGESTED = 8 * 1024 * 1024  # bytes buffered towards one peer before deliveries pause


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
                 on_full: Callable[[LinkStream, bool], None] | None = None) -> None:
        self.on_records = on_records
        self.on_lost = on_lost
        self.on_full = on_full
        self.reader = RecordReader()
        self.outbox = Outbox()
        self.transport: asyncio.Transport | None = None
        self.peer = -1  # the index of the worker at the other end, once it said hello
        self._scheduled = False
        self.paused = False  # the socket's write buffer is full

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.transport.set_write_buffer_limits(high=CONGESTED, low=CONGESTED // 2)

    def data_received(self, data: bytes) -> None:
        try:
            records = self.reader.feed(data)
        except LinkError as exc:
            log.error("worker link from %d broken: %s", self.peer, exc)
            if self.transport is not None:
                self.transport.abort()
            return
        if records:
            self.on_records(self, records)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
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
        """Write the outbox at the end of this event-loop turn."""
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self._scheduled = False
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

    async def start(self) -> None:
        """Listen for the other workers, then connect to the supervisor and say hello."""
        loop = asyncio.get_running_loop()
        path = socket_path(self.run_dir, self.index)
        path.unlink(missing_ok=True)
        self._server = await loop.create_unix_server(
            lambda: LinkStream(self._inbound_records, self._inbound_lost), str(path))
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

    async def connect(self, peer: int) -> None:
        """Open the link to worker ``peer`` (after the supervisor said it is up) and say
        hello on it."""
        old = self.out.pop(peer, None)
        if old is not None and old.transport is not None:
            old.transport.abort()
        s = await self._dial(peer, lambda: LinkStream(
            self._outbound_records, self._outbound_lost, self._outbound_full))
        s.peer = peer
        s.outbox.control(self._hello())
        s.schedule()
        self.out[peer] = s

    async def _dial(self, peer: int, factory: Callable[[], LinkStream]) -> LinkStream:
        """A connected stream to ``peer`` (here: its Unix socket)."""
        _, stream = await asyncio.get_running_loop().create_unix_connection(
            factory, str(socket_path(self.run_dir, peer)))
        return stream  # type: ignore[return-value]

    def _hello(self) -> tuple[object, ...]:
        """The first record on a link this worker opens."""
        return ("hello", self.index)

    def _hello_peer(self, hello: tuple[object, ...]) -> int | None:
        """The index the first record of an inbound link names, None to refuse it."""
        return int(hello[1]) if hello and hello[0] == "hello" else None  # type: ignore[call-overload]

    def _hub_records(self, stream: LinkStream, records: Records) -> None:
        self.on_records(-1, records)

    def _hub_lost(self, stream: LinkStream) -> None:
        self.hub = None
        log.error("the supervisor's link closed: this worker stops")
        asyncio.get_running_loop().call_soon(_stop_process)

    def _inbound_records(self, stream: LinkStream, records: Records) -> None:
        if stream.peer < 0:  # the first record names the worker at the other end
            kind, body = records[0]
            peer = self._hello_peer(read_control(body)) if kind == CONTROL else None
            if peer is None:
                name = stream.transport.get_extra_info("peername") if stream.transport else "?"
                log.error("link from %s without a valid hello closed", name)
                if stream.transport is not None:
                    stream.transport.abort()
                return
            stream.peer = peer
            self._inbound.add(stream)
            records = records[1:]
            if not records:
                return
        self.on_records(stream.peer, records)

    def _inbound_lost(self, stream: LinkStream) -> None:
        self._inbound.discard(stream)

    def _outbound_records(self, stream: LinkStream, records: Records) -> None:
        log.error("unexpected records from worker %d on an outbound link", stream.peer)

    def _outbound_lost(self, stream: LinkStream) -> None:
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
        for s in [*self.out.values(), *self._inbound]:
            if s.transport is not None:
                s.transport.abort()
        if self.hub is not None and self.hub.transport is not None:
            self.hub.flush()
            self.hub.transport.close()


def _stop_process() -> None:
    import os
    import signal
    os.kill(os.getpid(), signal.SIGTERM)
