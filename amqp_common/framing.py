"""Frame layer: split inbound bytes into frames, build outbound frames.

Inbound, :class:`FrameReader` splits a byte stream into ``(frame_type, channel, payload)``
tuples without raising on partial input; method payloads are decoded with pamqp by the
caller, except the two hot methods (Basic.Publish, Basic.Ack) which :func:`parse_publish`
and :func:`parse_ack` read by hand.

Outbound, method frames go through ``pamqp.frame.marshal``; the delivery path
(Basic.Deliver / GetOk / Return, content header, body) is packed by hand and forwards the
content header's property bytes exactly as the publisher sent them (never re-encoded:
re-encoding through pamqp costs ~7 us and can change field-table type tags). The
hand-packed encoders are checked byte for byte against pamqp in tests/test_framing.py.

Source: AMQP 0-9-1 spec 2.3.5 (frame format), 4.2.3 (general frame format), 4.2.6
(content framing).
"""

from __future__ import annotations

import struct
from typing import Any

from pamqp import frame as pamqp_frame

from amqp_common.errors import FrameError

FRAME_METHOD = 1
FRAME_HEADER = 2
FRAME_BODY = 3
FRAME_HEARTBEAT = 8
FRAME_END = 0xCE
FRAME_END_BYTE = b"\xce"
FRAME_OVERHEAD = 8  # 7-byte header + frame-end octet
PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
# headers answered as 0-9-1 (RabbitMQ also speaks the 0-9 framing this way)
ACCEPTED_HEADERS = (PROTOCOL_HEADER, b"AMQP\x01\x01\x00\x09")
HEARTBEAT_FRAME = b"\x08\x00\x00\x00\x00\x00\x00\xce"

_frame_head = struct.Struct(">BHI")
_FRAME_TYPES = frozenset((FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT))
_method_ids = struct.Struct(">HH")
_content_head = struct.Struct(">HHQ")
_u64_bit = struct.Struct(">QB")
_u64 = struct.Struct(">Q")

FRAME_PUBLISH = 0  # not a frame type: a whole publish fused by FrameReader.read
FRAME_ACK = -1  # not a frame type: a Basic.Ack read by FrameReader.read
# a header frame's head and the content header's fixed fields and first flags word
_header_frame_head = struct.Struct(">BHIIQH")  # class and weight as one

# (class_id << 16 | method_id) of hand-parsed methods
BASIC_PUBLISH = 0x003C0028
BASIC_ACK = 0x003C0050
PUBLISH_PREFIX = b"\x00\x3c\x00\x28"  # class 60, method 40
_ACK_IDS = b"\x00\x3c\x00\x50"  # class 60, method 80
_NO_PROPERTIES = b"\x00\x00"  # a content header's property flags with none set
_PUBLISH_TICKET_0 = PUBLISH_PREFIX + b"\x00\x00"  # ... and the reserved short (ticket) 0


