"""Hypothesis strategies for fuzzed AMQP streams: valid frames, frames with invalid field
values, mutated frames (bit flips, truncation, wrong sizes, wrong frame-end, wrong type or
channel), random bytes, content frames interleaved across channels.

Every strategy draws *bytes*; :func:`session_inputs` wraps a stream in the session-input
format of :mod:`tests.fuzz.harness` so that a failing example can be saved to the corpus as
it is.
"""

from __future__ import annotations

import functools
import struct
from typing import Any

from hypothesis import strategies as st
from pamqp import commands

from tests.fuzz import frames as F
from tests.fuzz import harness as H

NAMES = ("", "fz.shared", "fz.excl", "fz.dlx", "fz.dead", "fz.prio", "fz.len", "fz.sac",
         "fz.ttl", "fz.headers", "fz.topic", "fz.fanout", "fz.ae", "amq.direct", "amq.fanout",
         "amq.topic", "amq.headers", "amq.match", "amq.default", "amq.rabbitmq.reply-to",
         "amq.rabbitmq.reply-to.abc", "amq.gen-x", "nope", "q", "a.b.c", "#", "*")
EXCHANGE_TYPES = ("direct", "fanout", "topic", "headers", "x-unknown", "")
ARG_KEYS = ("x-message-ttl", "x-expires", "x-max-length", "x-max-length-bytes", "x-overflow",
            "x-dead-letter-exchange", "x-dead-letter-routing-key", "x-max-priority",
            "x-queue-type", "x-single-active-consumer", "x-queue-mode", "x-priority",
            "x-match", "alternate-exchange", "x-cancel-on-ha-failover", "k", "CC", "BCC",
            "x-death", "x-delivery-limit", "x-queue-master-locator")
CHANNELS = (0, 1, 1, 1, 2, 3, 4, 5, 2047, 2048, 65535)
INTS = (0, 1, 2, 3, 5, 10, 255, 256, 1000, 65535, 65536, 2**31 - 1, 2**31, 2**32 - 1,
        2**63 - 1, 2**64 - 1)
BODY_SIZES = (0, 1, 5, 100, 4088, 4089, 131064, F.MAX_MESSAGE_SIZE, F.MAX_MESSAGE_SIZE + 1,
              2**63, 2**64 - 1)

names = st.one_of(*[st.sampled_from(NAMES)] * 6, st.text(max_size=12),
                  st.binary(max_size=300).map(F.Raw).map(lambda b: F.Raw(F.shortstr(b))))
ints = st.one_of(st.sampled_from(INTS), st.integers(0, 20))
channels = st.one_of(st.sampled_from(CHANNELS), st.integers(0, 65535))

SCALARS = (None, True, False, 0, 1, -1, 5, 1000, 2**31, 2**40, -(2**63), 1.5, "all", "any",
           "all-with-x", "reject-publish", "drop-head", "reject-publish-dlx", "classic",
           "quorum", "stream", "lazy", "-1", "", "v", "fz.shared", "fz.fanout", b"\xff\x00")
scalars = st.sampled_from(SCALARS)
field_values = st.one_of(
    scalars, scalars, scalars,
    st.lists(scalars, max_size=3),
    st.dictionaries(st.sampled_from(ARG_KEYS), scalars, max_size=2),
    st.lists(st.dictionaries(st.sampled_from(ARG_KEYS), scalars, max_size=2), max_size=2),
)
tables = st.one_of(
    st.none(),
    st.dictionaries(st.sampled_from(ARG_KEYS), field_values, max_size=3),
)

