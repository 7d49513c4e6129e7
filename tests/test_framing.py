"""The frame layer: FrameReader and the hand-packed encoders/decoders, against pamqp; frame
errors and content assembly on a live connection.

pamqp is the reference implementation: every hand-packed frame must equal
``pamqp.frame.marshal`` of the same method byte for byte, and the hand parsers must agree with
pamqp's decoding.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest
from conftest import Client, connection_close, deliveries
from pamqp import commands
from pamqp import frame as pamqp_frame
from pamqp.body import ContentBody
from pamqp.header import ContentHeader

from amqp_common import framing
from amqp_common.errors import FrameError, ReplyCode
from amqp_common.method_tables import TABLE_METHODS, check_method_tables

MakeClient = Callable[..., Client]


def method_bytes(method: object, channel: int = 1) -> bytes:
    return pamqp_frame.marshal(method, channel)


def payload_of(frame: bytes) -> bytes:
    """The payload of one marshalled frame (without the 7-byte header and frame-end)."""
    return frame[7:-1]


# ---- FrameReader ---------------------------------------------------------------------------


def test_reader_partial_input_byte_by_byte() -> None:
    data = method_bytes(commands.Queue.Declare(queue="q1"), 3)
    reader = framing.FrameReader()
    for i, byte in enumerate(data[:-1]):
        assert reader.feed(bytes([byte])) == []
        assert reader.buffered == i + 1
    frames = reader.feed(data[-1:])
    assert frames == [(framing.FRAME_METHOD, 3, payload_of(data))]
    assert reader.buffered == 0


def test_reader_several_frames_in_one_chunk_and_a_partial_tail() -> None:
    a = method_bytes(commands.Channel.Open(), 1)
    b = pamqp_frame.marshal(ContentHeader(0, 3, commands.Basic.Properties()), 2)
    c = pamqp_frame.marshal(ContentBody(b"abc"), 2)
    hb = framing.HEARTBEAT_FRAME
    reader = framing.FrameReader()
    frames = reader.feed(a + b + c + hb + a[:5])
    assert frames == [
        (framing.FRAME_METHOD, 1, payload_of(a)),
        (framing.FRAME_HEADER, 2, payload_of(b)),
        (framing.FRAME_BODY, 2, b"abc"),
        (framing.FRAME_HEARTBEAT, 0, b""),
    ]
    assert reader.buffered == 5
    assert reader.feed(a[5:]) == [(framing.FRAME_METHOD, 1, payload_of(a))]


def test_reader_frame_exactly_frame_max_is_accepted() -> None:
    body = b"x" * (4096 - 8)
    data = pamqp_frame.marshal(ContentBody(body), 1)
    assert len(data) == 4096
    assert framing.FrameReader(4096).feed(data) == [(framing.FRAME_BODY, 1, body)]


def test_reader_oversize_frame_is_a_frame_error_as_soon_as_the_header_is_in() -> None:
    # payload 4097 > frame_max 4096 (RabbitMQ tolerates the 8 bytes of framing on top)
    data = pamqp_frame.marshal(ContentBody(b"x" * 4097), 1)
    reader = framing.FrameReader(4096)
    with pytest.raises(FrameError) as info:
        reader.feed(data[:7])  # only the header: the size is known already
    assert info.value.code == ReplyCode.FRAME_ERROR
    assert info.value.is_soft is False


def test_reader_zero_frame_max_means_the_default_limit() -> None:
    reader = framing.FrameReader(0)
    header = struct.pack(">BHI", framing.FRAME_BODY, 1, 131072 + 1)
    with pytest.raises(FrameError):
        reader.feed(header)


def test_reader_bad_frame_end_is_a_frame_error() -> None:
    data = bytearray(method_bytes(commands.Channel.Open(), 1))
    data[-1] = 0x00
    with pytest.raises(FrameError) as info:
        framing.FrameReader().feed(bytes(data))
    assert info.value.code == ReplyCode.FRAME_ERROR


def test_reader_bad_frame_end_after_a_good_frame() -> None:
    good = method_bytes(commands.Channel.Open(), 1)
    bad = bytearray(good)
    bad[-1] = 0xCD
    with pytest.raises(FrameError):
        framing.FrameReader().feed(good + bytes(bad))


@pytest.mark.parametrize("ftype", [0, 4, 9, 255])
def test_reader_unknown_frame_type_is_a_frame_error(ftype: int) -> None:
    data = struct.pack(">BHI", ftype, 0, 2) + b"ab" + framing.FRAME_END_BYTE
    with pytest.raises(FrameError) as info:
        framing.FrameReader().feed(data)
    assert info.value.code == ReplyCode.FRAME_ERROR


# ---- hand-packed outbound frames == pamqp ------------------------------------------------


def ex_rk(exchange: str, routing_key: str) -> bytes:
    return framing.encode_shortstr(exchange) + framing.encode_shortstr(routing_key)


CASES = [
    ("", "q1"),
    ("amq.direct", "a.b.c"),
    ("x", ""),
    ("x-1:@#,/+ ", "ключ.ル.🐇"),  # pamqp only accepts the spec's characters in names
    ("e" * 127, "k" * 255),
]


@pytest.mark.parametrize(("exchange", "routing_key"), CASES)
@pytest.mark.parametrize("redelivered", [False, True])
def test_deliver_frame_equals_pamqp(exchange: str, routing_key: str, redelivered: bool) -> None:
    for channel, tag, ctag in ((1, 1, "ctag"), (2047, 2**63 - 1, "amq.ctag-" + "A" * 22)):
        mine = framing.deliver_frame(channel, framing.encode_shortstr(ctag), tag, redelivered,
                                     ex_rk(exchange, routing_key))
        ref = commands.Basic.Deliver(consumer_tag=ctag, delivery_tag=tag,
                                     redelivered=redelivered, exchange=exchange,
                                     routing_key=routing_key)
        assert mine == pamqp_frame.marshal(ref, channel)


@pytest.mark.parametrize(("exchange", "routing_key"), CASES)
@pytest.mark.parametrize("redelivered", [False, True])
def test_get_ok_frame_equals_pamqp(exchange: str, routing_key: str, redelivered: bool) -> None:
    for channel, tag, count in ((1, 1, 0), (7, 123456789012, 2**32 - 1)):
        mine = framing.get_ok_frame(channel, tag, redelivered, ex_rk(exchange, routing_key),
                                    count)
        ref = commands.Basic.GetOk(delivery_tag=tag, redelivered=redelivered,
                                   exchange=exchange, routing_key=routing_key,
                                   message_count=count)
        assert mine == pamqp_frame.marshal(ref, channel)


@pytest.mark.parametrize(("exchange", "routing_key"), CASES)
def test_return_frame_equals_pamqp(exchange: str, routing_key: str) -> None:
    for code, text in ((312, "NO_ROUTE"), (313, "NO_CONSUMERS")):
        mine = framing.return_frame(5, code, text, ex_rk(exchange, routing_key))
        ref = commands.Basic.Return(reply_code=code, reply_text=text, exchange=exchange,
                                    routing_key=routing_key)
        assert mine == pamqp_frame.marshal(ref, 5)


def test_hand_packed_frames_decode_with_pamqp() -> None:
    data = framing.deliver_frame(3, framing.encode_shortstr("c1"), 42, True, ex_rk("x", "rk"))
    consumed, channel, method = pamqp_frame.unmarshal(data)
    assert (consumed, channel) == (len(data), 3)
    assert isinstance(method, commands.Basic.Deliver)
    assert (method.consumer_tag, method.delivery_tag, method.redelivered) == ("c1", 42, True)
    assert (method.exchange, method.routing_key) == ("x", "rk")


def test_method_frame_is_pamqp_marshal() -> None:
    m = commands.Queue.DeclareOk(queue="q", message_count=3, consumer_count=1)
    assert framing.method_frame(9, m) == pamqp_frame.marshal(m, 9)


# ---- hand parsers == pamqp -----------------------------------------------------------------


PUBLISH_CASES = [
    ("", "q1", False, False),
    ("amq.topic", "a.b.#", True, False),
    ("x", "", False, True),
    ("x", "ключ.ル.🐇", True, True),
    ("amq.direct", "é" * 127, False, True),
    ("e" * 127, "k" * 255, True, False),
]


@pytest.mark.parametrize(("exchange", "routing_key", "mandatory", "immediate"), PUBLISH_CASES)
def test_parse_publish_agrees_with_pamqp(exchange: str, routing_key: str, mandatory: bool,
                                         immediate: bool) -> None:
    data = method_bytes(commands.Basic.Publish(exchange=exchange, routing_key=routing_key,
                                               mandatory=mandatory, immediate=immediate))
    payload = payload_of(data)
    ref = commands.Basic.Publish()
    ref.unmarshal(payload[4:])
    ex, rk, raw, mand, imm = framing.parse_publish(payload)
    assert (ex, rk, mand, imm) == (ref.exchange, ref.routing_key, ref.mandatory, ref.immediate)
    assert (ex, rk, mand, imm) == (exchange, routing_key, mandatory, immediate)
    assert raw == ex_rk(exchange, routing_key)


def test_parse_publish_cache_gives_the_same_answers_past_its_size(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Cached names (by raw bytes) and flags: repeated and more distinct pairs than the
    cache holds all decode as pamqp decodes them."""
    monkeypatch.setattr(framing, "_PUBLISH_NAMES_MAX", 8)
    for _ in range(2):  # the second round meets cached and evicted pairs
        for i in range(20):
            for mandatory in (False, True):
                payload = payload_of(method_bytes(commands.Basic.Publish(
                    exchange=f"x{i % 3}", routing_key=f"k.{i}", mandatory=mandatory)))
                assert framing.parse_publish(payload)[:2] == (f"x{i % 3}", f"k.{i}")
                assert framing.parse_publish(payload)[3] is mandatory
    assert len(framing._publish_names) <= 8


