"""Connection handshake, login, tuning, heartbeats and timeouts (channel 0), as a client sees
them.

Reference: AMQP 0-9-1 spec 2.2.4 and 4.2; RabbitMQ 3.10-3.13 ``rabbit_reader`` (reply texts).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from conftest import (
    DEFAULT_CAPABILITIES,
    PROTOCOL_HEADER,
    Client,
    FakeClock,
    amqplain_response,
    connection_close,
    methods,
    only,
)
from pamqp import commands, heartbeat
from pamqp import frame as pamqp_frame
from pamqp.header import ProtocolHeader

from amqp_server.connection import State
from broker.broker import Broker

MakeClient = Callable[..., Client]
LOGIN_REFUSED = (
    "ACCESS_REFUSED - Login was refused using authentication mechanism {}."
    " For details see the broker logfile."
)


def start(c: Client) -> commands.Connection.Start:
    return only(c.send_bytes(PROTOCOL_HEADER), commands.Connection.Start)


def start_ok(c: Client, response: str, mechanism: str = "PLAIN",
             capabilities: dict | None = None) -> list:
    props = {"capabilities": dict(DEFAULT_CAPABILITIES if capabilities is None
                                  else capabilities)}
    return c.send(0, commands.Connection.StartOk(client_properties=props, mechanism=mechanism,
                                                 response=response))


def to_tune(c: Client) -> commands.Connection.Tune:
    start(c)
    return only(start_ok(c, "\0guest\0guest"), commands.Connection.Tune)


# ---- protocol header -----------------------------------------------------------------------


@pytest.mark.parametrize("header", [
    b"AMQP\x00\x00\x09\x00",  # 0-9-0
    b"AMQP\x01\x01\x00\x0a",  # 0-10
    b"AMQP\x00\x01\x00\x00",  # 1.0
    b"GET / HTTP/1.1\r\n",
])
def test_wrong_protocol_header_gets_ours_and_close(broker: Broker, header: bytes) -> None:
    c = Client(broker)
    c.conn.receive_data(header)
    assert c.conn.data_to_send() == b"AMQP\x00\x00\x09\x01"
    assert c.closed


def test_amqp_0_9_header_is_accepted_as_0_9_1(broker: Broker) -> None:
    c = Client(broker)
    start_frame = only(c.send_bytes(b"AMQP\x01\x01\x00\x09"), commands.Connection.Start)
    assert (start_frame.version_major, start_frame.version_minor) == (0, 9)
    assert not c.closed


def test_protocol_header_in_pieces(broker: Broker) -> None:
    c = Client(broker)
    for byte in PROTOCOL_HEADER[:-1]:
        assert c.send_bytes(bytes([byte])) == []
        assert not c.closed
    assert isinstance(c.send_bytes(PROTOCOL_HEADER[-1:])[0][1], commands.Connection.Start)


def test_protocol_header_followed_by_frames_in_one_chunk(broker: Broker) -> None:
    c = Client(broker)
    start_ok_frame = pamqp_frame.marshal(commands.Connection.StartOk(
        client_properties={}, mechanism="PLAIN", response="\0guest\0guest"), 0)
    out = c.send_bytes(PROTOCOL_HEADER + start_ok_frame)
    assert [type(f) for _, f in out] == [commands.Connection.Start, commands.Connection.Tune]
    assert not any(isinstance(f, ProtocolHeader) for _, f in out)


def test_connection_start_fields(broker: Broker) -> None:
    s = start(Client(broker))
    assert (s.version_major, s.version_minor) == (0, 9)
    assert s.mechanisms == "PLAIN AMQPLAIN"
    assert s.locales == "en_US"
    props = s.server_properties
    for key in ("product", "version", "platform", "copyright", "information"):
        assert key in props
    caps = props["capabilities"]
    for name in ("publisher_confirms", "exchange_exchange_bindings", "basic.nack",
                 "consumer_cancel_notify", "connection.blocked",
                 "authentication_failure_close", "per_consumer_qos"):
        assert caps[name] is True, name


def test_tune_values(broker: Broker) -> None:
    tune = to_tune(Client(broker))
    assert (tune.channel_max, tune.frame_max, tune.heartbeat) == (2047, 131072, 60)


def test_full_handshake(make_client: MakeClient) -> None:
    c = make_client(channel=None)
    assert c.conn.state is State.OPEN
    assert c.conn.user == "guest"
    assert c.conn.vhost_name == "/"
    kinds = [type(f) for _, f in c.received]
    assert kinds == [commands.Connection.Start, commands.Connection.Tune,
                     commands.Connection.OpenOk]
    assert all(ch == 0 for ch, _ in c.received)


# ---- login ---------------------------------------------------------------------------------


def test_bad_password_is_refused_with_connection_close(broker: Broker) -> None:
    c = Client(broker)
    start(c)
    close = connection_close(start_ok(c, "\0guest\0wrong"))
    assert close.reply_code == 403
    assert close.reply_text == LOGIN_REFUSED.format("PLAIN")
    assert not c.closed  # waiting for CloseOk
    assert c.send(0, commands.Connection.CloseOk()) == []
    assert c.closed


def test_unknown_user_is_refused(broker: Broker) -> None:
    c = Client(broker)
    start(c)
    close = connection_close(start_ok(c, "\0nobody\0guest"))
    assert (close.reply_code, close.reply_text) == (403, LOGIN_REFUSED.format("PLAIN"))


def test_login_failure_close_has_no_method_ids(broker: Broker) -> None:
    c = Client(broker)
    start(c)
    close = connection_close(start_ok(c, "\0guest\0wrong"))
    assert (close.class_id, close.method_id) == (0, 0)


def test_login_failure_without_capability_closes_silently(broker: Broker) -> None:
    c = Client(broker)
    start(c)
    out = start_ok(c, "\0guest\0wrong", capabilities={})
    assert methods(out, commands.Connection.Close) == []
    assert c.closed


@pytest.mark.parametrize("peer", [("10.0.0.1", 5000), ("192.168.1.20", 40000),
                                  ("2001:db8::1", 5000)])
def test_guest_from_non_loopback_peer_is_refused(broker: Broker, peer: tuple[str, int]) -> None:
    c = Client(broker, peer=peer)
    start(c)
    close = connection_close(start_ok(c, "\0guest\0guest"))
    assert (close.reply_code, close.reply_text) == (403, LOGIN_REFUSED.format("PLAIN"))
    assert c.conn.user is None


@pytest.mark.parametrize("peer", [("127.0.0.2", 5000), ("::1", 5000),
                                  ("::ffff:127.0.0.1", 5000)])
def test_guest_from_loopback_peers(broker: Broker, peer: tuple[str, int]) -> None:
    c = Client(broker, peer=peer)
    assert to_tune(c).frame_max == 131072


def test_other_user_from_remote_peer_is_accepted(broker: Broker) -> None:
    broker.users.add("alice", "s3cret")
    broker.permissions.set("alice", "/", ".*", ".*", ".*")
    c = Client(broker, peer=("10.0.0.1", 5000))
    c.handshake(user="alice", password="s3cret")
    assert c.conn.user == "alice"


def test_amqplain_login(broker: Broker) -> None:
    c = Client(broker)
    start(c)
    out = start_ok(c, amqplain_response("guest", "guest"), mechanism="AMQPLAIN")
    assert isinstance(only(out, commands.Connection.Tune), commands.Connection.Tune)


def test_amqplain_bad_password(broker: Broker) -> None:
    c = Client(broker)
    start(c)
    out = start_ok(c, amqplain_response("guest", "nope"), mechanism="AMQPLAIN")
    close = connection_close(out)
    assert (close.reply_code, close.reply_text) == (403, LOGIN_REFUSED.format("AMQPLAIN"))


def test_unknown_vhost_is_not_allowed(make_client: MakeClient) -> None:
    c = make_client(handshake=False)
    to_tune(c)
    out = c.send(0, commands.Connection.TuneOk(channel_max=2047, frame_max=131072, heartbeat=0),
                 commands.Connection.Open(virtual_host="nope"))
    close = connection_close(out)
    assert (close.reply_code, close.reply_text) == (530, "NOT_ALLOWED - vhost nope not found")
    assert (close.class_id, close.method_id) == (10, 40)
    assert c.conn.state is State.CLOSING
    c.send(0, commands.Connection.CloseOk())
    assert c.closed


def test_vhost_without_permissions_is_not_allowed(broker: Broker) -> None:
    broker.add_vhost("other")
    c = Client(broker)
    to_tune(c)
    out = c.send(0, commands.Connection.TuneOk(channel_max=2047, frame_max=131072, heartbeat=0),
                 commands.Connection.Open(virtual_host="other"))
    close = connection_close(out)
    assert close.reply_code == 530
    assert close.reply_text == "NOT_ALLOWED - access to vhost 'other' refused for user 'guest'"


# ---- tuning --------------------------------------------------------------------------------


def test_tune_ok_frame_max_above_server_max_is_not_allowed(broker: Broker) -> None:
    c = Client(broker)
    to_tune(c)
    out = c.send(0, commands.Connection.TuneOk(channel_max=2047, frame_max=200000,
                                               heartbeat=60))
    close = connection_close(out)
    assert close.reply_code == 530
    assert close.reply_text.startswith("NOT_ALLOWED - ")
    assert c.conn.state is State.CLOSING


@pytest.mark.parametrize(("frame_max", "text"), [
    (200000, "NOT_ALLOWED - negotiated frame_max = 200000 is higher than the maximum allowed "
             "value (131072)"),
    (1000, "NOT_ALLOWED - negotiated frame_max = 1000 is lower than the minimum allowed "
           "value (4096)"),
])
def test_tune_ok_frame_max_rabbitmq_texts(broker: Broker, frame_max: int, text: str) -> None:
    c = Client(broker)
    to_tune(c)
    out = c.send(0, commands.Connection.TuneOk(channel_max=2047, frame_max=frame_max,
                                               heartbeat=60))
    assert connection_close(out).reply_text == text


def test_tune_ok_frame_max_below_minimum_is_not_allowed(broker: Broker) -> None:
    c = Client(broker)
    to_tune(c)
    out = c.send(0, commands.Connection.TuneOk(channel_max=2047, frame_max=1000, heartbeat=60))
    assert connection_close(out).reply_code == 530


def test_channel_method_on_channel_zero(client: Client) -> None:
    close = connection_close(client.send(0, commands.Channel.Open()))
    assert (close.reply_code, close.reply_text) == (
        504, "CHANNEL_ERROR - unexpected method in connection state running")


def test_method_before_open_is_rejected(broker: Broker) -> None:
    c = Client(broker)
    to_tune(c)
    out = c.send(1, commands.Channel.Open())
    assert connection_close(out).reply_code == 503


# ---- heartbeats and timeouts ---------------------------------------------------------------


def test_heartbeat_sent_after_half_interval_idle(make_client: MakeClient,
                                                 clock: FakeClock) -> None:
    c = make_client(heartbeat=10)
    clock.advance(4.9)
    c.conn.tick()
    assert c.read() == []
    clock.advance(0.1)
    c.conn.tick()
    assert [type(f) for _, f in c.read()] == [heartbeat.Heartbeat]
    clock.advance(1)
    c.conn.tick()
    assert c.read() == []  # output was written just now


def test_missed_client_heartbeats_close_the_connection(make_client: MakeClient,
                                                       clock: FakeClock) -> None:
    c = make_client(heartbeat=10)
    c.declare_queue(1, "excl", exclusive=True)
    for _ in range(19):
        clock.advance(1)
        c.conn.tick()
        c.read()
    assert not c.closed
    clock.advance(1.5)
    c.conn.tick()
    assert c.closed
    assert methods(c.read(), commands.Connection.Close) == []  # RabbitMQ just drops it
    assert "excl" not in c.broker.vhosts["/"].queues


def test_client_heartbeats_keep_the_connection_open(make_client: MakeClient,
                                                    clock: FakeClock) -> None:
    c = make_client(heartbeat=10)
    for _ in range(10):
        clock.advance(5)
        c.send_bytes(heartbeat.Heartbeat.marshal())
        c.conn.tick()
    assert not c.closed


def test_heartbeat_zero_disables_timeouts(make_client: MakeClient, clock: FakeClock) -> None:
    c = make_client(heartbeat=0)
    clock.advance(3600)
    c.conn.tick()
    assert c.read() == []
    assert not c.closed


def test_handshake_timeout(broker: Broker, clock: FakeClock) -> None:
    c = Client(broker, clock)
    to_tune(c)
    clock.advance(10)
    c.conn.tick()
    assert not c.closed
    clock.advance(0.5)
    c.conn.tick()
    assert c.closed


def test_no_handshake_timeout_once_open(make_client: MakeClient, clock: FakeClock) -> None:
    c = make_client(heartbeat=0)
    clock.advance(30)
    c.conn.tick()
    assert not c.closed


def test_close_ok_timeout(client: Client, clock: FakeClock) -> None:
    client.publish(1, "", "q", b"x", immediate=True)  # 540: a connection error
    assert client.conn.state is State.CLOSING
    clock.advance(2.9)
    client.conn.tick()
    assert not client.closed
    clock.advance(0.2)
    client.conn.tick()
    assert client.closed


# ---- closing -------------------------------------------------------------------------------


def test_client_connection_close(client: Client) -> None:
    client.declare_queue(1, "ex", exclusive=True)
    out = client.send(0, commands.Connection.Close(reply_code=200, reply_text="bye",
                                                          class_id=0, method_id=0))
    assert [type(f) for _, f in out] == [commands.Connection.CloseOk]
    assert client.closed
    assert "ex" not in client.broker.vhosts["/"].queues


def test_after_server_close_only_close_ok_matters(client: Client) -> None:
    out = client.publish(1, "", "q", b"x", immediate=True)
    close = connection_close(out)
    assert (close.reply_code, close.reply_text) == (540, "NOT_IMPLEMENTED - immediate=true")
    assert (close.class_id, close.method_id) == (60, 40)
    assert client.send(1, commands.Queue.Declare(queue="q")) == []
    assert client.send(2, commands.Channel.Open()) == []
    assert not client.closed
    client.send(0, commands.Connection.CloseOk())
    assert client.closed


def test_connection_lost_releases_everything(broker: Broker, client: Client) -> None:
    client.declare_queue(1, "ex", exclusive=True)
    client.conn.connection_lost()
    assert client.closed
    assert "ex" not in broker.vhosts["/"].queues
    assert client.conn not in broker.connections


def test_publish_errors_wait_for_the_whole_command(client: Client) -> None:
    """As RabbitMQ's command assembler: a publish is judged once its content has arrived
    (checked against 3.10.8 with raw frames: nothing after the method or the header)."""
    raw = client.publish_bytes(1, "missing-x", "k", b"hi", immediate=True)
    method_end = raw.index(b"\xce") + 1  # the method frame's end octet
    assert client.send_bytes(raw[:method_end]) == []
    close = connection_close(client.send_bytes(raw[method_end:]))
    assert (close.reply_code, close.reply_text, close.class_id, close.method_id) == (
        540, "NOT_IMPLEMENTED - immediate=true", 60, 40)


# ---- Connection.UpdateSecret (RabbitMQ 3.8+; checked against 3.10.8 with pika) -----------


@pytest.mark.parametrize("secret", ["guest", "new-secret", ""])
def test_update_secret_is_answered_and_channels_stay_open(client: Client,
                                                          secret: str) -> None:
    """Internal users' credentials never expire, so RabbitMQ accepts any new secret for them
    (``rabbit_access_control:update_state/2``); client test suites send "new-secret"."""
    frames = client.send(0, commands.Connection.UpdateSecret(new_secret=secret,
                                                             reason="token refresh"))
    assert [type(m) for m in methods(frames)] == [commands.Connection.UpdateSecretOk]
    assert not client.closed
    ok = client.call(1, commands.Queue.Declare(queue="after-update"), commands.Queue.DeclareOk)
    assert ok.queue == "after-update"


def test_update_secret_of_a_user_deleted_since_login_is_refused(broker: Broker,
                                                                client: Client) -> None:
    """A backend that refuses the secret closes the connection with rabbit_reader's text;
    with the internal backend that is a user gone since login (normally already closed by
    the deletion with 320)."""
    broker.users.delete("guest")  # the store alone: the broker's deletion would close first
    close = connection_close(client.send(0, commands.Connection.UpdateSecret(
        new_secret="guest", reason="refresh")))
    assert (close.reply_code, close.reply_text) == (
        530, "NOT_ALLOWED - New secret was refused by one of the backends")


def test_update_secret_before_open_is_a_channel_error(broker: Broker) -> None:
    c = Client(broker)
    to_tune(c)
    close = connection_close(c.send(0, commands.Connection.UpdateSecret(new_secret="x",
                                                                        reason="r")))
    assert (close.reply_code, close.reply_text) == (
        503, "COMMAND_INVALID - unexpected method Connection.UpdateSecret in state tune_ok")
