"""``amqpqctl`` commands for vhosts, exchanges, queues, bindings and policies.

Names, default columns and progress lines follow rabbitmqctl (``list_queues`` prints
``name messages``); the declare commands, which rabbitmqctl lacks, take rabbitmqadmin's
defaults (durable).

Source: https://www.rabbitmq.com/docs/man/rabbitmqctl.8, https://www.rabbitmq.com/docs/management-cli.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import click

from amqpqctl.base import (
    Context,
    call,
    columns_argument,
    json_arg,
    output_options,
    show,
    vhost_option,
)
from amqpqctl.client import CtlError, path
from amqpqctl.output import Output

#: rabbitmqctl's ``list_queues`` columns and the management API's queue fields; any other
#: key of the API's queue objects is accepted too (so new fields need no change here).
#: rabbitmqctl's Erlang-process columns (pid, owner_pid, exclusive_consumer_pid, slave_pids,
#: synchronised_slave_pids, leader, members, online) and disk_reads/disk_writes are empty.
QUEUE_COLUMNS = {
    "name", "vhost", "durable", "auto_delete", "exclusive", "arguments", "policy",
    "operator_policy", "effective_policy_definition", "messages", "messages_ready",
    "messages_unacknowledged", "messages_ram", "messages_ready_ram",
    "messages_unacknowledged_ram", "messages_persistent", "messages_paged_out",
    "message_bytes", "message_bytes_ready", "message_bytes_unacknowledged",
    "message_bytes_ram", "message_bytes_persistent", "message_bytes_paged_out", "consumers",
    "consumer_utilisation", "consumer_capacity", "exclusive_consumer_tag",
    "single_active_consumer_tag", "memory", "state", "type", "node", "head_message_timestamp",
    "idle_since", "message_stats", "backing_queue_status", "disk_reads", "disk_writes",
    "pid", "owner_pid", "exclusive_consumer_pid", "slave_pids", "synchronised_slave_pids",
    "leader", "members", "online", "worker",
}
EXCHANGE_COLUMNS = {"name", "vhost", "type", "durable", "auto_delete", "internal",
                    "arguments", "policy"}
BINDING_COLUMNS = {"source_name", "source_kind", "destination_name", "destination_kind",
                   "routing_key", "arguments", "vhost", "properties_key"}
VHOST_COLUMNS = {"name", "description", "tags", "tracing", "messages", "messages_ready",
                 "messages_unacknowledged", "default_queue_type", "cluster_state"}
POLICY_COLUMNS = {"vhost", "name", "pattern", "apply-to", "definition", "priority"}


# ---- vhosts --------------------------------------------------------------------------------


@click.command("list_vhosts")
@columns_argument(VHOST_COLUMNS)
@output_options
def list_vhosts(ctx: Context, columns: tuple[str, ...], out: Output) -> None:
    """List virtual hosts (columns: name, description, tags, tracing, messages...)."""
    show(out, call(ctx, "GET", path("vhosts")), columns, ["name"], VHOST_COLUMNS,
         "Listing vhosts ...")


@click.command("add_vhost")
@click.argument("name")
@click.option("--description", default=None)
@click.option("--tags", default=None, help="comma-separated tags")
@output_options
def add_vhost(ctx: Context, name: str, description: str | None, tags: str | None,
              out: Output) -> None:
    """Create a virtual host (the user gets full permissions in it)."""
    body: dict[str, Any] = {}
    if description is not None:
        body["description"] = description
    if tags is not None:
        body["tags"] = tags
    out.progress(f'Adding vhost "{name}" ...')
    call(ctx, "PUT", path("vhosts", name), body)


@click.command("delete_vhost")
@click.argument("name")
@output_options
def delete_vhost(ctx: Context, name: str, out: Output) -> None:
    """Delete a virtual host and everything in it."""
    out.progress(f'Deleting vhost "{name}" ...')
    call(ctx, "DELETE", path("vhosts", name), what=f"vhost '{name}'")


# ---- exchanges -----------------------------------------------------------------------------


@click.command("list_exchanges")
@columns_argument(EXCHANGE_COLUMNS)
@vhost_option
@output_options
def list_exchanges(ctx: Context, columns: tuple[str, ...], vhost: str | None,
                   out: Output) -> None:
    """List a vhost's exchanges (default columns: name type)."""
    vhost = ctx.resolve(vhost)
    rows = call(ctx, "GET", path("exchanges", vhost), vhost=vhost)
    show(out, rows, columns, ["name", "type"], EXCHANGE_COLUMNS,
         f"Listing exchanges for vhost {vhost} ...")


