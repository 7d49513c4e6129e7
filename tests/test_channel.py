"""Channel lifecycle and the basic class (consume, deliver, ack, qos, get), as a client sees it.

Reference: AMQP 0-9-1 spec 1.5, 1.8, 2.2.4; RabbitMQ 3.10-3.13 ``rabbit_channel`` (reply texts).
"""

from __future__ import annotations

import struct
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from conftest import (
    Client,
    bodies,
    channel_close,
    connection_close,
    deliveries,
    methods,
    only,
)
from pamqp import commands
from pamqp import frame as pamqp_frame
from pamqp.body import ContentBody
from pamqp.header import ContentHeader

# ---- channel lifecycle ---------------------------------------------------------------------


def test_channel_open_ok_on_the_same_channel(client: Client) -> None:
    out = client.send(7, commands.Channel.Open())
    assert [(ch, type(f)) for ch, f in out] == [(7, commands.Channel.OpenOk)]


def test_method_on_unopened_channel_is_a_channel_error(client: Client) -> None:
    out = client.send(2, commands.Queue.Declare(queue="q"))
    close = connection_close(out)
    assert (close.reply_code, close.reply_text) == (504, "CHANNEL_ERROR - expected 'channel.open'")
    assert (close.class_id, close.method_id) == (50, 10)


def test_publish_on_unopened_channel_is_a_channel_error(client: Client) -> None:
    close = connection_close(client.publish(3, "", "q", b"x"))
    assert (close.reply_code, close.reply_text) == (504, "CHANNEL_ERROR - expected 'channel.open'")
    assert (close.class_id, close.method_id) == (60, 40)


def test_content_frame_on_unopened_channel_is_unexpected(client: Client) -> None:
    close = connection_close(client.send(3, ContentBody(b"x")))
    assert (close.reply_code, close.reply_text) == (
        505, "UNEXPECTED_FRAME - expected method frame, got non method frame instead")


def test_second_channel_open_is_a_channel_error(client: Client) -> None:
    close = connection_close(client.send(1, commands.Channel.Open()))
    assert (close.reply_code, close.reply_text) == (
        504, "CHANNEL_ERROR - second 'channel.open' seen")
    assert (close.class_id, close.method_id) == (20, 10)


def test_channel_close_and_reopen(client: Client) -> None:
    out = client.send(1, commands.Channel.Close(reply_code=200, reply_text="ok",
                                                class_id=0, method_id=0))
    assert [(ch, type(f)) for ch, f in out] == [(1, commands.Channel.CloseOk)]
    assert 1 not in client.conn.channels
    client.open_channel(1)


def test_soft_error_closes_only_the_channel(client: Client) -> None:
    client.open_channel(2)
    out = client.send(1, commands.Queue.Declare(queue="missing", passive=True))
    close = channel_close(out)
    assert [ch for ch, _ in out] == [1]
    assert (close.reply_code, close.reply_text) == (404, "NOT_FOUND - no queue 'missing' in vhost '/'")
    assert (close.class_id, close.method_id) == (50, 10)
    assert client.declare_queue(2, "q").queue == "q"  # channel 2 unaffected


def test_closed_channel_ignores_frames_until_close_ok(client: Client) -> None:
    client.declare_queue(1, "q")
    channel_close(client.send(1, commands.Queue.Declare(queue="nope", passive=True)))
    assert client.send(1, commands.Queue.Declare(queue="other")) == []
    assert client.publish(1, "", "q", b"dropped") == []
    assert client.send(1, commands.Basic.Ack(delivery_tag=5)) == []
    assert "other" not in client.broker.vhosts["/"].queues
    assert client.broker.vhosts["/"].queues["q"].message_count == 0
    # a Channel.Close crossing ours is answered; then CloseOk frees the number
    out = client.send(1, commands.Channel.Close(reply_code=200, reply_text="", class_id=0,
                                                method_id=0))
    assert [type(f) for _, f in out] == [commands.Channel.CloseOk]
    assert client.send(1, commands.Channel.CloseOk()) == []
    client.open_channel(1)
    assert client.declare_queue(1, "q").message_count == 0


