"""Limits under random values: frame_max, max message size, channel_max, max connections,
nested field tables, consumer timeout, half-open sockets found by heartbeats, and a stalled
reader against a real broker process (its memory stays bounded).

Reply codes and texts are RabbitMQ's: frame_too_large (501), "message size N is larger than
configured max size M" (406), channel_max (530), connection limit (530), the consumer timeout
(406), missed heartbeats (socket closed, no Connection.Close).
"""

from __future__ import annotations

import random
import socket
import threading
import time
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import commands

from amqp_common.properties import MAX_TABLE_DEPTH
from tests.fuzz import broker_process as BP
from tests.fuzz import frames as F
from tests.fuzz import harness as H

# pamqp warns when it decodes a deprecated method (Basic.RecoverAsync) a test sends
pytestmark = pytest.mark.filterwarnings("ignore:This command is deprecated:DeprecationWarning")

FAST = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
MAX = F.MAX_MESSAGE_SIZE


def new_broker(**config: object) -> tuple[object, H.FakeClock]:
    clock = H.FakeClock()
    return H.make_broker(clock, **config), clock


def closes(frames: list[tuple[int, int, object]]) -> list[object]:
    return [v for _, _, v in frames
            if isinstance(v, commands.Connection.Close | commands.Channel.Close)]


# ---- frame_max ------------------------------------------------------------------------------


@FAST
@given(st.integers(4096, 131072), st.integers(1, 64))
def test_frame_max_payload_is_accepted_and_one_byte_more_is_501(frame_max: int,
                                                                extra: int) -> None:
    broker, clock = new_broker()
    peer = H.Peer(broker, clock, "p").handshake(frame_max=frame_max).open(1)
    peer.expect(F.method(1, commands.Queue.Declare, queue="q"), commands.Queue.DeclareOk)
    # a body frame whose payload is exactly frame_max (RabbitMQ's 8-byte fudge) is fine
    size = frame_max
    ok = peer.send(F.method(1, commands.Basic.Publish, routing_key="q")
                   + F.content_header(1, size + extra) + F.body(1, b"b" * size))
    assert closes(ok) == [] and not peer.conn.closed
    frames = peer.send(F.body(1, b"b" * (frame_max + extra)))
    close = closes(frames)[0]
    assert close.reply_code == 501 and "frame_too_large" in close.reply_text
    assert H.leaks(broker, peer.conn) == []


# ---- max message size ----------------------------------------------------------------------


@FAST
@given(st.one_of(st.integers(MAX + 1, 2**64 - 1), st.sampled_from((MAX + 1, 2**63, 2**64 - 1))),
       st.booleans())