@click.command("declare_exchange")
@click.argument("name")
@click.argument("type_name", metavar="TYPE", default="direct")
@click.option("--durable/--transient", default=True, show_default=True)
@click.option("--auto-delete", is_flag=True)
@click.option("--internal", is_flag=True)
@click.option("--arguments", default=None, help='JSON object, e.g. {"alternate-exchange":"ae"}')
@vhost_option
@output_options
def declare_exchange(ctx: Context, name: str, type_name: str, durable: bool,
                     auto_delete: bool, internal: bool, arguments: str | None,
                     vhost: str | None, out: Output) -> None:
    """Declare an exchange (TYPE: direct, fanout, topic, headers; default direct)."""
    vhost = ctx.resolve(vhost)
    body = {"type": type_name, "durable": durable, "auto_delete": auto_delete,
            "internal": internal, "arguments": json_arg(arguments, "--arguments")}
    out.progress(f'Declaring exchange "{name}" in vhost "{vhost}" ...')
    call(ctx, "PUT", path("exchanges", vhost, name), body, vhost=vhost)


@click.command("delete_exchange")
@click.argument("name")
@click.option("--if-unused", is_flag=True)
@vhost_option
@output_options
def delete_exchange(ctx: Context, name: str, if_unused: bool, vhost: str | None,
                    out: Output) -> None:
    """Delete an exchange."""
    vhost = ctx.resolve(vhost)
    out.progress(f'Deleting exchange "{name}" in vhost "{vhost}" ...')
    query = "?if-unused=true" if if_unused else ""
    call(ctx, "DELETE", path("exchanges", vhost, name) + query, vhost=vhost,
         what=f"exchange '{name}' in vhost '{vhost}'")


# ---- queues --------------------------------------------------------------------------------


@click.command("list_queues")
@columns_argument(QUEUE_COLUMNS)
@vhost_option
@output_options
def list_queues(ctx: Context, columns: tuple[str, ...], vhost: str | None,
                out: Output) -> None:
    """List a vhost's queues (default columns: name messages; any field of the API's queue
    object, or a dotted path into one, is a column)."""
    vhost = ctx.resolve(vhost)
    rows = call(ctx, "GET", path("queues", vhost), vhost=vhost)
    show(out, rows, columns, ["name", "messages"], QUEUE_COLUMNS,
         f"Listing queues for vhost {vhost} ...")


@click.command("declare_queue")
@click.argument("name")
@click.option("--durable/--transient", default=True, show_default=True)
@click.option("--auto-delete", is_flag=True)
@click.option("--arguments", default=None, help='JSON object, e.g. {"x-max-length":10}')
@vhost_option
@output_options
def declare_queue(ctx: Context, name: str, durable: bool, auto_delete: bool,
                  arguments: str | None, vhost: str | None, out: Output) -> None:
    """Declare a queue."""
    vhost = ctx.resolve(vhost)
    body = {"durable": durable, "auto_delete": auto_delete,
            "arguments": json_arg(arguments, "--arguments")}
    out.progress(f'Declaring queue "{name}" in vhost "{vhost}" ...')
    call(ctx, "PUT", path("queues", vhost, name), body, vhost=vhost)


