"""Property tests of the frame decoder and of frame-level errors on a live connection.

FrameReader: any split of a byte stream gives the same frames; random bytes give frames or a
FrameError, nothing else. Connection: truncated frames wait for the rest; an oversize size
field is 501 before the payload arrives; a wrong frame-end or frame type is 501; a method on
an unopened channel is 504; a content frame where a method is due is 505; content frames
interleaved across channels are assembled per channel.

Reply codes and texts follow RabbitMQ (``rabbit_reader``, ``rabbit_command_assembler``).
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import commands

from amqp_common import framing
from amqp_common.errors import FrameError
from tests.fuzz import frames as F
from tests.fuzz import harness as H
from tests.fuzz import strategies as S

# pamqp warns when it decodes a deprecated method (Basic.RecoverAsync) a test sends
pytestmark = pytest.mark.filterwarnings("ignore:This command is deprecated:DeprecationWarning")

FAST = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

frame_specs = st.lists(
    st.tuples(st.sampled_from((1, 2, 3, 8)), st.integers(0, 65535), st.binary(max_size=300)),
    max_size=8)


def splits(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    out, last = [], 0
    for p in points:
        out.append(data[last:p])
        last = p
    out.append(data[last:])
    return out


def open_peer(**kw: object) -> tuple[H.Peer, H.FakeClock]:
    clock = H.FakeClock()
    broker = H.make_broker(clock)
    return H.Peer(broker, clock, "client").handshake(**kw).open(1), clock


def close_of(frames: list[tuple[int, int, object]]) -> commands.Connection.Close:
    found = [v for _, _, v in frames if isinstance(v, commands.Connection.Close)]
    assert len(found) == 1, frames
    return found[0]


# ---- FrameReader ----------------------------------------------------------------------------


@FAST
@given(frame_specs, st.lists(st.integers(0, 10_000), max_size=6))
def test_reader_any_split_gives_the_same_frames(specs: list[tuple[int, int, bytes]],
                                               cuts: list[int]) -> None:
    data = b"".join(F.frame(t, ch, p) for t, ch, p in specs)
    reader = framing.FrameReader(131072)
    got = []
    for piece in splits(data, cuts):
        got.extend(reader.feed(piece))
    assert got == [(t, ch, p) for t, ch, p in specs]
    assert reader.buffered == 0


def unfused(items: list[tuple]) -> list[tuple[int, int, bytes]]:
    out: list[tuple[int, int, bytes]] = []
    for item in items:
        out.extend(framing.unfuse(item) if item[0] in (framing.FRAME_PUBLISH, framing.FRAME_ACK)
                   else [item])
    return out


# publishes (some fused by FrameReader.read, some not: a ticket, a weight, an empty or a split
# body, another channel's frame in between, a body size that is not the header's) mixed with
# other frames
publish_parts = st.tuples(
    st.integers(0, 3), st.sampled_from(("", "amq.direct", "x\u00e9")), st.text(max_size=20),
    st.binary(min_size=0, max_size=40), st.integers(0, 3),
    st.sampled_from((b"\x00\x00", b"\x10\x00\x02", b"\x80\x00\x04text")),
    st.sampled_from(("plain", "ticket", "weight", "interleaved", "size", "split", "tail")))


def publish_frames(channel: int, exchange: str, rk: str, body: bytes, bits: int, props: bytes,
                   variant: str) -> bytes:
    method = F.method_payload(commands.Basic.Publish, exchange=exchange, routing_key=rk,
                              mandatory=bool(bits & 1), immediate=bool(bits & 2))
    if variant == "ticket":
        method = method[:4] + b"\x00\x07" + method[6:]
    if variant == "tail":
        method += b"\x00"
    size = len(body) + (1 if variant == "size" else 0)
    out = [F.frame(1, channel, method),
           F.content_header(channel, size, props, weight=1 if variant == "weight" else 0)]
    if variant == "interleaved":
        out.append(F.HEARTBEAT)
    if variant == "split" and len(body) > 1:
        out += [F.body(channel, body[:1]), F.body(channel, body[1:])]
    elif body:
        out.append(F.body(channel, body))
    return b"".join(out)


@FAST
@given(st.lists(st.one_of(publish_parts, st.tuples(st.sampled_from((1, 2, 3, 8)),
                                                   st.integers(0, 3), st.binary(max_size=30))),
                max_size=8),
       st.lists(st.integers(0, 10_000), max_size=4), st.sampled_from((4096, 131072)))
def test_read_is_feed_with_whole_publishes_fused(parts: list[tuple], cuts: list[int],
                                                  frame_max: int) -> None:
    """FrameReader.read gives feed's frames (a fused publish unfused: its three frames),
    whatever the split; a fused publish carries its names, flags, properties and body."""
    data = b"".join(publish_frames(*p) if len(p) == 7 else F.frame(*p) for p in parts)
    expected = framing.FrameReader(frame_max).feed(data)
    reader = framing.FrameReader(frame_max)
    got: list[tuple] = []
    for piece in splits(data, cuts):
        got.extend(reader.read(piece))
    assert unfused(got) == expected
    assert reader.buffered == 0
    for item in got:
        if item[0] == framing.FRAME_PUBLISH:
            _, _, (exchange, rk, raw), bits, flags, props, body = item
            method = framing.unfuse(item)[0][2]
            assert framing.parse_publish(method) == (exchange, rk, raw, bool(bits & 1),
                                                     bool(bits & 2))
            assert flags == int.from_bytes(props[:2], "big") and body


# a few publishes and acks of one shape and their near misses: a publish (an ack) like the
# one read before it is taken by comparing bytes with it (FrameReader.read), so repeats and
# one-field differences right after them are what to try
SHAPES = (
    ("plain", F.publish(1, "", "q", b"x" * 20)),
    ("body size", F.publish(1, "", "q", b"x" * 21)),
    ("same size", F.publish(1, "", "q", b"y" * 20)),
    ("channel", F.publish(2, "", "q", b"x" * 20)),
    ("props", F.publish(1, "", "q", b"x" * 20, props=b"\x10\x00\x02")),
    ("props value", F.publish(1, "", "q", b"x" * 20, props=b"\x10\x00\x01")),
    ("flags only", F.publish(1, "", "q", b"x" * 20, props=b"\x10\x00")),
    ("mandatory", F.publish(1, "", "q", b"x" * 20, mandatory=True)),
    ("key", F.publish(1, "", "r", b"x" * 20)),
    ("body channel", F.frame(1, 1, F.method_payload(commands.Basic.Publish, routing_key="q"))
     + F.content_header(1, 20) + F.body(2, b"x" * 20)),
    ("header end", (F.frame(1, 1, F.method_payload(commands.Basic.Publish, routing_key="q"))
                    + F.content_header(1, 20))[:-1] + b"\x00" + F.body(1, b"x" * 20)),
    ("body end", F.publish(1, "", "q", b"x" * 20)[:-1] + b"\x00"),
    ("heartbeat", F.HEARTBEAT),
    ("ack", F.frame(1, 1, b"\x00\x3c\x00\x50" + struct.pack(">QB", 7, 0))),
    ("ack multiple", F.frame(1, 1, b"\x00\x3c\x00\x50" + struct.pack(">QB", 2**64 - 1, 1))),
    ("ack bits", F.frame(1, 1, b"\x00\x3c\x00\x50" + struct.pack(">QB", 7, 2))),
    ("ack channel", F.frame(1, 2, b"\x00\x3c\x00\x50" + struct.pack(">QB", 8, 0))),
    ("ack end", F.frame(1, 1, b"\x00\x3c\x00\x50" + struct.pack(">QB", 9, 0))[:-1]
     + b"\x00"),
    ("nack", F.frame(1, 1, b"\x00\x3c\x00\x78" + struct.pack(">QB", 7, 0))),
)
same_shape = st.sampled_from(SHAPES)


def read_or_error(reader: framing.FrameReader, pieces: list[bytes]) -> list[tuple] | type:
    """The frames of ``pieces`` read one after the other (unfused), or FrameError."""
    got: list[tuple] = []
    try:
        for piece in pieces:
            got.extend(reader.read(piece))
    except FrameError:
        return FrameError
    return unfused(got)


def feed_or_error(data: bytes, frame_max: int = 131072) -> list[tuple] | type:
    try:
        return framing.FrameReader(frame_max).feed(data)
    except FrameError:
        return FrameError


@pytest.mark.parametrize("first", [name for name, _ in SHAPES])
def test_read_of_any_publish_after_another_is_feed(first: str) -> None:
    """Every shape after every other (and after itself, three times) gives feed's frames."""
    head = dict(SHAPES)[first]
    for _, then in SHAPES:
        data = head + then + then
        assert read_or_error(framing.FrameReader(), [data]) == feed_or_error(data)


