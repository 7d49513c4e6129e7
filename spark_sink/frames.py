"""Bulk encoding of Basic.Publish messages (method + content header + body frames).

Per row, Python only concatenates pre-encoded pieces; constant parts (exchange, flags, a
constant routing key, constant properties) are encoded once.

Sources: AMQP 0-9-1 specification, sections 4.2.3 (general frame format), 4.2.6 (content
header: class-id, weight, body size, property flags, property list) and the Basic class
property list; field-table value types as RabbitMQ reads them,
https://www.rabbitmq.com/amqp-0-9-1-errata#section_3.
"""

from __future__ import annotations

import datetime as dt
import decimal
import struct
from collections.abc import Iterable, Sequence
from itertools import repeat
from typing import Any

import pyarrow as pa

from spark_sink.encoding import iso_timestamp, json_text

CHANNEL = 1
_PUBLISH_HEAD = b"\x00\x3c\x00\x28\x00\x00"  # class 60, method 40, reserved-1 (short 0)
_pack_frame_head = struct.Struct(">BHI").pack
_unpack_frame_head = struct.Struct(">BHI").unpack_from
_pack_content_head = struct.Struct(">BHIHHQH").pack  # frame head + class, weight, size, flags
_pack_body_head = struct.Struct(">BBHI").pack  # previous frame-end + body frame head
_pack_u32 = struct.Struct(">I").pack
_pack_i64 = struct.Struct(">q").pack
_pack_u64 = struct.Struct(">Q").pack
_pack_f64 = struct.Struct(">d").pack
_pack_i32 = struct.Struct(">i").pack

# Basic content properties in wire order: (name, flag bit, kind)
# kinds: s = shortstr, o = octet, t = field table, T = timestamp (u64 seconds)
PROPERTIES: tuple[tuple[str, int, str], ...] = (
    ("content_type", 1 << 15, "s"),
    ("content_encoding", 1 << 14, "s"),
    ("headers", 1 << 13, "t"),
    ("delivery_mode", 1 << 12, "o"),
    ("priority", 1 << 11, "o"),
    ("correlation_id", 1 << 10, "s"),
    ("reply_to", 1 << 9, "s"),
    ("expiration", 1 << 8, "s"),
    ("message_id", 1 << 7, "s"),
    ("timestamp", 1 << 6, "T"),
    ("type", 1 << 5, "s"),
    ("user_id", 1 << 4, "s"),
    ("app_id", 1 << 3, "s"),
)
PROPERTY_KIND = {name: kind for name, _, kind in PROPERTIES}

# a property value for a batch: one encoded value for every row, or one per row (None = unset)
PropertyValue = bytes | Sequence[bytes | None]


class EncodeError(ValueError):
    """A row value that AMQP cannot carry (e.g. a routing key longer than 255 bytes)."""


def shortstr(value: str, what: str) -> bytes:
    """AMQP short string: length octet + UTF-8 (raises EncodeError past 255 bytes)."""
    data = value.encode("utf-8")
    if len(data) > 255:
        raise EncodeError(f"{what} is longer than 255 bytes: {value[:40]!r}...")
    return bytes((len(data),)) + data


def shortstrs(values: Iterable[str | None], what: str) -> list[bytes | None]:
    """:func:`shortstr` for many values (None stays None)."""
    out: list[bytes | None] = []
    append = out.append
    for v in values:
        if v is None:
            append(None)
            continue
        data = v.encode("utf-8")
        if len(data) > 255:
            raise EncodeError(f"{what} is longer than 255 bytes: {v[:40]!r}...")
        append(bytes((len(data),)) + data)
    return out


def encode_property(name: str, value: Any) -> bytes:
    """One constant property value in wire form (``value`` already validated)."""
    kind = PROPERTY_KIND[name]
    if kind == "s":
        return shortstr(str(value), f"property {name}")
    if kind == "o":
        return bytes((int(value),))
    if kind == "T":
        return _pack_u64(int(value))
    raise ValueError(f"{name} is not a constant property")


# ----------------------------------------------------------------------------- field tables
def table_entries(key: str, col: pa.Array) -> list[bytes]:
    """Field-table entries ``key -> value`` for every value of ``col`` (null -> void 'V')."""
    k = shortstr(key, "header name")
    t = col.type
    values = col.to_pylist()
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return [k + b"V" if v is None else k + _long_str(b"S", v.encode()) for v in values]
    if pa.types.is_boolean(t):
        return [k + (b"V" if v is None else b"t\x01" if v else b"t\x00") for v in values]
    if pa.types.is_integer(t):
        return [k + b"V" if v is None else k + b"l" + _pack_i64(v) for v in values]
    if pa.types.is_floating(t):
        return [k + b"V" if v is None else k + b"d" + _pack_f64(v) for v in values]
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return [k + b"V" if v is None else k + _long_str(b"x", v) for v in values]
    return [k + table_value(v, t) for v in values]


def table_value(v: Any, t: pa.DataType | None = None) -> bytes:
    """One field-table value (type tag + data) for a Python value from Arrow."""
    if v is None:
        return b"V"
    if isinstance(v, bool):
        return b"t\x01" if v else b"t\x00"
    if isinstance(v, int):
        return b"l" + _pack_i64(v)
    if isinstance(v, float):
        return b"d" + _pack_f64(v)
    if isinstance(v, str):
        return _long_str(b"S", v.encode())
    if isinstance(v, bytes):
        return _long_str(b"x", v)
    if isinstance(v, decimal.Decimal):
        sign, digits, exponent = v.as_tuple()
        scale = -int(exponent)
        unscaled = int(v.scaleb(scale))
        if 0 <= scale <= 255 and -(2**31) <= unscaled < 2**31:
            return b"D" + bytes((scale,)) + _pack_i32(unscaled)
        return _long_str(b"S", str(v).encode())
    if isinstance(v, dt.datetime):
        seconds = v.timestamp() if v.tzinfo else v.replace(tzinfo=dt.UTC).timestamp()
        if seconds >= 0:
            return b"T" + _pack_u64(int(seconds))
        return _long_str(b"S", iso_timestamp(v).encode())
    if isinstance(v, dt.date):
        return _long_str(b"S", v.isoformat().encode())
    text = json_text(v, t) if t is not None else str(v)
    return _long_str(b"S", text.encode())


