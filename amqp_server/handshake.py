"""Channel 0's handshake: the connection states, the SASL mechanisms, and the handlers of
Connection.StartOk, TuneOk, Open and UpdateSecret (:data:`TRANSITIONS`).

The :class:`~amqp_server.connection.Connection` looks up ``(state, method class)`` in
:data:`TRANSITIONS`, calls the handler with itself and the decoded method, then moves to the
next state (see its module docstring for the state diagram). A handler raises an
:class:`~amqp_common.errors.AMQPError` to refuse: 403 on login (hard), 503 for an unknown
mechanism, 530 for frame_max, vhost, permission or connection-limit refusals, with
RabbitMQ's texts. Connection.Close/CloseOk and the states after OPEN stay in the connection.

Source: AMQP 0-9-1 spec 2.2.4, 4.2.2, 1.4.2; RabbitMQ ``rabbit_reader``,
https://www.rabbitmq.com/docs/access-control, /docs/connections#capabilities.
"""

from __future__ import annotations

import logging
import platform
import socket
import struct
from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING, Any

from pamqp import commands, decode

from amqp_common import framing
from amqp_common.errors import CommandInvalid, ConnectionAccessRefused, NotAllowed
from amqp_server import connection_log
from broker.config import BrokerConfig

if TYPE_CHECKING:
    from amqp_server.connection import Connection

log = logging.getLogger("amqpq.connection")

#: Connection.Start's ``capabilities`` (RabbitMQ 3.13's, all true).
CAPABILITIES = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "consumer_priorities": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
    "direct_reply_to": True,
}
MIN_FRAME_MAX = 4096  # bytes, spec 4.2.1 frame-min-size


class State(Enum):
    """Where a connection is in its life (the diagram is in :mod:`amqp_server.connection`)."""

    AWAITING_HEADER = "awaiting_header"
    START_OK = "start_ok"
    TUNE_OK = "tune_ok"
    OPEN_WAIT = "open_wait"
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


class LoginRefused(ConnectionAccessRefused):
    """A refused login (403, hard). The client reads RabbitMQ's "Login was refused using
    authentication mechanism PLAIN. For details see the broker logfile."; the log gets
    :attr:`log_text`, e.g. ``"PLAIN login refused: user 'guest' - invalid credentials"`` or
    ``"... user 'guest' can only connect via localhost"`` (``rabbit_reader:auth_fail``)."""

    def __init__(self, mechanism: str, username: str, reason: str) -> None:
        super().__init__(f"Login was refused using authentication mechanism {mechanism}."
                         " For details see the broker logfile.")
        self.log_text = f"{mechanism} login refused: user '{username}' {reason}"


def parse_sasl(mechanism: str, response: bytes | str) -> tuple[str, str]:
    """(username, password) from a PLAIN or AMQPLAIN Connection.StartOk response.

    Raises:
        CommandInvalid (503): unknown mechanism.
        ConnectionAccessRefused (403): unparsable response.
    """
    raw = response.encode("utf-8", "surrogateescape") if isinstance(response, str) else response
    if mechanism == "PLAIN":
        parts = raw.split(b"\x00")
        if len(parts) != 3:
            raise ConnectionAccessRefused("PLAIN response is malformed")
        return parts[1].decode("utf-8", "replace"), parts[2].decode("utf-8", "replace")
    if mechanism == "AMQPLAIN":
        try:
            _, table = decode.field_table(struct.pack(">I", len(raw)) + raw)
        except Exception:
            raise ConnectionAccessRefused("AMQPLAIN response is malformed") from None
        user, password = table.get("LOGIN", b""), table.get("PASSWORD", b"")
        if isinstance(user, bytes):
            user = user.decode("utf-8", "replace")
        if isinstance(password, bytes):
            password = password.decode("utf-8", "replace")
        return str(user), str(password)
    raise CommandInvalid(f"unknown authentication mechanism '{mechanism}'")