@FAST
@given(st.lists(same_shape, max_size=10), st.lists(st.integers(0, 2_000), max_size=4),
       st.sampled_from((4096, 131072)))
def test_read_of_repeated_publishes_is_feed(parts: list[tuple[str, bytes]], cuts: list[int],
                                            frame_max: int) -> None:
    """Publishes that repeat the one before, or differ from it in one field or frame-end
    octet, give feed's frames (or its FrameError), whatever the split."""
    data = b"".join(p for _, p in parts)
    assert (read_or_error(framing.FrameReader(frame_max), splits(data, cuts))
            == feed_or_error(data, frame_max))


def test_read_checks_a_repeated_publish_against_a_new_frame_max() -> None:
    """A publish like the last one is not taken as it when frame_max changed since."""
    one = F.publish(1, "", "q", b"x" * 200)
    reader = framing.FrameReader(131072)
    assert [f[0] for f in reader.read(one)] == [framing.FRAME_PUBLISH]
    reader.frame_max = 100
    with pytest.raises(FrameError, match="frame_too_large"):
        reader.read(one)


def test_read_gives_basic_ack_by_hand() -> None:
    acks = [F.frame(1, 3, b"\x00\x3c\x00\x50" + struct.pack(">QB", 2**63 + 5, bits))
            for bits in (0, 1, 2)]
    data = b"".join(acks)
    got = framing.FrameReader().read(data)
    assert got[:2] == [(framing.FRAME_ACK, 3, 2**63 + 5, False),
                       (framing.FRAME_ACK, 3, 2**63 + 5, True)]
    assert got[2][0] == framing.FRAME_METHOD  # other bits set: as sent, for the assembler
    assert unfused(got) == framing.FrameReader().feed(data)