def test_channel_flow(client: Client) -> None:
    ok = client.call(1, commands.Channel.Flow(active=True), commands.Channel.FlowOk)
    assert ok.active is True
    close = connection_close(client.send(1, commands.Channel.Flow(active=False)))
    assert (close.reply_code, close.reply_text) == (540, "NOT_IMPLEMENTED - active=false")
    assert (close.class_id, close.method_id) == (20, 20)


# ---- consuming -----------------------------------------------------------------------------


def fill(c: Client, queue: str, n: int, ch: int = 1) -> list[bytes]:
    msgs = [f"m{i}".encode() for i in range(n)]
    for m in msgs:
        assert c.publish(ch, "", queue, m) == []
    return msgs


def test_consume_ok_precedes_first_deliver_and_tags_count_from_one(client: Client) -> None:
    client.declare_queue(1, "q")
    msgs = fill(client, "q", 3)
    out = client.consume(1, "q", tag="c1")
    assert isinstance(out[0][1], commands.Basic.ConsumeOk)
    assert out[0][1].consumer_tag == "c1"
    ds = deliveries(out)
    assert [d.body for d in ds] == msgs
    assert [d.method.delivery_tag for d in ds] == [1, 2, 3]
    for d in ds:
        assert d.channel == 1
        assert (d.method.consumer_tag, d.method.redelivered) == ("c1", False)
        assert (d.method.exchange, d.method.routing_key) == ("", "q")


def test_server_generated_consumer_tag(client: Client) -> None:
    client.declare_queue(1, "q")
    tag = only(client.consume(1, "q"), commands.Basic.ConsumeOk).consumer_tag
    assert tag.startswith("amq.ctag-") and len(tag) == len("amq.ctag-") + 22


def test_round_robin_across_two_consumers(client: Client) -> None:
    client.declare_queue(1, "q")
    client.consume(1, "q", tag="a", no_ack=True)
    client.consume(1, "q", tag="b", no_ack=True)
    got = []
    for i in range(4):
        (d,) = deliveries(client.publish(1, "", "q", f"m{i}".encode()))
        got.append((d.method.consumer_tag, d.body))
    assert got == [("a", b"m0"), ("b", b"m1"), ("a", b"m2"), ("b", b"m3")]


def test_delivery_to_a_consumer_on_another_connection(make_client) -> None:
    consumer, publisher = make_client(), make_client()
    consumer.declare_queue(1, "q")
    consumer.consume(1, "q", tag="c")
    assert publisher.publish(1, "", "q", b"hello") == []
    (d,) = deliveries(consumer.read())
    assert (d.body, d.method.delivery_tag) == (b"hello", 1)


def test_no_ack_consumer(client: Client) -> None:
    client.declare_queue(1, "q")
    fill(client, "q", 2)
    ds = deliveries(client.consume(1, "q", no_ack=True))
    assert [d.method.delivery_tag for d in ds] == [1, 2]
    assert client.broker.vhosts["/"].queues["q"].message_count == 0
    assert channel_close(client.ack(1, 1)).reply_text == (
        "PRECONDITION_FAILED - unknown delivery tag 1")


def test_prefetch_count_limits_unacked_deliveries(client: Client) -> None:
    client.declare_queue(1, "q")
    fill(client, "q", 5)
    client.qos(1, 2)
    assert bodies(client.consume(1, "q")) == [b"m0", b"m1"]
    assert bodies(client.ack(1, 1)) == [b"m2"]
    assert bodies(client.ack(1, 3, multiple=True)) == [b"m3", b"m4"]


def test_global_qos_limits_the_whole_channel(client: Client) -> None:
    for q in ("q1", "q2"):
        client.declare_queue(1, q)
        fill(client, q, 2)
    client.qos(1, 3, global_=True)
    got = bodies(client.consume(1, "q1")) + bodies(client.consume(1, "q2"))
    assert got == [b"m0", b"m1", b"m0"]
    assert bodies(client.ack(1, 1)) == [b"m1"]


def test_cancel(client: Client) -> None:
    client.declare_queue(1, "q")
    client.consume(1, "q", tag="c")
    ok = client.call(1, commands.Basic.Cancel(consumer_tag="c"), commands.Basic.CancelOk)
    assert ok.consumer_tag == "c"
    assert client.publish(1, "", "q", b"x") == []
    assert client.broker.vhosts["/"].queues["q"].message_count == 1


