"""``amqpqctl`` federation commands, as rabbitmqctl spells them with the federation plugin:
``federation_status`` (rabbitmqctl 3.10.8's fields ``error exchange id last_changed
local_connection queue status type upstream upstream_exchange upstream_queue uri vhost``,
empty strings where a link has none) and ``restart_federation_link LINK_ID`` (``Link with
the given ID was not found`` and exit 1 when no link has that id; rabbitmqctl exits 69).
Upstreams and upstream sets are runtime parameters: ``set_parameter federation-upstream
NAME JSON``.

Source: https://www.rabbitmq.com/docs/federation#status, rabbitmqctl 3.10.8 (checked).
"""

from __future__ import annotations

from typing import Any

import click

from amqpqctl.base import Context, call, output_options
from amqpqctl.client import path
from amqpqctl.output import Output, emit

STATUS_COLUMNS = ["error", "exchange", "id", "last_changed", "local_connection", "queue",
                  "status", "type", "upstream", "upstream_exchange", "upstream_queue", "uri",
                  "vhost"]


def _status_row(row: dict[str, Any]) -> dict[str, Any]:
    out = {c: row.get(c) or "" for c in STATUS_COLUMNS}
    out["last_changed"] = row.get("timestamp", "")
    return out


@click.command("federation_status")
@output_options
def federation_status(ctx: Context, out: Output) -> None:
    """Show every federation link's status (rabbitmqctl's fields)."""
    node = call(ctx, "GET", path("overview")).get("node")
    rows = [_status_row(r) for r in call(ctx, "GET", path("federation-links"))]
    emit(rows, STATUS_COLUMNS, out, f"Listing federation links on node {node}...")


@click.command("restart_federation_link")
@click.argument("link_id")
@output_options
def restart_federation_link(ctx: Context, link_id: str, out: Output) -> None:
    """Restart federation link LINK_ID (its connections closed and opened again)."""
    node = call(ctx, "GET", path("overview")).get("node")
    out.progress(f"Restarting federation link {link_id} on node {node}")
    for row in call(ctx, "GET", path("federation-links")):
        if row.get("id") == link_id:
            call(ctx, "DELETE", path("federation-links", "vhost", row["vhost"], link_id,
                                     row.get("node", node), "restart"), vhost=row["vhost"])
            return
    raise click.ClickException("Link with the given ID was not found")


COMMANDS = [federation_status, restart_federation_link]