def test_read_fuses_a_whole_publish_in_one_chunk_only() -> None:
    data = F.publish(5, "amq.direct", "k", b"abc", props=b"\x10\x00\x02", mandatory=True)
    (item,) = framing.FrameReader().read(data)
    assert item == (framing.FRAME_PUBLISH, 5, ("amq.direct", "k", b"\x0aamq.direct\x01k"), 1,
                    0x1000, b"\x10\x00\x02", b"abc")
    reader = framing.FrameReader()
    assert [f[0] for f in reader.read(data[:-3])] == [1, 2]  # the body is not in yet
    assert reader.read(data[-3:]) == [(3, 5, b"abc")]


@FAST
@given(st.binary(max_size=200), st.lists(st.integers(0, 500), max_size=4),
       st.sampled_from((4096, 131072)))
def test_reader_random_bytes_give_frames_or_a_frame_error(data: bytes, cuts: list[int],
                                                          frame_max: int) -> None:
    reader = framing.FrameReader(frame_max)
    try:
        for piece in splits(data, cuts):
            for ftype, channel, payload in reader.feed(piece):
                assert ftype in (1, 2, 3, 8)
                assert 0 <= channel <= 65535 and len(payload) <= frame_max
    except FrameError:
        pass


@FAST
@given(st.integers(1, 2**32 - 1), st.sampled_from((1, 2, 3, 8)))
def test_reader_refuses_an_oversize_frame_from_its_header_alone(extra: int, ftype: int) -> None:
    frame_max = 4096
    size = min(frame_max + extra, 2**32 - 1)
    with pytest.raises(FrameError, match="frame_too_large"):
        framing.FrameReader(frame_max).feed(struct.pack(">BHI", ftype, 1, size))