def _long_str(tag: bytes, data: bytes) -> bytes:
    return tag + _pack_u32(len(data)) + data


def header_tables(constant: bytes, columns: Sequence[list[bytes]], n: int) -> list[bytes]:
    """Per-row field tables: ``constant`` entries followed by one entry from each column."""
    if not columns:
        table = _pack_u32(len(constant)) + constant
        return [table] * n
    out = []
    for entries in zip(*columns, strict=True):
        body = constant + b"".join(entries)
        out.append(_pack_u32(len(body)) + body)
    return out


# ------------------------------------------------------------------------------ properties
def property_lists(values: dict[str, PropertyValue], n: int) -> tuple[list[int], list[bytes]]:
    """Property flags and encoded property list of each of ``n`` rows."""
    const_flags = 0
    const_parts: list[bytes] = []
    row_cols: list[tuple[int, Sequence[bytes | None]]] = []
    segments: list[Iterable[bytes | None]] = []
    has_none = False
    for name, bit, _ in PROPERTIES:
        value = values.get(name)
        if value is None:
            continue
        if isinstance(value, bytes):
            const_flags |= bit
            const_parts.append(value)
        else:
            if const_parts:
                segments.append(repeat(b"".join(const_parts), n))
                const_parts = []
            row_cols.append((bit, value))
            segments.append(value)
            has_none = has_none or any(v is None for v in value)
    if not row_cols:
        return [const_flags] * n, [b"".join(const_parts)] * n
    if const_parts:
        segments.append(repeat(b"".join(const_parts), n))
    if not has_none:
        flags = const_flags
        for bit, _ in row_cols:
            flags |= bit
        return [flags] * n, [b"".join(t) for t in zip(*segments, strict=False)]
    flag_list = [const_flags] * n
    for bit, col in row_cols:
        for i, v in enumerate(col):
            if v is not None:
                flag_list[i] |= bit
    return flag_list, [b"".join(p for p in t if p is not None) for t in zip(*segments, strict=False)]


# ----------------------------------------------------------------------------------- frames
class PublishEncoder:
    """Encodes messages for one exchange on channel 1.

    Args:
        exchange: exchange name ("" = default exchange).
        mandatory: set the mandatory bit (unroutable messages come back as Basic.Return).
        frame_max: negotiated frame_max (bytes); bodies are split into frames of
            ``frame_max - 8`` bytes.
    """

    def __init__(self, exchange: str, mandatory: bool, frame_max: int) -> None:
        self._head = _PUBLISH_HEAD + shortstr(exchange, "exchange name")
        self._bits = b"\x01" if mandatory else b"\x00"
        self._chunk = frame_max - 8
        self._method_cache: dict[bytes, bytes] = {}

    def method_frame(self, routing_key: bytes) -> bytes:
        """The Basic.Publish frame for an encoded (shortstr) routing key."""
        frame = self._method_cache.get(routing_key)
        if frame is None:
            payload = self._head + routing_key + self._bits
            frame = _pack_frame_head(1, CHANNEL, len(payload)) + payload + b"\xce"
            if len(self._method_cache) < 10000:
                self._method_cache[routing_key] = frame
        return frame

    def encode(
        self,
        out: bytearray,
        bodies: Sequence[bytes],
        routing_keys: bytes | Sequence[bytes],
        flags: Sequence[int],
        props: Sequence[bytes],
    ) -> None:
        """Append the frames of ``len(bodies)`` messages to ``out``."""
        if isinstance(routing_keys, bytes):
            methods: Iterable[bytes] = repeat(self.method_frame(routing_keys), len(bodies))
        else:
            mf = self.method_frame
            methods = [mf(rk) for rk in routing_keys]
        chunk = self._chunk
        for method, body, flag, prop in zip(methods, bodies, flags, props, strict=False):
            size = len(body)
            out += method
            out += _pack_content_head(2, CHANNEL, 14 + len(prop), 60, 0, size, flag)
            out += prop
            if size <= chunk:
                if size:
                    out += _pack_body_head(0xCE, 3, CHANNEL, size)
                    out += body
            else:
                for start in range(0, size, chunk):
                    piece = body[start:start + chunk]
                    out += _pack_body_head(0xCE, 3, CHANNEL, len(piece))
                    out += piece
            out += b"\xce"


def split_messages(data: bytes | bytearray | memoryview) -> list[memoryview]:
    """Cut encoded messages (as written by :meth:`PublishEncoder.encode`) apart: one view per
    message, each starting at its Basic.Publish method frame (frame type 1).

    Raises:
        ValueError: ``data`` does not end on a frame boundary.
    """
    view = memoryview(data)
    starts: list[int] = []
    pos, end = 0, len(view)
    while pos < end:
        if pos + 7 > end:
            raise ValueError("truncated frame")
        ftype, _, size = _unpack_frame_head(view, pos)
        if ftype == 1:
            starts.append(pos)
        pos += 8 + size
    if pos != end:
        raise ValueError("truncated frame")
    starts.append(end)
    return [view[a:b] for a, b in zip(starts, starts[1:], strict=False)]