class FrameReader:
    """Sans-IO splitter of an AMQP frame stream.

    ``feed(data)`` returns complete frames as ``(frame_type, channel, payload_bytes)``; a partial
    frame stays buffered. ``frame_max`` (bytes, whole frame including its 8 bytes of overhead)
    bounds accepted frames; 0 means "not negotiated yet" and uses the 131072-byte default.

    Raises:
        FrameError (501): a frame payload larger than ``frame_max`` (RabbitMQ allows the
            8 bytes of overhead on top), a missing frame-end octet, or an unknown frame type.
    """

    __slots__ = ("_buf", "frame_max", "_last", "_skip", "_backoff")

    def __init__(self, frame_max: int = 131072) -> None:
        self._buf = bytearray()
        self.frame_max = frame_max
        # the last publish fused by read(), as a template the next one is compared against
        # (see read); None before the first
        self._last: tuple[Any, ...] | None = None
        # publishes fused the long way still to go before the next is the template, and
        # how many to skip after that (grows while most publishes differ from the last)
        self._skip = 0
        self._backoff = 0

    def feed(self, data: bytes) -> list[tuple[int, int, bytes]]:
        buf = self._buf
        if buf:  # a partial frame from before: join once, then parse from immutable bytes
            buf += data
            data = bytes(buf)
            buf.clear()
        frames: list[tuple[int, int, bytes]] = []
        append = frames.append
        unpack = _frame_head.unpack_from
        pos = 0
        end = len(data)
        limit = self.frame_max or 131072
        while end - pos >= 7:
            ftype, channel, size = unpack(data, pos)
            # RabbitMQ tolerates 8 bytes over frame_max (FRAME_SIZE_FUDGE): clients get it wrong
            if size > limit:
                raise FrameError(f"type {ftype}, all octets = <<>>: "
                                 f"{{frame_too_large,{size},{limit - FRAME_OVERHEAD}}}")
            stop = pos + size + FRAME_OVERHEAD
            if stop > end:
                break
            if data[stop - 1] != FRAME_END:
                raise FrameError(f"invalid frame end octet on channel {channel}")
            if ftype not in _FRAME_TYPES:
                raise FrameError(f"type {ftype}, all octets = <<>>: unknown_frame")
            append((ftype, channel, data[pos + 7:stop - 1]))
            pos = stop
        if pos < end:
            buf += data[pos:]
        return frames

    def read(self, data: bytes) -> list[tuple[Any, ...]]:
        """:meth:`feed`, with each common publish fused into one item: a Basic.Publish
        method frame (ticket 0, no byte past its flags), its content header (class 60,
        weight 0) and one body frame holding the whole non-empty body, all on one channel
        and complete in ``data``, come as one
        ``(FRAME_PUBLISH, channel, names, bits, flags, properties_raw, body)`` where
        ``names`` is ``(exchange, routing_key, exchange_and_key_raw)`` (see
        :func:`publish_names`), ``bits`` the mandatory (1) and immediate (2) flags and
        ``flags`` the first property-flags word; a Basic.Ack method frame (13 bytes) comes as
        ``(FRAME_ACK, channel, delivery_tag, multiple)``. Every other frame is a
        ``(frame_type, channel, payload)`` as from :meth:`feed`; :func:`unfuse` gives a
        fused publish's three frames back. Same errors as :meth:`feed`; one pass over the
        bytes, three slices per publish (instead of three frames, then a parse of each).

        A publish shaped as the last one fused (the same method frame byte for byte, the
        same content header up to its property flags: same size, body size and flags, and
        a body frame of that size on that channel) is taken after three comparisons of
        those bytes and the two frame-end octets, without reading its fields again: they
        are the last one's (publishers mostly repeat one exchange, routing key and shape).
        While most publishes differ from the one before (varied body sizes), a new template
        is taken from every 2nd, 4th ... 64th publish only, not from each. A Basic.Ack
        after another on the same channel is likewise taken by comparing its head with the
        other's.
        """
        buf = self._buf
        if buf:
            buf += data
            data = bytes(buf)
            buf.clear()
        frames: list[tuple[Any, ...]] = []
        append = frames.append
        unpack = _frame_head.unpack_from
        unpack_header = _header_frame_head.unpack_from
        names_of = _publish_names.get
        publish_head = _PUBLISH_TICKET_0
        pos = 0
        end = len(data)
        limit = self.frame_max or 131072
        last = self._last
        if last is not None:
            (l_method, l_header, l_body, l_method_len, l_header_len, l_body_len, l_channel,
             l_names, l_bits, l_flags, l_props, l_limit) = last
            if l_limit != limit:  # checked under another frame_max
                last = self._last = None
        starts = data.startswith
        unpack_ack = _u64_bit.unpack_from
        # the head (type, channel, size, class and method ids) of the last Basic.Ack read
        ack_head: bytes | None = None
        ack_channel = 0
        skip = self._skip
        slow = 0  # publishes fused the long way in this call
        while end - pos >= 7:
            if last is not None and starts(l_method, pos):
                # a publish like the last one fused? (the bytes compared are all it read)
                stop = pos + l_method_len
                hstop = stop + l_header_len
                bstop = hstop + l_body_len
                if (bstop <= end and starts(l_header, stop) and data[hstop - 1] == 0xCE
                        and starts(l_body, hstop) and data[bstop - 1] == 0xCE):
                    append((0, l_channel, l_names, l_bits, l_flags,
                            data[stop + 19:hstop - 1] if l_props is None else l_props,
                            data[hstop + 7:bstop - 1]))
                    pos = bstop
                    continue
            if (ack_head is not None and starts(ack_head, pos) and end - pos >= 21
                    and data[pos + 20] == 0xCE and data[pos + 19] < 2):
                # a Basic.Ack on the channel of the one before (its head compared)
                tag, bits = unpack_ack(data, pos + 11)
                append((FRAME_ACK, ack_channel, tag, bits == 1))
                pos += 21
                continue
            ftype, channel, size = unpack(data, pos)
            if size > limit:
                raise FrameError(f"type {ftype}, all octets = <<>>: "
                                 f"{{frame_too_large,{size},{limit - FRAME_OVERHEAD}}}")
            stop = pos + size + 8
            if stop > end:
                break
            if data[stop - 1] != 0xCE:
                raise FrameError(f"invalid frame end octet on channel {channel}")
            if ftype == 1 and data[pos + 7:pos + 13] == publish_head and stop + 21 <= end:
                # Basic.Publish: try to take its header and body frame with it
                n = pos + 14 + data[pos + 13]  # the routing key's length octet
                if n < stop and n + 3 + data[n] == stop:  # then the bits, then frame end
                    htype, hch, hsize, class_weight, bsize, flags = unpack_header(data, stop)
                    hstop = stop + hsize + 8
                    if (htype == 2 and hch == channel and class_weight == 0x3C0000
                            and 14 <= hsize <= limit and hstop + 7 <= end
                            and data[hstop - 1] == 0xCE):
                        btype, bch, bsize2 = unpack(data, hstop)
                        bstop = hstop + bsize2 + 8
                        if (btype == 3 and bch == channel and 0 < bsize2 == bsize <= limit
                                and bstop <= end and data[bstop - 1] == 0xCE):
                            raw = data[pos + 13:stop - 2]
                            names = names_of(raw) or publish_names(raw)
                            if names is not None:
                                # props: a slice unless the header holds just the flags
                                props = (None if hsize != 14 else data[stop + 19:stop + 21]
                                         if flags else _NO_PROPERTIES)
                                bits = data[stop - 2]
                                append((0, channel, names, bits, flags,
                                        data[stop + 19:hstop - 1] if props is None else props,
                                        data[hstop + 7:bstop - 1]))
                                slow += 1
                                if skip:
                                    skip -= 1
                                else:  # the template of the publishes that follow
                                    skip = self._backoff
                                    last = self._last = (
                                        data[pos:stop], data[stop:stop + 21],
                                        data[hstop:hstop + 7], stop - pos, hstop - stop,
                                        bstop - hstop, channel, names, bits, flags, props, limit)
                                    (l_method, l_header, l_body, l_method_len, l_header_len,
                                     l_body_len, l_channel, l_names, l_bits, l_flags, l_props,
                                     l_limit) = last
                                pos = bstop
                                continue
            elif (ftype == 1 and size == 13 and data[pos + 7:pos + 11] == _ACK_IDS
                    and data[pos + 19] < 2):
                # Basic.Ack: (FRAME_ACK, channel, delivery tag, multiple)
                append((FRAME_ACK, channel, _u64.unpack_from(data, pos + 11)[0],
                        data[pos + 19] == 1))
                ack_head, ack_channel = data[pos:pos + 11], channel
                pos = stop
                continue
            elif ftype not in _FRAME_TYPES:
                raise FrameError(f"type {ftype}, all octets = <<>>: unknown_frame")
            append((ftype, channel, data[pos + 7:stop - 1]))
            pos = stop
        if pos < end:
            buf += data[pos:]
        if slow:  # more long ways than templates taken: take fewer while it lasts
            self._backoff = min(self._backoff * 2 + 1, 63) if slow * 2 > len(frames) else 0
            self._skip = min(skip, self._backoff)
        return frames

    @property
    def buffered(self) -> int:
        """Bytes held for a frame not yet complete."""
        return len(self._buf)