# method classes a client may send, and a few it may not (server-only methods)
CLIENT_METHODS = (
    commands.Channel.Open, commands.Channel.Close, commands.Channel.CloseOk,
    commands.Channel.Flow, commands.Channel.FlowOk,
    commands.Exchange.Declare, commands.Exchange.Delete, commands.Exchange.Bind,
    commands.Exchange.Unbind, commands.Queue.Declare, commands.Queue.Bind,
    commands.Queue.Unbind, commands.Queue.Purge, commands.Queue.Delete, commands.Basic.Qos,
    commands.Basic.Consume, commands.Basic.Cancel, commands.Basic.Publish,
    commands.Basic.Get, commands.Basic.Ack, commands.Basic.Reject, commands.Basic.Nack,
    commands.Basic.Recover, commands.Basic.RecoverAsync, commands.Tx.Select,
    commands.Tx.Commit, commands.Tx.Rollback, commands.Confirm.Select,
    commands.Connection.StartOk, commands.Connection.TuneOk, commands.Connection.Open,
    commands.Connection.Close, commands.Connection.CloseOk, commands.Connection.UpdateSecret,
)
OTHER_METHODS = tuple(c for c in set(commands.INDEX_MAPPING.values())
                      if c not in CLIENT_METHODS)


@functools.cache
def _field_strategy(cls: type, name: str) -> st.SearchStrategy[Any]:
    kind = cls.amqp_type(name)
    if kind == "bit":
        return st.booleans()
    if kind == "table":
        return tables
    if kind in ("shortstr", "longstr"):
        if name == "response":
            return st.sampled_from(("\0guest\0guest", "\0guest\0bad", "", "\0\0", "x"))
        if name == "mechanism":
            return st.sampled_from(("PLAIN", "AMQPLAIN", "EXTERNAL", "", "X"))
        if name == "exchange_type":
            return st.sampled_from(EXCHANGE_TYPES)
        if name == "virtual_host":
            return st.sampled_from(("/", "", "nope", "/" * 3))
        return names
    if name == "delivery_tag":
        return st.one_of(st.integers(0, 8), st.sampled_from(INTS))
    if name == "frame_max":
        return st.sampled_from((0, 4095, 4096, 8192, 131072, 131073, 2**32 - 1))
    if name == "heartbeat":
        return st.sampled_from((0, 1, 5, 60, 65535))
    return ints


_ANY_METHOD = st.sampled_from(CLIENT_METHODS + OTHER_METHODS)
_CLIENT_METHOD = st.sampled_from(CLIENT_METHODS)


@st.composite
def method_frames(draw: st.DrawFn, channel: int | None = None) -> bytes:
    """A method frame of a client method (sometimes a server-only one) with drawn fields."""
    cls = draw(_ANY_METHOD if draw(st.integers(0, 9)) == 0 else _CLIENT_METHOD)
    values = {name: draw(_field_strategy(cls, name)) for name in cls.__slots__
              if draw(st.integers(0, 3))}
    ch = draw(channels) if channel is None else channel
    if cls.__name__ in ("StartOk", "TuneOk", "Open", "Close", "CloseOk", "UpdateSecret") \
            and cls.name.startswith("Connection") and draw(st.booleans()):
        ch = 0
    try:
        return F.method(ch, cls, **values)
    except (TypeError, ValueError, struct.error, OverflowError):
        return F.method(ch, cls)


properties = st.builds(
    commands.Basic.Properties,
    content_type=st.one_of(st.none(), st.sampled_from(("", "x", "é"))),
    headers=st.one_of(st.none(), tables),
    delivery_mode=st.one_of(st.none(), st.sampled_from((1, 2, 0, 255))),
    priority=st.one_of(st.none(), st.integers(0, 255)),
    correlation_id=st.one_of(st.none(), st.sampled_from(("", "x", "é"))),
    reply_to=st.one_of(st.none(), st.sampled_from(("amq.rabbitmq.reply-to", "fz.shared", "x"))),
    expiration=st.one_of(st.none(), st.sampled_from(("0", "1", "100", "-1", "abc", "1.5", "",
                                                      "99999999999999999999"))),
    message_id=st.one_of(st.none(), st.sampled_from(("", "x", "é"))),
    timestamp=st.none(),
    user_id=st.one_of(st.none(), st.sampled_from(("guest", "other"))),
    app_id=st.one_of(st.none(), st.sampled_from(("", "x", "é"))),
)


