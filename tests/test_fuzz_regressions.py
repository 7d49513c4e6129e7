"""Bugs the fuzzers found, each as a minimal reproducer (strict xfail until fixed: when a fix
lands the test passes, xfail(strict) turns that into a failure, and the marker comes off).

The same inputs are in tests/fuzz/corpus/ (replayed by tests/test_fuzz_connection.py) and
``tests.fuzz.harness.KNOWN_BUGS`` keeps the long fuzz runs from stopping at them.
"""

from __future__ import annotations

import struct

import pytest
from pamqp import commands

from amqp_server.connection import Connection
from tests.fuzz import frames as F
from tests.fuzz import harness as H

# pamqp warns when it decodes a deprecated method (Basic.RecoverAsync) a test sends
pytestmark = pytest.mark.filterwarnings("ignore:This command is deprecated:DeprecationWarning")

REASON = {bug.id: bug.reason for bug in H.KNOWN_BUGS}


def peer_on_new_broker(**config: object) -> tuple[H.Peer, object, H.FakeClock]:
    clock = H.FakeClock()
    broker = H.make_broker(clock, **config)
    return H.Peer(broker, clock, "p").handshake(heartbeat=0).open(1), broker, clock


def connection_close(frames: list[tuple[int, int, object]]) -> commands.Connection.Close | None:
    found = [v for _, _, v in frames if isinstance(v, commands.Connection.Close)]
    return found[0] if found else None


# ---- fixed: a wrong protocol header leaked the connection -----------------------------------


def test_wrong_protocol_header_does_not_leak_the_connection() -> None:
    clock = H.FakeClock()
    broker = H.make_broker(clock)
    conn = Connection(broker, peer=("127.0.0.1", 1), clock=clock)
    conn.receive_data(b"HTTP/1.1 ")
    assert conn.data_to_send() == F.PROTOCOL_HEADER and conn.closed
    conn.connection_lost()  # the transport closes the socket
    assert conn not in broker.connections


# ---- fixed: malformed content properties escaped as 541 -------------------------------------


def _bcc_props() -> bytes:
    def longstr(raw: bytes, length: int | None = None) -> bytes:
        return b"S" + struct.pack(">I", len(raw) if length is None else length) + raw

    def array(*items: bytes) -> bytes:
        body = b"".join(items)
        return b"A" + struct.pack(">I", len(body)) + body

    # {"BCC": ["q"], "k": [<a string claiming 100 bytes>], "z": <type '#'>}: pamqp reads the
    # string past its array and never sees "z"; the byte-level re-parse for BCC stopped at it
    entries = (F.shortstr("BCC") + array(longstr(b"q")) + F.shortstr("k")
               + array(longstr(b"v", 100)) + F.shortstr("z") + b"#")
    return b"\x20\x00" + struct.pack(">I", len(entries)) + entries