@click.command("delete_queue")
@click.argument("name")
@click.option("--if-unused", is_flag=True)
@click.option("--if-empty", is_flag=True)
@vhost_option
@output_options
def delete_queue(ctx: Context, name: str, if_unused: bool, if_empty: bool, vhost: str | None,
                 out: Output) -> None:
    """Delete a queue."""
    vhost = ctx.resolve(vhost)
    out.progress(f"Deleting queue '{name}' on vhost '{vhost}' ...")
    flags = [f for f, on in (("if-unused=true", if_unused), ("if-empty=true", if_empty)) if on]
    query = "?" + "&".join(flags) if flags else ""
    call(ctx, "DELETE", path("queues", vhost, name) + query, vhost=vhost,
         what=f"queue '{name}' in vhost '{vhost}'")


@click.command("purge_queue")
@click.argument("name")
@vhost_option
@output_options
def purge_queue(ctx: Context, name: str, vhost: str | None, out: Output) -> None:
    """Remove every ready message from a queue."""
    vhost = ctx.resolve(vhost)
    out.progress(f"Purging queue '{name}' in vhost '{vhost}' ...")
    call(ctx, "DELETE", path("queues", vhost, name, "contents"), vhost=vhost,
         what=f"queue '{name}' in vhost '{vhost}'")


# ---- bindings ------------------------------------------------------------------------------


def _binding_row(b: dict[str, Any]) -> dict[str, Any]:
    """The API's binding with rabbitmqctl's column names added."""
    return {**b, "source_name": b["source"], "source_kind": "exchange",
            "destination_name": b["destination"], "destination_kind": b["destination_type"],
            "routing_key": b["routing_key"], "arguments": b["arguments"], "vhost": b["vhost"],
            "properties_key": b.get("properties_key")}


@click.command("list_bindings")
@columns_argument(BINDING_COLUMNS)
@vhost_option
@output_options
def list_bindings(ctx: Context, columns: tuple[str, ...], vhost: str | None,
                  out: Output) -> None:
    """List a vhost's bindings (rabbitmqctl's default columns)."""
    vhost = ctx.resolve(vhost)
    default = ["source_name", "source_kind", "destination_name", "destination_kind",
               "routing_key", "arguments"]
    rows = [_binding_row(b) for b in call(ctx, "GET", path("bindings", vhost), vhost=vhost)]
    show(out, rows, columns, default, BINDING_COLUMNS, f"Listing bindings for vhost {vhost}...")


def _kind(destination_type: str) -> str:
    return "q" if destination_type == "queue" else "e"


_destination_type = click.option("--destination-type", "-t", default="queue",
                                  type=click.Choice(["queue", "exchange"]),
                                  show_default=True)


@click.command("bind")
@click.argument("source")
@click.argument("destination")
@_destination_type
@click.option("--routing-key", "-k", default="", help="binding key")
@click.option("--arguments", default=None, help='JSON object, e.g. {"x-match":"all"}')
@vhost_option
@output_options
def bind(ctx: Context, source: str, destination: str, destination_type: str,
         routing_key: str, arguments: str | None, vhost: str | None, out: Output) -> None:
    """Bind a queue (or, with -t exchange, an exchange) to exchange SOURCE."""
    vhost = ctx.resolve(vhost)
    body = {"routing_key": routing_key, "arguments": json_arg(arguments, "--arguments")}
    out.progress(f'Binding {destination_type} "{destination}" to exchange "{source}" '
                        f'with routing key "{routing_key}" in vhost "{vhost}" ...')
    call(ctx, "POST", path("bindings", vhost, "e", source, _kind(destination_type),
                           destination), body, vhost=vhost)


