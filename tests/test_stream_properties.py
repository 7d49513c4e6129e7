"""The x-stream-offset / x-stream-timestamp headers a stream delivery carries: the splice of
queue_store.stream_queue.stamped_properties gives the same bytes as the general
amqp_common.properties.with_headers for any content properties a publisher can send."""

from __future__ import annotations

import datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands
from pamqp.header import ContentHeader

from amqp_common.properties import Long, with_headers
from queue_store.stream_queue import stamped_properties

_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)
_header_values = st.one_of(st.integers(-2**31, 2**31 - 1), _text, st.booleans())
_header_names = st.one_of(_text, st.sampled_from(["x-stream-offset", "x-stream-timestamp",
                                                  "x-stream-filter-value", "a"]))


@st.composite
def properties(draw: Any) -> bytes:
    """Encoded content properties (flags + list) with a random subset of the properties."""
    kw: dict[str, Any] = {}
    for name, strategy in (("content_type", _text), ("content_encoding", _text),
                           ("headers", st.dictionaries(_header_names, _header_values,
                                                       max_size=4)),
                           ("delivery_mode", st.sampled_from([1, 2])),
                           ("priority", st.integers(0, 9)), ("correlation_id", _text),
                           ("message_id", _text),
                           ("timestamp", st.just(datetime.datetime(2026, 1, 2, 3, 4, 5,
                                                                   tzinfo=datetime.UTC))),
                           ("app_id", _text)):
        if draw(st.booleans()):
            kw[name] = draw(strategy)
    return ContentHeader(0, 0, commands.Basic.Properties(**kw)).marshal()[12:]


@settings(max_examples=150, deadline=None)
@given(properties(), st.integers(0, 2**63 - 1), st.one_of(st.none(), st.integers(0, 2**62)))
def test_splice_equals_with_headers(raw: bytes, offset: int, ts: int | None) -> None:
    expected: dict[str, Any] = {"x-stream-offset": Long(offset)}
    if ts is not None:
        expected["x-stream-timestamp"] = Long(ts)
    assert stamped_properties(raw, offset, ts) == with_headers(raw, expected)


def test_no_properties_at_all() -> None:
    assert stamped_properties(b"\x00\x00", 7, None) == with_headers(
        b"\x00\x00", {"x-stream-offset": Long(7)})
