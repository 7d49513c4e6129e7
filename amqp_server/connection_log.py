"""A connection's life in the log, in RabbitMQ 3.10.8's words (``rabbit_reader``).

RabbitMQ names a connection by its Erlang process and, in parentheses, its addresses:
``accepting AMQP connection <0.15877.0> (127.0.0.1:45780 -> 127.0.0.1:5672)``. amqpq has
no process id; its connection name is the management API's (``peer -> local``), so every
line here is RabbitMQ's with the ``<pid> `` left out and the parenthesised part unchanged:

=========  =================================================================================
level      text (``{name}`` = ``127.0.0.1:45780 -> 127.0.0.1:5672``)
=========  =================================================================================
info       ``accepting AMQP connection ({name})`` (first bytes received; a socket closed
           before sending anything is not logged, as RabbitMQ does)
info       ``connection ({name}) has a client-provided name: orders-worker``
info       ``connection ({name} - orders-worker): user 'guest' authenticated and granted
           access to vhost '/'``
info       ``closing AMQP connection ({name} - orders-worker, vhost: '/', user: 'guest')``
warning    the same ``closing`` line, then ``:\\nclient unexpectedly closed TCP connection``
error      the same ``closing`` line, then ``:\\nmissed heartbeats from client, timeout:
           60s`` or ``:\\n{bad_header,<<"GET / HT">>}``
error      ``Error on AMQP connection ({name}, state: starting):\\nPLAIN login refused: user
           'guest' - invalid credentials`` (the client gets only "Login was refused ...")
error      ``Error on AMQP connection ({name}, user: 'guest', state: opening):\\nvhost x not
           found``
error      ``Error on AMQP connection ({name}, vhost: '/', user: 'guest', state: running),
           channel 1:\\n operation channel.open caused a connection exception
           channel_error: "second 'channel.open' seen"``
error      ``Channel error on connection ({name}, vhost: '/', user: 'guest'), channel 1:\\n
           operation queue.declare caused a channel exception not_found: no queue 'q' in
           vhost '/'``
=========  =================================================================================

The vhost is ``'none'`` in the closing line of a connection that authenticated but did not
open one. Source: the reference RabbitMQ 3.10.8's log, driven with pika and raw sockets.
Logger: ``amqpq.connection`` (RabbitMQ's ``connection`` category), but ``amqpq.channel`` for
the channel error (RabbitMQ logs it from the channel, category ``channel``). Every record
carries structured fields for the JSON log format (:mod:`broker.log_setup`):
``connection`` (the name above), and ``user``, ``vhost``, ``channel`` where known.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pamqp import commands

from amqp_common.errors import AMQPError

if TYPE_CHECKING:
    from amqp_server.connection import Connection

log = logging.getLogger("amqpq.connection")
channel_log = logging.getLogger("amqpq.channel")

#: ``extra`` of the error and warning lines about what a *client* did (a refused login, a
#: protocol error, a dropped socket): ``record.amqp_client_error`` is True, so that a check
#: for the broker's own failures (the fuzz harness) can tell them from ``log.exception``.
CLIENT_ERROR = {"amqp_client_error": True}

#: connection state value -> RabbitMQ's ``connection_state`` in error lines.
_STATE_NAMES = {"start_ok": "starting", "tune_ok": "tuning", "open_wait": "opening",
                "open": "running", "closing": "closing", "closed": "closed"}


def _host_port(addr: tuple[str, int] | None) -> str:
    host, port = addr or ("127.0.0.1", 0)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def connection_name(conn: Connection) -> str:
    """``127.0.0.1:45780 -> 127.0.0.1:5672`` (peer -> local; IPv6 hosts in brackets)."""
    return f"{_host_port(conn.peer)} -> {_host_port(conn.local)}"


def client_provided_name(conn: Connection) -> str | None:
    """The ``connection_name`` client property, when the client sent a string."""
    value = conn.client_properties.get("connection_name")
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return value if isinstance(value, str) and value else None


def method_name(class_id: int, method_id: int) -> str:
    """``queue.declare`` for (50, 10); ``none`` when unknown (RabbitMQ's atom)."""
    cls = commands.INDEX_MAPPING.get((class_id << 16) | method_id)
    return cls.name.lower() if cls is not None else "none"


def fields(conn: Connection, channel: int | None = None,
           client_error: bool = False) -> dict[str, object]:
    """The ``extra`` of a connection's log record: ``connection`` (its name),
    ``client_provided_name``, ``user`` and ``vhost`` once known, ``channel``, and
    :data:`CLIENT_ERROR` when ``client_error``."""
    extra: dict[str, object] = {"connection": connection_name(conn)}
    client_name = client_provided_name(conn)
    if client_name is not None:
        extra["client_provided_name"] = client_name
    if conn.user is not None:
        extra["user"] = conn.user
    if conn.vhost_name:
        extra["vhost"] = conn.vhost_name
    if channel is not None:
        extra["channel"] = channel
    if client_error:
        extra.update(CLIENT_ERROR)
    return extra


def accepting(conn: Connection) -> None:
    log.info("accepting AMQP connection (%s)", connection_name(conn), extra=fields(conn))


def client_name_given(conn: Connection) -> None:
    """Connection.StartOk carried a ``connection_name``: say so (info)."""
    name = client_provided_name(conn)
    if name is not None:
        log.info("connection (%s) has a client-provided name: %s", connection_name(conn), name,
                 extra=fields(conn))


def _named(conn: Connection) -> str:
    name = client_provided_name(conn)
    return connection_name(conn) + (f" - {name}" if name else "")


def authenticated(conn: Connection) -> None:
    """Connection.Open succeeded (info)."""
    log.info("connection (%s): user '%s' authenticated and granted access to vhost '%s'",
             _named(conn), conn.user, conn.vhost_name, extra=fields(conn))


def closing(conn: Connection, reason: str | None = None, level: int = logging.INFO) -> None:
    """The connection is gone: ``closing AMQP connection (...)``, with ``:\\n{reason}``."""
    details = _named(conn)
    if conn.user is not None:
        details += f", vhost: '{conn.vhost_name or 'none'}', user: '{conn.user}'"
    extra = fields(conn, client_error=True)
    if reason is None:
        log.log(level, "closing AMQP connection (%s)", details, extra=extra)
    else:
        log.log(level, "closing AMQP connection (%s):\n%s", details, reason, extra=extra)


def connection_error(conn: Connection, channel: int, exc: AMQPError, class_id: int,
                     method_id: int) -> None:
    """A hard error about to close the connection (error); a refused login's reason is
    :attr:`LoginRefused.log_text` ``"PLAIN login refused: user 'x' - invalid credentials"``."""
    state = _STATE_NAMES.get(conn.state.value, conn.state.value)
    name = connection_name(conn)
    text = getattr(exc, "log_text", None) or exc.explanation
    extra = fields(conn, channel or None, client_error=True)
    if state in ("running", "closing"):
        quoted = text.replace("\\", "\\\\").replace('"', '\\"')
        log.error('Error on AMQP connection (%s, vhost: \'%s\', user: \'%s\', state: %s), '
                  'channel %d:\n operation %s caused a connection exception %s: "%s"',
                  name, conn.vhost_name, conn.user, state, channel,
                  method_name(class_id, method_id), exc.code.name.lower(), quoted,
                  extra=extra)
    elif conn.user is not None:
        log.error("Error on AMQP connection (%s, user: '%s', state: %s):\n%s",
                  name, conn.user, state, text, extra=extra)
    else:
        log.error("Error on AMQP connection (%s, state: %s):\n%s", name, state, text,
                  extra=extra)


def channel_error(conn: Connection, channel: int, exc: AMQPError, class_id: int,
                  method_id: int) -> None:
    """A soft error closing one channel (error, logger ``amqpq.channel``)."""
    channel_log.error("Channel error on connection (%s, vhost: '%s', user: '%s'), channel %d:\n"
              "operation %s caused a channel exception %s: %s",
              connection_name(conn), conn.vhost_name, conn.user, channel,
              method_name(class_id, method_id), exc.code.name.lower(), exc.explanation,
              extra=fields(conn, channel, client_error=True))


def bad_header(header: bytes) -> str:
    """``{bad_header,<<"GET / HT">>}``: RabbitMQ's reason for a wrong protocol header
    (printable bytes as text, others as Erlang byte values)."""
    if all(32 <= b < 127 for b in header):
        text = header.decode("ascii").replace("\\", "\\\\").replace('"', '\\"')
        return '{bad_header,<<"' + text + '">>}'
    return "{bad_header,<<" + ",".join(str(b) for b in header) + ">>}"
