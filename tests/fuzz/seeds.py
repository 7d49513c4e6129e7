"""Well-formed session inputs that reach deep states: the atheris harness starts from these
(plus tests/fuzz/corpus/), and tests/test_fuzz_connection.py checks that each passes the
oracle as it is."""

from __future__ import annotations

from pamqp import commands

from tests.fuzz import frames as F
from tests.fuzz import harness as H

SCENARIO = {name: i for i, (name, _) in enumerate(H.SCENARIOS)}


def _m(ch: int, cls: type, **kw: object) -> bytes:
    return F.method(ch, cls, **kw)


def seed_inputs() -> list[tuple[str, bytes]]:
    B, Q, X, C, T = commands.Basic, commands.Queue, commands.Exchange, commands.Confirm, commands.Tx
    props = F.properties_raw(commands.Basic.Properties(
        headers={"k": "v", "CC": ["fz.dead"], "BCC": ["fz.prio"]}, delivery_mode=2, priority=3,
        expiration="5000", content_type="text/plain"))
    seeds = {
        "handshake": H.encode_input(SCENARIO["raw"], b"".join(F.handshake())
                                    + _m(1, commands.Channel.Open)),
        "handshake-bytewise": H.encode_input(SCENARIO["raw"], b"".join(F.handshake()), chunk=1),
        "topology": H.encode_input(SCENARIO["channel"], b"".join((
            _m(1, X.Declare, exchange="fz.x", exchange_type="topic", auto_delete=True),
            _m(1, Q.Declare, queue="fz.q", arguments={"x-max-length": 3, "x-message-ttl": 50}),
            _m(1, Q.Bind, queue="fz.q", exchange="fz.x", routing_key="a.*"),
            _m(1, X.Bind, destination="fz.fanout", source="fz.x", routing_key="#"),
            _m(1, Q.Purge, queue="fz.q"), _m(1, Q.Unbind, queue="fz.q", exchange="fz.x",
                                             routing_key="a.*"),
            _m(1, X.Unbind, destination="fz.fanout", source="fz.x", routing_key="#"),
            _m(1, Q.Delete, queue="fz.q"), _m(1, X.Delete, exchange="fz.x"),
        ))),
        "publish-consume-ack": H.encode_input(SCENARIO["channel"], b"".join((
            _m(1, B.Qos, prefetch_count=2), _m(1, C.Select),
            _m(1, B.Consume, queue="fz.shared", consumer_tag="t"),
            F.publish(1, "", "fz.shared", b"hello", props),
            F.publish(1, "fz.topic", "a.b", b"t"), F.publish(1, "fz.headers", "", b"h", props),
            F.publish(1, "fz.ae", "nowhere", b"ae", mandatory=True),
            F.publish(1, "", "fz.prio", b"p", props), F.publish(1, "", "fz.len", b"l1"),
            F.publish(1, "", "fz.len", b"l2"), F.publish(1, "", "fz.len", b"l3"),
            _m(1, B.Ack, delivery_tag=1), _m(1, B.Nack, delivery_tag=2, requeue=True),
            _m(1, B.Reject, delivery_tag=3, requeue=False),
            _m(1, B.Ack, delivery_tag=0, multiple=True), _m(1, B.Cancel, consumer_tag="t"),
        ))),
        "get-recover": H.encode_input(SCENARIO["channel"], b"".join((
            _m(1, B.Get, queue="fz.shared"), _m(1, B.Get, queue="fz.shared", no_ack=True),
            _m(1, B.Recover, requeue=True), _m(1, B.Get, queue="fz.dlx"),
            F.publish(1, "", "fz.dlx", b"d"), _m(1, B.Get, queue="fz.dlx"),
            _m(1, B.Reject, delivery_tag=3, requeue=False),
        ))),
        "tx": H.encode_input(SCENARIO["channel"], b"".join((
            _m(1, T.Select), F.publish(1, "", "fz.shared", b"tx"),
            _m(1, B.Consume, queue="fz.shared", consumer_tag="t"), _m(1, B.Ack, delivery_tag=1),
            _m(1, T.Rollback), _m(1, B.Ack, delivery_tag=2), _m(1, T.Commit),
        ))),
        "busy-close": H.encode_input(SCENARIO["busy"], b"".join((
            F.body(2, b"y" * 90), _m(1, B.Ack, delivery_tag=2, multiple=True),
            _m(2, commands.Channel.Close, reply_code=200),
            _m(3, T.Commit), _m(0, commands.Connection.Close, reply_code=200),
        ))),
        "busy-timeout": H.encode_input(SCENARIO["busy"], b"", advance=25),
        "busy-heartbeat-lost": H.encode_input(SCENARIO["busy"], b"", advance=200),
        "small-frames": H.encode_input(SCENARIO["small"], F.publish(
            1, "", "fz.shared", b"z" * 10000, frame_max=4096) + _m(3, commands.Channel.Open)
            + _m(1, B.Get, queue="fz.shared"), chunk=6, drain=False),
        "reply-to": H.encode_input(SCENARIO["channel"], b"".join((
            _m(1, B.Consume, queue="amq.rabbitmq.reply-to", no_ack=True, consumer_tag="r"),
            F.publish(1, "", "fz.shared", b"rpc", F.properties_raw(commands.Basic.Properties(
                reply_to="amq.rabbitmq.reply-to"))),
            _m(1, B.Cancel, consumer_tag="r"),
        ))),
        "exclusive": H.encode_input(SCENARIO["channel"], b"".join((
            _m(1, Q.Declare, queue="", exclusive=True),
            _m(1, Q.Bind, queue="", exchange="fz.fanout"),
            _m(1, B.Consume, queue="", exclusive=True),
            F.publish(1, "fz.fanout", "", b"fan"),
        ))),
        "sac": H.encode_input(SCENARIO["channel"], b"".join((
            _m(1, B.Consume, queue="fz.sac", consumer_tag="a"),
            _m(1, B.Consume, queue="fz.sac", consumer_tag="b", arguments={"x-priority": 5}),
            F.publish(1, "", "fz.sac", b"s"), _m(1, B.Cancel, consumer_tag="a"),
        ))),
    }
    return sorted(seeds.items())
