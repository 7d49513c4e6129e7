"""``amqpqctl`` commands for what clients hold open: connections, channels, consumers.

Columns and default columns are rabbitmqctl's:

* ``list_connections``: ``user peer_host peer_port state`` (add ``name``: what
  ``close_connection`` takes);
* ``list_channels``: ``pid user consumer_count messages_unacknowledged``; also
  ``connection name number vhost transactional confirm messages_uncommitted
  acks_uncommitted messages_unconfirmed prefetch_count global_prefetch_count``;
* ``list_consumers``: ``queue_name channel_pid consumer_tag ack_required prefetch_count
  active arguments``; also ``activity_status``.

amqpq has no Erlang processes: a channel's ``pid`` (and a consumer's ``channel_pid``) is
the channel's name as the management API gives it (``127.0.0.1:50432 -> 127.0.0.1:5672
(1)``), and a channel's ``connection`` is its connection's name, where rabbitmqctl prints
``<rabbit@host.1795469201.643.0>``. ``arguments`` are a JSON object (``{"x-priority":3}``)
where rabbitmqctl prints an Erlang table (``[{"x-priority",3}]``).

``list_channels`` lists every channel, as rabbitmqctl; ``-p VHOST`` on the command line
limits it to that vhost's. JSON with no columns gives the API's objects with these columns
added.

Source: https://www.rabbitmq.com/docs/man/rabbitmqctl.8 (list_connections, list_channels,
list_consumers), https://www.rabbitmq.com/docs/management#http-api.
"""

from __future__ import annotations

from typing import Any

import click

from amqpqctl.base import (
    Context,
    call,
    columns_argument,
    output_options,
    show,
    vhost_option,
)
from amqpqctl.client import path
from amqpqctl.output import Output

CONNECTION_COLUMNS = {"name", "user", "vhost", "peer_host", "peer_port", "host", "port",
                      "state", "channels", "protocol", "auth_mechanism", "timeout",
                      "frame_max", "channel_max", "client_properties", "connected_at",
                      "user_provided_name", "ssl", "node", "type"}
CHANNEL_COLUMNS = {"pid", "connection", "name", "number", "user", "vhost", "transactional",
                   "confirm", "consumer_count", "messages_unacknowledged",
                   "messages_uncommitted", "acks_uncommitted", "messages_unconfirmed",
                   "prefetch_count", "global_prefetch_count"}
CONSUMER_COLUMNS = {"queue_name", "channel_pid", "consumer_tag", "ack_required",
                    "prefetch_count", "active", "activity_status", "arguments",
                    "channel_name", "connection_name", "exclusive"}


@click.command("list_connections")
@columns_argument(CONNECTION_COLUMNS)
@output_options
def list_connections(ctx: Context, columns: tuple[str, ...], out: Output) -> None:
    """List client connections (default columns: user peer_host peer_port state)."""
    show(out, call(ctx, "GET", path("connections")), columns,
         ["user", "peer_host", "peer_port", "state"], CONNECTION_COLUMNS,
         "Listing connections ...")


@click.command("close_connection")
@click.argument("name")
@click.argument("explanation", required=False)
@output_options
def close_connection(ctx: Context, name: str, explanation: str | None, out: Output) -> None:
    """Close connection NAME (``127.0.0.1:54321 -> 127.0.0.1:5672``) with 320
    CONNECTION_FORCED and EXPLANATION (default: Closed via management plugin)."""
    out.progress(f'Closing connection "{name}", reason: '
                 f'{explanation or "Closed via management plugin"}...')
    headers = {"X-Reason": explanation} if explanation else None
    call(ctx, "DELETE", path("connections", name), headers=headers,
         what=f"connection '{name}'")


def _channel_row(ch: dict[str, Any]) -> dict[str, Any]:
    """The API's channel with rabbitmqctl's ``pid`` and ``connection`` added."""
    conn = ch.get("connection_details") or {}
    return {**ch, "pid": ch.get("name"), "connection": conn.get("name")}


@click.command("list_channels")
@columns_argument(CHANNEL_COLUMNS)
@vhost_option
@output_options
def list_channels(ctx: Context, columns: tuple[str, ...], vhost: str | None,
                  out: Output) -> None:
    """List channels (default columns: pid user consumer_count messages_unacknowledged;
    pid is the channel's name). Every vhost's, or with -p only that one's."""
    scope = ctx.scope(vhost)
    url = path("channels") if scope is None else path("vhosts", scope, "channels")
    rows = [_channel_row(ch) for ch in call(ctx, "GET", url, vhost=scope)]
    show(out, rows, columns, ["pid", "user", "consumer_count", "messages_unacknowledged"],
         CHANNEL_COLUMNS, "Listing channels ...")


def _consumer_row(c: dict[str, Any]) -> dict[str, Any]:
    """The API's consumer with rabbitmqctl's column names added."""
    ch = c.get("channel_details") or {}
    return {**c, "queue_name": (c.get("queue") or {}).get("name"),
            "channel_pid": ch.get("name"), "channel_name": ch.get("name"),
            "connection_name": ch.get("connection_name")}


@click.command("list_consumers")
@columns_argument(CONSUMER_COLUMNS)
@vhost_option
@output_options
def list_consumers(ctx: Context, columns: tuple[str, ...], vhost: str | None,
                   out: Output) -> None:
    """List a vhost's consumers (default columns: queue_name channel_pid consumer_tag
    ack_required prefetch_count active arguments; channel_pid is the channel's name)."""
    vhost = ctx.resolve(vhost)
    default = ["queue_name", "channel_pid", "consumer_tag", "ack_required", "prefetch_count",
               "active", "arguments"]
    rows = [_consumer_row(c) for c in call(ctx, "GET", path("consumers", vhost), vhost=vhost)]
    show(out, rows, columns, default, CONSUMER_COLUMNS, f"Listing consumers in vhost {vhost} ...")


WORKER_COLUMNS = {"index", "pid", "up", "connections", "channels", "consumers", "queues",
                  "messages_ready", "messages_unacknowledged", "mem_alarm",
                  "disk_free_alarm"}


@click.command("list_workers")
@columns_argument(WORKER_COLUMNS)
@output_options
def list_workers(ctx: Context, columns: tuple[str, ...], out: Output) -> None:
    """List the broker's worker processes (amqpq's own, ``--workers N``; default columns:
    index pid up connections queues). Which worker a queue lives on: ``list_queues name
    worker``."""
    show(out, call(ctx, "GET", "/api/workers"), columns,
         ["index", "pid", "up", "connections", "queues"], WORKER_COLUMNS,
         "Listing workers ...")


COMMANDS = [list_connections, close_connection, list_channels, list_consumers, list_workers]
