"""Vhost isolation and permissions as pika sees them (issue [4/9]).

The broker is started with ``--definitions`` holding two vhosts and users with narrow
permissions; each test logs in as one of them and checks every refusal's code and text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pika
import pytest

from tests.support.broker_process import BrokerProcess
from vhosts.users import hash_password

pytestmark = [pytest.mark.timeout(60), pytest.mark.own_broker]  # own_broker: see conftest.py

USERS = {"alice": "a-pw", "bob": "b-pw", "carol": "c-pw", "dave": "d-pw"}


def _definitions() -> dict:
    return {
        "users": [{"name": n, "password_hash": hash_password(p),
                   "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": []}
                  for n, p in USERS.items()],
        "vhosts": [{"name": "team-a"}, {"name": "team-b"}],
        "permissions": [
            {"user": "alice", "vhost": "team-a", "configure": ".*", "write": ".*", "read": ".*"},
            {"user": "bob", "vhost": "team-b", "configure": ".*", "write": ".*", "read": ".*"},
            {"user": "carol", "vhost": "team-a", "configure": "^c-", "write": "^c-",
             "read": "^c-"},
            {"user": "dave", "vhost": "team-a", "configure": ".*", "write": ".*",
             "read": ".*"},
        ],
        "topic_permissions": [
            {"user": "dave", "vhost": "team-a", "exchange": "amq.topic",
             "write": "^allowed\\.", "read": ".*"},
        ],
    }


@pytest.fixture(scope="module")
def port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    d = tmp_path_factory.mktemp("acl")
    (d / "defs.json").write_text(json.dumps(_definitions()))
    with BrokerProcess(d / "data", d / "broker.log",
                       args=("--definitions", str(d / "defs.json"))) as broker:
        yield broker.port


def _connect(port: int, user: str, vhost: str) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", port, vhost, pika.PlainCredentials(user, USERS[user]),
        connection_attempts=1))


def test_a_user_cannot_open_another_teams_vhost(port: int) -> None:
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as info:
        _connect(port, "alice", "team-b")
    assert "NOT_ALLOWED - access to vhost 'team-b' refused for user 'alice'" in str(info.value)
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
        _connect(port, "bob", "team-a")


def test_vhosts_do_not_share_queues(port: int) -> None:
    a = _connect(port, "alice", "team-a")
    b = _connect(port, "bob", "team-b")
    try:
        a.channel().queue_declare("shared-name")
        a.channel().basic_publish("", "shared-name", b"for team a")
        ch_b = b.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch_b.queue_declare("shared-name", passive=True)
        assert info.value.args == (404, "NOT_FOUND - no queue 'shared-name' in vhost 'team-b'")
        ch_b = b.channel()
        ch_b.queue_declare("shared-name")
        assert ch_b.basic_get("shared-name", auto_ack=True) == (None, None, None)
        ch_a = a.channel()
        assert ch_a.basic_get("shared-name", auto_ack=True)[2] == b"for team a"
        ch_a.queue_delete("shared-name")
        ch_b.queue_delete("shared-name")
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize(("action", "text"), [
    (lambda ch: ch.queue_declare("other"),
     "ACCESS_REFUSED - access to queue 'other' in vhost 'team-a' refused for user 'carol'"),
    (lambda ch: ch.exchange_declare("other-x", "direct"),
     "ACCESS_REFUSED - access to exchange 'other-x' in vhost 'team-a' refused for user "
     "'carol'"),
    (lambda ch: (ch.basic_publish("", "c-q", b"x"), ch.queue_declare("c-q", passive=True)),
     "ACCESS_REFUSED - access to exchange 'amq.default' in vhost 'team-a' refused for user "
     "'carol'"),
    (lambda ch: ch.queue_bind("c-q", "amq.direct", "k"),
     "ACCESS_REFUSED - access to exchange 'amq.direct' in vhost 'team-a' refused for user "
     "'carol'"),
])
def test_narrow_permissions_refuse_with_rabbitmq_texts(port: int, action, text: str) -> None:
    conn = _connect(port, "carol", "team-a")
    try:
        conn.channel().queue_declare("c-q")  # allowed by ^c-
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            action(conn.channel())
        assert info.value.args == (403, text)
    finally:
        conn.close()


def test_topic_permission_limits_routing_keys(port: int) -> None:
    conn = _connect(port, "dave", "team-a")
    try:
        ch = conn.channel()
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_bind(q, "amq.topic", "#")
        ch.basic_publish("amq.topic", "allowed.1", b"ok")
        assert ch.basic_get(q, auto_ack=True)[2] == b"ok"
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.basic_publish("amq.topic", "denied.1", b"no")
            ch.queue_declare(q, passive=True)
        assert info.value.args == (
            403, "ACCESS_REFUSED - write access to topic 'denied.1' in exchange 'amq.topic' in "
                 "vhost 'team-a' refused for user 'dave'")
    finally:
        conn.close()


def test_wrong_password_is_refused(port: int) -> None:
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        pika.BlockingConnection(pika.ConnectionParameters(
            "127.0.0.1", port, "team-a", pika.PlainCredentials("alice", "wrong"),
            connection_attempts=1))