def server_properties(cfg: BrokerConfig, cluster: Any = None) -> dict[str, Any]:
    """Connection.Start's ``server_properties``: product, version, platform, capabilities,
    ``cluster_name``: the node's name, or in a cluster (``cluster``: the broker's
    membership, ``nodes()`` dicts with ``name``) its first member's name in sorted order,
    the same on every node (``/api/overview``'s ``cluster_name``)."""
    node = cfg.node_name or f"amqpq@{socket.gethostname().split('.')[0] or 'localhost'}"
    names = [str(n["name"]) for n in cluster.nodes()] if cluster is not None else []
    return {
        "product": cfg.product,
        "version": cfg.version,
        "platform": f"Python {platform.python_version()}",
        "copyright": "amqpq contributors",
        "information": "Licensed under the Apache License 2.0",
        # RabbitMQ's default cluster name is a node's name: a federation link reads it for
        # the x-received-from entry that its cycle detection compares with the upstream
        # queue's x-downstream-name (federation.manager: the same name)
        "cluster_name": min(names) if names else node,
        "capabilities": dict(CAPABILITIES),
    }


def start_ok(conn: Connection, m: Any) -> None:
    """Connection.StartOk: authenticate (PLAIN, AMQPLAIN, or EXTERNAL with a verified TLS
    client certificate), then send Connection.Tune.

    Raises:
        LoginRefused (403, hard): unknown user, wrong password, guest from a non-loopback
            or unknown address (its ``log_text`` says which, for the log).
        ConnectionAccessRefused (403, hard): a malformed response.
        CommandInvalid (503): unknown mechanism.
    """
    conn.client_properties = m.client_properties or {}
    conn.auth_mechanism = m.mechanism
    connection_log.client_name_given(conn)
    # A peer that reset before accept() has no address: it never counts as loopback
    host = conn.peer[0] if conn.peer else None
    if m.mechanism == "EXTERNAL" and conn.peer_cn:
        username = conn.peer_cn
        user = conn.broker.users.authenticate_external(username, host)
        if user is None:
            raise LoginRefused(m.mechanism, username, "- invalid credentials")
    else:
        username, password = parse_sasl(m.mechanism, m.response)
        user = conn.broker.users.authenticate(username, password, host)
        if user is None:
            # RabbitMQ checks the loopback rule after the password: tell which one failed
            local = conn.broker.users.authenticate(username, password, "127.0.0.1")
            reason = "- invalid credentials" if local is None else (
                "can only connect via localhost" if host is not None else
                "can only connect via localhost (the client's address is unknown: "
                "its connection was reset)")
            raise LoginRefused(m.mechanism, username, reason)
    conn.user = username
    conn.send_frame(framing.method_frame(0, commands.Connection.Tune(
        channel_max=conn.channel_max, frame_max=conn.frame_max, heartbeat=conn.heartbeat
    )))


def update_secret(conn: Connection, m: Any) -> None:
    """Connection.UpdateSecret (RabbitMQ 3.8+, OAuth2 token refresh): the user's backend
    takes the new secret, channels stay open, Update-Secret-Ok answers.

    Raises:
        NotAllowed (530): the backend refuses the secret (``rabbit_reader``'s text).
    """
    secret = m.new_secret
    if isinstance(secret, bytes):
        secret = secret.decode("utf-8", "replace")
    if conn.broker.users.update_state(conn.user or "", secret) is None:
        log.error("secret update was refused for user '%s'", conn.user)
        raise NotAllowed("New secret was refused by one of the backends")
    log.info("user '%s' updated secret, reason: %s", conn.user, m.reason)
    conn.send_frame(framing.method_frame(0, commands.Connection.UpdateSecretOk()))


