"""One fuzzed connection on a sans-IO broker, and the oracle that judges what it did.

A *session input* is a byte string, the unit of the corpus (tests/fuzz/corpus/*.bin) and of
the atheris harness (fuzz/fuzz_connection.py)::

    byte 0     scenario: the state the fuzzed connection is brought to first (SCENARIOS)
    byte 1     bits 0-2: chunking of the stream (CHUNK_SIZES); bit 7: do not read the
               output between chunks (the output buffer fills, deliveries throttle)
    byte 2     seconds the clock moves after the stream (heartbeats, consumer timeout, TTL)
    byte 3...  the stream fed to ``Connection.receive_data``

:func:`run_input` builds a broker with some shared topology, a *checker* client, the fuzzed
connection in its scenario, feeds the stream, ticks, drops the socket
(``connection_lost()``) and returns an :class:`Outcome` whose ``problems`` list every broken
rule:

* no exception escapes ``receive_data``/``data_to_send``/``tick``/``connection_lost`` or a
  broker timer, and nothing is logged at ERROR (``log.exception`` of an internal error; the
  connection's RabbitMQ-style lines about a client's errors, ``amqp_client_error``, are not
  counted);
* the broker's output is well-formed frames; a Connection.Close carries a protocol error code
  (``CONNECTION_CODES``: 501-506, or 403/530/540 where RabbitMQ uses them), never 541
  INTERNAL_ERROR; a Channel.Close a soft code (``CHANNEL_CODES``: 403-406); nothing follows a
  Connection.Close but CloseOk;
* once closed the connection holds nothing: not in ``broker.connections``, no exclusive queue
  it owned, no consumer of its channels on any queue, no unacked delivery left on any queue,
  no direct reply-to registration, no binding to a deleted queue or exchange;
* the checker connection still declares, publishes, consumes and acks.

Internal errors whose stack matches a :data:`KNOWN_BUGS` entry are counted in
``Outcome.known`` instead of ``problems`` when ``allow_known`` is set, so a long fuzz run keeps
exploring past a bug already reported (each has a strict xfail test).
"""

from __future__ import annotations

import functools
import logging
import struct
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pamqp import commands

from amqp_server.connection import Connection
from broker.broker import Broker
from broker.config import BrokerConfig
from broker.environment import BrokerEnvironment
from tests.fuzz import frames as F

CONNECTION_CODES = frozenset({403, 501, 502, 503, 504, 505, 506, 530, 540})
CHANNEL_CODES = frozenset({403, 404, 405, 406})
CHUNK_SIZES = (0, 1, 2, 3, 7, 13, 64, 4096)  # 0: the whole stream in one receive_data
INTERNAL_ERROR = 541

FUZZ_CONFIG = {"consumer_timeout": 20_000, "heartbeat": 60}

# names the generators draw from, so that fuzzed methods hit the prepared topology
SHARED_QUEUES = ("fz.shared", "fz.dlx", "fz.dead", "fz.prio", "fz.len", "fz.sac", "fz.ttl")
EXCHANGES = ("fz.headers", "fz.topic", "fz.fanout", "fz.ae")


class FakeClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


@dataclass
class Internal:
    """An internal error: an escaped exception or an ERROR log record with its stack."""

    where: str  # "escaped from receive_data", "logged", ...
    exc_type: str
    message: str
    stack: list[str]  # "module:function" innermost last

    def __str__(self) -> str:
        return f"{self.where}: {self.exc_type}: {self.message[:200]} at {' > '.join(self.stack[-6:])}"


@dataclass
class Outcome:
    frames: list[tuple[int, int, Any]] = field(default_factory=list)  # (type, channel, value)
    connection_close: Any = None
    channel_closes: list[tuple[int, Any]] = field(default_factory=list)
    internals: list[Internal] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    known: list[str] = field(default_factory=list)  # KNOWN_BUGS ids hit (allow_known)
    closed_by_broker: bool = False

    @property
    def codes(self) -> list[int]:
        out = [c.reply_code for _, c in self.channel_closes]
        if self.connection_close is not None:
            out.append(self.connection_close.reply_code)
        return out


# ---- known bugs (each has a strict xfail test reproducing it) --------------------------------


@dataclass(frozen=True)
class KnownBug:
    """A reported bug: ``internal`` matches its internal errors, ``problem`` its other
    problem texts (a leak); ``reason`` is the strict xfail reason of its regression test."""

    id: str
    reason: str
    internal: Callable[[Internal], bool] = lambda e: False
    problem: Callable[[str], bool] = lambda text: False


