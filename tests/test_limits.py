"""Limits that bound a client's reach: consumer timeout, max connections."""

from __future__ import annotations

from pamqp import commands

from broker.broker import Broker
from broker.config import BrokerConfig
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


# ---- vhost and user limits (https://www.rabbitmq.com/docs/vhosts#limits, /docs/user-limits) ----


NORMAL_CLOSE = {"reply_code": 200, "reply_text": "bye", "class_id": 0, "method_id": 0}


def _open_as(broker: Broker, user: str = "guest", vhost: str = "/") -> list:
    """Handshake up to Connection.Open; the frames the Open got back."""
    c = Client(broker)
    c.send_bytes(b"AMQP\x00\x00\x09\x01")
    c.send(0, commands.Connection.StartOk(
        client_properties={}, mechanism="PLAIN", response=f"\0{user}\0{user}"))
    c.send(0, commands.Connection.TuneOk(channel_max=2047, frame_max=131072, heartbeat=0))
    return c.send(0, commands.Connection.Open(virtual_host=vhost))


def _opened(frames: list) -> bool:
    return any(isinstance(f, commands.Connection.OpenOk) for _, f in frames)


def _broker_with_user(name: str = "u") -> Broker:
    broker = Broker(BrokerConfig(loopback_users=()))
    broker.users.add(name, name, [])
    broker.permissions.set(name, "/", ".*", ".*", ".*")
    return broker


def test_vhost_connection_limit_counts_only_that_vhosts_connections() -> None:
    broker = _broker_with_user()
    broker.add_vhost("other")
    broker.permissions.set("u", "other", ".*", ".*", ".*")
    broker.limits.set("vhost", "/", {"max-connections": 2})
    assert _opened(_open_as(broker, "u")) and _opened(_open_as(broker, "u"))
    assert _opened(_open_as(broker, "u", "other"))  # another vhost: not counted
    close = connection_close(_open_as(broker, "u"))
    assert close.reply_code == 530
    assert close.reply_text == ("NOT_ALLOWED - access to vhost '/' refused for user 'u': "
                                "connection limit (2) is reached")


def test_vhost_connection_limit_zero_refuses_all_and_negative_means_none() -> None:
    broker = _broker_with_user()
    broker.limits.set("vhost", "/", {"max-connections": 0})
    assert connection_close(_open_as(broker, "u")).reply_text.endswith(
        "connection limit (0) is reached")
    broker.limits.set("vhost", "/", {"max-connections": -1})
    assert all(_opened(_open_as(broker, "u")) for _ in range(5))


def test_closed_connections_free_their_place() -> None:
    broker = _broker_with_user()
    broker.limits.set("vhost", "/", {"max-connections": 1})
    first = Client(broker).handshake("u", "u")
    assert not _opened(_open_as(broker, "u"))
    first.call(0, commands.Connection.Close(**NORMAL_CLOSE), commands.Connection.CloseOk)
    assert _opened(_open_as(broker, "u"))


def test_user_connection_limit_counts_every_vhost() -> None:
    broker = _broker_with_user()
    broker.add_vhost("other")
    broker.permissions.set("u", "other", ".*", ".*", ".*")
    broker.users.add("v", "v", [])
    broker.permissions.set("v", "/", ".*", ".*", ".*")
    broker.limits.set("user", "u", {"max-connections": 1})
    assert _opened(_open_as(broker, "u"))
    close = connection_close(_open_as(broker, "u", "other"))
    assert close.reply_code == 530
    assert close.reply_text == ("NOT_ALLOWED - connection refused for user 'u': "
                                "user connection limit (1) is reached")
    assert _opened(_open_as(broker, "v"))  # other users are not limited


def test_user_channel_limit_counts_channels_across_connections() -> None:
    broker = _broker_with_user()
    broker.limits.set("user", "u", {"max-channels": 2})
    a = Client(broker).handshake("u", "u").open_channel(1)
    b = Client(broker).handshake("u", "u").open_channel(1)
    close = connection_close(b.send(2, commands.Channel.Open()))
    assert close.reply_code == 530
    assert close.reply_text == ("NOT_ALLOWED - number of channels opened for user 'u' has "
                                "reached the maximum allowed user limit of (2)")
    # closing a channel frees a place
    a.call(1, commands.Channel.Close(**NORMAL_CLOSE), commands.Channel.CloseOk)
    Client(broker).handshake("u", "u").open_channel(1)


def test_vhost_queue_limit_refuses_new_queues_only() -> None:
    broker = _broker_with_user()
    broker.limits.set("vhost", "/", {"max-queues": 1})
    c = Client(broker).handshake("u", "u").open_channel(1)
    c.declare_queue(1, "a")
    c.declare_queue(1, "a")  # a redeclare is not a new queue
    close = channel_close(c.send(1, commands.Queue.Declare(queue="b")))
    assert close.reply_code == 406
    assert close.reply_text == ("PRECONDITION_FAILED - cannot declare queue 'b': queue limit "
                                "in vhost '/' (1) is reached")
    c.open_channel(2)
    c.call(2, commands.Queue.Delete(queue="a"), commands.Queue.DeleteOk)
    c.declare_queue(2, "b")  # room again


def test_limits_go_with_their_vhost_and_user() -> None:
    broker = _broker_with_user()
    broker.add_vhost("gone")
    broker.limits.set("vhost", "gone", {"max-queues": 0})
    broker.limits.set("user", "u", {"max-channels": 0})
    broker.delete_vhost("gone")
    broker.delete_user("u")
    assert broker.limits.vhosts == {} and broker.limits.users == {}
    broker.add_vhost("gone")  # a new vhost of the same name starts without limits
    assert broker.limits.vhost("gone", "max-queues") is None