# ---- frame errors on a connection ----------------------------------------------------------


VALID_STREAM = b"".join((
    F.method(1, commands.Queue.Declare, queue="t1"),
    F.publish(1, "", "t1", b"abc" * 50),
    F.method(1, commands.Basic.Get, queue="t1", no_ack=True),
    F.HEARTBEAT,
    F.method(1, commands.Queue.Purge, queue="t1"),
    F.publish(1, "", "t1", b""),
    F.method(1, commands.Queue.Delete, queue="t1"),
))


def method_names(frames: list[tuple[int, int, object]]) -> list[str]:
    return [getattr(v, "name", "?") for t, _, v in frames if t == F.FRAME_METHOD]


@FAST
@given(st.lists(st.integers(0, len(VALID_STREAM)), max_size=5))
def test_truncated_frames_wait_for_the_rest(cuts: list[int]) -> None:
    whole, _ = open_peer()
    expected = method_names(whole.send(VALID_STREAM))
    peer, _ = open_peer()
    got = []
    for piece in splits(VALID_STREAM, cuts):
        got.extend(method_names(peer.send(piece)))
        assert not peer.conn.closed
    assert got == expected == ["Queue.DeclareOk", "Basic.GetOk", "Queue.PurgeOk",
                               "Queue.DeleteOk"]


@FAST
@given(st.integers(0, 2**32 - 1 - 131073), st.sampled_from((4096, 8192, 131072)),
       st.sampled_from((1, 2, 3, 8)), st.integers(0, 3))
def test_oversize_frame_is_501_before_its_payload(extra: int, frame_max: int, ftype: int,
                                                  channel: int) -> None:
    peer, _ = open_peer(frame_max=frame_max)
    size = frame_max + 1 + extra
    close = close_of(peer.send(struct.pack(">BHI", ftype, channel, size)))
    assert close.reply_code == 501
    assert close.reply_text == (f"FRAME_ERROR - type {ftype}, all octets = <<>>: "
                                f"{{frame_too_large,{size},{frame_max - 8}}}")
    assert peer.conn.closed


@FAST
@given(st.integers(0, 255).filter(lambda b: b != 0xCE),
       st.sampled_from((F.method(1, commands.Basic.Qos, prefetch_count=1), F.HEARTBEAT,
                        F.content_header(1, 3), F.body(1, b"abc"))))
def test_wrong_frame_end_is_501(end: int, frame: bytes) -> None:
    peer, _ = open_peer()
    close = close_of(peer.send(frame[:-1] + bytes((end,))))
    assert close.reply_code == 501
    assert "frame end" in close.reply_text


@FAST
@given(st.integers(0, 255).filter(lambda t: t not in (1, 2, 3, 8)), st.binary(max_size=20))
def test_unknown_frame_type_is_501(ftype: int, payload: bytes) -> None:
    peer, _ = open_peer()
    close = close_of(peer.send(F.frame(ftype, 1, payload)))
    assert (close.reply_code, close.reply_text) == (
        501, f"FRAME_ERROR - type {ftype}, all octets = <<>>: unknown_frame")


@FAST
@given(st.integers(1, 65535), st.binary(max_size=8))
def test_heartbeat_on_a_channel_is_501(channel: int, payload: bytes) -> None:
    peer, _ = open_peer()
    close = close_of(peer.send(F.frame(F.FRAME_HEARTBEAT, channel, payload)))
    assert close.reply_code == 501