def _in_stack(*names: str) -> Callable[[Internal], bool]:
    return lambda e: any(any(n in s for n in names) for s in e.stack)


KNOWN_BUGS: tuple[KnownBug, ...] = ()
# Fixed since they were found (their inputs stay in tests/fuzz/corpus/ as regressions):
# queue names outside pamqp's character set in Queue.DeclareOk (541); non-UTF-8 shortstr
# properties (now 502 at publish) and non-UTF-8 CC/BCC values (routed, not 541); acks inside
# an uncommitted transaction lost on close; a wrong protocol header left the connection in
# broker.connections; malformed content
# properties (truncated, unknown field types, non-UTF-8 keys, deep nesting) escaped as 541 from
# Message.properties and from the BCC/dead-letter re-parse; Channel.CloseOk inside content
# was ignored; the 406 for an oversize message named method 60/0.


KNOWN_BY_ID = {bug.id: bug for bug in KNOWN_BUGS}


def known_bug(e: Internal | str) -> KnownBug | None:
    for bug in KNOWN_BUGS:
        if bug.internal(e) if isinstance(e, Internal) else bug.problem(e):
            return bug
    return None


def _sort_known(outcome: Outcome, allow_known: bool) -> None:
    """Move problems of KNOWN_BUGS from ``problems`` to ``known`` (when allowed)."""
    problems = list(outcome.problems)
    outcome.problems = []
    unknown_internal = False
    for item in [*outcome.internals, *problems]:
        bug = known_bug(item) if allow_known else None
        if bug is None and isinstance(item, str) and item.startswith("541 ") and allow_known:
            # the Connection.Close of an internal error: known when its cause is
            bug = None if unknown_internal or not outcome.known else KNOWN_BY_ID[
                outcome.known[0]]
        if bug is not None:
            if bug.id not in outcome.known:
                outcome.known.append(bug.id)
        else:
            unknown_internal = unknown_internal or isinstance(item, Internal)
            outcome.problems.append(str(item))


# ---- capturing internal errors --------------------------------------------------------------


def _stack_of(tb: Any) -> list[str]:
    out = []
    for fs in traceback.extract_tb(tb):
        module = fs.filename.rsplit("/", 1)[-1].removesuffix(".py")
        out.append(f"{module}:{fs.name}")
    return out


class _ErrorCapture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.errors: list[Internal] = []

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "amqp_client_error", False):
            return  # RabbitMQ's lines about the client's errors (amqp_server.connection_log)
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            self.errors.append(Internal(f"logged ({record.getMessage()[:60]})",
                                        type(exc).__name__, str(exc),
                                        _stack_of(record.exc_info[2])))
        else:
            self.errors.append(Internal("logged", "error", record.getMessage(), []))


@contextmanager
def capture_errors() -> Iterator[_ErrorCapture]:
    handler = _ErrorCapture()
    logger = logging.getLogger("amqpq")
    logger.addHandler(handler)
    old_propagate = logger.propagate
    logger.propagate = False  # keep expected noise out of the test output
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.propagate = old_propagate


# ---- parsing what the broker wrote -----------------------------------------------------------


def parse_output(data: bytes, problems: list[str]) -> list[tuple[int, int, Any]]:
    """The broker's output as (frame type, channel, decoded method | payload bytes)."""
    from amqp_server.assembler import decode_method

    out: list[tuple[int, int, Any]] = []
    pos = 0
    if data.startswith(F.PROTOCOL_HEADER):
        out.append((0, 0, "protocol-header"))
        pos = 8
    while pos < len(data):
        if len(data) - pos < 8:
            problems.append(f"broker wrote a truncated frame at {pos}: {data[pos:pos + 16]!r}")
            break
        ftype, channel, size = struct.unpack_from(">BHI", data, pos)
        end = pos + 7 + size
        if end >= len(data) or data[end] != 0xCE:
            problems.append(f"broker wrote a malformed frame at {pos}: {data[pos:pos + 16]!r}")
            break
        payload = data[pos + 7:end]
        if ftype == F.FRAME_METHOD:
            try:
                value: Any = decode_method(payload)
            except Exception as exc:
                problems.append(f"broker wrote an undecodable method: {exc}")
                value = payload
        elif ftype in (F.FRAME_HEADER, F.FRAME_BODY, F.FRAME_HEARTBEAT):
            value = payload
        else:
            problems.append(f"broker wrote frame type {ftype}")
            value = payload
        out.append((ftype, channel, value))
        pos = end + 1
    return out


# ---- the broker and its clients ---------------------------------------------------------------