BAD_HEADERS = b"\x20\x00\x00\x00\x00\x05\x01aZZZ"  # headers {"a": <unknown type 'Z'>}
MALFORMED = {
    # (exchange, routing key, property flags + list): the flag says a property follows, and
    # it does not (or does not decode). Each was a 541 INTERNAL_ERROR, from Message.properties
    # decoding lazily on routing, or from the BCC / dead-letter re-parse.
    "expiration flag, no value": ("", "fz.shared", b"\x01\x00"),
    "priority flag, no value, priority queue": ("", "fz.prio", b"\x08\x00"),
    "headers flag, no table, headers exchange": ("fz.headers", "", b"\x20\x00"),
    "headers with unknown field type, CC routing": (
        "", "fz.shared", b"\x20\x00\x00\x00\x00\x0a\x02CCA\x00\x00\x00\x00\x01kZ"),
    "headers table nested 600 deep, headers exchange": (
        "fz.headers", "", b"\x20\x00" + F.nested_table(600)),
    "BCC with a string running past its array": ("", "fz.shared", _bcc_props()),
    "bad headers into a TTL queue with DLX": ("", "fz.ttl", BAD_HEADERS),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_properties_are_a_protocol_error_not_541(case: str) -> None:
    exchange, routing_key, props = MALFORMED[case]
    outcome = H.run_input(H.encode_input(5, F.publish(1, exchange, routing_key, b"x",
                                                      props=props), advance=5),
                          allow_known=False)
    assert not outcome.problems, outcome.problems
    assert outcome.codes == [502]
    assert "malformed content properties" in outcome.connection_close.reply_text


@pytest.mark.parametrize("depth", [1, 32, 64, 65, 200])
def test_headers_nesting_limit(depth: int) -> None:
    """Message headers may nest tables/arrays 64 deep; deeper is 502 SYNTAX_ERROR."""
    props = b"\x20\x00" + F.nested_table(depth)
    outcome = H.run_input(H.encode_input(5, F.publish(1, "fz.headers", "", b"x", props=props)),
                          allow_known=False)
    assert not outcome.problems, outcome.problems
    assert outcome.codes == ([] if depth <= 64 else [502])


def test_rejected_publish_of_bad_headers_leaves_other_connections_alone() -> None:
    """Was: the message got in, and the *consumer* that rejected it into a DLX got 541."""
    publisher, broker, clock = peer_on_new_broker()
    consumer = H.Peer(broker, clock, "consumer").handshake(heartbeat=0).open(1)
    consumer.send(F.method(1, commands.Queue.Declare, queue="r", arguments={
        "x-dead-letter-exchange": ""}) + F.method(1, commands.Basic.Consume, queue="r"))
    close = connection_close(publisher.send(F.publish(1, "", "r", b"poison",
                                                      props=BAD_HEADERS)))
    assert close is not None and close.reply_code == 502
    assert broker.vhosts["/"].queues["r"].message_count == 0
    frames = consumer.send(F.method(1, commands.Basic.Qos, prefetch_count=1))
    assert connection_close(frames) is None and not consumer.conn.closed


# ---- shortstr properties that are not UTF-8 ------------------------------------------------------


NON_UTF8 = {
    # (exchange, routing key, properties, the close RabbitMQ would send or None)
    "reply_to": ("", "q", b"\x02\x00\x01\x97", None),
    "expiration": ("", "q", b"\x01\x00\x01\xff", 406),  # invalid expiration: 406
    "content_type, headers exchange": ("amq.headers", "", b"\xa0\x00\x01\xff\x00\x00\x00\x00",
                                       None),
}


@pytest.mark.parametrize("case", sorted(NON_UTF8))
def test_non_utf8_shortstr_properties_are_not_541(case: str) -> None:
    exchange, routing_key, props, code = NON_UTF8[case]
    peer, broker, _ = peer_on_new_broker()
    peer.send(F.method(1, commands.Queue.Declare, queue="q"))
    frames = peer.send(F.publish(1, exchange, routing_key, b"m", props=props))
    assert connection_close(frames) is None, connection_close(frames).reply_text
    closes = [v.reply_code for _, _, v in frames if isinstance(v, commands.Channel.Close)]
    assert closes == ([code] if code else [])


# ---- CC/BCC values that are not UTF-8 ---------------------------------------------------------


def _cc_props(name: str) -> bytes:
    entry = F.shortstr(name) + b"A" + struct.pack(">I", 6) + b"S" + struct.pack(">I", 1) + b"\xff"
    return b"\x20\x00" + struct.pack(">I", len(entry)) + entry


@pytest.mark.parametrize("header", ["CC", "BCC"])
def test_cc_with_a_non_utf8_value_is_routed_not_541(header: str) -> None:
    peer, broker, _ = peer_on_new_broker()
    peer.send(F.method(1, commands.Queue.Declare, queue="q"))
    frames = peer.send(F.publish(1, "", "q", b"m", props=_cc_props(header)))
    assert connection_close(frames) is None  # the longstr is bytes: no queue has that name
    assert broker.vhosts["/"].queues["q"].message_count == 1


def test_dead_lettering_a_message_with_a_non_utf8_cc_is_not_541() -> None:
    peer, broker, _ = peer_on_new_broker()
    peer.send(F.method(1, commands.Queue.Declare, queue="dl", arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"})
        + F.method(1, commands.Queue.Declare, queue="dead"))
    # published with a plain routing key, a CC that is valid; then dead-lettered with the CC
    # keys of the message (no x-dead-letter-routing-key on "dl2")
    peer.send(F.method(1, commands.Queue.Declare, queue="dl2", arguments={
        "x-dead-letter-exchange": ""}))
    frames = peer.send(F.publish(1, "", "dl2", b"m", props=_cc_props("CC"))
                       + F.method(1, commands.Basic.Get, queue="dl2")
                       + F.method(1, commands.Basic.Reject, delivery_tag=1, requeue=False))
    assert connection_close(frames) is None


# ---- settlements in an uncommitted transaction are lost on close -----------------------------


@pytest.mark.parametrize("settle", [
    F.method(1, commands.Basic.Ack, delivery_tag=1),
    F.method(1, commands.Basic.Reject, delivery_tag=1, requeue=True),
    F.method(1, commands.Basic.Nack, delivery_tag=1, requeue=False),
], ids=["ack", "reject-requeue", "nack-drop"])
@pytest.mark.parametrize("close", ["channel.close", "connection_lost"])
def test_uncommitted_tx_settlement_requeues_on_close(settle: bytes, close: str) -> None:
    peer, broker, _ = peer_on_new_broker()
    peer.send(F.method(1, commands.Queue.Declare, queue="q") + F.publish(1, "", "q", b"m")
              + F.method(1, commands.Tx.Select) + F.method(1, commands.Basic.Get, queue="q")
              + settle)
    if close == "channel.close":
        peer.expect(F.method(1, commands.Channel.Close, reply_code=200),
                    commands.Channel.CloseOk)
    else:
        peer.conn.connection_lost()
    q = broker.vhosts["/"].queues["q"]
    assert (q.message_count, q.unacked_count) == (1, 0)  # RabbitMQ: back in the queue


# ---- replies built with pamqp refuse names RabbitMQ accepts --------------------------------


@pytest.mark.parametrize("name", ["é", "a<b", "q\u00e9ue", "x|y", "日本"])
def test_queue_names_outside_pamqps_regex_are_declared(name: str) -> None:
    peer, broker, _ = peer_on_new_broker()
    ok = peer.expect(F.method(1, commands.Queue.Declare, queue=name), commands.Queue.DeclareOk)
    assert ok.queue == name
