"""Byte-level editing of content properties and field tables, without re-encoding the rest.

When the broker must change a message's properties (dead lettering adds ``x-death`` and
drops ``expiration``; direct reply-to rewrites ``reply_to``), only the changed fields are
encoded; every other property and header entry is copied byte for byte, so the publisher's
field-table type tags survive (pamqp would re-encode ``l`` 5 as ``b`` 5).

Source: AMQP 0-9-1 spec 4.2.6.1 (property flags and list), 4.2.5.5 (field tables) with
RabbitMQ's field type tags (https://www.rabbitmq.com/amqp-0-9-1-errata#section_3).
"""

from __future__ import annotations

import datetime
import decimal
import struct
from collections.abc import Hashable
from typing import Any

from pamqp import decode as _pamqp_decode

# Basic property names in flag order (bit 15 first) and their encodings
PROPERTY_FIELDS = (
    ("content_type", "shortstr"), ("content_encoding", "shortstr"), ("headers", "table"),
    ("delivery_mode", "octet"), ("priority", "octet"), ("correlation_id", "shortstr"),
    ("reply_to", "shortstr"), ("expiration", "shortstr"), ("message_id", "shortstr"),
    ("timestamp", "timestamp"), ("type", "shortstr"), ("user_id", "shortstr"),
    ("app_id", "shortstr"), ("cluster_id", "shortstr"),
)
_FIXED = {"t": 1, "b": 1, "B": 1, "s": 2, "u": 2, "I": 4, "i": 4, "l": 8, "L": 8, "f": 4,
          "d": 8, "D": 5, "T": 8, "V": 0}  # "L": py-amqp's 64-bit int, which RabbitMQ accepts
_SIZED = frozenset("SAFx")  # u32 length prefix


#: :func:`string_header`'s answer for a header present with another type than a string (or
#: properties it does not walk): the caller decodes the properties instead
NOT_A_STRING: Any = object()
_FIELD_WIDTHS: dict[int, int | None] = {
    **{ord(t): n for t, n in _FIXED.items()}, **{ord(t): None for t in _SIZED}}
_TAG_S, _TAG_X = ord("S"), ord("x")
_U32 = struct.Struct(">I")


def string_header(raw: bytes, flags: int, name: bytes) -> Any:
    """The value of header ``name`` read straight from content-header property bytes, without
    decoding the other properties (a publish path that needs one header pays ~1 us, not a
    whole decode).

    Args:
        raw: property flags + property list, already checked at publish.
        flags: the first property-flags word of ``raw``.
        name: the header name, UTF-8.

    Returns:
        the value as a str when it is a long string (``S``) or byte array (``x``, decoded as
        UTF-8 with surrogate escapes); None when the header, or the headers property, is
        absent, or its value is void (``V``); :data:`NOT_A_STRING` otherwise.

    Raises:
        IndexError, struct.error, KeyError: bytes that were not checked (callers treat these
        as :data:`NOT_A_STRING`).
    """
    if not flags & (1 << 13):  # no headers property
        return None
    if flags & 1:  # a second property-flags word: not walked here
        return NOT_A_STRING
    pos = 2
    if flags & (1 << 15):  # content_type
        pos += 1 + raw[pos]
    if flags & (1 << 14):  # content_encoding
        pos += 1 + raw[pos]
    (size,) = _U32.unpack_from(raw, pos)
    pos += 4
    end = pos + size
    while pos < end:
        n = raw[pos]
        key = raw[pos + 1:pos + 1 + n]
        pos += 1 + n
        tag = raw[pos]
        width = _FIELD_WIDTHS[tag]
        if width is None:
            (length,) = _U32.unpack_from(raw, pos + 1)
            if key == name:
                if tag == _TAG_S or tag == _TAG_X:
                    return raw[pos + 5:pos + 5 + length].decode("utf-8", "surrogateescape")
                return NOT_A_STRING
            pos += 5 + length
        else:
            if key == name:
                return None if width == 0 else NOT_A_STRING
            pos += 1 + width
    return None


def header_value_key(value: Any) -> Hashable | None:
    """A decoded header value as a dict key (deduplication, message groups): strings and
    bytes with the same UTF-8 are one key, a void value (None) is no key, a table or array
    is keyed by its ``repr``."""
    if value is None:
        return None
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "surrogateescape")
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


