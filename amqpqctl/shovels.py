"""``amqpqctl`` commands for runtime parameters and dynamic shovels, as rabbitmqctl spells
them.

``set_parameter [-p VHOST] COMPONENT NAME VALUE`` (e.g. ``set_parameter shovel s1
'{"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://", "dest-queue": "b"}'``),
``clear_parameter [-p VHOST] COMPONENT NAME``, ``list_parameters [-p VHOST]`` (columns
``component name value``); ``shovel_status`` (rabbitmqctl's columns ``destination
last_changed name source state termination_reason type vhost``; ``--formatter json`` adds
the ends: ``destination_protocol``, ``destination_queue``..., ``source_queue``...),
``delete_shovel [-p VHOST] NAME`` and ``restart_shovel [-p VHOST] NAME``. A shovel that
does not exist is one line on stderr and exit 1 (rabbitmqctl: 69).

Source: https://www.rabbitmq.com/docs/man/rabbitmqctl.8 (set_parameter, shovel_status,
delete_shovel, restart_shovel), checked against rabbitmqctl 3.10.8.
"""

from __future__ import annotations

import json
from typing import Any

import click

from amqpqctl.base import Context, call, json_arg, output_options, vhost_option
from amqpqctl.client import path
from amqpqctl.output import Output, emit

STATUS_COLUMNS = ["destination", "last_changed", "name", "source", "state",
                  "termination_reason", "type", "vhost"]
#: /api/shovels field -> rabbitmqctl shovel_status field (the ends, JSON output)
_ENDS = {"dest_protocol": "destination_protocol", "dest_queue": "destination_queue",
         "dest_exchange": "destination_exchange",
         "dest_exchange_key": "destination_exchange_key", "src_protocol": "source_protocol",
         "src_queue": "source_queue", "src_exchange": "source_exchange",
         "src_exchange_key": "source_exchange_key"}


@click.command("set_parameter")
@click.argument("component")
@click.argument("name")
@click.argument("value")
@vhost_option
@output_options
def set_parameter(ctx: Context, component: str, name: str, value: str, vhost: str | None,
                  out: Output) -> None:
    """Set runtime parameter NAME of COMPONENT (e.g. shovel) to the JSON VALUE."""
    vhost = ctx.resolve(vhost)
    parsed = json_arg(value, "value")
    out.progress(f'Setting runtime parameter "{name}" for component "{component}" to '
                 f'"{value}" in vhost "{vhost}" ...')
    call(ctx, "PUT", path("parameters", component, vhost, name),
         {"component": component, "vhost": vhost, "name": name, "value": parsed}, vhost=vhost)


@click.command("clear_parameter")
@click.argument("component")
@click.argument("name")
@vhost_option
@output_options
def clear_parameter(ctx: Context, component: str, name: str, vhost: str | None,
                    out: Output) -> None:
    """Remove runtime parameter NAME of COMPONENT."""
    vhost = ctx.resolve(vhost)
    out.progress(f'Clearing runtime parameter "{name}" for component "{component}" on '
                 f'vhost "{vhost}" ...')
    call(ctx, "DELETE", path("parameters", component, vhost, name), vhost=vhost,
         missing="Parameter does not exist")


@click.command("list_parameters")
@vhost_option
@output_options
def list_parameters(ctx: Context, vhost: str | None, out: Output) -> None:
    """List the vhost's runtime parameters (component, name, value)."""
    vhost = ctx.resolve(vhost)
    rows = [p for p in call(ctx, "GET", path("parameters"), vhost=vhost)
            if p.get("vhost") == vhost]
    emit([{"component": p["component"], "name": p["name"],
           "value": json.dumps(p["value"], separators=(",", ":"))} for p in rows],
         ["component", "name", "value"], out,
         f'Listing runtime parameters for vhost "{vhost}" ...')


def _status_row(row: dict[str, Any]) -> dict[str, Any]:
    out = {"destination": row.get("dest_uri", ""), "last_changed": row.get("timestamp", ""),
           "name": row["name"], "source": row.get("src_uri", ""), "state": row["state"],
           "termination_reason": row.get("reason") or "", "type": row["type"],
           "vhost": row["vhost"]}
    for api, ctl in _ENDS.items():
        if api in row:
            out[ctl] = row[api]
    return out


@click.command("shovel_status")
@output_options
def shovel_status(ctx: Context, out: Output) -> None:
    """Show every shovel's state (rabbitmqctl's columns; JSON adds the ends)."""
    overview = call(ctx, "GET", path("overview"))
    rows = [_status_row(r) for r in call(ctx, "GET", path("shovels"))]
    if out.formatter == "json":
        emit(rows, None, out)
        return
    emit(rows, STATUS_COLUMNS, out, f"Shovel status on node {overview.get('node')}")


@click.command("delete_shovel")
@click.argument("name")
@vhost_option
@output_options
def delete_shovel(ctx: Context, name: str, vhost: str | None, out: Output) -> None:
    """Delete dynamic shovel NAME (its runtime parameter)."""
    vhost = ctx.resolve(vhost)
    out.progress(f"Deleting shovel {name} in vhost {vhost}")
    call(ctx, "DELETE", path("parameters", "shovel", vhost, name), vhost=vhost,
         missing=f"shovel '{name}' in vhost '{vhost}' does not exist")


@click.command("restart_shovel")
@click.argument("name")
@vhost_option
@output_options
def restart_shovel(ctx: Context, name: str, vhost: str | None, out: Output) -> None:
    """Restart dynamic shovel NAME (its connections are closed and opened again)."""
    vhost = ctx.resolve(vhost)
    node = call(ctx, "GET", path("overview")).get("node")
    out.progress(f"Restarting dynamic Shovel {name} in virtual host {vhost} on node {node}")
    call(ctx, "DELETE", path("shovels", "vhost", vhost, name, "restart"), vhost=vhost,
         missing=f"shovel '{name}' in vhost '{vhost}' does not exist")


COMMANDS = [set_parameter, clear_parameter, list_parameters, shovel_status, delete_shovel,
            restart_shovel]