def _shortstr(value: str) -> bytes:
    raw = value.encode("utf-8")
    return bytes((len(raw),)) + raw


def read_shortstr(payload: bytes, pos: int) -> tuple[str, int]:
    """Read an AMQP shortstr at ``pos``; returns (value, next position).

    Raises:
        ValueError: the string runs past the payload or is not UTF-8.
    """
    n = payload[pos]
    end = pos + 1 + n
    if end > len(payload):
        raise ValueError("short string runs past the end of the frame")
    return payload[pos + 1 : end].decode("utf-8"), end


_PUBLISH_NAMES_MAX = 16_384  # cached exchange/routing-key pairs
_publish_names: dict[bytes, tuple[str, str, bytes]] = {}


def publish_names(raw: bytes) -> tuple[str, str, bytes] | None:
    """``(exchange, routing_key, raw)`` of Basic.Publish's two shortstrs ``raw`` (exactly
    the two), cached by ``raw`` (up to ``_PUBLISH_NAMES_MAX`` pairs: publishers reuse a few,
    and the cache saves two UTF-8 decodes per message); None when they do not decode."""
    try:
        exchange, pos = read_shortstr(raw, 0)
        routing_key, pos = read_shortstr(raw, pos)
    except (ValueError, IndexError):
        return None
    if pos != len(raw):
        return None
    if len(_publish_names) >= _PUBLISH_NAMES_MAX:
        _publish_names.clear()
    names = _publish_names[raw] = (exchange, routing_key, raw)
    return names