class Long(int):
    """An int to encode as a signed 64-bit ``l`` field (RabbitMQ's type for x-death count)."""

    amqp_type = "long"


class Timestamp(int):
    """An AMQP timestamp (u64 seconds, spec 4.2.5.4) beyond what ``datetime`` holds (after
    9999-12-31): kept as the integer, encoded back as ``T`` with the same 8 bytes."""

    __slots__ = ()
    amqp_type = "timestamp"


#: the last second ``datetime`` holds (9999-12-31T23:59:59Z)
MAX_DATETIME_SECONDS = 253_402_300_799
_U64 = struct.Struct(">Q")


def timestamp_value(seconds: int) -> datetime.datetime | Timestamp:
    """A u64 AMQP timestamp as decoded: a UTC datetime when it holds the value, else a
    :class:`Timestamp` (RabbitMQ passes every 64-bit value through)."""
    if seconds <= MAX_DATETIME_SECONDS:
        return datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return Timestamp(seconds)


def _decode_timestamp(value: bytes) -> tuple[int, datetime.datetime | Timestamp]:
    """pamqp's timestamp decoder, exact: pamqp's own divides values above 2**32 by 1000
    ("likely milliseconds") and raises ValueError past year 9999, which closed the
    connection with 541 for a message RabbitMQ accepts."""
    try:
        (seconds,) = _U64.unpack_from(value, 0)
    except struct.error as err:
        raise ValueError("Could not unpack timestamp value") from err
    return 8, timestamp_value(seconds)


# Every decode of a timestamp goes through pamqp's two tables: the ``timestamp`` property
# (decode.by_type) and ``T`` values in field tables (decode.embedded_value), in content
# headers and method frames alike; this module is imported before any of them is decoded.
_pamqp_decode.METHODS["timestamp"] = _decode_timestamp
_pamqp_decode.TABLE_MAPPING[b"T"] = _decode_timestamp


def _field_size(data: bytes, pos: int, kind: str) -> int:
    if kind == "shortstr":
        return 1 + data[pos]
    if kind == "table":
        return 4 + struct.unpack_from(">I", data, pos)[0]
    return 1 if kind == "octet" else 8


def split_properties(raw: bytes) -> dict[str, bytes]:
    """Property name -> its encoded bytes, for the properties present in ``raw`` (property
    flags followed by the property list).

    Raises:
        ValueError: truncated or malformed property bytes.
    """
    try:
        (flags,) = struct.unpack_from(">H", raw, 0)
        pos = 2
        out: dict[str, bytes] = {}
        for bit, (name, kind) in zip(range(15, 1, -1), PROPERTY_FIELDS, strict=True):
            if flags & (1 << bit):
                size = _field_size(raw, pos, kind)
                if pos + size > len(raw):
                    raise ValueError(f"property {name} runs past the content header")
                out[name] = raw[pos:pos + size]
                pos += size
        return out
    except (struct.error, IndexError) as exc:
        raise ValueError(f"malformed content properties: {exc}") from None


def check_properties(raw: bytes) -> None:
    """Validate content-header property bytes without decoding them into objects: every
    present field fits, a ``headers`` table is well formed (nested tables and arrays
    included, known type tags only), nothing trails.

    Raises:
        ValueError: with what is wrong.
    """
    fields = split_properties(raw)
    if sum(len(v) for v in fields.values()) + 2 != len(raw):
        raise ValueError("trailing bytes after the content properties")
    table = fields.get("headers")
    if table is not None:
        check_table(table)


MAX_TABLE_DEPTH = 64  # nesting of tables/arrays accepted in field tables


def check_table(data: bytes, pos: int = 0, end: int | None = None) -> int:
    """Validate the field table (u32 size + entries) at ``data[pos:]`` without decoding it:
    entries fit, keys are UTF-8, type tags are known, nesting of tables and arrays is at most
    :data:`MAX_TABLE_DEPTH` levels. Returns the offset just past the table.

    Raises:
        ValueError: with what is wrong (the caller answers 502 SYNTAX_ERROR).
    """
    end = len(data) if end is None else end
    try:
        _check_table(data, pos, end, 0)
        return pos + 4 + struct.unpack_from(">I", data, pos)[0]
    except (struct.error, IndexError):
        raise ValueError("field table truncated") from None