def tune_ok(conn: Connection, m: Any) -> None:
    """Connection.TuneOk: the client's frame_max (bytes; 0 = the server's), channel_max
    (the lower of both) and heartbeat (seconds) take effect.

    Raises:
        NotAllowed (530): frame_max below :data:`MIN_FRAME_MAX` or above the server's.
    """
    server_max = conn.broker.config.frame_max
    if m.frame_max and m.frame_max < MIN_FRAME_MAX:
        raise NotAllowed(f"negotiated frame_max = {m.frame_max} is lower than the minimum "
                         f"allowed value ({MIN_FRAME_MAX})")
    if m.frame_max > server_max:
        raise NotAllowed(f"negotiated frame_max = {m.frame_max} is higher than the maximum "
                         f"allowed value ({server_max})")
    conn.frame_max = m.frame_max or server_max
    conn.reader.frame_max = conn.frame_max
    if m.channel_max:
        conn.channel_max = min(m.channel_max, conn.channel_max)
    conn.heartbeat = m.heartbeat


def open_vhost(conn: Connection, m: Any) -> None:
    """Connection.Open: the vhost must exist and the user have permissions in it, within the
    connection limits; Connection.OpenOk answers.

    Raises:
        NotAllowed (530): unknown vhost, no permissions, or a connection limit reached.
    """
    vhost = conn.broker.vhosts.get(m.virtual_host)
    if vhost is None:
        raise NotAllowed(f"vhost {m.virtual_host} not found")
    if conn.broker.permissions.get(conn.user or "", m.virtual_host) is None:
        raise NotAllowed(
            f"access to vhost '{m.virtual_host}' refused for user '{conn.user}'")
    check_connection_limits(conn, m.virtual_host)
    conn.vhost_name = m.virtual_host
    conn.vhost = vhost
    conn.send_frame(framing.method_frame(0, commands.Connection.OpenOk()))
    connection_log.authenticated(conn)


def check_connection_limits(conn: Connection, vhost: str) -> None:
    """The node's, the vhost's and the user's connection limits, in RabbitMQ's order
    (``rabbit_reader``: node, vhost, user).

    Raises:
        NotAllowed (530): a limit is reached.
    """
    broker, user = conn.broker, conn.user or ""
    open_conns = [c for c in broker.connections if c.state is State.OPEN]
    workers = broker.workers  # --workers N: the others' connections count too (1 s old)

    def elsewhere(key: str, name: str | None = None) -> int:
        return 0 if workers is None else int(workers.elsewhere(key, name))

    limit = broker.config.max_connections
    if limit and len(open_conns) + elsewhere("connections") >= limit:
        raise NotAllowed(f"connection refused: node connection limit ({limit}) is reached")
    limit = broker.limits.vhost(vhost, "max-connections")
    if limit is not None and sum(c.vhost_name == vhost for c in open_conns) + elsewhere(
            "open_by_vhost", vhost) >= limit:
        raise NotAllowed(f"access to vhost '{vhost}' refused for user '{user}': "
                         f"connection limit ({limit}) is reached")
    limit = broker.limits.user(user, "max-connections")
    if limit is not None and sum(c.user == user for c in open_conns) + elsewhere(
            "open_by_user", user) >= limit:
        raise NotAllowed(f"connection refused for user '{user}': "
                         f"user connection limit ({limit}) is reached")


#: Channel 0's handshake and running methods: (state, method) -> (handler, next state).
#: Connection.Close/CloseOk are valid in every state (see ``Connection._connection_method``).
TRANSITIONS: dict[tuple[State, type], tuple[Callable[[Connection, Any], None], State]] = {
    (State.START_OK, commands.Connection.StartOk): (start_ok, State.TUNE_OK),
    (State.TUNE_OK, commands.Connection.TuneOk): (tune_ok, State.OPEN_WAIT),
    (State.OPEN_WAIT, commands.Connection.Open): (open_vhost, State.OPEN),
    (State.OPEN, commands.Connection.UpdateSecret): (update_secret, State.OPEN),
}