@st.composite
def property_bytes(draw: st.DrawFn, valid_only: bool = False) -> bytes:
    """Content-header property flags + list: pamqp-encoded or raw random bytes."""
    if valid_only or draw(st.integers(0, 3)):
        try:
            return F.properties_raw(draw(properties))
        except (TypeError, ValueError, struct.error, OverflowError):
            return b"\x00\x00"
    return draw(st.binary(max_size=24))


@st.composite
def content_frames(draw: st.DrawFn, channel: int | None = None,
                   valid_properties: bool = False) -> bytes:
    """A content header, and body frames, perhaps disagreeing with the announced size."""
    ch = draw(channels) if channel is None else channel
    size = draw(st.one_of(st.sampled_from(BODY_SIZES), st.integers(0, 300)))
    head = F.content_header(ch, size, draw(property_bytes(valid_only=valid_properties)),
                            class_id=draw(st.sampled_from((60, 60, 60, 10, 0, 65535))),
                            weight=draw(st.sampled_from((0, 0, 1))))
    parts = [head]
    remaining = min(size, 300) + draw(st.sampled_from((0, 0, 0, 1, -1)))
    while remaining > 0 and len(parts) < 4:
        n = draw(st.integers(1, remaining))
        parts.append(F.body(ch, draw(st.binary(min_size=n, max_size=n))))
        remaining -= n
    return b"".join(parts)


@st.composite
def publishes(draw: st.DrawFn, channel: int | None = None,
              valid_properties: bool = False) -> bytes:
    """Basic.Publish + header + body, mostly well-formed (the fast path)."""
    ch = draw(st.sampled_from((1, 1, 2, 3))) if channel is None else channel
    data = draw(st.binary(max_size=64))
    return F.publish(ch, draw(names), draw(names), data,
                     props=draw(property_bytes(valid_only=valid_properties)),
                     mandatory=draw(st.booleans()))


_SIZES = st.one_of(st.sampled_from((0, 1, 4088, 4089, 131064, 131065, 131073, 2**31,
                                     2**32 - 1)), st.integers(0, 600))


def mutate(draw: st.DrawFn, frame: bytes) -> bytes:
    """``frame`` broken in one way: bit flip, truncation, size, frame-end, type, channel,
    inserted or deleted bytes."""
    data = bytearray(frame)
    kind = draw(st.integers(0, 7))
    if kind == 0 and data:  # flip bits of one byte
        i = draw(st.integers(0, len(data) - 1))
        data[i] ^= draw(st.integers(1, 255))
    elif kind == 1:  # truncate
        data = data[:draw(st.integers(0, max(0, len(data) - 1)))]
    elif kind == 2 and len(data) >= 7:  # wrong size field (oversize too)
        size = draw(_SIZES)
        struct.pack_into(">I", data, 3, size)
    elif kind == 3 and data:  # wrong frame-end
        end = draw(st.integers(0, 254))
        data[-1] = end if end < 0xCE else end + 1
    elif kind == 4 and data:  # wrong frame type
        data[0] = draw(st.sampled_from((0, 4, 5, 7, 9, 65, 206, 255, 1, 2, 3, 8)))
    elif kind == 5 and len(data) >= 3:  # another channel
        struct.pack_into(">H", data, 1, draw(channels))
    elif kind == 6:  # insert bytes
        i = draw(st.integers(0, len(data)))
        data[i:i] = draw(st.binary(min_size=1, max_size=8))
    elif data:  # delete bytes in the payload
        i = draw(st.integers(0, len(data) - 1))
        del data[i:i + draw(st.integers(1, 8))]
    return bytes(data)


@functools.cache
def good_frames(valid_properties: bool = False) -> st.SearchStrategy[bytes]:
    """A well-formed frame or publish on channels 1-3 (channel 1 mostly)."""
    ch1 = method_frames(channel=1)
    pub = publishes(valid_properties=valid_properties)
    return st.one_of(
        ch1, ch1, ch1, ch1, method_frames(channel=2), method_frames(channel=3),
        st.sampled_from((2, 3)).map(lambda ch: F.method(ch, commands.Channel.Open)),
        pub, pub, pub, st.just(F.HEARTBEAT),
    )