def test_duplicate_consumer_tag_is_not_allowed(client: Client) -> None:
    client.declare_queue(1, "q")
    client.consume(1, "q", tag="c1")
    close = connection_close(client.consume(1, "q", tag="c1"))
    assert (close.reply_code, close.reply_text) == (
        530, "NOT_ALLOWED - attempt to reuse consumer tag 'c1'")
    assert (close.class_id, close.method_id) == (60, 20)


@pytest.mark.parametrize("first_exclusive", [True, False])
def test_exclusive_consume_conflict_is_access_refused(client: Client,
                                                      first_exclusive: bool) -> None:
    client.declare_queue(1, "q")
    client.consume(1, "q", tag="a", exclusive=first_exclusive)
    close = channel_close(client.consume(1, "q", tag="b", exclusive=not first_exclusive))
    assert (close.reply_code, close.reply_text) == (
        403, "ACCESS_REFUSED - queue 'q' in vhost '/' in exclusive use")


CANCEL_CAPS = {"capabilities": {"consumer_cancel_notify": True}}


def test_queue_deletion_cancels_consumers_that_asked_for_it(make_client) -> None:
    consumer = make_client(client_properties=CANCEL_CAPS)
    other = make_client()
    consumer.declare_queue(1, "q")
    consumer.consume(1, "q", tag="c1")
    assert other.call(1, commands.Queue.Delete(queue="q"), commands.Queue.DeleteOk)
    cancel = only(consumer.read(), commands.Basic.Cancel)
    assert cancel.consumer_tag == "c1"
    assert "c1" not in consumer.conn.channels[1].consumers


def test_queue_deletion_without_capability_sends_no_cancel(make_client) -> None:
    consumer, other = make_client(), make_client()
    consumer.declare_queue(1, "q")
    consumer.consume(1, "q", tag="c1")
    other.call(1, commands.Queue.Delete(queue="q"), commands.Queue.DeleteOk)
    assert consumer.read() == []


# ---- acknowledgements ----------------------------------------------------------------------


def test_ack_unknown_tag_closes_the_channel(client: Client) -> None:
    close = channel_close(client.ack(1, 99))
    assert (close.reply_code, close.reply_text) == (
        406, "PRECONDITION_FAILED - unknown delivery tag 99")
    assert (close.class_id, close.method_id) == (60, 80)


def test_double_ack_is_unknown_tag(client: Client) -> None:
    client.declare_queue(1, "q")
    fill(client, "q", 1)
    client.consume(1, "q")
    assert client.ack(1, 1) == []
    assert channel_close(client.ack(1, 1)).reply_text == (
        "PRECONDITION_FAILED - unknown delivery tag 1")


def test_acks_in_one_read_settle_in_order_up_to_an_unknown_tag(client: Client) -> None:
    """Acks read together (taken one after the other on their channel): those before an
    unknown tag settle, the unknown one closes the channel (406), the rest are ignored."""
    client.declare_queue(1, "q")
    fill(client, "q", 6)
    client.call(1, commands.Basic.Qos(prefetch_count=3), commands.Basic.QosOk)
    client.consume(1, "q")
    ch = client.conn.channels[1]
    assert sorted(ch.unacked) == [1, 2, 3]
    out = client.send_bytes(b"".join(struct.pack(">BHIHHQBB", 1, 1, 13, 60, 80, tag, 0, 0xCE)
                                     for tag in (1, 2, 9, 3)))
    assert [d.method.delivery_tag for d in deliveries(out)] == [4, 5]
    assert channel_close(out).reply_text == "PRECONDITION_FAILED - unknown delivery tag 9"
    # tags 3, 4, 5 were outstanding when the channel closed: back in the queue
    queue = client.broker.vhosts["/"].queues["q"]
    assert (queue.message_count, queue.unacked_count) == (4, 0)