class Peer:
    """A client speaking raw bytes to one sans-IO Connection (the checker, the setup)."""

    def __init__(self, broker: Broker, clock: FakeClock, name: str) -> None:
        self.conn = Connection(broker, peer=("127.0.0.1", 40000), clock=clock)
        self.name = name
        self.problems: list[str] = []

    def send(self, data: bytes) -> list[tuple[int, int, Any]]:
        self.conn.receive_data(data)
        return parse_output(self.conn.data_to_send(), self.problems)

    def methods(self, data: bytes) -> list[Any]:
        return [v for t, _, v in self.send(data) if t == F.FRAME_METHOD]

    def expect(self, data: bytes, kind: type) -> Any:
        got = self.methods(data)
        found = [m for m in got if isinstance(m, kind)]
        if len(found) != 1:
            raise AssertionError(f"{self.name}: expected {kind.name}, got "
                                 f"{[getattr(m, 'name', m) for m in got]}: {got}")
        return found[0]

    def handshake(self, **kw: Any) -> Peer:
        steps = _handshake(tuple(sorted(kw.items())))
        self.send(steps[0])
        self.send(steps[1])
        self.expect(steps[2], commands.Connection.OpenOk)
        return self

    def open(self, ch: int) -> Peer:
        self.expect(F.method(ch, commands.Channel.Open), commands.Channel.OpenOk)
        return self


@functools.cache
def _handshake(kw: tuple[tuple[str, Any], ...]) -> list[bytes]:
    return F.handshake(**dict(kw))


def make_broker(clock: FakeClock, **config: Any) -> Broker:
    cfg = {**FUZZ_CONFIG, **config}
    return Broker(BrokerConfig(**cfg), BrokerEnvironment(clock=clock))


