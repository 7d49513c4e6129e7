"""Queue class methods, exclusive and auto-delete queues, Basic.Get, and requeueing of
unacknowledged deliveries (reject, channel close, connection loss), as a client sees them.

Reference: AMQP 0-9-1 spec 1.7, RabbitMQ 3.10-3.13 ``rabbit_channel``/``rabbit_amqqueue``
(reply texts).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from conftest import Client, bodies, channel_close, deliveries, only
from pamqp import commands

from broker.broker import Broker

MakeClient = Callable[..., Client]
LOCKED = (
    "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{}' in vhost '/'."
    " It could be originally declared on another connection or the exclusive property value"
    " does not match that of the original declaration."
)


def fill(c: Client, queue: str, n: int, ch: int = 1) -> None:
    for i in range(n):
        assert c.publish(ch, "", queue, f"m{i}".encode()) == []


def get(c: Client, queue: str, ch: int = 1) -> tuple[bytes, bool] | None:
    out = c.send(ch, commands.Basic.Get(queue=queue, no_ack=True))
    ds = deliveries(out)
    if not ds:
        only(out, commands.Basic.GetEmpty)
        return None
    return ds[0].body, ds[0].method.redelivered


def drain(c: Client, queue: str, ch: int = 1) -> list[tuple[bytes, bool]]:
    out = []
    while (m := get(c, queue, ch)) is not None:
        out.append(m)
    return out


# ---- declare -------------------------------------------------------------------------------


def test_server_named_queue(client: Client) -> None:
    ok = client.declare_queue(1, "")
    assert ok.queue.startswith("amq.gen-")
    assert len(ok.queue) == len("amq.gen-") + 22
    assert (ok.message_count, ok.consumer_count) == (0, 0)
    assert client.declare_queue(1, "").queue != ok.queue


def test_declare_ok_counts_ready_messages_and_consumers(make_client: MakeClient) -> None:
    a, b = make_client(), make_client()
    a.declare_queue(1, "q")
    fill(a, "q", 3)
    b.qos(1, 1)
    b.consume(1, "q")  # takes one: two stay ready
    ok = a.declare_queue(1, "q")
    assert (ok.queue, ok.message_count, ok.consumer_count) == ("q", 2, 1)
    ok = a.declare_queue(1, "q", passive=True)
    assert (ok.message_count, ok.consumer_count) == (2, 1)


def test_passive_declare_of_missing_queue(client: Client) -> None:
    close = channel_close(client.send(1, commands.Queue.Declare(queue="q", passive=True)))
    assert (close.reply_code, close.reply_text) == (404, "NOT_FOUND - no queue 'q' in vhost '/'")
    assert (close.class_id, close.method_id) == (50, 10)


@pytest.mark.parametrize(("field", "first", "second", "text"), [
    ("durable", False, True, "received 'true' but current is 'false'"),
    ("durable", True, False, "received 'false' but current is 'true'"),
    ("auto_delete", False, True, "received 'true' but current is 'false'"),
])
def test_redeclare_with_other_flags_is_inequivalent(client: Client, field: str, first: bool,
                                                    second: bool, text: str) -> None:
    client.declare_queue(1, "q", **{field: first})
    close = channel_close(client.send(1, commands.Queue.Declare(queue="q", **{field: second})))
    assert close.reply_code == 406
    assert close.reply_text == (
        f"PRECONDITION_FAILED - inequivalent arg '{field}' for queue 'q' in vhost '/': {text}")


def test_redeclare_with_a_missing_argument_is_inequivalent(client: Client) -> None:
    client.declare_queue(1, "q", arguments={"x-dead-letter-exchange": "dlx"})
    close = channel_close(client.send(1, commands.Queue.Declare(queue="q")))
    assert close.reply_text == (
        "PRECONDITION_FAILED - inequivalent arg 'x-dead-letter-exchange' for queue 'q' in "
        "vhost '/': received none but current is the value 'dlx' of type 'longstr'")


def test_redeclare_with_another_argument_value_is_inequivalent(client: Client) -> None:
    client.declare_queue(1, "q", arguments={"x-message-ttl": 1000})
    out = client.send(1, commands.Queue.Declare(queue="q", arguments={"x-message-ttl": 2000}))
    assert channel_close(out).reply_text == (
        "PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue 'q' in vhost '/': "
        "received '2000' but current is '1000'")


def test_reserved_queue_name_prefix(client: Client) -> None:
    close = channel_close(client.send(1, commands.Queue.Declare(queue="amq.q")))
    assert (close.reply_code, close.reply_text) == (
        403, "ACCESS_REFUSED - queue name 'amq.q' contains reserved prefix 'amq.*'")


def test_empty_queue_name_means_the_last_declared_queue(client: Client) -> None:
    name = client.declare_queue(1, "").queue
    client.call(1, commands.Queue.Bind(queue="", exchange="amq.direct", routing_key="k"),
                commands.Queue.BindOk)
    assert client.publish(1, "amq.direct", "k", b"x") == []
    assert client.broker.vhosts["/"].queues[name].message_count == 1


# ---- exclusive queues ----------------------------------------------------------------------


@pytest.mark.parametrize("method", [
    commands.Queue.Declare(queue="ex"),
    commands.Queue.Declare(queue="ex", exclusive=True),
    commands.Queue.Declare(queue="ex", passive=True),
    commands.Basic.Consume(queue="ex"),
    commands.Basic.Get(queue="ex"),
    commands.Queue.Purge(queue="ex"),
    commands.Queue.Delete(queue="ex"),
    commands.Queue.Bind(queue="ex", exchange="amq.direct", routing_key="k"),
], ids=lambda m: m.name)
def test_exclusive_queue_is_locked_for_other_connections(make_client: MakeClient,
                                                         method: object) -> None:
    owner, other = make_client(), make_client()
    owner.declare_queue(1, "ex", exclusive=True)
    close = channel_close(other.send(1, method))
    assert (close.reply_code, close.reply_text) == (405, LOCKED.format("ex"))
    assert "ex" in owner.broker.vhosts["/"].queues


def test_exclusive_queue_redeclared_non_exclusive_by_its_owner_is_locked(client: Client) -> None:
    client.declare_queue(1, "ex", exclusive=True)
    close = channel_close(client.send(1, commands.Queue.Declare(queue="ex")))
    assert (close.reply_code, close.reply_text) == (405, LOCKED.format("ex"))


def test_non_exclusive_queue_redeclared_exclusive_is_locked(make_client: MakeClient) -> None:
    a, b = make_client(), make_client()
    a.declare_queue(1, "shared")
    close = channel_close(b.send(1, commands.Queue.Declare(queue="shared", exclusive=True)))
    assert (close.reply_code, close.reply_text) == (405, LOCKED.format("shared"))


def test_owner_may_use_its_exclusive_queue(client: Client) -> None:
    client.declare_queue(1, "ex", exclusive=True)
    assert client.declare_queue(1, "ex", exclusive=True).queue == "ex"
    fill(client, "ex", 1)
    assert get(client, "ex") == (b"m0", False)


@pytest.mark.parametrize("how", ["close", "lost"])
def test_exclusive_queue_deleted_with_its_connection(broker: Broker, make_client: MakeClient,
                                                     how: str) -> None:
    owner, other = make_client(), make_client()
    owner.declare_queue(1, "ex", exclusive=True)
    owner.bind(1, "ex", "amq.fanout")
    if how == "close":
        owner.send(0, commands.Connection.Close(reply_code=200, reply_text="", class_id=0,
                                                method_id=0))
    else:
        owner.conn.connection_lost()
    assert "ex" not in broker.vhosts["/"].queues
    assert broker.vhosts["/"].exchanges["amq.fanout"].bindings == {}
    # now anyone may declare it
    assert other.declare_queue(1, "ex").queue == "ex"


# ---- auto-delete ---------------------------------------------------------------------------


def test_auto_delete_queue_goes_after_its_last_consumer(client: Client) -> None:
    queues = client.broker.vhosts["/"].queues
    client.declare_queue(1, "ad", auto_delete=True)
    assert "ad" in queues  # never had a consumer: stays
    client.consume(1, "ad", tag="a")
    client.consume(1, "ad", tag="b")
    client.call(1, commands.Basic.Cancel(consumer_tag="a"), commands.Basic.CancelOk)
    assert "ad" in queues
    client.call(1, commands.Basic.Cancel(consumer_tag="b"), commands.Basic.CancelOk)
    assert "ad" not in queues


def test_auto_delete_queue_goes_when_the_consuming_channel_closes(client: Client) -> None:
    client.open_channel(2)
    client.declare_queue(2, "ad", auto_delete=True)
    client.consume(2, "ad")
    client.send(2, commands.Channel.Close(reply_code=200, reply_text="", class_id=0,
                                          method_id=0))
    assert "ad" not in client.broker.vhosts["/"].queues


# ---- purge and delete ----------------------------------------------------------------------


def test_purge_counts_ready_messages_only(client: Client) -> None:
    client.declare_queue(1, "q")
    fill(client, "q", 4)
    client.send(1, commands.Basic.Get(queue="q"))  # one unacked
    ok = client.call(1, commands.Queue.Purge(queue="q"), commands.Queue.PurgeOk)
    assert ok.message_count == 3
    assert client.call(1, commands.Queue.Purge(queue="q"),
                       commands.Queue.PurgeOk).message_count == 0


def test_purge_missing_queue(client: Client) -> None:
    close = channel_close(client.send(1, commands.Queue.Purge(queue="q")))
    assert (close.reply_code, close.reply_text) == (404, "NOT_FOUND - no queue 'q' in vhost '/'")


def test_delete_counts_messages_and_removes_bindings(client: Client) -> None:
    vhost = client.broker.vhosts["/"]
    client.declare_queue(1, "q")
    client.bind(1, "q", "amq.direct", "k")
    fill(client, "q", 2)
    ok = client.call(1, commands.Queue.Delete(queue="q"), commands.Queue.DeleteOk)
    assert ok.message_count == 2
    assert "q" not in vhost.queues
    assert vhost.exchanges["amq.direct"].bindings == {}


def test_delete_missing_queue_is_ok(client: Client) -> None:
    ok = client.call(1, commands.Queue.Delete(queue="nope"), commands.Queue.DeleteOk)
    assert ok.message_count == 0


def test_delete_if_unused(client: Client) -> None:
    client.declare_queue(1, "q")
    client.consume(1, "q")
    close = channel_close(client.send(1, commands.Queue.Delete(queue="q", if_unused=True)))
    assert (close.reply_code, close.reply_text) == (
        406, "PRECONDITION_FAILED - queue 'q' in vhost '/' in use")
    assert "q" in client.broker.vhosts["/"].queues


def test_delete_if_empty(client: Client) -> None:
    client.declare_queue(1, "q")
    fill(client, "q", 1)
    close = channel_close(client.send(1, commands.Queue.Delete(queue="q", if_empty=True)))
    assert (close.reply_code, close.reply_text) == (
        406, "PRECONDITION_FAILED - queue 'q' in vhost '/' not empty")
    client.open_channel(2)
    get(client, "q", 2)
    assert client.call(2, commands.Queue.Delete(queue="q", if_empty=True, if_unused=True),
                       commands.Queue.DeleteOk).message_count == 0


# ---- requeue when a channel or connection goes away ----------------------------------------


def test_unacked_requeued_in_order_when_the_channel_closes(client: Client) -> None:
    client.declare_queue(1, "q")
    fill(client, "q", 5)
    client.open_channel(2)
    client.qos(2, 3)
    assert bodies(client.consume(2, "q")) == [b"m0", b"m1", b"m2"]
    assert bodies(client.ack(2, 2)) == [b"m3"]
    out = client.send(2, commands.Channel.Close(reply_code=200, reply_text="", class_id=0,
                                                method_id=0))
    assert [type(f) for _, f in out] == [commands.Channel.CloseOk]
    assert drain(client, "q") == [(b"m0", True), (b"m2", True), (b"m3", True),
                                  (b"m4", False)]


def test_unacked_requeued_when_the_channel_is_closed_by_an_error(client: Client) -> None:
    client.declare_queue(1, "q")
    fill(client, "q", 2)
    client.open_channel(2)
    client.consume(2, "q")
    channel_close(client.ack(2, 42))
    assert drain(client, "q") == [(b"m0", True), (b"m1", True)]


def test_unacked_requeued_when_the_connection_is_lost(make_client: MakeClient) -> None:
    a, b = make_client(), make_client()
    a.declare_queue(1, "q")
    fill(a, "q", 3)
    assert bodies(a.consume(1, "q")) == [b"m0", b"m1", b"m2"]
    b.consume(1, "q", tag="b")
    assert b.read() == []
    a.conn.connection_lost()
    ds = deliveries(b.read())
    assert [(d.body, d.method.redelivered, d.method.delivery_tag) for d in ds] == [
        (b"m0", True, 1), (b"m1", True, 2), (b"m2", True, 3)]


def test_basic_get_unacked_requeued_when_the_connection_closes(make_client: MakeClient) -> None:
    a, b = make_client(), make_client()
    a.declare_queue(1, "q")
    fill(a, "q", 2)
    a.send(1, commands.Basic.Get(queue="q"))
    a.send(0, commands.Connection.Close(reply_code=200, reply_text="", class_id=0,
                                        method_id=0))
    assert drain(b, "q") == [(b"m0", True), (b"m1", False)]


# ---- Basic.Get and requeue positions --------------------------------------------------------


def test_reject_requeue_goes_back_to_its_original_position(client: Client) -> None:
    client.declare_queue(1, "q")
    fill(client, "q", 3)
    for _ in range(2):
        client.send(1, commands.Basic.Get(queue="q"))
    client.send(1, commands.Basic.Reject(delivery_tag=2, requeue=True))
    client.send(1, commands.Basic.Reject(delivery_tag=1, requeue=True))
    got = [deliveries(client.send(1, commands.Basic.Get(queue="q", no_ack=True)))[0]
           for _ in range(3)]
    assert [(d.body, d.method.redelivered) for d in got] == [
        (b"m0", True), (b"m1", True), (b"m2", False)]


def test_basic_get_ok_and_get_empty(client: Client) -> None:
    client.declare_queue(1, "q")
    fill(client, "q", 2)
    (d,) = deliveries(client.send(1, commands.Basic.Get(queue="q")))
    assert isinstance(d.method, commands.Basic.GetOk)
    assert (d.body, d.method.delivery_tag, d.method.redelivered) == (b"m0", 1, False)
    assert (d.method.exchange, d.method.routing_key, d.method.message_count) == ("", "q", 1)
    (d,) = deliveries(client.send(1, commands.Basic.Get(queue="q", no_ack=True)))
    assert (d.body, d.method.delivery_tag, d.method.message_count) == (b"m1", 2, 0)
    only(client.send(1, commands.Basic.Get(queue="q")), commands.Basic.GetEmpty)
    assert client.ack(1, 1) == []
    assert channel_close(client.ack(1, 2)).reply_code == 406  # no_ack get: nothing to ack


def test_basic_get_missing_queue(client: Client) -> None:
    close = channel_close(client.send(1, commands.Basic.Get(queue="nope")))
    assert (close.reply_code, close.reply_text) == (404, "NOT_FOUND - no queue 'nope' in vhost '/'")


def test_persistent_flag_read_without_decoding_matches_pamqp() -> None:
    from pamqp.header import ContentHeader

    from queue_store.message import Message

    for props in (commands.Basic.Properties(delivery_mode=2),
                  commands.Basic.Properties(delivery_mode=1, content_type="text/plain"),
                  commands.Basic.Properties(content_type="a", content_encoding="gzip",
                                            headers={"k": "v", "n": 1}, delivery_mode=2),
                  commands.Basic.Properties(headers={"x": [1, 2]}, delivery_mode=1),
                  commands.Basic.Properties(priority=3)):
        raw = ContentHeader(0, 0, props).marshal()[12:]
        fast = Message("", "rk", b"", raw, b"")
        slow = Message("", "rk", b"", raw, b"")
        assert fast.persistent == (slow.properties.delivery_mode == 2)


def test_a_plain_queue_keeps_its_attributes_in_fast_storage() -> None:
    """At most MAX_INSTANCE_ATTRIBUTES attributes (CPython 3.11's inline limit): one more
    costs every publish and delivery ~2% in instructions (queue_store/queue.py)."""
    from queue_store.queue import MAX_INSTANCE_ATTRIBUTES, Queue
    from vhosts.vhost import VirtualHost

    for q in (Queue("q", "/"), VirtualHost("/").declare_queue("d", durable=True,
                                                              arguments={"x-max-length": 5})):
        assert len(q.__dict__) <= MAX_INSTANCE_ATTRIBUTES, sorted(q.__dict__)
