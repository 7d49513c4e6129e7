"""Exchange class methods and routing through a vhost (direct, fanout, topic, headers, default
exchange, exchange-to-exchange bindings, alternate exchanges), as a client sees them.

Reference: AMQP 0-9-1 spec 1.6, 1.7.2.3, 3.1.3; RabbitMQ 3.10-3.13 ``rabbit_channel`` and
``rabbit_exchange`` (reply texts); https://www.rabbitmq.com/docs/e2e, /docs/ae.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from conftest import Client, channel_close, connection_close, deliveries
from pamqp import commands

DEFAULT_X = "ACCESS_REFUSED - operation not permitted on the default exchange"


def count(c: Client, queue: str) -> int:
    return c.broker.vhosts["/"].queues[queue].message_count


def queues_with(c: Client, names: list[str], publish: tuple[str, str], **kw: Any) -> list[str]:
    """Publish once, return the queues (of ``names``) that received a message (then purge)."""
    exchange, rk = publish
    assert c.publish(1, exchange, rk, b"x", **kw) == []
    got = [n for n in names if count(c, n)]
    for n in names:
        assert count(c, n) in (0, 1), f"{n} got {count(c, n)} copies"
        c.broker.vhosts["/"].queues[n].purge()
    return got


def declare_queues(c: Client, *names: str) -> list[str]:
    for n in names:
        c.declare_queue(1, n)
    return list(names)


# ---- Exchange.Declare ----------------------------------------------------------------------


def test_declare_and_redeclare(client: Client) -> None:
    client.declare_exchange(1, "x", "topic", durable=True)
    client.declare_exchange(1, "x", "topic", durable=True)
    client.declare_exchange(1, "x", passive=True)
    x = client.broker.vhosts["/"].exchanges["x"]
    assert (x.type_name, x.durable) == ("topic", True)


def test_passive_declare_of_missing_exchange(client: Client) -> None:
    out = client.send(1, commands.Exchange.Declare(exchange="x", passive=True))
    close = channel_close(out)
    assert (close.reply_code, close.reply_text) == (404, "NOT_FOUND - no exchange 'x' in vhost '/'")
    assert (close.class_id, close.method_id) == (40, 10)


@pytest.mark.parametrize(("kw", "text"), [
    ({"exchange_type": "fanout"}, "inequivalent arg 'type' for exchange 'x' in vhost '/': "
                                  "received 'fanout' but current is 'direct'"),
    ({"durable": True}, "inequivalent arg 'durable' for exchange 'x' in vhost '/': "
                        "received 'true' but current is 'false'"),
    ({"auto_delete": True}, "inequivalent arg 'auto_delete' for exchange 'x' in vhost '/': "
                            "received 'true' but current is 'false'"),
    ({"internal": True}, "inequivalent arg 'internal' for exchange 'x' in vhost '/': "
                         "received 'true' but current is 'false'"),
    ({"arguments": {"alternate-exchange": "ae"}},
     "inequivalent arg 'alternate-exchange' for exchange 'x' in vhost '/': received the value "
     "'ae' of type 'longstr' but current is none"),
])
def test_inequivalent_redeclare(client: Client, kw: dict[str, Any], text: str) -> None:
    client.declare_exchange(1, "x", "direct")
    args = {"exchange": "x", "exchange_type": "direct", **kw}
    close = channel_close(client.send(1, commands.Exchange.Declare(**args)))
    assert (close.reply_code, close.reply_text) == (406, "PRECONDITION_FAILED - " + text)


def test_predeclared_exchanges(client: Client) -> None:
    for name, kind in (("amq.direct", "direct"), ("amq.fanout", "fanout"),
                       ("amq.topic", "topic"), ("amq.headers", "headers"),
                       ("amq.match", "headers")):
        client.declare_exchange(1, name, kind, durable=True)
    close = channel_close(client.send(1, commands.Exchange.Declare(
        exchange="amq.direct", exchange_type="direct")))
    assert close.reply_text == ("PRECONDITION_FAILED - inequivalent arg 'durable' for exchange "
                                "'amq.direct' in vhost '/': received 'false' but current is 'true'")


def test_reserved_exchange_name_prefix(client: Client) -> None:
    out = client.send(1, commands.Exchange.Declare(exchange="amq.foo", exchange_type="direct"))
    close = channel_close(out)
    assert (close.reply_code, close.reply_text) == (
        403, "ACCESS_REFUSED - exchange name 'amq.foo' contains reserved prefix 'amq.*'")


@pytest.mark.parametrize("method", [
    commands.Exchange.Declare(exchange="", exchange_type="direct"),
    commands.Exchange.Declare(exchange="", passive=True),
    commands.Exchange.Delete(exchange=""),
    commands.Queue.Bind(queue="q", exchange="", routing_key="q"),
    commands.Queue.Unbind(queue="q", exchange="", routing_key="q"),
    commands.Exchange.Bind(destination="x", source="", routing_key="k"),
    commands.Exchange.Bind(destination="", source="x", routing_key="k"),
], ids=lambda m: m.name)
def test_default_exchange_is_off_limits(client: Client, method: Any) -> None:
    client.declare_queue(1, "q")
    client.declare_exchange(1, "x")
    close = channel_close(client.send(1, method))
    assert (close.reply_code, close.reply_text) == (403, DEFAULT_X)


def test_unknown_exchange_type_closes_the_connection(client: Client) -> None:
    out = client.send(1, commands.Exchange.Declare(exchange="x", exchange_type="foo"))
    close = connection_close(out)
    assert (close.reply_code, close.reply_text) == (
        503, "COMMAND_INVALID - unknown exchange type 'foo'")
    assert (close.class_id, close.method_id) == (40, 10)


def test_unknown_type_on_redeclare_is_checked_first(client: Client) -> None:
    client.declare_exchange(1, "x", "direct")
    out = client.send(1, commands.Exchange.Declare(exchange="x", exchange_type="foo"))
    close = connection_close(out)
    assert (close.reply_code, close.reply_text) == (
        503, "COMMAND_INVALID - unknown exchange type 'foo'")


# ---- Exchange.Delete -----------------------------------------------------------------------


def test_delete_if_unused(client: Client) -> None:
    client.declare_exchange(1, "x")
    client.declare_queue(1, "q")
    client.bind(1, "q", "x", "k")
    close = channel_close(client.send(1, commands.Exchange.Delete(exchange="x", if_unused=True)))
    assert (close.reply_code, close.reply_text) == (
        406, "PRECONDITION_FAILED - exchange 'x' in vhost '/' in use")
    client.open_channel(2)
    client.call(2, commands.Queue.Unbind(queue="q", exchange="x", routing_key="k"),
                commands.Queue.UnbindOk)
    client.call(2, commands.Exchange.Delete(exchange="x", if_unused=True),
                commands.Exchange.DeleteOk)
    assert "x" not in client.broker.vhosts["/"].exchanges


def test_delete_missing_exchange_is_ok(client: Client) -> None:
    client.call(1, commands.Exchange.Delete(exchange="nope"), commands.Exchange.DeleteOk)


def test_delete_system_exchange_is_refused(client: Client) -> None:
    close = channel_close(client.send(1, commands.Exchange.Delete(exchange="amq.direct")))
    assert (close.reply_code, close.reply_text) == (
        403, "ACCESS_REFUSED - deletion of system exchange 'amq.direct' in vhost '/' not allowed")


def test_delete_missing_system_exchange_is_refused(client: Client) -> None:
    close = channel_close(client.send(1, commands.Exchange.Delete(exchange="amq.nope")))
    assert (close.reply_code, close.reply_text) == (
        403, "ACCESS_REFUSED - deletion of system exchange 'amq.nope' in vhost '/' not allowed")


def test_bind_to_missing_things(client: Client) -> None:
    client.declare_queue(1, "q")
    close = channel_close(client.send(1, commands.Queue.Bind(queue="q", exchange="nope")))
    assert (close.reply_code, close.reply_text) == (404, "NOT_FOUND - no exchange 'nope' in vhost '/'")
    client.open_channel(2)
    close = channel_close(client.send(2, commands.Queue.Bind(queue="nope", exchange="amq.direct")))
    assert (close.reply_code, close.reply_text) == (404, "NOT_FOUND - no queue 'nope' in vhost '/'")


# ---- routing -------------------------------------------------------------------------------


def test_direct_routing(client: Client) -> None:
    names = declare_queues(client, "q1", "q2", "q3")
    client.declare_exchange(1, "d", "direct")
    client.bind(1, "q1", "d", "a")
    client.bind(1, "q2", "d", "b")
    client.bind(1, "q3", "d", "a")
    assert queues_with(client, names, ("d", "a")) == ["q1", "q3"]
    assert queues_with(client, names, ("d", "b")) == ["q2"]
    assert queues_with(client, names, ("d", "c")) == []


def test_fanout_routing_ignores_the_key(client: Client) -> None:
    names = declare_queues(client, "q1", "q2")
    client.declare_exchange(1, "f", "fanout")
    client.bind(1, "q1", "f", "whatever")
    client.bind(1, "q2", "f")
    assert queues_with(client, names, ("f", "anything")) == ["q1", "q2"]


def test_topic_routing(client: Client) -> None:
    names = declare_queues(client, "q1", "q2", "q3")
    client.declare_exchange(1, "t", "topic")
    client.bind(1, "q1", "t", "a.*.c")
    client.bind(1, "q2", "t", "a.#")
    client.bind(1, "q3", "t", "#.z")
    assert queues_with(client, names, ("t", "a.b.c")) == ["q1", "q2"]
    assert queues_with(client, names, ("t", "a")) == ["q2"]
    assert queues_with(client, names, ("t", "b.z")) == ["q3"]
    assert queues_with(client, names, ("t", "a.b.b.c")) == ["q2"]


def test_headers_routing(client: Client) -> None:
    names = declare_queues(client, "all", "any")
    client.declare_exchange(1, "h", "headers")
    client.bind(1, "all", "h", arguments={"x-match": "all", "a": 1, "b": "x"})
    client.bind(1, "any", "h", arguments={"x-match": "any", "a": 1, "b": "x"})

    def hdr(headers: dict[str, Any]) -> dict[str, Any]:
        return {"properties": commands.Basic.Properties(headers=headers)}

    assert queues_with(client, names, ("h", ""), **hdr({"a": 1, "b": "x"})) == ["all", "any"]
    assert queues_with(client, names, ("h", ""), **hdr({"a": 1})) == ["any"]
    assert queues_with(client, names, ("h", ""), **hdr({"a": 2, "b": "y"})) == []
    assert queues_with(client, names, ("h", "")) == []  # no headers at all


def test_default_exchange_routes_by_queue_name(client: Client) -> None:
    names = declare_queues(client, "q1", "q2")
    assert queues_with(client, names, ("", "q2")) == ["q2"]
    assert queues_with(client, names, ("", "nope")) == []


def test_queue_bound_twice_gets_one_copy(client: Client) -> None:
    names = declare_queues(client, "q")
    client.bind(1, "q", "amq.topic", "a.*")
    client.bind(1, "q", "amq.topic", "#")
    client.bind(1, "q", "amq.fanout", "k1")
    client.bind(1, "q", "amq.fanout", "k2")
    assert queues_with(client, names, ("amq.topic", "a.b")) == ["q"]
    assert queues_with(client, names, ("amq.fanout", "")) == ["q"]


def test_unbind_stops_routing(client: Client) -> None:
    names = declare_queues(client, "q")
    client.bind(1, "q", "amq.direct", "k")
    client.call(1, commands.Queue.Unbind(queue="q", exchange="amq.direct", routing_key="k"),
                commands.Queue.UnbindOk)
    assert queues_with(client, names, ("amq.direct", "k")) == []


def test_exchange_to_exchange_binding(client: Client) -> None:
    names = declare_queues(client, "q1", "q2")
    client.declare_exchange(1, "src", "topic")
    client.declare_exchange(1, "dst", "direct")
    client.call(1, commands.Exchange.Bind(destination="dst", source="src", routing_key="a.*"),
                commands.Exchange.BindOk)
    client.bind(1, "q1", "dst", "a.b")
    client.bind(1, "q2", "dst", "a.c")
    assert queues_with(client, names, ("src", "a.b")) == ["q1"]
    assert queues_with(client, names, ("src", "b.b")) == []
    client.call(1, commands.Exchange.Unbind(destination="dst", source="src", routing_key="a.*"),
                commands.Exchange.UnbindOk)
    assert queues_with(client, names, ("src", "a.b")) == []


def test_exchange_binding_cycle_delivers_one_copy(client: Client) -> None:
    names = declare_queues(client, "q")
    for x in ("x1", "x2", "x3"):
        client.declare_exchange(1, x, "fanout")
    for src, dst in (("x1", "x2"), ("x2", "x3"), ("x3", "x1"), ("x2", "x1")):
        client.call(1, commands.Exchange.Bind(destination=dst, source=src),
                    commands.Exchange.BindOk)
    client.bind(1, "q", "x1")
    client.bind(1, "q", "x3")
    for x in ("x1", "x2", "x3"):
        assert queues_with(client, names, (x, "")) == ["q"]


def test_alternate_exchange(client: Client) -> None:
    names = declare_queues(client, "main", "unrouted")
    client.declare_exchange(1, "ae", "fanout")
    client.bind(1, "unrouted", "ae")
    client.declare_exchange(1, "x", "direct", arguments={"alternate-exchange": "ae"})
    client.bind(1, "main", "x", "k")
    assert queues_with(client, names, ("x", "k")) == ["main"]
    assert queues_with(client, names, ("x", "other")) == ["unrouted"]
    # routed through the alternate exchange: not returned even when mandatory
    assert queues_with(client, names, ("x", "other"), mandatory=True) == ["unrouted"]


def test_missing_alternate_exchange_drops(client: Client) -> None:
    names = declare_queues(client, "q")
    client.declare_exchange(1, "x", "direct", arguments={"alternate-exchange": "missing"})
    assert queues_with(client, names, ("x", "k")) == []


def test_mandatory_unroutable_is_returned_with_its_content(client: Client) -> None:
    props = commands.Basic.Properties(message_id="m1", headers={"h": 1})
    client.declare_exchange(1, "x", "direct")
    out = client.publish(1, "x", "nowhere", b"payload", properties=props, mandatory=True)
    (ret,) = deliveries(out, commands.Basic.Return)
    assert (ret.method.reply_code, ret.method.reply_text) == (312, "NO_ROUTE")
    assert (ret.method.exchange, ret.method.routing_key) == ("x", "nowhere")
    assert (ret.body, ret.properties_raw) == (b"payload", props.marshal())
    assert client.publish(1, "x", "nowhere", b"quiet") == []  # not mandatory: dropped


def test_publish_to_missing_exchange(client: Client) -> None:
    close = channel_close(client.publish(1, "nope", "k", b"x"))
    assert (close.reply_code, close.reply_text) == (404, "NOT_FOUND - no exchange 'nope' in vhost '/'")
    assert (close.class_id, close.method_id) == (60, 40)


def test_publish_to_internal_exchange(client: Client) -> None:
    client.declare_exchange(1, "ix", "fanout", internal=True)
    close = channel_close(client.publish(1, "ix", "", b"x"))
    assert (close.reply_code, close.reply_text) == (
        403, "ACCESS_REFUSED - cannot publish to internal exchange 'ix' in vhost '/'")


def test_auto_delete_exchange_goes_with_its_last_binding(client: Client) -> None:
    declare_queues(client, "q")
    client.declare_exchange(1, "ad", "fanout", auto_delete=True)
    client.bind(1, "q", "ad")
    client.call(1, commands.Queue.Unbind(queue="q", exchange="ad"), commands.Queue.UnbindOk)
    assert "ad" not in client.broker.vhosts["/"].exchanges


# ---- unbind is idempotent (RabbitMQ 3.x; checked against 3.10.8 with pika) ---------------


@pytest.mark.parametrize("unbind", [
    commands.Queue.Unbind(queue="missing-q", exchange="amq.direct", routing_key="k"),
    commands.Queue.Unbind(queue="q", exchange="missing-x", routing_key="k"),
    commands.Queue.Unbind(queue="q", exchange="amq.direct", routing_key="never-bound"),
    commands.Exchange.Unbind(destination="missing-x", source="amq.direct", routing_key="k"),
    commands.Exchange.Unbind(destination="amq.fanout", source="missing-x", routing_key="k"),
    commands.Exchange.Unbind(destination="amq.fanout", source="amq.direct", routing_key="k"),
], ids=["missing-queue", "missing-exchange", "missing-binding", "missing-destination",
        "missing-source", "missing-e2e-binding"])
def test_unbind_of_missing_things_is_ok(client: Client, unbind: Any) -> None:
    names = declare_queues(client, "q")
    client.bind(1, "q", "amq.direct", "k")
    reply = commands.Queue.UnbindOk if isinstance(unbind, commands.Queue.Unbind) \
        else commands.Exchange.UnbindOk
    client.call(1, unbind, reply)
    # nothing else changed and the channel is still open
    assert queues_with(client, names, ("amq.direct", "k")) == ["q"]


def test_bind_to_missing_queue_is_still_404(client: Client) -> None:
    frames = client.send(1, commands.Queue.Bind(queue="missing-q", exchange="amq.direct",
                                                routing_key="k"))
    close = channel_close(frames)
    assert (close.reply_code, close.reply_text) == (
        404, "NOT_FOUND - no queue 'missing-q' in vhost '/'")


def test_unbind_from_default_exchange_is_still_403(client: Client) -> None:
    close = channel_close(client.send(1, commands.Queue.Unbind(
        queue="missing-q", exchange="", routing_key="k")))
    assert (close.reply_code, close.reply_text) == (
        403, "ACCESS_REFUSED - operation not permitted on the default exchange")


def test_unbind_checks_exclusivity_only_when_the_binding_exists(
        make_client: Callable[..., Client]) -> None:
    owner, other = make_client(), make_client()
    owner.declare_queue(1, "excl", exclusive=True)
    owner.bind(1, "excl", "amq.direct", "k")
    other.call(1, commands.Queue.Unbind(queue="excl", exchange="amq.direct",
                                        routing_key="other"), commands.Queue.UnbindOk)
    close = channel_close(other.send(1, commands.Queue.Unbind(
        queue="excl", exchange="amq.direct", routing_key="k")))
    assert close.reply_code == 405 and "RESOURCE_LOCKED" in close.reply_text