def test_parse_publish_truncated_raises_value_error() -> None:
    payload = payload_of(method_bytes(commands.Basic.Publish(exchange="x", routing_key="abc")))
    with pytest.raises((ValueError, IndexError)):
        framing.parse_publish(payload[:-3])


@pytest.mark.parametrize("tag", [0, 1, 255, 2**32, 2**63 - 1])
@pytest.mark.parametrize("multiple", [False, True])
def test_parse_ack_agrees_with_pamqp(tag: int, multiple: bool) -> None:
    payload = payload_of(method_bytes(commands.Basic.Ack(delivery_tag=tag, multiple=multiple)))
    ref = commands.Basic.Ack()
    ref.unmarshal(payload[4:])
    assert framing.parse_ack(payload) == (ref.delivery_tag, ref.multiple) == (tag, multiple)


def test_parse_ack_full_unsigned_range() -> None:
    # pamqp encodes longlong as signed; the spec's delivery-tag is unsigned 64-bit
    payload = struct.pack(">HHQB", 60, 80, 2**64 - 1, 1)
    assert framing.parse_ack(payload) == (2**64 - 1, True)


def test_publish_and_ack_method_indexes_match_pamqp() -> None:
    assert framing.BASIC_PUBLISH == commands.Basic.Publish.index
    assert framing.BASIC_ACK == commands.Basic.Ack.index