def test_ack_multiple_and_ack_all(client: Client) -> None:
    client.declare_queue(1, "q")
    fill(client, "q", 5)
    client.consume(1, "q")
    ch = client.conn.channels[1]
    assert client.ack(1, 3, multiple=True) == []
    assert sorted(ch.unacked) == [4, 5]
    assert client.ack(1, 0, multiple=True) == []  # tag 0 + multiple: everything
    assert ch.unacked == {}


def test_nack_multiple_requeue_redelivers_in_original_order(client: Client) -> None:
    client.declare_queue(1, "q")
    fill(client, "q", 3)
    client.consume(1, "q", tag="c")
    out = client.send(1, commands.Basic.Nack(delivery_tag=3, multiple=True, requeue=True))
    ds = deliveries(out)
    assert [(d.body, d.method.delivery_tag, d.method.redelivered) for d in ds] == [
        (b"m0", 4, True), (b"m1", 5, True), (b"m2", 6, True)]


def test_reject_and_nack_without_requeue_drop(client: Client) -> None:
    client.declare_queue(1, "q")
    fill(client, "q", 3)
    client.consume(1, "q")
    assert client.send(1, commands.Basic.Reject(delivery_tag=1, requeue=False)) == []
    assert client.send(1, commands.Basic.Nack(delivery_tag=3, multiple=True,
                                              requeue=False)) == []
    q = client.broker.vhosts["/"].queues["q"]
    assert (q.message_count, q.unacked_count) == (0, 0)


def test_recover_requeue(client: Client) -> None:
    client.declare_queue(1, "q")
    fill(client, "q", 2)
    client.consume(1, "q", tag="c")
    out = client.send(1, commands.Basic.Recover(requeue=True))
    assert len(methods(out, commands.Basic.RecoverOk)) == 1
    ds = deliveries(out)
    assert [(d.body, d.method.delivery_tag, d.method.redelivered) for d in ds] == [
        (b"m0", 3, True), (b"m1", 4, True)]


def test_recover_without_requeue_is_not_implemented(client: Client) -> None:
    close = connection_close(client.send(1, commands.Basic.Recover(requeue=False)))
    assert (close.reply_code, close.reply_text) == (540, "NOT_IMPLEMENTED - requeue=false")


def test_qos_prefetch_size_is_not_implemented(client: Client) -> None:
    close = connection_close(client.send(1, commands.Basic.Qos(prefetch_size=10)))
    assert (close.reply_code, close.reply_text) == (540, "NOT_IMPLEMENTED - prefetch_size!=0 (10)")


# ---- content -------------------------------------------------------------------------------


def test_properties_arrive_byte_identical(client: Client) -> None:
    props = commands.Basic.Properties(
        content_type="application/octet-stream", content_encoding="gzip", delivery_mode=1,
        priority=7, correlation_id="corr", reply_to="rq", expiration="60000",
        message_id="id-1", timestamp=datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC), message_type="t",
        user_id="guest", app_id="tests",
        headers={"int": 5, "neg": -40000, "big": 2**40, "str": "välue", "bool": False,
                 "float": 1.25, "dec": Decimal("3.14"), "none": None,
                 "table": {"x": 1, "y": ["a", 2]}, "list": [1, "b", True],
                 "bytes": bytearray(b"\x00\xff")})
    client.declare_queue(1, "q")
    client.consume(1, "q")
    (d,) = deliveries(client.publish(1, "", "q", b"body", properties=props))
    assert d.properties_raw == props.marshal()
    assert d.properties == props


def test_non_canonical_property_bytes_are_forwarded_verbatim(client: Client) -> None:
    table = b"\x01nI\x00\x00\x00\x05" + b"\x01sS\x00\x00\x00\x01v"  # 5 as 'I', not 'b'
    raw_props = struct.pack(">HI", 0x2000, len(table)) + table
    header = struct.pack(">HHQ", 60, 0, 2) + raw_props
    data = (pamqp_frame.marshal(commands.Basic.Publish(routing_key="q"), 1)
            + struct.pack(">BHI", 2, 1, len(header)) + header + b"\xce"
            + pamqp_frame.marshal(ContentBody(b"hi"), 1))
    client.declare_queue(1, "q")
    client.consume(1, "q")
    (d,) = deliveries(client.send_bytes(data))
    assert d.properties_raw == raw_props
    assert d.properties.headers == {"n": 5, "s": "v"}