@click.command("unbind")
@click.argument("source")
@click.argument("destination")
@_destination_type
@click.option("--routing-key", "-k", default="", help="binding key")
@click.option("--arguments", default=None, help="JSON object (as bound)")
@vhost_option
@output_options
def unbind(ctx: Context, source: str, destination: str, destination_type: str,
           routing_key: str, arguments: str | None, vhost: str | None,
           out: Output) -> None:
    """Remove the binding of DESTINATION to SOURCE with that routing key and arguments."""
    vhost = ctx.resolve(vhost)
    args = json_arg(arguments, "--arguments")
    between = path("bindings", vhost, "e", source, _kind(destination_type), destination)
    found = [b for b in call(ctx, "GET", between, vhost=vhost)
             if b["routing_key"] == routing_key and (b["arguments"] or {}) == args]
    if not found:
        raise CtlError(f"no binding from exchange '{source}' to {destination_type} "
                       f"'{destination}' with routing key '{routing_key}' in vhost '{vhost}'")
    out.progress(f'Unbinding {destination_type} "{destination}" from exchange '
                        f'"{source}" in vhost "{vhost}" ...')
    call(ctx, "DELETE", f"{between}/{quote(found[0]['properties_key'], safe='')}", vhost=vhost)


# ---- policies ------------------------------------------------------------------------------


def _policy_commands(resource: str, noun: str, plural: str, default_apply_to: str
                     ) -> list[click.Command]:
    """``list_<plural>``, ``set_<noun>`` and ``clear_<noun>`` over ``/api/<resource>``
    (policies and operator policies share them, as rabbitmqctl's verbs do)."""
    label = noun.replace("_", " ")

    @click.command(f"list_{plural}")
    @columns_argument(POLICY_COLUMNS)
    @vhost_option
    @output_options
    def list_(ctx: Context, columns: tuple[str, ...], vhost: str | None,
              out: Output) -> None:
        vhost = ctx.resolve(vhost)
        default = ["vhost", "name", "pattern", "apply-to", "definition", "priority"]
        rows = call(ctx, "GET", path(resource, vhost), vhost=vhost)
        show(out, rows, columns, default, POLICY_COLUMNS,
             f'Listing {label.replace("policy", "policies")} for vhost "{vhost}" ...')

    @click.command(f"set_{noun}")
    @click.argument("name")
    @click.argument("pattern")
    @click.argument("definition")
    @click.option("--priority", default=0, show_default=True, type=int)
    @click.option("--apply-to", default=default_apply_to, show_default=True,
                  type=click.Choice(["all", "queues", "exchanges", "classic_queues",
                                     "quorum_queues"]))
    @vhost_option
    @output_options
    def set_(ctx: Context, name: str, pattern: str, definition: str, priority: int,
             apply_to: str, vhost: str | None, out: Output) -> None:
        vhost = ctx.resolve(vhost)
        body = {"pattern": pattern, "definition": json_arg(definition, "definition"),
                "priority": priority, "apply-to": apply_to}
        out.progress(f'Setting {label} "{name}" for pattern "{pattern}" to '
                            f'"{json.dumps(body["definition"])}" with priority "{priority}" '
                            f'for vhost "{vhost}" ...')
        call(ctx, "PUT", path(resource, vhost, name), body, vhost=vhost)

    @click.command(f"clear_{noun}")
    @click.argument("name")
    @vhost_option
    @output_options
    def clear(ctx: Context, name: str, vhost: str | None, out: Output) -> None:
        vhost = ctx.resolve(vhost)
        out.progress(f'Clearing {label} "{name}" on vhost "{vhost}" ...')
        call(ctx, "DELETE", path(resource, vhost, name), vhost=vhost,
             what=f"{label} '{name}' in vhost '{vhost}'")

    list_.help = f"List a vhost's {label.replace('policy', 'policies')}."
    set_.help = f"Set {label} NAME: PATTERN matches names, DEFINITION is a JSON object."
    clear.help = f"Remove {label} NAME."
    return [list_, set_, clear]


COMMANDS = [list_vhosts, add_vhost, delete_vhost, list_exchanges, declare_exchange,
            delete_exchange, list_queues, declare_queue, delete_queue, purge_queue,
            list_bindings, bind, unbind,
            *_policy_commands("policies", "policy", "policies", "all"),
            *_policy_commands("operator-policies", "operator_policy", "operator_policies",
                              "queues")]