def _check_table(data: bytes, pos: int, end: int, depth: int) -> None:
    if depth > MAX_TABLE_DEPTH:
        raise ValueError(f"field table nested deeper than {MAX_TABLE_DEPTH} levels")
    (size,) = struct.unpack_from(">I", data, pos)
    pos += 4
    stop = pos + size
    if stop > end:
        raise ValueError("field table runs past its end")
    while pos < stop:
        n = data[pos]
        try:
            data[pos + 1:pos + 1 + n].decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError("field table key is not UTF-8") from None
        pos = _check_value(data, pos + 1 + n, stop, depth)
    if pos != stop:
        raise ValueError("field table entry runs past the table")


def _check_value(data: bytes, pos: int, end: int, depth: int) -> int:
    if pos >= end:
        raise ValueError("field value missing")
    tag = chr(data[pos])
    pos += 1
    if tag in _FIXED:
        nxt = pos + _FIXED[tag]
    elif tag in _SIZED:
        if pos + 4 > end:
            raise ValueError("field value length missing")
        (size,) = struct.unpack_from(">I", data, pos)
        nxt = pos + 4 + size
        if nxt <= end and tag == "F":
            _check_table(data, pos, nxt, depth + 1)
        elif nxt <= end and tag == "A":
            if depth + 1 > MAX_TABLE_DEPTH:  # the array is one level deeper than its holder
                raise ValueError(f"field table nested deeper than {MAX_TABLE_DEPTH} levels")
            item = pos + 4
            while item < nxt:
                item = _check_value(data, item, nxt, depth + 1)
            if item != nxt:
                raise ValueError("field array entry runs past the array")
    else:
        raise ValueError(f"unknown field type {tag!r}")
    if nxt > end:
        raise ValueError("field value runs past its container")
    return nxt


def utf8_safe_properties(raw: bytes) -> bytes:
    """``raw`` with every shortstr property that is not UTF-8 transcoded from Latin-1, so a
    strict UTF-8 decoder accepts it (AMQP shortstrs are bytes; RabbitMQ keeps them as they
    are). Used only to *read* properties; the original bytes are what is forwarded."""
    fields = split_properties(raw)
    for name, kind in PROPERTY_FIELDS:
        value = fields.get(name)
        if value is None or kind != "shortstr":
            continue
        try:
            value[1:].decode("utf-8")
        except UnicodeDecodeError:
            text = value[1:].decode("latin-1").encode("utf-8")[:255]
            fields[name] = bytes((len(text),)) + text
    return join_properties(fields)


def join_properties(fields: dict[str, bytes]) -> bytes:
    """Property flags + list from name -> encoded bytes (inverse of split_properties)."""
    flags = 0
    parts = []
    for bit, (name, _) in zip(range(15, 1, -1), PROPERTY_FIELDS, strict=True):
        if name in fields:
            flags |= 1 << bit
            parts.append(fields[name])
    return struct.pack(">H", flags) + b"".join(parts)


def shortstr(value: str) -> bytes:
    """An encoded shortstr (for a property such as ``reply_to``)."""
    raw = value.encode("utf-8")
    if len(raw) > 255:
        raise ValueError("short string longer than 255 bytes")
    return bytes((len(raw),)) + raw


def split_table(table: bytes) -> list[tuple[str, bytes]]:
    """The entries of an encoded field table (with its u32 length) as (key, value bytes
    including the type tag).

    Raises:
        ValueError: malformed table.
    """
    try:
        (size,) = struct.unpack_from(">I", table, 0)
        end = 4 + size
        pos = 4
        out = []
        while pos < end:
            n = table[pos]
            key = table[pos + 1:pos + 1 + n].decode("utf-8")
            pos += 1 + n
            tag = chr(table[pos])
            if tag in _FIXED:
                length = 1 + _FIXED[tag]
            elif tag in _SIZED:
                length = 5 + struct.unpack_from(">I", table, pos + 1)[0]
            else:
                raise ValueError(f"unknown field type {tag!r}")
            out.append((key, table[pos:pos + length]))
            pos += length
        return out
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise ValueError(f"malformed field table: {exc}") from None


