"""A connection's life in the log: the lines an operator greps for, in RabbitMQ 3.10.8's
words with amqpq's connection name (``peer -> local``) where RabbitMQ writes
``<pid> (peer -> local)``.

Reference: /var/log/rabbitmq/rabbit@*.log of RabbitMQ 3.10.8 after pika connections
(client-provided name, refused logins, unknown vhost, channel and connection errors,
abrupt close) and raw sockets (bad header); see ``amqp_server/connection_log.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from conftest import DEFAULT_CAPABILITIES, PROTOCOL_HEADER, Client, FakeClock
from pamqp import commands

from broker.broker import Broker

NAME = "127.0.0.1:5000 -> 127.0.0.1:5672"
PROPS = {"connection_name": "orders-worker", "capabilities": dict(DEFAULT_CAPABILITIES)}
MakeClient = Callable[..., Client]


def lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    """(level name, message) of every ``amqpq.connection`` and ``amqpq.channel`` record at
    info or above."""
    return [(r.levelname, r.getMessage()) for r in caplog.records
            if r.name in ("amqpq.connection", "amqpq.channel") and r.levelno >= logging.INFO]


@pytest.fixture(autouse=True)
def _capture(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="amqpq.connection")
    caplog.set_level(logging.DEBUG, logger="amqpq.channel")


def test_life_of_a_named_connection(make_client: MakeClient,
                                    caplog: pytest.LogCaptureFixture) -> None:
    c = make_client(client_properties=PROPS)
    c.send(0, commands.Connection.Close(reply_code=200, reply_text="Normal shutdown",
                                               class_id=0, method_id=0))
    assert c.closed
    assert lines(caplog) == [
        ("INFO", f"accepting AMQP connection ({NAME})"),
        ("INFO", f"connection ({NAME}) has a client-provided name: orders-worker"),
        ("INFO", f"connection ({NAME} - orders-worker): user 'guest' authenticated and "
                 "granted access to vhost '/'"),
        ("INFO", f"closing AMQP connection ({NAME} - orders-worker, vhost: '/', "
                 "user: 'guest')"),
    ]


def test_unnamed_connection(make_client: MakeClient, caplog: pytest.LogCaptureFixture) -> None:
    c = make_client()
    c.send(0, commands.Connection.Close(reply_code=200, reply_text="Normal shutdown",
                                               class_id=0, method_id=0))
    assert (f"connection ({NAME}): user 'guest' authenticated and granted access to "
            "vhost '/'") in [m for _, m in lines(caplog)]
    assert ("INFO", f"closing AMQP connection ({NAME}, vhost: '/', user: 'guest')") \
        in lines(caplog)


def test_local_address_names_the_connection(broker: Broker,
                                            caplog: pytest.LogCaptureFixture) -> None:
    from amqp_server.connection import Connection

    conn = Connection(broker, ("::1", 40000), FakeClock(), local=("::1", 5673))
    conn.receive_data(PROTOCOL_HEADER)
    assert lines(caplog)[0] == ("INFO", "accepting AMQP connection ([::1]:40000 -> [::1]:5673)")


def test_refused_login_logs_the_reason_client_gets_rabbitmq_text(
        broker: Broker, caplog: pytest.LogCaptureFixture) -> None:
    c = Client(broker)
    c.send_bytes(PROTOCOL_HEADER)
    out = c.send(0, commands.Connection.StartOk(
        client_properties=PROPS, mechanism="PLAIN", response="\0guest\0wrong"))
    close = [f for _, f in out if isinstance(f, commands.Connection.Close)][0]
    assert close.reply_text == ("ACCESS_REFUSED - Login was refused using authentication "
                                "mechanism PLAIN. For details see the broker logfile.")
    c.send(0, commands.Connection.CloseOk())
    assert ("ERROR", f"Error on AMQP connection ({NAME}, state: starting):\n"
                     "PLAIN login refused: user 'guest' - invalid credentials") in lines(caplog)
    assert lines(caplog)[-1] == ("INFO", f"closing AMQP connection ({NAME} - orders-worker)")


def test_guest_from_remote_host_logs_loopback_reason(
        broker: Broker, caplog: pytest.LogCaptureFixture) -> None:
    c = Client(broker, peer=("10.1.2.3", 40000))
    c.send_bytes(PROTOCOL_HEADER)
    c.send(0, commands.Connection.StartOk(
        client_properties=PROPS, mechanism="PLAIN", response="\0guest\0guest"))
    assert ("ERROR", "Error on AMQP connection (10.1.2.3:40000 -> 127.0.0.1:5672, "
                     "state: starting):\nPLAIN login refused: user 'guest' can only connect "
                     "via localhost") in lines(caplog)


def test_unknown_user(broker: Broker, caplog: pytest.LogCaptureFixture) -> None:
    c = Client(broker)
    c.send_bytes(PROTOCOL_HEADER)
    c.send(0, commands.Connection.StartOk(
        client_properties=PROPS, mechanism="AMQPLAIN",
        response="\x05LOGINS\x00\x00\x00\x06nobody\x08PASSWORDS\x00\x00\x00\x01x"))
    assert any(m.endswith("\nAMQPLAIN login refused: user 'nobody' - invalid credentials")
               for _, m in lines(caplog))


def test_unknown_vhost(make_client: MakeClient, caplog: pytest.LogCaptureFixture) -> None:
    c = make_client(handshake=False)
    c.send_bytes(PROTOCOL_HEADER)
    tune = [f for _, f in c.send(0, commands.Connection.StartOk(
        client_properties={}, mechanism="PLAIN", response="\0guest\0guest"))][0]
    c.send(0, commands.Connection.TuneOk(channel_max=tune.channel_max,
                                         frame_max=tune.frame_max, heartbeat=0),
           commands.Connection.Open(virtual_host="novhost"))
    c.send(0, commands.Connection.CloseOk())
    assert lines(caplog)[-2:] == [
        ("ERROR", f"Error on AMQP connection ({NAME}, user: 'guest', state: opening):\n"
                  "vhost novhost not found"),
        ("INFO", f"closing AMQP connection ({NAME}, vhost: 'none', user: 'guest')"),
    ]


def test_channel_error_names_connection_user_vhost(
        client: Client, caplog: pytest.LogCaptureFixture) -> None:
    client.send(1, commands.Queue.Declare(queue="nonexistent", passive=True))
    assert ("ERROR", f"Channel error on connection ({NAME}, vhost: '/', user: 'guest'), "
                     "channel 1:\noperation queue.declare caused a channel exception "
                     "not_found: no queue 'nonexistent' in vhost '/'") in lines(caplog)


def test_records_carry_structured_fields_for_json_logs(
        make_client: MakeClient, caplog: pytest.LogCaptureFixture) -> None:
    client = make_client()
    client.send(1, commands.Queue.Declare(queue="nonexistent", passive=True))
    record = [r for r in caplog.records if r.name == "amqpq.channel"][-1]
    assert (record.connection, record.user, record.vhost, record.channel) == (
        NAME, "guest", "/", 1)
    accepted = [r for r in caplog.records if r.getMessage().startswith("accepting")][-1]
    assert accepted.connection == NAME and not hasattr(accepted, "user")


def test_connection_error_while_running(client: Client,
                                        caplog: pytest.LogCaptureFixture) -> None:
    client.send(1, commands.Channel.Open())
    assert ("ERROR", f"Error on AMQP connection ({NAME}, vhost: '/', user: 'guest', "
                     "state: running), channel 1:\n operation channel.open caused a "
                     "connection exception channel_error: \"second 'channel.open' seen\"") \
        in lines(caplog)


def test_abrupt_close_is_a_warning(make_client: MakeClient,
                                   caplog: pytest.LogCaptureFixture) -> None:
    c = make_client(client_properties=PROPS)
    c.conn.connection_lost()
    assert lines(caplog)[-1] == (
        "WARNING", f"closing AMQP connection ({NAME} - orders-worker, vhost: '/', "
                   "user: 'guest'):\nclient unexpectedly closed TCP connection")


def test_missed_heartbeats_is_an_error(make_client: MakeClient, clock: FakeClock,
                                       caplog: pytest.LogCaptureFixture) -> None:
    c = make_client(heartbeat=10)
    c.conn.tick(clock.advance(21))
    assert lines(caplog)[-1] == (
        "ERROR", f"closing AMQP connection ({NAME}, vhost: '/', user: 'guest'):\n"
                 "missed heartbeats from client, timeout: 10s")


def test_bad_header_and_silent_socket(broker: Broker,
                                      caplog: pytest.LogCaptureFixture) -> None:
    silent = Client(broker)
    silent.conn.connection_lost()
    assert lines(caplog) == []  # RabbitMQ logs nothing for a socket that sent nothing
    c = Client(broker)
    c.send_bytes(b"GET / HTTP/1.1\r\n\r\n")
    assert lines(caplog) == [
        ("INFO", f"accepting AMQP connection ({NAME})"),
        ("ERROR", f'closing AMQP connection ({NAME}):\n{{bad_header,<<"GET / HT">>}}'),
    ]


def test_socket_closed_after_our_close_is_not_unexpected(
        broker: Broker, caplog: pytest.LogCaptureFixture) -> None:
    c = Client(broker)  # pika hangs up after a refused login instead of sending CloseOk
    c.send_bytes(PROTOCOL_HEADER)
    c.send(0, commands.Connection.StartOk(
        client_properties=PROPS, mechanism="PLAIN", response="\0guest\0wrong"))
    c.conn.connection_lost()
    assert lines(caplog)[-1] == ("INFO", f"closing AMQP connection ({NAME} - orders-worker)")