@functools.cache
def _topology_bytes() -> tuple[bytes, bytes]:
    Q = commands.Queue.Declare
    decl = [
        F.method(1, Q, queue="fz.shared"),
        F.method(1, Q, queue="fz.dead"),
        F.method(1, Q, queue="fz.dlx", arguments={
            "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "fz.dead"}),
        F.method(1, Q, queue="fz.prio", arguments={"x-max-priority": 5}),
        F.method(1, Q, queue="fz.len", arguments={"x-max-length": 2,
                                                  "x-overflow": "reject-publish"}),
        F.method(1, Q, queue="fz.sac", arguments={"x-single-active-consumer": True}),
        F.method(1, Q, queue="fz.ttl", arguments={
            "x-message-ttl": 1000, "x-dead-letter-exchange": "fz.fanout", "x-expires": 600_000}),
        F.method(1, commands.Exchange.Declare, exchange="fz.headers", exchange_type="headers"),
        F.method(1, commands.Exchange.Declare, exchange="fz.topic", exchange_type="topic"),
        F.method(1, commands.Exchange.Declare, exchange="fz.fanout", exchange_type="fanout"),
        F.method(1, commands.Exchange.Declare, exchange="fz.ae", exchange_type="direct",
                 arguments={"alternate-exchange": "fz.fanout"}),
        F.method(1, commands.Queue.Bind, queue="fz.shared", exchange="fz.headers",
                 arguments={"x-match": "any", "k": "v"}),
        F.method(1, commands.Queue.Bind, queue="fz.shared", exchange="fz.topic",
                 routing_key="a.#"),
        F.method(1, commands.Queue.Bind, queue="fz.dead", exchange="fz.fanout"),
    ]
    return b"".join(decl), b"".join(F.publish(1, "", "fz.shared", b"shared-%d" % i)
                                    for i in range(5))


def prepare_topology(checker: Peer) -> None:
    """Queues and exchanges with features (DLX, TTL, priorities, limits, SAC, headers/topic
    routing, alternate exchange) for fuzzed methods to run into; messages in fz.shared."""
    declare, publish = _topology_bytes()
    checker.send(declare)
    checker.send(publish)
    if checker.conn.closed:
        raise AssertionError(f"topology setup failed: {checker.problems}")


def _scenario_busy(p: Peer) -> None:
    """Channels mid-flight: consumer with unacked deliveries, confirm mode, a publish waiting
    for its body, tx with pending work, an exclusive queue, a direct reply-to consumer."""
    p.open(1).open(2).open(3)
    p.send(F.method(1, commands.Basic.Qos, prefetch_count=3)
           + F.method(1, commands.Basic.Consume, queue="fz.shared", consumer_tag="c1"))
    p.send(F.method(2, commands.Confirm.Select)
           + F.method(2, commands.Basic.Consume, queue="amq.rabbitmq.reply-to",
                      consumer_tag="rr", no_ack=True)
           + F.method(3, commands.Queue.Declare, queue="fz.excl", exclusive=True)
           + F.method(3, commands.Basic.Consume, queue="fz.excl", consumer_tag="ex",
                      no_ack=True)
           + F.method(3, commands.Tx.Select)
           + F.publish(3, "", "fz.excl", b"in-tx")
           + F.method(3, commands.Basic.Ack, delivery_tag=1)
           + F.method(2, commands.Basic.Publish, exchange="", routing_key="fz.shared")
           + F.content_header(2, 100) + F.body(2, b"x" * 10))


def _scenario_open_wait(p: Peer) -> None:
    for step in F.handshake()[:2]:
        p.send(step)
    p.send(F.method(0, commands.Connection.TuneOk, channel_max=16, frame_max=4096,
                    heartbeat=10))


SCENARIOS: tuple[tuple[str, Callable[[Peer], None]], ...] = (
    ("raw", lambda p: None),
    ("header", lambda p: p.send(F.PROTOCOL_HEADER)),
    ("tune", lambda p: [p.send(step) for step in F.handshake()[:2]]),
    ("open-wait", lambda p: _scenario_open_wait(p)),
    ("open", lambda p: p.handshake()),
    ("channel", lambda p: p.handshake().open(1)),
    ("busy", lambda p: _scenario_busy(p.handshake())),
    ("small", lambda p: p.handshake(channel_max=3, frame_max=4096, heartbeat=5).open(1)),
)


def encode_input(scenario: int, stream: bytes, chunk: int = 0, drain: bool = True,
                 advance: int = 0) -> bytes:
    """A session input (see the module docstring)."""
    return bytes((scenario % 256, (chunk & 7) | (0 if drain else 0x80), advance & 0xFF)) + stream


def decode_input(data: bytes) -> tuple[int, int, bool, int, bytes]:
    """(scenario, chunk size, drain, advance seconds, stream) of a session input."""
    head = data[:3].ljust(3, b"\x00")
    scenario = head[0] % len(SCENARIOS)
    return (scenario, CHUNK_SIZES[head[1] & 7], not head[1] & 0x80, head[2], data[3:])


# ---- running one session ----------------------------------------------------------------------


def _call(outcome: Outcome, where: str, fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as exc:
        outcome.internals.append(Internal(f"escaped from {where}", type(exc).__name__,
                                          str(exc), _stack_of(exc.__traceback__)))
        return None


def run_input(data: bytes, allow_known: bool = True, check_peer: bool = True) -> Outcome:
    """Run one session input; see the module docstring for what is checked."""
    scenario, chunk, drain, advance, stream = decode_input(data)
    clock = FakeClock()
    broker = make_broker(clock)
    outcome = Outcome()
    with capture_errors() as errors:
        checker = Peer(broker, clock, "checker").handshake(heartbeat=0).open(1)
        prepare_topology(checker)
        fuzzed = Peer(broker, clock, "fuzzed")
        SCENARIOS[scenario][1](fuzzed)
        if errors.errors or fuzzed.conn.closed:
            raise AssertionError(f"scenario {SCENARIOS[scenario][0]} did not set up: "
                                 f"{errors.errors} {fuzzed.problems}")
        conn = fuzzed.conn
        out: list[bytes] = []
        pieces = [stream] if not chunk else [stream[i:i + chunk]
                                             for i in range(0, len(stream), chunk)]
        for piece in pieces:
            _call(outcome, "receive_data", conn.receive_data, piece)
            if drain:
                out.append(_call(outcome, "data_to_send", conn.data_to_send) or b"")
        out.append(_call(outcome, "data_to_send", conn.data_to_send) or b"")
        if advance:
            for step in (advance / 2, advance / 2):
                clock.now += step
                _call(outcome, "timers", broker.timers.run_due)
                _call(outcome, "tick", conn.tick)
                out.append(_call(outcome, "data_to_send", conn.data_to_send) or b"")
        output = b"".join(out)
        closed_before_lost = conn.closed
        _call(outcome, "connection_lost", conn.connection_lost)
        outcome.frames = parse_output(output, outcome.problems)
        _judge_frames(outcome)
        outcome.closed_by_broker = closed_before_lost
        used_tx = b"\x00\x5a\x00\x0a" in stream or SCENARIOS[scenario][0] == "busy"
        _check_released(broker, conn, outcome, used_tx)
        if check_peer:
            _check_peer(checker, outcome, clock)
        outcome.internals.extend(errors.errors)
    _sort_known(outcome, allow_known)
    return outcome


def _judge_frames(outcome: Outcome) -> None:
    closed_at: int | None = None
    for i, (ftype, channel, value) in enumerate(outcome.frames):
        if closed_at is not None and not isinstance(value, commands.Connection.CloseOk):
            outcome.problems.append(f"frame after Connection.Close: {ftype} ch {channel} "
                                    f"{getattr(value, 'name', value)!r:.80}")
        if isinstance(value, commands.Connection.Close):
            if outcome.connection_close is not None:
                outcome.problems.append("two Connection.Close frames")
            outcome.connection_close = value
            closed_at = i
            if value.reply_code == INTERNAL_ERROR:
                outcome.problems.append(f"541 INTERNAL_ERROR: {value.reply_text}")
            elif value.reply_code not in CONNECTION_CODES:
                outcome.problems.append(f"Connection.Close with code {value.reply_code}: "
                                        f"{value.reply_text}")
            if channel != 0:
                outcome.problems.append(f"Connection.Close on channel {channel}")
        elif isinstance(value, commands.Channel.Close):
            outcome.channel_closes.append((channel, value))
            if value.reply_code not in CHANNEL_CODES:
                outcome.problems.append(f"Channel.Close with code {value.reply_code}: "
                                        f"{value.reply_text}")


def leaks(broker: Broker, conn: Connection) -> list[str]:
    """What a closed connection still holds in ``broker``."""
    found = []
    if conn in broker.connections:
        found.append(f"connection still in broker.connections (state {conn.state.value})")
    if conn.channels:
        found.append(f"connection still has channels {sorted(conn.channels)}")
    for vhost in broker.vhosts.values():
        for q in vhost.queues.values():
            if q.exclusive and q.exclusive_owner is conn:
                found.append(f"exclusive queue {q.name} of the closed connection survives")
            for c in q.consumers:
                if getattr(c.channel, "connection", None) is conn:
                    found.append(f"consumer {c.tag} of the closed connection on {q.name}")
            if q.unacked_count:
                found.append(f"queue {q.name} has {q.unacked_count} unacked deliveries")
        for dest in getattr(vhost, "_inbound", {}):
            gone = (dest.name not in vhost.queues if dest.kind == "queue"
                    else dest.name not in vhost.exchanges)
            if gone:
                found.append(f"binding to deleted {dest.kind} {dest.name}")
        for x in vhost.exchanges.values():
            for b in x.bindings.values():
                d = b.destination
                if (d.name not in vhost.queues if d.kind == "queue"
                        else d.name not in vhost.exchanges):
                    found.append(f"binding {x.name} -> deleted {d.kind} {d.name}")
    for ch in getattr(broker.reply_to, "_channels", {}).values():
        if ch.connection is conn:
            found.append("direct reply-to registration of the closed connection")
    return found


def _check_released(broker: Broker, conn: Connection, outcome: Outcome,
                    used_tx: bool = False) -> None:
    for leak in leaks(broker, conn):
        if used_tx and "unacked deliveries" in leak:
            leak += " [session used tx]"
        outcome.problems.append(f"leak: {leak}")


_peer_rounds = 0


def _check_peer(checker: Peer, outcome: Outcome, clock: FakeClock) -> None:
    """The checker connection still works: declare, consume, publish, get it, ack, cancel."""
    global _peer_rounds
    _peer_rounds += 1
    tag = f"chk-{_peer_rounds}"
    try:
        if checker.conn.closed:
            raise AssertionError("the checker connection was closed")
        ok = checker.expect(F.method(1, commands.Queue.Declare, queue="", exclusive=True),
                            commands.Queue.DeclareOk)
        checker.expect(F.method(1, commands.Basic.Consume, queue=ok.queue, consumer_tag=tag),
                       commands.Basic.ConsumeOk)
        got = checker.send(F.publish(1, "", ok.queue, b"ping"))
        delivers = [v for t, _, v in got if isinstance(v, commands.Basic.Deliver)]
        bodies = [v for t, _, v in got if t == F.FRAME_BODY]
        if len(delivers) != 1 or bodies != [b"ping"]:
            raise AssertionError(f"checker got {got}")
        checker.send(F.method(1, commands.Basic.Ack, delivery_tag=delivers[0].delivery_tag))
        checker.expect(F.method(1, commands.Basic.Cancel, consumer_tag=tag),
                       commands.Basic.CancelOk)
        checker.expect(F.method(1, commands.Queue.Delete, queue=ok.queue),
                       commands.Queue.DeleteOk)
        if checker.problems:
            raise AssertionError(checker.problems)
    except AssertionError as exc:
        outcome.problems.append(f"other connection broken: {exc}")
    except Exception as exc:
        outcome.internals.append(Internal("checker", type(exc).__name__, str(exc),
                                          _stack_of(exc.__traceback__)))