def encode_value(value: Any) -> bytes:
    """One field value with its type tag (``Long`` -> ``l``, str -> ``S``, datetime -> ``T``,
    list -> ``A``, dict -> ``F``, bool -> ``t``, int -> ``I``/``l``, bytes -> ``S``,
    bytearray -> ``x``, Decimal -> ``D``). Raises TypeError for another type, and
    struct.error for a decimal whose unscaled value or scale does not fit (i32, u8)."""
    if isinstance(value, bool):
        return b"t" + bytes((1 if value else 0,))
    if isinstance(value, Long):
        return b"l" + struct.pack(">q", value)
    if isinstance(value, Timestamp):
        return b"T" + _U64.pack(value)
    if isinstance(value, int):
        if -(2**31) <= value < 2**31:
            return b"I" + struct.pack(">i", value)
        return b"l" + struct.pack(">q", value)
    if isinstance(value, float):
        return b"d" + struct.pack(">d", value)
    if isinstance(value, str | bytes):
        raw = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value
        return b"S" + struct.pack(">I", len(raw)) + raw
    if isinstance(value, bytearray):  # 'x' byte array, as pamqp decodes it
        return b"x" + struct.pack(">I", len(value)) + bytes(value)
    if isinstance(value, decimal.Decimal):  # 'D': scale u8, unscaled value i32
        sign, digits, exponent = value.as_tuple()
        unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
        scale = -int(exponent) if isinstance(exponent, int) and exponent < 0 else 0
        if isinstance(exponent, int) and exponent > 0:
            unscaled *= 10 ** exponent
        return b"D" + struct.pack(">Bi", scale, unscaled)
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return b"T" + struct.pack(">Q", int(value.timestamp()))
    if isinstance(value, list):
        body = b"".join(encode_value(v) for v in value)
        return b"A" + struct.pack(">I", len(body)) + body
    if isinstance(value, dict):
        return b"F" + encode_table(value)
    if value is None:
        return b"V"
    raise TypeError(f"cannot encode {type(value).__name__} in a field table")


def encode_table(entries: dict[str, Any]) -> bytes:
    """An encoded field table (with its u32 length)."""
    body = b"".join(shortstr(k) + encode_value(v) for k, v in entries.items())
    return struct.pack(">I", len(body)) + body


def with_header(raw: bytes, key: str, value: Any) -> bytes:
    """Content properties ``raw`` with header ``key`` set to ``value`` (replaced if present);
    every other property and header entry is copied byte for byte.

    Raises:
        ValueError: malformed properties.
    """
    return with_headers(raw, {key: value})


def with_headers(raw: bytes, values: dict[str, Any]) -> bytes:
    """Content properties ``raw`` with each header of ``values`` set (replaced if present);
    every other property and header entry is copied byte for byte.

    Raises:
        ValueError: malformed properties.
    """
    fields = split_properties(raw)
    kept = [(k, v) for k, v in split_table(fields["headers"]) if k not in values] \
        if "headers" in fields else []
    fields["headers"] = join_table(kept + [(k, encode_value(v)) for k, v in values.items()])
    return join_properties(fields)


def join_table(entries: list[tuple[str, bytes]]) -> bytes:
    """An encoded field table from (key, encoded value) entries."""
    body = b"".join(shortstr(k) + v for k, v in entries)
    return struct.pack(">I", len(body)) + body


def amqp_type_name(value: Any) -> str:
    """RabbitMQ's name for a field-table value's type: the wire type when the value carries it
    (``amqp_type``, see :mod:`amqp_common.method_tables`), otherwise as most clients encode
    such a Python value."""
    wire = getattr(value, "amqp_type", None)
    if wire is not None:
        return str(wire)
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "signedint" if -(2**31) <= value < 2**31 else "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, decimal.Decimal):
        return "decimal"
    if isinstance(value, bytearray):
        return "binary"
    if isinstance(value, datetime.datetime):
        return "timestamp"
    if isinstance(value, str | bytes):
        return "longstr"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, list):
        return "array"
    return "void" if value is None else type(value).__name__