def test_body_split_over_frames_is_reassembled_and_resplit(make_client) -> None:
    publisher = make_client(frame_max=4096)
    consumer = make_client(frame_max=8192)
    consumer.declare_queue(1, "q")
    consumer.consume(1, "q")
    body = bytes(range(256)) * 80  # 20480 bytes: 6 frames in, 3 frames out
    assert publisher.publish(1, "", "q", body) == []
    (d,) = deliveries(consumer.read())
    assert d.body == body
    assert d.body_frames == 3
    assert max(len(r) for r in consumer.raw) <= 8192


def test_empty_body_has_no_body_frame(client: Client) -> None:
    client.declare_queue(1, "q")
    client.consume(1, "q")
    out = client.publish(1, "", "q", b"")
    assert [type(f) for _, f in out] == [commands.Basic.Deliver, ContentHeader]
    assert deliveries(out)[0].body == b""


@pytest.mark.parametrize("case", ["body_before_header", "method_before_header",
                                  "header_without_publish"])
def test_content_frames_out_of_order_are_unexpected(client: Client, case: str) -> None:
    client.declare_queue(1, "q")
    publish = pamqp_frame.marshal(commands.Basic.Publish(routing_key="q"), 1)
    header = pamqp_frame.marshal(ContentHeader(0, 5, commands.Basic.Properties()), 1)
    body = pamqp_frame.marshal(ContentBody(b"hello"), 1)
    data, text = {
        "body_before_header": (publish + body, "UNEXPECTED_FRAME - expected content header for "
                               "class 60, got non content header frame instead"),
        "method_before_header": (publish + pamqp_frame.marshal(commands.Queue.Declare(queue="x"), 1),
                                 "UNEXPECTED_FRAME - expected content header for class 60, "
                                 "got non content header frame instead"),
        "header_without_publish": (header + body, "UNEXPECTED_FRAME - expected method frame, "
                                   "got non method frame instead"),
    }[case]
    close = connection_close(client.send_bytes(data))
    assert (close.reply_code, close.reply_text) == (505, text)
    assert client.broker.vhosts["/"].queues["q"].message_count == 0


@pytest.mark.parametrize("second", ["body", "method"])
def test_unexpected_content_frame_reports_basic_publish(client: Client, second: str) -> None:
    publish = pamqp_frame.marshal(commands.Basic.Publish(routing_key="q"), 1)
    extra = (pamqp_frame.marshal(ContentBody(b"hello"), 1) if second == "body"
             else pamqp_frame.marshal(commands.Queue.Declare(queue="x"), 1))
    close = connection_close(client.send_bytes(publish + extra))
    assert (close.class_id, close.method_id) == (60, 40)


def test_content_header_of_another_class_is_unexpected(client: Client) -> None:
    client.declare_queue(1, "q")
    publish = pamqp_frame.marshal(commands.Basic.Publish(routing_key="q"), 1)
    header = struct.pack(">HHQH", 50, 0, 0, 0)
    data = publish + struct.pack(">BHI", 2, 1, len(header)) + header + b"\xce"
    close = connection_close(client.send_bytes(data))
    assert (close.reply_code, close.reply_text) == (
        505, "UNEXPECTED_FRAME - expected content header for class 60, got one for class 50 "
        "instead")




@pytest.mark.parametrize("method", [
    commands.Connection.Close(reply_code=200, reply_text="x", class_id=0, method_id=0),
    commands.Connection.Blocked(reason="x"),
    commands.Queue.DeclareOk(queue="q", message_count=0, consumer_count=0),
    commands.Basic.ConsumeOk(consumer_tag="t"),
    commands.Confirm.SelectOk(),
    commands.Channel.OpenOk(),
], ids=lambda m: m.name)
def test_methods_a_client_may_not_send_on_a_channel_are_503(client: Client, method) -> None:
    """RabbitMQ 3.10.8 (checked with raw frames): 503 "unimplemented method" on the
    connection."""
    close = connection_close(client.send(1, method))
    assert (close.reply_code, close.reply_text) == (503, "COMMAND_INVALID - unimplemented method")