CHANNEL_METHODS = [c for c in S.CLIENT_METHODS
                   if c.name.split(".")[0] != "Connection" and c is not commands.Channel.Open]


@FAST
@given(st.sampled_from(CHANNEL_METHODS), st.integers(2, 65535))
def test_method_on_an_unopened_channel_is_504(cls: type, channel: int) -> None:
    peer, _ = open_peer()
    close = close_of(peer.send(F.method(channel, cls)))
    assert (close.reply_code, close.reply_text) == (504, "CHANNEL_ERROR - expected "
                                                    "'channel.open'")
    assert (close.class_id, close.method_id) == divmod(cls.index, 1 << 16)


@FAST
@given(st.sampled_from((F.content_header(2, 3), F.body(2, b"abc"), F.content_header(1, 3),
                        F.body(1, b"abc"))))
def test_content_frame_where_a_method_is_due_is_505(frame: bytes) -> None:
    peer, _ = open_peer()  # channel 1 is open, nothing published: a method is due
    close = close_of(peer.send(frame))
    assert close.reply_code == 505
    assert close.reply_text == ("UNEXPECTED_FRAME - expected method frame, got non method "
                                "frame instead")


@FAST
@given(st.sampled_from(CHANNEL_METHODS), st.integers(1, 1000))
def test_method_inside_content_is_505(cls: type, size: int) -> None:
    peer, _ = open_peer()
    peer.expect(F.method(2, commands.Channel.Open), commands.Channel.OpenOk)
    start = F.method(1, commands.Basic.Publish, routing_key="x") + F.content_header(1, size)
    # another channel is not held up by channel 1's pending content
    assert peer.expect(start + F.method(2, commands.Basic.Qos),
                       commands.Basic.QosOk) is not None
    close = close_of(peer.send(F.method(1, cls)))
    assert close.reply_code == 505
    assert "expected content" in close.reply_text


@FAST
@given(S.interleaved_publishes(), st.integers(0, 7))
def test_content_interleaved_across_channels_is_assembled_per_channel(
        case: tuple[bytes, list[tuple[int, bytes]]], chunk: int) -> None:
    stream, sent = case
    peer, _ = open_peer()
    peer.open(2).open(3)
    for ch in (1, 2, 3):
        peer.expect(F.method(1, commands.Queue.Declare, queue=f"fz.i{ch}"),
                    commands.Queue.DeclareOk)
    size = H.CHUNK_SIZES[chunk] or len(stream) or 1
    for i in range(0, len(stream), size):
        assert not [v for _, _, v in peer.send(stream[i:i + size])
                    if isinstance(v, commands.Connection.Close | commands.Channel.Close)]
    queues = peer.conn.vhost.queues
    for ch in (1, 2, 3):
        got = [qm.message.body for qm in list(queues[f"fz.i{ch}"].ready)]
        assert got == [body for c, body in sent if c == ch]


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.binary(min_size=1, max_size=64), st.integers(0, 7))
def test_random_bytes_after_the_handshake_are_a_hard_error_or_wait(data: bytes,
                                                                   chunk: int) -> None:
    outcome = H.run_input(H.encode_input(5, data, chunk=chunk))
    assert not outcome.problems, outcome.problems
    if outcome.connection_close is not None:
        assert outcome.connection_close.reply_code in H.CONNECTION_CODES


def test_channel_close_ok_inside_content_is_505() -> None:
    """Was a bug: Channel.CloseOk between a publish's content frames was ignored (RabbitMQ's
    command assembler answers any method there with 505)."""
    peer, _ = open_peer()
    peer.send(F.method(1, commands.Basic.Publish, routing_key="x") + F.content_header(1, 5))
    close = close_of(peer.send(F.method(1, commands.Channel.CloseOk)))
    assert close.reply_code == 505
