"""Limits that bound a client's reach: consumer timeout, max connections."""

from __future__ import annotations

from pamqp import commands

from amqp_server.broker import Broker
from amqp_server.config import BrokerConfig
from tests.conftest import Client, FakeClock, channel_close, connection_close, deliveries


def test_unacked_delivery_past_consumer_timeout_closes_the_channel() -> None:
    clock = FakeClock()
    broker = Broker(BrokerConfig(consumer_timeout=5_000, heartbeat=0))
    c = Client(broker, clock).handshake(heartbeat=0).open_channel(1)
    c.declare_queue(1, "q")
    c.consume(1, "q")
    c.publish(1, "", "q", b"slow")
    assert len(deliveries(c.received)) == 1
    c.conn.tick(clock.advance(4.0))
    assert c.read() == []  # still within the timeout
    c.conn.tick(clock.advance(2.0))
    close = channel_close(c.read())
    assert close.reply_code == 406
    assert close.reply_text == (
        "PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out. Timeout value "
        "used: 5000 ms. This timeout value can be configured, see consumers doc guide to learn "
        "more")
    # the message went back to the queue
    assert broker.vhosts["/"].queues["q"].message_count == 1


def test_acked_deliveries_never_time_out() -> None:
    clock = FakeClock()
    broker = Broker(BrokerConfig(consumer_timeout=5_000, heartbeat=0))
    c = Client(broker, clock).handshake(heartbeat=0).open_channel(1)
    c.declare_queue(1, "q")
    c.consume(1, "q")
    for i in range(10):
        c.publish(1, "", "q", b"m")
        c.ack(1, i + 1)
        c.conn.tick(clock.advance(1.0))
    assert not [f for _, f in c.received if isinstance(f, commands.Channel.Close)]


def test_connection_limit_refuses_open_with_530() -> None:
    broker = Broker(BrokerConfig(max_connections=1))
    Client(broker).handshake()
    second = Client(broker)
    second.send_bytes(b"AMQP\x00\x00\x09\x01")
    second.send(0, commands.Connection.StartOk(
        client_properties={}, mechanism="PLAIN", response="\0guest\0guest"))
    second.send(0, commands.Connection.TuneOk(channel_max=2047, frame_max=131072, heartbeat=0))
    close = connection_close(second.send(0, commands.Connection.Open(virtual_host="/")))
    assert close.reply_code == 530
    assert close.reply_text == ("NOT_ALLOWED - connection refused: node connection limit (1) "
                                "is reached")
