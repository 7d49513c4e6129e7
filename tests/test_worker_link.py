"""The worker link's wire format (amqp_server/workers/link_codec.py), sans-IO."""

from __future__ import annotations

import pytest

from amqp_common.method_tables import WIRE_NUMBER_TYPES
from amqp_server.workers.link_codec import (
    CONTROL,
    CREDIT,
    DELIVER,
    PUBLISH,
    RESULTS,
    SETTLE,
    LinkError,
    Outbox,
    PublishReader,
    RecordReader,
    message_from,
    queue_key,
    read_control,
    read_credit,
    read_deliver,
    read_publish,
    read_results,
    read_settle,
    split_queue_key,
)


def _all_records() -> bytes:
    box = Outbox()
    box.publish(7, True, queue_key("/", "orders"), b"\x00\x06orders", b"\x10\x00\x02",
                b"x" * 300)
    box.deliver(3, 99, True, b"\x01x\x01k", b"\x00\x00", b"")
    box.settle(2, [5, 6, 70000])
    box.credit(3, 125)
    box.results([(7, 1), (8, 2)])
    box.control(("consume", 3, {"x-priority": WIRE_NUMBER_TYPES["I"](5)}))
    assert box.size == len(b"".join(box._parts))
    return box.take()


def test_every_record_comes_back_whatever_the_cuts() -> None:
    data = _all_records()
    for step in (1, 2, 7, 64, len(data)):
        reader = RecordReader()
        records = []
        for i in range(0, len(data), step):
            records += reader.feed(data[i:i + step])
        assert [kind for kind, _ in records] == [PUBLISH, DELIVER, SETTLE, CREDIT, RESULTS,
                                                 CONTROL]
        (_, pub), (_, dlv), (_, stl), (_, crd), (_, res), (_, ctl) = records
        pub_id, want, qkey, exrk, props, body = read_publish(pub)
        assert (pub_id, want, split_queue_key(qkey), exrk, props, body) == (
            7, True, ("/", "orders"), b"\x00\x06orders", b"\x10\x00\x02", b"x" * 300)
        assert read_deliver(dlv) == (3, 99, True, b"\x01x\x01k", b"\x00\x00", b"")
        assert read_settle(stl) == (2, (5, 6, 70000))
        assert read_credit(crd) == (3, 125)
        assert read_results(res) == [(7, 1), (8, 2)]
        record = read_control(ctl)
        assert record[:2] == ("consume", 3)
        # the AMQP type a number was sent as survives (equivalence checks on other workers)
        assert getattr(record[2]["x-priority"], "amqp_type", None) == "signedint"


def test_a_publish_reader_reads_what_read_publish_does_in_any_order_of_repeats() -> None:
    """PublishReader takes the last exchange/routing key and properties again when they
    repeat: every message is still the one read_publish + message_from make."""
    shapes = [(b"\x00\x01q", b"\x00\x00"), (b"\x00\x01q", b"\x10\x00\x02"),
              (b"\x02ex\x03k\xffy", b"\x10\x00\x02"), (b"\x00\x01r", b"\x00\x00"),
              (b"\x00\x01q", b""), (b"\x00\x00", b"\x00\x00")]
    box = Outbox()
    order = [0, 0, 1, 1, 0, 2, 2, 3, 0, 4, 4, 5, 0]
    for i, s in enumerate(order):
        exrk, props = shapes[s]
        box.publish(i, i % 2 == 1, queue_key("/", f"q{s}"), exrk, props, b"b%d" % i)
    reader = PublishReader()
    for _, body in RecordReader().feed(box.take()):
        pub_id, want, qkey, exrk, props, payload = read_publish(body)
        expected = message_from(exrk, props, payload)
        got_id, got_want, got_qkey, got = reader.read(body)
        assert (got_id, got_want, got_qkey) == (pub_id, want, qkey)
        assert (got.exchange, got.routing_key, got.ex_rk_raw, got.properties_raw, got.body,
                got.flags) == (expected.exchange, expected.routing_key, expected.ex_rk_raw,
                               expected.properties_raw, expected.body, expected.flags)


def test_an_empty_outbox_gives_nothing_and_a_taken_one_is_empty() -> None:
    box = Outbox()
    assert box.take() == b""
    box.credit(1, 1)
    assert box.take() and box.take() == b"" and box.size == 0


@pytest.mark.parametrize("length", [0, (1 << 30) + 1])
def test_a_record_length_out_of_range_breaks_the_link(length: int) -> None:
    with pytest.raises(LinkError):
        RecordReader().feed(length.to_bytes(4, "big") + b"\x01abc")


@pytest.mark.parametrize("body", [b'["not", "a", "tuple"]', b"not json",
                                  b'{"t": [{"e": "SystemExit", "x": "", "c": 0, "m": 0}]}',
                                  b'{"t": [{"zz": 1}]}', b'{"t": []}'])
def test_a_control_record_that_is_not_one_breaks_the_link(body: bytes) -> None:
    with pytest.raises(LinkError):
        read_control(body)


def test_control_values_keep_their_types() -> None:
    import datetime
    import decimal

    from amqp_common.errors import NotFound
    from amqp_common.properties import Long

    record = ("x", None, True, 3, 2.5, b"\x00\xff", (1, (2,)), [1, [2]],
              {b"k": (1, 2), "s": {"nested": Long(7)}}, decimal.Decimal("1.50"),
              datetime.datetime(2026, 11, 24, 7, 0, 0), WIRE_NUMBER_TYPES["f"](1.5),
              NotFound("no queue 'q' in vhost '/'", 50, 10))
    box = Outbox()
    box.control(record)
    ((kind, body),) = RecordReader().feed(box.take())
    back = read_control(body)
    assert back[:-1] == record[:-1]
    assert type(back[8]["s"]["nested"]) is Long and type(back[11]) is WIRE_NUMBER_TYPES["f"]
    err = back[-1]
    assert isinstance(err, NotFound) and err.reply_text == "NOT_FOUND - no queue 'q' in vhost '/'"
    assert (err.class_id, err.method_id) == (50, 10)