@st.composite
def mutated_frames(draw: st.DrawFn) -> bytes:
    return mutate(draw, draw(good_frames()))


@functools.cache
def bad_frames() -> st.SearchStrategy[bytes]:
    """A broken frame: mutated, random bytes, a heartbeat on a channel, an oversize frame."""
    return st.one_of(
        mutated_frames(), mutated_frames(), method_frames(), content_frames(channel=1),
        content_frames(), st.binary(min_size=1, max_size=16),
        channels.map(lambda ch: F.frame(8, ch, b"")),
        st.sampled_from((4089, 131065, 2**32 - 1)).map(
            lambda n: struct.pack(">BHI", 1, 1, n) + b"\x00" * 16),
    )


@functools.cache
def frames_of(valid_properties: bool = False) -> st.SearchStrategy[bytes]:
    """One element of a stream: mostly well-formed frames, sometimes broken ones."""
    good = good_frames(valid_properties)
    return st.one_of(good, good, good, good, bad_frames())


@st.composite
def streams(draw: st.DrawFn, valid_properties: bool = False, max_size: int = 12) -> bytes:
    """Well-formed frames, then perhaps one broken element, then perhaps more frames (which
    a closed connection must ignore)."""
    good = good_frames(valid_properties)
    parts = draw(st.lists(good, max_size=max_size))
    if draw(st.integers(0, 2)) == 0:
        parts.append(draw(bad_frames()))
        parts.extend(draw(st.lists(frames_of(valid_properties), max_size=3)))
    if not parts:
        parts.append(draw(frames_of(valid_properties)))
    return b"".join(parts)


# connections past the handshake get most of the examples
_WEIGHTED_SCENARIOS = tuple(i for i, (name, _) in enumerate(H.SCENARIOS)
                            for _ in range(1 if name in ("raw", "header", "tune", "open-wait")
                                           else 4))


@st.composite
def session_inputs(draw: st.DrawFn, scenarios: tuple[int, ...] | None = None,
                   valid_properties: bool = False, max_size: int = 12) -> bytes:
    """A whole session input (scenario, chunking, drain, clock advance, stream)."""
    scenario = draw(st.sampled_from(scenarios or _WEIGHTED_SCENARIOS))
    stream = draw(streams(valid_properties, max_size))
    if H.SCENARIOS[scenario][0] == "raw":
        prefix = b"".join(F.handshake()[:draw(st.integers(0, 3))])
        stream = prefix + stream
    return H.encode_input(scenario, stream, chunk=draw(st.integers(0, 7)),
                          drain=draw(st.booleans()),
                          advance=draw(st.sampled_from((0, 0, 0, 5, 11, 25, 130, 255))))


@st.composite
def interleaved_publishes(draw: st.DrawFn) -> tuple[bytes, list[tuple[int, bytes]]]:
    """Publishes on channels 1-3 with their content frames interleaved across channels (each
    channel's own frames stay in order): the stream and the (channel, body) published."""
    per_channel: dict[int, list[bytes]] = {}
    sent: list[tuple[int, bytes]] = []
    for _ in range(draw(st.integers(1, 6))):
        ch = draw(st.sampled_from((1, 2, 3)))
        data = draw(st.binary(max_size=40))
        sent.append((ch, data))
        frames = [F.method(ch, commands.Basic.Publish, exchange="", routing_key=f"fz.i{ch}"),
                  F.content_header(ch, len(data))]
        split = draw(st.integers(0, len(data))) if data else 0
        for part in (data[:split], data[split:]):
            if part:
                frames.append(F.body(ch, part))
        per_channel.setdefault(ch, []).extend(frames)
    order = draw(st.permutations([ch for ch, fs in per_channel.items() for _ in fs]))
    cursors = dict.fromkeys(per_channel, 0)
    out = []
    for ch in order:
        out.append(per_channel[ch][cursors[ch]])
        cursors[ch] += 1
    return b"".join(out), sent
