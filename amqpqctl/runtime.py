"""``amqpqctl`` commands for connections, consumers, definitions and broker status.

``list_connections`` defaults to rabbitmqctl's ``user peer_host peer_port state`` (add
``name`` to get what ``close_connection`` takes); ``export_definitions FILE`` writes the
JSON (``-`` for stdout) and ``import_definitions FILE`` posts it (all or nothing).

Source: https://www.rabbitmq.com/docs/man/rabbitmqctl.8, https://www.rabbitmq.com/docs/definitions.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from amqpqctl.base import (
    Context,
    call,
    format_option,
    pass_context,
    progress,
    select_columns,
    vhost_option,
)
from amqpqctl.client import CtlError, path
from amqpqctl.output import emit

CONNECTION_COLUMNS = {"name", "user", "vhost", "peer_host", "peer_port", "host", "port",
                      "state", "channels", "protocol", "auth_mechanism", "timeout",
                      "frame_max", "channel_max", "client_properties", "connected_at",
                      "user_provided_name", "ssl", "node", "type"}
CONSUMER_COLUMNS = {"queue_name", "channel_name", "connection_name", "consumer_tag",
                    "ack_required", "prefetch_count", "active", "activity_status",
                    "arguments", "exclusive"}


@click.command("list_connections")
@click.argument("columns", nargs=-1)
@format_option
@pass_context
def list_connections(ctx: Context, columns: tuple[str, ...], fmt: str | None) -> None:
    """List client connections (default columns: user peer_host peer_port state)."""
    _, fmt = ctx.resolve(None, fmt)
    cols = select_columns(columns, ["user", "peer_host", "peer_port", "state"],
                          CONNECTION_COLUMNS)
    rows = call(ctx, "GET", path("connections"))
    emit(rows, cols, fmt, None if ctx.quiet else "Listing connections ...")


@click.command("close_connection")
@click.argument("name")
@click.argument("explanation", required=False)
@format_option
@pass_context
def close_connection(ctx: Context, name: str, explanation: str | None,
                     fmt: str | None) -> None:
    """Close connection NAME (``127.0.0.1:54321 -> 127.0.0.1:5672``) with 320
    CONNECTION_FORCED and EXPLANATION (default: Closed via management plugin)."""
    progress(ctx, fmt, f'Closing connection "{name}", reason: '
                       f'{explanation or "Closed via management plugin"}...')
    headers = {"X-Reason": explanation} if explanation else None
    call(ctx, "DELETE", path("connections", name), headers=headers,
         what=f"connection '{name}'")


def _consumer_row(c: dict[str, Any]) -> dict[str, Any]:
    ch = c.get("channel_details") or {}
    return {"queue_name": c["queue"]["name"], "channel_name": ch.get("name"),
            "connection_name": ch.get("connection_name"), "consumer_tag": c["consumer_tag"],
            "ack_required": c["ack_required"], "prefetch_count": c["prefetch_count"],
            "active": c["active"], "activity_status": c.get("activity_status"),
            "arguments": c["arguments"], "exclusive": c["exclusive"]}


@click.command("list_consumers")
@click.argument("columns", nargs=-1)
@vhost_option
@format_option
@pass_context
def list_consumers(ctx: Context, columns: tuple[str, ...], vhost: str | None,
                   fmt: str | None) -> None:
    """List a vhost's consumers."""
    vhost, fmt = ctx.resolve(vhost, fmt)
    default = ["queue_name", "channel_name", "consumer_tag", "ack_required",
               "prefetch_count", "active", "arguments"]
    cols = select_columns(columns, default, CONSUMER_COLUMNS)
    rows = [_consumer_row(c) for c in call(ctx, "GET", path("consumers", vhost), vhost=vhost)]
    emit(rows, cols, fmt, None if ctx.quiet else f"Listing consumers in vhost {vhost} ...")


@click.command("export_definitions")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@format_option
@pass_context
def export_definitions(ctx: Context, file: str, fmt: str | None) -> None:
    """Write the broker's definitions (RabbitMQ JSON format) to FILE (``-``: stdout)."""
    doc = call(ctx, "GET", path("definitions"))
    text = json.dumps(doc, indent=2) + "\n"
    if file == "-":
        sys.stdout.write(text)
        return
    progress(ctx, fmt, f'Exporting definitions to "{file}" ...')
    try:
        Path(file).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise CtlError(f"cannot write {file}: {exc.strerror}") from None


@click.command("import_definitions")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@format_option
@pass_context
def import_definitions(ctx: Context, file: str, fmt: str | None) -> None:
    """Import definitions from FILE (``-``: stdin); nothing changes if any entry is bad."""
    try:
        raw = sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")
    except OSError as exc:
        raise CtlError(f"cannot read {file}: {exc.strerror}") from None
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise CtlError(f"{file} is not valid JSON: {exc}") from None
    progress(ctx, fmt, f'Importing definitions in JSON from a file at "{file}" ...')
    call(ctx, "POST", path("definitions"), doc)


@click.command("status")
@format_option
@pass_context
def status(ctx: Context, fmt: str | None) -> None:
    """Show the broker's version, listeners and object counts."""
    _, fmt = ctx.resolve(None, fmt)
    o = call(ctx, "GET", path("overview"))
    if fmt == "json":
        click.echo(json.dumps(o, indent=1))
        return
    totals = o.get("object_totals", {})
    queue_totals = o.get("queue_totals", {})
    lines = [
        f"Status of node {o.get('node')} ...",
        f"Product: {o.get('product_name')} {o.get('product_version')} "
        f"(RabbitMQ {o.get('rabbitmq_version')} compatible)",
        "Listeners:",
        *[f"  {x.get('protocol')}: {x.get('ip_address')}:{x.get('port')}"
          for x in o.get("listeners", [])],
        "Totals:",
        *[f"  {k}: {totals[k]}" for k in sorted(totals)],
        f"  messages: {queue_totals.get('messages', 0)}",
        f"  messages_ready: {queue_totals.get('messages_ready', 0)}",
        f"  messages_unacknowledged: {queue_totals.get('messages_unacknowledged', 0)}",
    ]
    click.echo("\n".join(lines))


COMMANDS = [list_connections, close_connection, list_consumers, export_definitions,
            import_definitions, status]