def test_message_above_max_size_is_406_without_allocating_it(size: int, fast_path: bool
                                                             ) -> None:
    broker, clock = new_broker()
    peer = H.Peer(broker, clock, "p").handshake().open(1).open(2)
    if fast_path:  # the publish fast path needs one publish seen on the connection
        peer.send(F.publish(2, "", "nowhere", b""))
    tracemalloc.start()
    try:
        frames = peer.send(F.method(1, commands.Basic.Publish, routing_key="q")
                           + F.content_header(1, size) + F.body(1, b"x"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 2**20, f"{peak} bytes allocated for a message that is refused"
    [close] = closes(frames)
    assert isinstance(close, commands.Channel.Close)
    assert (close.reply_code, close.reply_text) == (
        406, f"PRECONDITION_FAILED - message size {size} is larger than configured max size "
             f"{MAX}")
    assert (close.class_id, close.method_id) == (60, 40)  # basic.publish (was 60/0: a bug)
    # the body frame after the header is ignored (channel closing), the connection lives on
    peer.expect(F.method(2, commands.Basic.Qos, prefetch_count=1), commands.Basic.QosOk)
    peer.send(F.method(1, commands.Channel.CloseOk))
    peer.expect(F.method(1, commands.Channel.Open), commands.Channel.OpenOk)


def test_message_of_exactly_max_size_is_accepted_until_its_body() -> None:
    broker, clock = new_broker()
    peer = H.Peer(broker, clock, "p").handshake().open(1)
    frames = peer.send(F.method(1, commands.Basic.Publish, routing_key="q")
                       + F.content_header(1, MAX) + F.body(1, b"x" * 1000))
    assert closes(frames) == [] and not peer.conn.closed
    peer.conn.connection_lost()
    assert H.leaks(broker, peer.conn) == []


# ---- channel_max ---------------------------------------------------------------------------


@FAST
@given(st.integers(1, 64), st.sampled_from((None, 40)), st.randoms(use_true_random=False))
def test_channel_max_counts_open_channels(client_max: int, server_max: int | None,
                                          rnd: random.Random) -> None:
    """RabbitMQ refuses a channel when the count of open channels reaches channel_max; any
    channel number 1..65535 is valid (rabbit_reader:create_channel/2)."""
    config = {"channel_max": server_max} if server_max else {}
    broker, clock = new_broker(**config)
    peer = H.Peer(broker, clock, "p").handshake(channel_max=client_max)
    limit = min(client_max, server_max or 2047)
    numbers = rnd.sample(range(1, 65536), limit + 2)
    for number in numbers[:limit]:
        peer.expect(F.method(number, commands.Channel.Open), commands.Channel.OpenOk)
    # closing one frees a slot for a new number, above channel_max or not
    peer.expect(F.method(numbers[0], commands.Channel.Close), commands.Channel.CloseOk)
    peer.expect(F.method(numbers[limit], commands.Channel.Open), commands.Channel.OpenOk)
    [close] = closes(peer.send(F.method(numbers[limit + 1], commands.Channel.Open)))
    assert isinstance(close, commands.Connection.Close)
    assert (close.reply_code, close.reply_text) == (
        530, f"NOT_ALLOWED - number of channels opened ({limit}) has reached the "
             f"negotiated channel_max ({limit})")
    assert H.leaks(broker, peer.conn) == []


def test_channel_number_above_channel_max_is_valid() -> None:
    broker, clock = new_broker()
    peer = H.Peer(broker, clock, "p").handshake(channel_max=2047)
    peer.expect(F.method(65535, commands.Channel.Open), commands.Channel.OpenOk)
    peer.expect(F.method(65535, commands.Queue.Declare, queue="q65535"),
                commands.Queue.DeclareOk)


def test_channel_max_zero_means_the_server_limit() -> None:
    broker, clock = new_broker(channel_max=5)
    peer = H.Peer(broker, clock, "p").handshake(channel_max=0)
    for number in range(1, 6):
        peer.expect(F.method(number, commands.Channel.Open), commands.Channel.OpenOk)
    [close] = closes(peer.send(F.method(6, commands.Channel.Open)))
    assert (close.reply_code, close.reply_text) == (
        530, "NOT_ALLOWED - number of channels opened (5) has reached the negotiated "
             "channel_max (5)")


# ---- max connections -----------------------------------------------------------------------


def _opened(peer: H.Peer) -> list[object]:
    steps = F.handshake()
    peer.send(steps[0])
    peer.send(steps[1])
    return peer.methods(steps[2])


@FAST
@given(st.integers(1, 5), st.lists(st.sampled_from(("lost", "close", "hard_error",
                                                     "heartbeat", "handshaking")), max_size=8))
def test_max_connections_counts_open_connections_only(limit: int, events: list[str]) -> None:
    broker, clock = new_broker(max_connections=limit)
    live = [H.Peer(broker, clock, f"c{i}").handshake() for i in range(limit)]
    for event in events:
        if event == "handshaking":  # a connection in its handshake does not count
            H.Peer(broker, clock, "h").send(F.PROTOCOL_HEADER)
            continue
        [refused] = [m for m in _opened(H.Peer(broker, clock, "extra"))
                     if isinstance(m, commands.Connection.Close)]
        assert refused.reply_code == 530 and "connection limit" in refused.reply_text
        victim = live.pop(0)
        if event == "lost":
            victim.conn.connection_lost()
        elif event == "close":
            victim.send(F.method(0, commands.Connection.Close, reply_code=200))
        elif event == "hard_error":
            victim.send(F.frame(9, 0, b""))
        else:
            clock.now += 200
            victim.conn.tick()
        assert victim.conn not in broker.connections
        fresh = H.Peer(broker, clock, "fresh")
        assert any(isinstance(m, commands.Connection.OpenOk) for m in _opened(fresh))
        live.append(fresh)


# ---- nested field tables -------------------------------------------------------------------


NESTING_TARGETS = {
    "queue.declare": lambda t: F.method(1, commands.Queue.Declare, queue="deep", arguments=t),
    "exchange.declare": lambda t: F.method(1, commands.Exchange.Declare, exchange="deep",
                                           exchange_type="headers", arguments=t),
    "queue.bind headers": lambda t: F.method(1, commands.Queue.Bind, queue="fz.shared",
                                             exchange="fz.headers", arguments=t),
    "basic.consume": lambda t: F.method(1, commands.Basic.Consume, queue="fz.shared",
                                        arguments=t),
    "connection.start-ok": None,  # client_properties, see below
}


@pytest.mark.parametrize("depth", [1, 10, 63, 64, 65, 300, 1000, 18000])
@pytest.mark.parametrize("target", sorted(NESTING_TARGETS))
@pytest.mark.parametrize("array", [False, True], ids=["tables", "arrays"])
def test_nested_tables_in_method_arguments_limited_to_64_levels(target: str, depth: int,
                                                                array: bool) -> None:
    """Tables and arrays nested up to MAX_TABLE_DEPTH (64) levels decode; deeper ones close
    the connection with 502 SYNTAX_ERROR naming the limit, before pamqp's recursive decoder
    sees them (never 541, however deep). RabbitMQ has no such limit (documented difference)."""
    assert MAX_TABLE_DEPTH == 64
    table = F.nested_array(depth) if array else F.nested_table(depth)
    if len(table) > 131000:
        pytest.skip("does not fit a frame")
    if target == "connection.start-ok":
        stream = F.PROTOCOL_HEADER + F.method(0, commands.Connection.StartOk,
                                              client_properties=table, mechanism="PLAIN",
                                              response="\0guest\0guest", locale="en_US")
        data = H.encode_input(0, stream)
    else:
        data = H.encode_input(5, NESTING_TARGETS[target](table) * 2)  # twice: equivalence
    outcome = H.run_input(data, allow_known=False)
    assert not outcome.problems, outcome.problems
    levels = depth + 1 if array else depth  # containers below the top-level table
    if levels <= MAX_TABLE_DEPTH:
        assert outcome.codes == [], outcome.codes
    else:
        assert outcome.codes == [502]
        assert "nested deeper than 64 levels" in outcome.connection_close.reply_text


# ---- consumer timeout ----------------------------------------------------------------------


@FAST
@given(st.integers(1, 60), st.lists(st.tuples(st.integers(1, 3), st.booleans()), min_size=1,
                                    max_size=6))
def test_consumer_timeout_closes_exactly_the_late_channel(timeout_s: int,
                                                         plan: list[tuple[int, bool]]) -> None:
    """Each step: the clock moves, a delivery arrives on channel 1 or 2 and is acked at once
    (True) or left unacked. A channel is closed with 406 when, at a tick, its oldest unacked
    delivery is older than the timeout; its messages go back to the queue."""
    broker, clock = new_broker(consumer_timeout=timeout_s * 1000, heartbeat=0)
    peer = H.Peer(broker, clock, "p").handshake(heartbeat=0).open(1).open(2)
    for ch in (1, 2):
        peer.send(F.method(ch, commands.Queue.Declare, queue=f"t{ch}")
                  + F.method(ch, commands.Basic.Consume, queue=f"t{ch}"))
    oldest: dict[int, float | None] = {1: None, 2: None}
    tags = {1: 0, 2: 0}
    closed: set[int] = set()
    for step, (seconds, ack) in enumerate(plan):
        ch = 1 + step % 2
        if ch in closed:
            continue
        peer.send(F.publish(ch, "", f"t{ch}", b"m"))
        tags[ch] += 1
        if ack:
            peer.send(F.method(ch, commands.Basic.Ack, delivery_tag=tags[ch]))
        elif oldest[ch] is None:
            oldest[ch] = clock.now
        clock.now += seconds * timeout_s / 3
        peer.conn.tick()
        got = peer.send(b"")
        for c in (1, 2):
            late = oldest[c] is not None and clock.now - oldest[c] > timeout_s and c not in closed
            closed_now = [v for _, n, v in got if n == c and isinstance(v, commands.Channel.Close)]
            if late:
                assert len(closed_now) == 1 and closed_now[0].reply_code == 406
                closed.add(c)
                queue = broker.vhosts["/"].queues[f"t{c}"]
                assert queue.unacked_count == 0 and queue.message_count >= 1
            else:
                assert closed_now == []
    assert not peer.conn.closed
    peer.conn.connection_lost()
    assert H.leaks(broker, peer.conn) == []


# ---- half-open sockets ---------------------------------------------------------------------


@FAST
@given(st.integers(1, 60), st.floats(0.1, 5.0), st.booleans())
def test_missed_heartbeats_close_a_half_open_connection_and_free_it(heartbeat: int,
                                                                    idle_factor: float,
                                                                    with_work: bool) -> None:
    """The client vanished (no FIN): after two heartbeat intervals without a byte from it the
    broker closes the socket; unacked deliveries go back, exclusive queues go, and another
    client gets the messages."""
    broker, clock = new_broker(heartbeat=60)
    other = H.Peer(broker, clock, "other").handshake(heartbeat=0).open(1)
    other.send(F.method(1, commands.Queue.Declare, queue="work")
               + b"".join(F.publish(1, "", "work", b"job%d" % i) for i in range(3)))
    peer = H.Peer(broker, clock, "p").handshake(heartbeat=heartbeat).open(1)
    if with_work:
        peer.send(F.method(1, commands.Basic.Consume, queue="work")
                  + F.method(1, commands.Queue.Declare, queue="mine", exclusive=True))
    idle = heartbeat * idle_factor
    steps = max(1, int(idle))
    for _ in range(steps):  # the broker ticks about once a second
        clock.now += idle / steps
        peer.conn.tick()
        peer.conn.data_to_send()  # heartbeats go out; nothing comes back
    assert peer.conn.closed == (idle > 2 * heartbeat)
    if peer.conn.closed:
        assert H.leaks(broker, peer.conn) == []
        assert "mine" not in broker.vhosts["/"].queues
        got = other.send(F.method(1, commands.Basic.Consume, queue="work", no_ack=True))
        assert [v for t, _, v in got if t == F.FRAME_BODY] == [b"job0", b"job1", b"job2"]


# ---- a stalled reader against a real broker ------------------------------------------------


def test_stalled_consumer_does_not_grow_broker_memory(tmp_path: Path) -> None:
    """Two consumers that never read (one no-ack, one with acks) on queues capped at 16 MB
    (x-max-length-bytes, drop-head); 200 MB are published to both through amq.fanout. The
    broker must stop writing to the stalled sockets (transport back-pressure) rather than
    buffer what they do not read: its RSS stays within queues + buffers of the baseline."""
    cap = 16 * 2**20
    with BP.running(tmp_path / "data") as broker:
        baseline = broker.rss()
        stalled = []
        for i, no_ack in enumerate((True, False)):
            sock = BP.connect(broker.port)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.sendall(F.method(1, commands.Queue.Declare, queue=f"stall{i}", arguments={
                "x-max-length-bytes": cap, "x-overflow": "drop-head"})
                + F.method(1, commands.Queue.Bind, queue=f"stall{i}", exchange="amq.fanout")
                + F.method(1, commands.Basic.Consume, queue=f"stall{i}", no_ack=no_ack))
            BP.read_until(sock, b"\x00\x3c\x00\x15")  # ConsumeOk; from now on: no reading
            stalled.append(sock)
        peak = [baseline]
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], broker.rss())
                time.sleep(0.02)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        publisher = BP.connect(broker.port)
        body = b"x" * (128 * 1024 - 64)
        batch = F.publish(1, "amq.fanout", "", body) * 8
        sent = 0
        while sent < 200 * 2**20:
            publisher.sendall(batch)
            sent += 8 * len(body)
        publisher.sendall(F.method(1, commands.Queue.Declare, queue="stall0", passive=True))
        BP.read_until(publisher, b"\x00\x32\x00\x0b")  # all publishes were processed
        done.set()
        sampler.join()
        growth = peak[0] - baseline
        assert broker.alive()
        # two capped queues + per-connection output (1 MiB) and transport (4 MiB) buffers
        assert growth < 2 * cap + 64 * 2**20, f"RSS grew {growth / 2**20:.0f} MiB"
        # the stalled consumers are still connected: they were paused, not dropped
        for sock in stalled:
            sock.setblocking(False)
            assert sock.recv(1), "stalled consumer got nothing at all"
            sock.close()
        publisher.close()