def unfuse(item: tuple[Any, ...]) -> list[tuple[int, int, bytes]]:
    """The frames of an item of :meth:`FrameReader.read`: the three of a fused publish (its
    ticket and the header's weight are 0: it fuses no other), the method frame of a
    Basic.Ack."""
    if item[0] == FRAME_ACK:
        return [(FRAME_METHOD, item[1], _ACK_IDS + _u64_bit.pack(item[2], item[3]))]
    _, channel, names, bits, _flags, props, body = item
    return [(FRAME_METHOD, channel, PUBLISH_PREFIX + b"\x00\x00" + names[2] + bytes((bits,))),
            (FRAME_HEADER, channel, _content_head.pack(60, 0, len(body)) + props),
            (FRAME_BODY, channel, body)]


def parse_publish(payload: bytes) -> tuple[str, str, bytes, bool, bool]:
    """Decode a Basic.Publish method payload (class/method ids included) by hand.

    Returns ``(exchange, routing_key, exchange_and_key_raw, mandatory, immediate)`` where
    ``exchange_and_key_raw`` is the two shortstrs as received, forwarded verbatim in
    Basic.Deliver/GetOk/Return. pamqp's ``Basic.Publish`` is the reference (tests).

    Publishers reuse a few exchange/routing-key pairs: their decoded form is cached by the raw
    bytes (up to ``_PUBLISH_NAMES_MAX`` pairs), which saves two UTF-8 decodes per message.

    Raises:
        ValueError, IndexError: truncated or non-UTF-8 payload (the caller maps them to 502
            SYNTAX_ERROR).
    """
    n = payload[6]
    end = 8 + n + payload[7 + n]  # past the routing key: 6 + (1 + n) + (1 + its length)
    bits = payload[end]  # IndexError when the payload stops before the flags
    raw = payload[6:end]
    names = _publish_names.get(raw)
    if names is None:
        exchange, pos = read_shortstr(payload, 6)
        routing_key, _ = read_shortstr(payload, pos)
        if len(_publish_names) >= _PUBLISH_NAMES_MAX:
            _publish_names.clear()
        names = _publish_names[raw] = (exchange, routing_key, raw)
    return names[0], names[1], raw, bool(bits & 1), bool(bits & 2)


def parse_ack(payload: bytes) -> tuple[int, bool]:
    """Decode a Basic.Ack payload by hand: ``(delivery_tag, multiple)``.

    Raises:
        struct.error: truncated payload.
    """
    tag, bits = _u64_bit.unpack_from(payload, 4)
    return tag, bool(bits & 1)


def method_frame(channel: int, method: Any) -> bytes:
    """Encode a pamqp method object as one method frame."""
    return pamqp_frame.marshal(method, channel)


def content_frames(
    channel: int, properties_raw: bytes, body: bytes, frame_max: int, class_id: int = 60
) -> list[bytes]:
    """Content header frame (with the publisher's raw property bytes) plus body frames, each
    body frame at most ``frame_max`` bytes long (spec 4.2.6.2)."""
    head = _content_head.pack(class_id, 0, len(body)) + properties_raw
    out = [_frame_head.pack(FRAME_HEADER, channel, len(head)), head, FRAME_END_BYTE]
    chunk = (frame_max or 131072) - FRAME_OVERHEAD
    size = len(body)
    if size <= chunk:
        if size:
            out += (_frame_head.pack(FRAME_BODY, channel, size), body, FRAME_END_BYTE)
        return out
    view = memoryview(body)
    for start in range(0, size, chunk):
        part = view[start : start + chunk]
        out += (_frame_head.pack(FRAME_BODY, channel, len(part)), part.tobytes(), FRAME_END_BYTE)
    return out


