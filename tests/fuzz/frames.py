"""Raw AMQP 0-9-1 frame encoders for fuzzing: no validation, so invalid values go on the wire.

pamqp validates names and lengths when it marshals a method; these encoders only follow the
wire format (spec 4.2.3 general frame format, 4.2.5 field types, 4.2.6 content framing), so a
test can send a 300-byte shortstr, an exchange name pamqp refuses, a table nested 10,000
levels deep or a content header announcing 2**64-1 bytes.
"""

from __future__ import annotations

import struct
import warnings
from typing import Any

from pamqp import commands, encode

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT = 1, 2, 3, 8
FRAME_END = b"\xce"
HEARTBEAT = b"\x08\x00\x00\x00\x00\x00\x00\xce"
MAX_MESSAGE_SIZE = 128 * 1024 * 1024  # RabbitMQ's max_message_size default

_head = struct.Struct(">BHI")


class Raw(bytes):
    """Already-encoded field bytes, put on the wire as they are (any field type)."""


def frame(ftype: int, channel: int, payload: bytes) -> bytes:
    """One frame: type, channel, size, payload, frame-end (spec 4.2.3)."""
    return _head.pack(ftype, channel & 0xFFFF, len(payload)) + payload + FRAME_END


def shortstr(value: str | bytes) -> bytes:
    """A shortstr whose length octet is the length mod 256 (so longer strings corrupt)."""
    raw = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value
    return bytes((len(raw) & 0xFF,)) + raw


def longstr(value: str | bytes) -> bytes:
    raw = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value
    return struct.pack(">I", len(raw)) + raw


def table(value: dict[str, Any] | None) -> bytes:
    """A field table with pamqp's value encoding (nested dicts and lists allowed)."""
    return encode.field_table(value or {})


def _field(value: Any, kind: str) -> bytes:
    if isinstance(value, Raw):
        return bytes(value)
    if kind == "shortstr":
        return shortstr(value if value is not None else "")
    if kind == "longstr":
        return longstr(value if value is not None else "")
    if kind == "table":
        return table(value)
    if kind == "octet":
        return struct.pack(">B", int(value or 0) & 0xFF)
    if kind == "short":
        return struct.pack(">H", int(value or 0) & 0xFFFF)
    if kind == "long":
        return struct.pack(">I", int(value or 0) & 0xFFFFFFFF)
    if kind in ("longlong", "timestamp"):
        return struct.pack(">Q", int(value or 0) & 0xFFFFFFFFFFFFFFFF)
    return encode.by_type(value, kind)


def method_payload(cls: type, **values: Any) -> bytes:
    """The payload of a method frame for pamqp command class ``cls`` with ``values``
    (defaults for fields not given), encoded without pamqp's validation."""
    out = [struct.pack(">I", cls.index)]
    bits: list[bool] = []
    defaults = _defaults(cls)
    for name in cls.__slots__:
        kind = cls.amqp_type(name)
        value = values[name] if name in values else getattr(defaults, name, None)
        if kind == "bit":
            bits.append(bool(value))
            if len(bits) == 8:
                out.append(_bits(bits))
                bits = []
            continue
        if bits:
            out.append(_bits(bits))
            bits = []
        out.append(_field(value, kind))
    if bits:
        out.append(_bits(bits))
    return b"".join(out)


_DEFAULTS: dict[type, Any] = {}


def _defaults(cls: type) -> Any:
    """An instance of ``cls`` with its default field values (None if it needs arguments)."""
    if cls not in _DEFAULTS:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # pamqp warns about deprecated methods
                _DEFAULTS[cls] = cls()
        except (TypeError, ValueError):
            _DEFAULTS[cls] = None
    return _DEFAULTS[cls]


def _bits(bits: list[bool]) -> bytes:
    byte = 0
    for i, bit in enumerate(bits):
        if bit:
            byte |= 1 << i
    return bytes((byte,))


def method(channel: int, cls: type, **values: Any) -> bytes:
    """A method frame (see :func:`method_payload`)."""
    return frame(FRAME_METHOD, channel, method_payload(cls, **values))


def content_header(channel: int, body_size: int, properties_raw: bytes = b"\x00\x00",
                   class_id: int = 60, weight: int = 0) -> bytes:
    """A content header frame with ``properties_raw`` (property flags + list) verbatim."""
    payload = struct.pack(">HHQ", class_id & 0xFFFF, weight & 0xFFFF,
                          body_size & 0xFFFFFFFFFFFFFFFF) + properties_raw
    return frame(FRAME_HEADER, channel, payload)


def properties_raw(properties: commands.Basic.Properties | None = None) -> bytes:
    """Property flags + list as pamqp encodes them."""
    from pamqp.header import ContentHeader

    return ContentHeader(0, 0, properties).marshal()[12:]


def body(channel: int, data: bytes) -> bytes:
    return frame(FRAME_BODY, channel, data)


def publish(channel: int, exchange: str, routing_key: str, data: bytes,
            props: bytes = b"\x00\x00", mandatory: bool = False, frame_max: int = 131072
            ) -> bytes:
    """Basic.Publish + content header + body frames split at ``frame_max``."""
    out = [method(channel, commands.Basic.Publish, exchange=exchange, routing_key=routing_key,
                  mandatory=mandatory),
           content_header(channel, len(data), props)]
    chunk = frame_max - 8
    for start in range(0, len(data), chunk):
        out.append(body(channel, data[start:start + chunk]))
    return b"".join(out)


def nested_table(depth: int, key: bytes = b"a") -> Raw:
    """A field table nested ``depth`` levels deep: {"a": {"a": ... {}}} (7 bytes a level)."""
    inner = struct.pack(">I", 0)
    for _ in range(depth):
        entry = shortstr(key) + b"F" + inner
        inner = struct.pack(">I", len(entry)) + entry
    return Raw(inner)


def nested_array(depth: int) -> Raw:
    """A table {"a": [[[...]]]}: ``depth`` + 1 arrays, each inside the last (5 bytes a
    level)."""
    inner = struct.pack(">I", 0)
    for _ in range(depth):
        entry = b"A" + inner
        inner = struct.pack(">I", len(entry)) + entry
    entry = shortstr(b"a") + b"A" + inner
    return Raw(struct.pack(">I", len(entry)) + entry)


def handshake(user: str = "guest", password: str = "guest", vhost: str = "/",
              channel_max: int = 2047, frame_max: int = 131072, heartbeat: int = 60,
              capabilities: dict[str, Any] | None = None) -> list[bytes]:
    """The client side of a handshake, one item per step: protocol header, StartOk,
    TuneOk + Open."""
    caps = capabilities if capabilities is not None else {
        "authentication_failure_close": True, "publisher_confirms": True, "basic.nack": True,
        "consumer_cancel_notify": True, "connection.blocked": True}
    return [
        PROTOCOL_HEADER,
        method(0, commands.Connection.StartOk, client_properties={"capabilities": caps},
               mechanism="PLAIN", response=f"\0{user}\0{password}", locale="en_US"),
        method(0, commands.Connection.TuneOk, channel_max=channel_max, frame_max=frame_max,
               heartbeat=heartbeat)
        + method(0, commands.Connection.Open, virtual_host=vhost),
    ]