# ---- content frames ------------------------------------------------------------------------


def props_raw(props: commands.Basic.Properties) -> bytes:
    return props.marshal()


@pytest.mark.parametrize(
    ("frame_max", "size", "expected"),
    [
        (4096, 0, []),
        (4096, 1, [1]),
        (4096, 4088, [4088]),
        (4096, 4089, [4088, 1]),
        (4096, 10000, [4088, 4088, 1824]),
        (131072, 131064 * 2, [131064, 131064]),
        (0, 131065, [131064, 1]),  # 0: not negotiated, the 131072 default
    ],
)
def test_content_frames_split_body_at_frame_max(frame_max: int, size: int,
                                                expected: list[int]) -> None:
    body = bytes(range(256)) * (size // 256 + 1)
    body = body[:size]
    props = commands.Basic.Properties(content_type="text/plain", headers={"a": 1})
    parts = framing.content_frames(4, props_raw(props), body, frame_max)
    data = b"".join(parts)
    frames = []
    pos = 0
    while pos < len(data):
        consumed, channel, value = pamqp_frame.unmarshal(data[pos:])
        assert channel == 4
        if frame_max:
            assert consumed <= frame_max
        frames.append(value)
        pos += consumed
    header, body_frames = frames[0], frames[1:]
    assert isinstance(header, ContentHeader)
    assert header.body_size == size
    assert header.properties == props
    assert [len(f.value) for f in body_frames] == expected
    assert b"".join(f.value for f in body_frames) == body


def test_content_header_keeps_property_bytes_verbatim() -> None:
    # headers {"n": 5} encoded as a signed 32-bit 'I' and "s" as 'S': pamqp would re-encode
    # 5 as a short-short 'b', so only a verbatim copy keeps these bytes
    table = b"\x01nI\x00\x00\x00\x05" + b"\x01sS\x00\x00\x00\x01v"
    raw = struct.pack(">H", 0x2000) + struct.pack(">I", len(table)) + table
    assert commands.Basic.Properties(headers={"n": 5, "s": "v"}).marshal() != raw
    data = b"".join(framing.content_frames(1, raw, b"body", 4096))
    assert data[:7] == struct.pack(">BHI", framing.FRAME_HEADER, 1, 12 + len(raw))
    assert data[7:19] == struct.pack(">HHQ", 60, 0, 4)
    assert data[19 : 19 + len(raw)] == raw
    consumed, _, header = pamqp_frame.unmarshal(data)
    assert header.properties.headers == {"n": 5, "s": "v"}
    assert data[consumed:] == pamqp_frame.marshal(ContentBody(b"body"), 1)


def test_content_header_equals_pamqp_for_canonical_properties() -> None:
    props = commands.Basic.Properties(content_type="application/json", delivery_mode=2,
                                      headers={"a": 1, "b": "x"}, priority=3,
                                      correlation_id="c", reply_to="r", expiration="100",
                                      message_id="m", message_type="t", user_id="guest",
                                      app_id="app")
    data = b"".join(framing.content_frames(6, props.marshal(), b"xyz", 4096))
    ref = pamqp_frame.marshal(ContentHeader(0, 3, props), 6)
    assert data == ref + pamqp_frame.marshal(ContentBody(b"xyz"), 6)


def test_content_frames_with_arbitrary_property_bytes() -> None:
    raw = b"\x80\x00\x03abc"  # content_type "abc"
    data = b"".join(framing.content_frames(2, raw, b"", 4096))
    assert data == struct.pack(">BHI", 2, 2, 12 + len(raw)) + struct.pack(">HHQ", 60, 0, 0) \
        + raw + b"\xce"


# ---- frame errors on a live connection ----------------------------------------------------


def test_smaller_frame_max_is_used_for_inbound_frames(make_client: MakeClient) -> None:
    c = make_client(frame_max=4096)
    assert c.conn.frame_max == 4096
    # a 5008-byte frame: over the negotiated 4096 (though under the server's 131072)
    out = c.send_bytes(pamqp_frame.marshal(ContentBody(b"x" * 5000), 1))
    close = connection_close(out)
    assert close.reply_code == 501
    assert c.closed


def test_frame_payload_of_frame_max_is_tolerated(make_client: MakeClient) -> None:
    c = make_client(frame_max=4096)
    c.declare_queue(1, "q")
    body = b"x" * 4096  # one 4104-byte frame
    data = (pamqp_frame.marshal(commands.Basic.Publish(routing_key="q"), 1)
            + pamqp_frame.marshal(ContentHeader(0, len(body), None), 1)
            + pamqp_frame.marshal(ContentBody(body), 1))
    assert c.send_bytes(data) == []
    assert c.broker.vhosts["/"].queues["q"].message_count == 1


@pytest.mark.parametrize(("data", "text"), [
    (pamqp_frame.marshal(ContentBody(b"x" * 5000), 1),
     "FRAME_ERROR - type 3, all octets = <<>>: {frame_too_large,5000,4088}"),
    (b"\x09\x00\x00\x00\x00\x00\x00\xce", "FRAME_ERROR - type 9, all octets = <<>>: unknown_frame"),
])
def test_frame_error_texts(make_client: MakeClient, data: bytes, text: str) -> None:
    c = make_client(frame_max=4096)
    close = connection_close(c.send_bytes(data))
    assert (close.reply_code, close.reply_text, close.class_id, close.method_id) == (
        501, text, 0, 0)


def test_heartbeat_frame_on_a_channel_is_a_frame_error(client: Client) -> None:
    out = client.send_bytes(b"\x08\x00\x01\x00\x00\x00\x00\xce")
    assert connection_close(out).reply_code == 501


def test_publishes_interleaved_across_channels(client: Client) -> None:
    client.open_channel(2)
    client.declare_queue(1, "q")
    a = client.publish_bytes(1, "", "q", b"one")
    b = client.publish_bytes(2, "", "q", b"two")

    def split(data: bytes) -> list[bytes]:
        out, pos = [], 0
        while pos < len(data):
            size = struct.unpack_from(">I", data, pos + 3)[0] + 8
            out.append(data[pos : pos + size])
            pos += size
        return out

    fa, fb = split(a), split(b)
    assert len(fa) == len(fb) == 3
    mixed = b"".join(x + y for x, y in zip(fa, fb, strict=True))
    assert client.send_bytes(mixed) == []
    got = [deliveries(client.send(1, commands.Basic.Get(queue="q", no_ack=True)))[0].body
           for _ in range(2)]
    assert got == [b"one", b"two"]


def test_body_longer_than_announced_is_a_hard_error(client: Client) -> None:
    client.declare_queue(1, "q")
    publish = pamqp_frame.marshal(commands.Basic.Publish(routing_key="q"), 1)
    header = pamqp_frame.marshal(ContentHeader(0, 3, commands.Basic.Properties()), 1)
    body = pamqp_frame.marshal(ContentBody(b"hello"), 1)
    then = pamqp_frame.marshal(commands.Basic.Get(queue="q"), 1)
    # RabbitMQ notices at the next frame (505), the broker at once (501): both close
    assert connection_close(client.send_bytes(publish + header + body + then)).reply_code >= 500
    assert client.broker.vhosts["/"].queues["q"].message_count == 0


@pytest.mark.parametrize("body", [b"", b"x", b"y" * 4088])
@pytest.mark.parametrize("redelivered", [True, False])
def test_deliver_bytes_equals_deliver_frame_plus_content_frames(body: bytes,
                                                                redelivered: bool) -> None:
    props = ContentHeader(0, len(body), commands.Basic.Properties(
        content_type="text/plain", headers={"a": 1})).marshal()[12:]
    ex_rk = b"\x02ex\x03key"
    expected = framing.deliver_frame(7, b"\x03tag", 2**40 + 1, redelivered, ex_rk) + b"".join(
        framing.content_frames(7, props, body, 4096))
    assert expected == pamqp_frame.marshal(commands.Basic.Deliver(
        "tag", 2**40 + 1, redelivered, "ex", "key"), 7) + b"".join(
        pamqp_frame.marshal(f, 7) for f in (ContentHeader(0, len(body), commands.Basic.Properties(
            content_type="text/plain", headers={"a": 1})), ContentBody(body)) if f.__class__
        is ContentHeader or body)
    assert framing.deliver_bytes(7, b"\x03tag", 2**40 + 1, redelivered, ex_rk, props, body,
                                 4096) == expected


# ---- field tables in method frames -----------------------------------------------------------


@pytest.mark.parametrize("cls", sorted(TABLE_METHODS, key=lambda c: c.name),
                         ids=lambda c: c.name)
def test_method_table_check_walks_every_table_method_as_pamqp_encodes_it(cls: type) -> None:
    """check_method_tables finds the table after the other fields of each method that has one
    (pamqp marshals the reference bytes); a frame cut inside the table is refused."""
    table = {"x-a": {"b": [1, "two", {"c": True}]}, "k": "v"}
    kwargs = {name: table for name in cls.__slots__
              if not name.startswith("_") and cls.amqp_type(name) == "table"}
    if "mechanisms" in cls.__slots__:  # Connection.Start: its longstrs need values
        kwargs.update(mechanisms="PLAIN", locales="en_US")
    args = pamqp_frame.marshal(cls(**kwargs), 1)[7 + 4:-1]  # frame header, ids, frame end
    check_method_tables(cls, args)
    with pytest.raises(ValueError):  # the table is most of the arguments: cut inside it
        check_method_tables(cls, args[:len(args) // 2])