_deliver_head = struct.Struct(">HH")
_tag_bit = struct.Struct(">Q?")
# frame type, channel, size, class and method ids
_deliver_method_head = struct.Struct(">BHII")
# the previous frame's end octet, then a header frame's head and the content header's fields
_deliver_header_head = struct.Struct(">BBHIHHQ")
# the previous frame's end octet, then a body frame's head
_deliver_body_head = struct.Struct(">BBHI")


def deliver_frame(
    channel: int, consumer_tag_raw: bytes, delivery_tag: int, redelivered: bool, ex_rk_raw: bytes
) -> bytes:
    """Hand-packed Basic.Deliver method frame (spec 1.8.3.9).

    ``consumer_tag_raw`` is the consumer tag as an encoded shortstr, ``ex_rk_raw`` the exchange
    and routing key shortstrs as received in Basic.Publish.
    """
    payload = b"".join(
        (
            b"\x00\x3c\x00\x3c",
            consumer_tag_raw,
            _tag_bit.pack(delivery_tag, 1 if redelivered else 0),
            ex_rk_raw,
        )
    )
    return _frame_head.pack(FRAME_METHOD, channel, len(payload)) + payload + FRAME_END_BYTE


def deliver_bytes(
    channel: int, consumer_tag_raw: bytes, delivery_tag: int, redelivered: bool, ex_rk_raw: bytes,
    properties_raw: bytes, body: bytes, frame_max: int,
) -> bytes:
    """Basic.Deliver + content header + body as one bytes object, for a body that fits one
    frame (the caller checks ``len(body) <= frame_max - 8``); one allocation per delivery
    (three packs of the fixed fields, one join)."""
    size = len(body)
    parts = (
        _deliver_method_head.pack(FRAME_METHOD, channel,
                                  13 + len(consumer_tag_raw) + len(ex_rk_raw), 0x003C003C),
        consumer_tag_raw, _tag_bit.pack(delivery_tag, redelivered), ex_rk_raw,
        _deliver_header_head.pack(FRAME_END, FRAME_HEADER, channel, 12 + len(properties_raw),
                                  60, 0, size),
        properties_raw,
        _deliver_body_head.pack(FRAME_END, FRAME_BODY, channel, size) if size
        else FRAME_END_BYTE,
        body, FRAME_END_BYTE if size else b"")
    return b"".join(parts)


def declare_ok_frame(channel: int, queue: str, message_count: int, consumer_count: int) -> bytes:
    """Hand-packed Queue.DeclareOk (spec 1.7.2.2): any UTF-8 queue name, as RabbitMQ allows."""
    payload = b"".join((b"\x00\x32\x00\x0b", _shortstr(queue),
                        struct.pack(">II", message_count, consumer_count)))
    return _frame_head.pack(FRAME_METHOD, channel, len(payload)) + payload + FRAME_END_BYTE


def get_ok_frame(
    channel: int, delivery_tag: int, redelivered: bool, ex_rk_raw: bytes, message_count: int
) -> bytes:
    """Hand-packed Basic.GetOk method frame (spec 1.8.3.11)."""
    payload = b"".join(
        (
            b"\x00\x3c\x00\x47",
            _tag_bit.pack(delivery_tag, 1 if redelivered else 0),
            ex_rk_raw,
            struct.pack(">I", message_count),
        )
    )
    return _frame_head.pack(FRAME_METHOD, channel, len(payload)) + payload + FRAME_END_BYTE


def return_frame(channel: int, reply_code: int, reply_text: str, ex_rk_raw: bytes) -> bytes:
    """Hand-packed Basic.Return method frame (spec 1.8.3.8)."""
    payload = b"".join(
        (b"\x00\x3c\x00\x32", struct.pack(">H", reply_code), _shortstr(reply_text), ex_rk_raw)
    )
    return _frame_head.pack(FRAME_METHOD, channel, len(payload)) + payload + FRAME_END_BYTE


def encode_shortstr(value: str) -> bytes:
    """An AMQP shortstr: one length octet and up to 255 bytes of UTF-8."""
    return _shortstr(value)
