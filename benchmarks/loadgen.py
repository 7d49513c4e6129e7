"""Load-generator worker processes (one per publisher / consumer, started by multiprocessing).

Each worker connects and sets up in its own process, reports ``ready``, waits for the shared
``go`` event, runs its bounded loop (count and time), and puts a result dict on the results
queue. Timestamps are ``time.monotonic()`` (CLOCK_MONOTONIC, the same clock in every process
of the machine), so the orchestrator can combine a publisher's start with a consumer's end.

Hot paths never decode AMQP with pamqp:

* publishers ``sendall`` pre-encoded batches of Publish+header+body frames;
* consumers ``recv_into`` a 1 MiB buffer and count body-frame starts with
  ``bytearray.count`` (see :func:`tests.support.wire.body_frame_pattern`); manual-ack consumers
  send one Basic.Ack per delivery (``multiple=False``, like a typical client acking every
  message in its callback), written together for all deliveries one ``recv`` brought, with
  delivery tags computed from the count (a channel's tags are 1, 2, 3, ...);
* confirm publishers walk only the small Ack/Nack frames that come back.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import selectors
import socket
import struct
import time
from typing import Any

from tests.support import wire
from tests.support.wire import Client

RECV_SIZE = 1 << 20


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def send_all(sock: socket.socket, data: bytes, deadline: float) -> None:
    """``sendall`` that tolerates a broker not reading for a while (flow control, paging)
    and gives up only at ``deadline``; the socket must have a short timeout."""
    mv = memoryview(data)
    while mv:
        try:
            n = sock.send(mv)
        except TimeoutError:
            if time.monotonic() > deadline:
                raise TimeoutError("broker stopped reading until the time limit") from None
            continue
        mv = mv[n:]


def raise_nofile() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


# ----------------------------------------------------------------------------- publisher
class Publisher:
    """cfg: port, exchange, routing_keys, count, body_size, persistent, confirm (window, 0 =
    off), batch (messages per write), time_limit, wait_queue/wait_count (poll a passive
    declare until the queue holds wait_count messages: the backlog scenario)."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.client = Client(cfg["port"])
        self.client.channel(1)
        self.window = int(cfg.get("confirm") or 0)
        if self.window:
            self.client.confirm_select(1)
        body = b"x" * cfg["body_size"]
        self.msgs = [wire.publish_bytes(cfg["exchange"], rk, body,
                                        persistent=cfg.get("persistent", False))
                     for rk in cfg["routing_keys"]]
        # message m of the run is always msgs[m % len(msgs)] (the orchestrator relies on it
        # to know how many messages each queue of a topic exchange gets)
        nm = len(self.msgs)
        k = int(cfg.get("batch", 1000))
        if self.window:
            k = min(k, self.window)
        if nm <= k:
            k = max(nm, k // nm * nm)
            self.chunks = [b"".join(self.msgs * (k // nm))]
        else:
            while nm % k:
                k -= 1
            self.chunks = [b"".join(self.msgs[i:i + k]) for i in range(0, nm, k)]
        self.batch = k

    def _partial(self, sent: int, n: int) -> bytes:
        msgs, nm = self.msgs, len(self.msgs)
        return b"".join([msgs[(sent + t) % nm] for t in range(n)])

    def run(self, _ctl: Any) -> dict[str, Any]:
        cfg = self.cfg
        count, k = int(cfg["count"]), self.batch
        sock = self.client.sock
        sock.settimeout(1.0)
        t0 = time.monotonic()
        deadline = t0 + cfg["time_limit"]
        chunks, nchunks = self.chunks, len(self.chunks)
        sent = i = 0
        res: dict[str, Any] = {"t_start": t0}
        try:
            if not self.window:
                while sent < count:
                    if time.monotonic() > deadline:
                        res["error"] = f"time limit: {sent} of {count} sent"
                        break
                    n = min(k, count - sent)
                    send_all(sock, chunks[i % nchunks] if n == k else self._partial(sent, n),
                             deadline)
                    sent += n
                    i += 1
                res["t_sent"] = time.monotonic()
            else:
                tracker = wire.ConfirmTracker()
                window = self.window
                while tracker.confirmed < count:
                    if time.monotonic() > deadline:
                        res["error"] = f"time limit: {tracker.confirmed} of {count} confirmed"
                        break
                    if sent < count and sent - tracker.confirmed + k <= window:
                        n = min(k, count - sent)
                        send_all(sock, chunks[i % nchunks] if n == k
                                 else self._partial(sent, n), deadline)
                        sent += n
                        i += 1
                        continue
                    try:
                        data = sock.recv(1 << 16)
                    except TimeoutError:
                        continue
                    if not data:
                        res["error"] = "connection closed by broker"
                        break
                    tracker.feed(data)
                    if tracker.error:
                        res["error"] = tracker.error
                        break
                res["t_sent"] = time.monotonic()
                res["confirmed"] = tracker.confirmed
                res["nacked"] = tracker.nacked
        except (OSError, TimeoutError) as exc:
            res["error"] = f"{type(exc).__name__}: {exc} after {sent} sent"
        res["sent"] = sent
        if cfg.get("wait_queue") and "error" not in res:
            want = int(cfg["wait_count"])
            have = -1
            # the passive declare queues behind everything the broker has not read yet
            sock.settimeout(max(1.0, deadline - time.monotonic()))
            self.client.timeout = max(1.0, deadline - time.monotonic())
            while time.monotonic() < deadline:
                have = self.client.queue_count(cfg["wait_queue"])
                if have >= want:
                    break
                time.sleep(0.02)
            res["queued"] = have
            if have < want:
                res["error"] = f"time limit: queue holds {have} of {want}"
        res["t_done"] = time.monotonic()
        return res

    def close(self) -> None:
        # Wait for CloseOk as long as the run may last: a broker applying flow control has
        # not read the tail of what we sent yet, and closing the socket under it loses it.
        self.client.close(timeout=self.cfg["time_limit"])


# ------------------------------------------------------------------------------ consumer
class _Stream:
    __slots__ = ("client", "sock", "counter", "acked", "queue")

    def __init__(self, client: Client, queue: str, body_size: int) -> None:
        self.client, self.sock, self.queue = client, client.sock, queue
        self.counter = wire.PatternCounter(wire.body_frame_pattern(body_size))
        self.acked = 0


class Consumer:
    """cfg: port, queues (one connection + channel 1 each), expected (total over them),
    body_size, no_ack, prefetch (0 = none), time_limit, consume_on_go (send Basic.Consume
    only when the run starts: draining a backlog), one_connection (all queues on one
    connection, channels 1..n: not used by default)."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.streams: list[_Stream] = []
        for q in cfg["queues"]:
            c = Client(cfg["port"])
            c.channel(1)
            if cfg.get("declare"):  # the queue lives where its consumer is (--workers N)
                c.declare_queue(q)
            if cfg.get("prefetch"):
                c.qos(int(cfg["prefetch"]))
            if not cfg.get("consume_on_go"):
                c.consume(q, no_ack=cfg["no_ack"], ctag=f"bench-{q}")
            self.streams.append(_Stream(c, q, cfg["body_size"]))

    def run(self, _ctl: Any) -> dict[str, Any]:
        cfg = self.cfg
        expected, no_ack = int(cfg["expected"]), bool(cfg["no_ack"])
        t0 = time.monotonic()
        deadline = t0 + cfg["time_limit"]
        sel = selectors.DefaultSelector()
        buf = bytearray(RECV_SIZE)
        total = 0
        res: dict[str, Any] = {"t_start": t0}
        for st in self.streams:
            st.sock.settimeout(10.0)
            if cfg.get("consume_on_go"):
                from pamqp import commands, frame
                st.sock.sendall(frame.marshal(commands.Basic.Consume(
                    queue=st.queue, consumer_tag=f"bench-{st.queue}", no_ack=no_ack), 1))
            if st.client.buf:  # bytes read past ConsumeOk during set-up
                leftover = bytearray(st.client.buf)
                total += st.counter.feed(leftover, len(leftover))
                st.client.buf = b""
            sel.register(st.sock, selectors.EVENT_READ, st)
        t_first = None
        try:
            while total < expected:
                now = time.monotonic()
                if now > deadline:
                    res["error"] = f"time limit: {total} of {expected} received"
                    break
                for key, _ in sel.select(0.5):
                    st = key.data
                    try:
                        n = st.sock.recv_into(buf)
                    except BlockingIOError:
                        continue
                    if n == 0:
                        raise ConnectionError(f"broker closed the connection of {st.queue}")
                    c = st.counter.feed(buf, n)
                    if c:
                        if t_first is None:
                            t_first = time.monotonic()
                        total += c
                        if not no_ack:
                            st.sock.sendall(wire.acks_bytes(st.acked + 1, st.acked + c))
                            st.acked += c
        except (OSError, TimeoutError) as exc:
            res["error"] = f"{type(exc).__name__}: {exc} after {total} received"
        res["t_last"] = time.monotonic()
        res["t_first"] = t_first
        res["received"] = total
        sel.close()
        return res

    def close(self) -> None:
        for st in self.streams:
            st.client.close(timeout=3.0)


# ------------------------------------------------------------------------------- latency
_TS = struct.Struct(">Q")


class LatencyPublisher:
    """cfg: port, exchange, routing_key, rate (msg/s), duration (s), body_size. Each body
    starts with the send time (monotonic ns); paced on an absolute schedule."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.client = Client(cfg["port"])
        self.client.channel(1)
        self.head = wire.publish_head(cfg["exchange"], cfg["routing_key"], cfg["body_size"])
        self.pad = b"x" * (cfg["body_size"] - 8)
        self.frame_hdr = struct.pack(">BHI", 3, 1, cfg["body_size"])

    def run(self, _ctl: Any) -> dict[str, Any]:
        rate, duration = float(self.cfg["rate"]), float(self.cfg["duration"])
        n = int(rate * duration)
        sock = self.client.sock
        sock.settimeout(10.0)
        head, pad, fh = self.head, self.pad, self.frame_hdr
        t0 = time.monotonic()
        sent, late = 0, 0
        res: dict[str, Any] = {"t_start": t0}
        try:
            for i in range(n):
                due = t0 + i / rate
                delay = due - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                elif delay < -0.005:
                    late += 1
                sock.sendall(head + fh + _TS.pack(time.monotonic_ns()) + pad + b"\xce")
                sent += 1
        except (OSError, TimeoutError) as exc:
            res["error"] = f"{type(exc).__name__}: {exc}"
        res.update(sent=sent, late=late, t_sent=time.monotonic())
        return res

    def close(self) -> None:
        self.client.close()


class LatencyConsumer:
    """cfg: port, queue, expected, warmup (messages not counted), time_limit. Walks frames
    (low rate), reads the timestamp at the start of each body."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.client = Client(cfg["port"])
        self.client.channel(1)
        self.client.consume(cfg["queue"], no_ack=True, ctag="bench-lat")

    def run(self, _ctl: Any) -> dict[str, Any]:
        cfg = self.cfg
        expected, warmup = int(cfg["expected"]), int(cfg.get("warmup", 0))
        sock = self.client.sock
        sock.settimeout(1.0)
        deadline = time.monotonic() + cfg["time_limit"]
        lats: list[int] = []
        data = self.client.buf
        self.client.buf = b""
        got = 0
        res: dict[str, Any] = {}
        hdr, ts = struct.Struct(">BHI").unpack_from, _TS.unpack_from
        while got < expected and time.monotonic() < deadline:
            try:
                chunk = sock.recv(1 << 16)
            except TimeoutError:
                continue
            now = time.monotonic_ns()
            if not chunk:
                res["error"] = "connection closed by broker"
                break
            data += chunk
            pos, end = 0, len(data)
            while end - pos >= 7:
                ftype, _ch, size = hdr(data, pos)
                if pos + 8 + size > end:
                    break
                if ftype == 3 and size >= 8:
                    got += 1
                    if got > warmup:
                        lats.append(now - ts(data, pos + 7)[0])
                pos += 8 + size
            data = data[pos:]
        if got < expected and "error" not in res:
            res["error"] = f"time limit: {got} of {expected} received"
        lats.sort()

        def pct(p: float) -> float | None:
            if not lats:
                return None
            return lats[min(len(lats) - 1, int(p / 100 * len(lats)))] / 1e6

        res.update(received=got, samples=len(lats), p50_ms=pct(50), p90_ms=pct(90),
                   p99_ms=pct(99), max_ms=lats[-1] / 1e6 if lats else None)
        return res

    def close(self) -> None:
        self.client.close()


# ----------------------------------------------------------------------- idle connections
class IdleConnections:
    """cfg: port, connections, concurrency (handshakes in flight), hold_limit (s). Opens every
    connection (handshake + one channel, heartbeat as the broker proposes, like a typical
    client), reports ``opened`` with the set-up time, holds them until the orchestrator
    sets ``release`` (or hold_limit), then closes them with Connection.Close."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        raise_nofile()

    def run(self, ctl: Any) -> dict[str, Any]:
        return asyncio.run(self._run(ctl))

    async def _run(self, ctl: Any) -> dict[str, Any]:
        from pamqp import commands, frame
        from pamqp.exceptions import UnmarshalingException

        cfg = self.cfg
        port, n = cfg["port"], int(cfg["connections"])
        sem = asyncio.Semaphore(int(cfg.get("concurrency", 100)))
        start_ok = wire.start_ok("amqpq-bench-idle")
        conns: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

        async def read_method(reader: asyncio.StreamReader, buf: bytearray) -> Any:
            while True:
                if buf:
                    try:
                        used, _ch, value = frame.unmarshal(bytes(buf))
                    except UnmarshalingException:
                        pass
                    else:
                        del buf[:used]
                        return value
                data = await reader.read(65536)
                if not data:
                    raise ConnectionError("closed during handshake")
                buf += data

        async def open_one() -> None:
            async with sem:
                reader, writer = await asyncio.open_connection(wire.HOST, port)
                buf = bytearray()
                writer.write(wire.PROTOCOL_HEADER)
                await read_method(reader, buf)  # Start
                writer.write(start_ok)
                tune = await read_method(reader, buf)
                writer.write(wire.tune_ok_open(tune, tune.heartbeat)
                             + frame.marshal(commands.Channel.Open(), 1))
                await read_method(reader, buf)  # Connection.OpenOk
                await read_method(reader, buf)  # Channel.OpenOk
                conns.append((reader, writer))

        t0 = time.monotonic()
        res: dict[str, Any] = {"t_start": t0}
        tasks = [asyncio.ensure_future(open_one()) for _ in range(n)]
        done, pending = await asyncio.wait(tasks, timeout=cfg["time_limit"])
        for t in pending:
            t.cancel()
        errors = [t.exception() for t in done if t.exception() is not None]
        res["setup_s"] = time.monotonic() - t0
        res["opened"] = len(conns)
        if pending:
            res["error"] = f"time limit: {len(conns)} of {n} connections opened"
        elif errors:
            res["error"] = f"{len(errors)} connections failed, first: {errors[0]!r}"
        ctl["phase"](dict(res))
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, ctl["release"].wait, cfg.get("hold_limit", 60))

        async def close_one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(wire.CLOSE_FRAME)
            with contextlib.suppress(Exception):
                seen = b""
                while wire.CLOSE_OK_FRAME not in seen:
                    data = await asyncio.wait_for(reader.read(4096), 5)
                    if not data:
                        break
                    seen = seen[-16:] + data
            writer.close()

        await asyncio.gather(*(close_one(r, w) for r, w in conns), return_exceptions=True)
        return res

    def close(self) -> None:
        pass


KINDS = {"publisher": Publisher, "consumer": Consumer, "latency_pub": LatencyPublisher,
         "latency_con": LatencyConsumer, "idle": IdleConnections}


def worker_main(idx: int, kind: str, cfg: dict[str, Any], ready_q: Any, go: Any,
                results: Any, release: Any) -> None:
    """Process entry point: set up, report ready, wait for go, run, report the result."""
    raise_nofile()
    try:
        w = KINDS[kind](cfg)
    except Exception as exc:  # noqa: BLE001 - reported to the orchestrator
        ready_q.put((idx, "error", f"{kind} set-up: {type(exc).__name__}: {exc}"))
        return
    ready_q.put((idx, "ready", None))
    if not go.wait(cfg.get("go_timeout", 120)):
        with contextlib.suppress(Exception):
            w.close()
        return
    cpu0 = _cpu()
    ctl = {"release": release, "phase": lambda r: results.put((idx, "phase", r))}
    try:
        res = w.run(ctl)
    except Exception as exc:  # noqa: BLE001
        res = {"error": f"{kind}: {type(exc).__name__}: {exc}"}
    res["gen_cpu_s"] = _cpu() - cpu0
    results.put((idx, "result", res))
    with contextlib.suppress(Exception):
        w.close()
