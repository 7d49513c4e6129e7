"""``amqpqctl`` commands for definitions and broker status.

``export_definitions FILE`` writes the broker's definitions as JSON (``-``: stdout),
``import_definitions FILE`` posts them (all or nothing); with ``-p VHOST`` on the command
line, only that vhost's (the management API's ``/api/definitions/{vhost}``: parameters,
policies, queues, exchanges, bindings; no users, vhosts or permissions), as rabbitmqadmin's
``-V``. rabbitmqctl's ``--format erlang`` is not supported (``--format`` is the formatter).

``await_startup [-t SECONDS]`` waits until the node's management API answers (a node serves
it once it has read its data directory and, in a cluster, the metadata);
``await_online_nodes COUNT [-t SECONDS]`` until the cluster has COUNT running nodes, as
seen by that node. Both wait 300 s by default, as rabbitmqctl's, retrying while nothing
listens yet, and exit 75 (EX_TEMPFAIL, rabbitmqctl's code for a timeout) when time is up.

Source: https://www.rabbitmq.com/docs/man/rabbitmqctl.8, https://www.rabbitmq.com/docs/definitions.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import click

from amqpqctl.base import Context, call, output_options, vhost_option
from amqpqctl.client import CtlError, HttpError, Unreachable, path
from amqpqctl.output import Output


def _definitions_url(vhost: str | None) -> str:
    return path("definitions") if vhost is None else path("definitions", vhost)


@click.command("export_definitions")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@vhost_option
@output_options
def export_definitions(ctx: Context, file: str, vhost: str | None, out: Output) -> None:
    """Write the broker's definitions (RabbitMQ JSON format) to FILE (``-``: stdout); with
    -p VHOST only that vhost's."""
    scope = ctx.scope(vhost)
    doc = call(ctx, "GET", _definitions_url(scope), vhost=scope)
    text = json.dumps(doc, indent=2) + "\n"
    if file == "-":
        click.echo(text, nl=False)
        return
    out.progress(f'Exporting definitions in JSON to a file at "{file}" ...')
    try:
        Path(file).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise CtlError(f"cannot write {file}: {exc.strerror}") from None


@click.command("import_definitions")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@vhost_option
@output_options
def import_definitions(ctx: Context, file: str, vhost: str | None, out: Output) -> None:
    """Import definitions from FILE (``-``: stdin); nothing changes if any entry is bad.
    With -p VHOST, FILE's queues, exchanges, bindings and policies go into that vhost."""
    scope = ctx.scope(vhost)
    try:
        raw = sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")
    except OSError as exc:
        raise CtlError(f"cannot read {file}: {exc.strerror}") from None
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise CtlError(f"{file} is not valid JSON: {exc}") from None
    out.progress(f'Importing definitions in JSON from a file at "{file}" ...')
    call(ctx, "POST", _definitions_url(scope), doc, vhost=scope)


@click.command("status")
@output_options
def status(ctx: Context, out: Output) -> None:
    """Show the broker's version, listeners and object counts."""
    o = call(ctx, "GET", path("overview"))
    if out.formatter == "json":
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


@click.command("cluster_status")
@output_options
def cluster_status(ctx: Context, out: Output) -> None:
    """Show the cluster's nodes, as ``rabbitmqctl cluster_status``: the nodes seen (Disk
    Nodes), those running now (Running Nodes) and their resource alarms (Alarms); one node
    without ``--cluster-etcd``. Then amqpq's own section: each quorum queue's leader, members, in-sync replicas and, where
    the node asked leads it, how many log operations each follower is behind."""
    o = call(ctx, "GET", path("overview"))
    nodes = call(ctx, "GET", path("nodes"))
    seen = [n.get("name") for n in nodes]
    running = [n.get("name") for n in nodes if n.get("running")]
    quorum = [{k: q.get(k) for k in ("vhost", "name", "leader", "members", "in_sync", "epoch",
                                     "replica_lag")}
              for q in call(ctx, "GET", path("queues"))
              if q.get("type") == "quorum" and "in_sync" in q]
    alarms = [f"{kind} alarm on node {n.get('name')}" for n in nodes if n.get("running")
              for kind, key in (("Memory", "mem_alarm"), ("Free disk space", "disk_free_alarm"))
              if n.get(key)]
    if out.formatter == "json":
        click.echo(json.dumps({"cluster_name": o.get("cluster_name"), "disk_nodes": seen,
                               "running_nodes": running, "alarms": alarms,
                               "quorum_queues": quorum}, indent=1))
        return
    lines = [f"Cluster status of node {o.get('node')} ...", "Basics", "",
             f"Cluster name: {o.get('cluster_name')}", "", "Disk Nodes", "", *seen, "",
             "Running Nodes", "", *running, "", "Alarms", "", *(alarms or ["(none)"])]
    if quorum:
        lines += ["", "Quorum queues (vhost, name, leader, members, in sync, epoch, lag)", ""]
        for q in quorum:
            lag = q["replica_lag"]
            lines.append(
                f"{q['vhost']}\t{q['name']}\t{q['leader']}\t{','.join(q['members'] or [])}\t"
                f"{','.join(q['in_sync'] or [])}\t{q['epoch']}\t"
                + (",".join(f"{k}:{v}" for k, v in lag.items()) if lag else "-"))
    click.echo("\n".join(lines))


@click.command("forget_cluster_node")
@click.argument("node")
@output_options
def forget_cluster_node(ctx: Context, node: str, out: Output) -> None:
    """Remove stopped node NODE from the cluster (refused while it runs)."""
    out.progress(f"Removing node {node} from the cluster")
    call(ctx, "DELETE", path("nodes", node), what=f"node '{node}'")


AWAIT_DEFAULT = 300.0  # s, await_startup and await_online_nodes (rabbitmqctl's default)
POLL = 0.5  # s between attempts


class TimedOut(CtlError):
    """An await command whose time is up (exit 75, EX_TEMPFAIL: rabbitmqctl's timeout)."""

    exit_code = 75


def _await(ctx: Context, command: str, timeout: float, done: Callable[[], bool]) -> None:
    """Call ``done`` every :data:`POLL` s until it is true; a node not listening yet or
    answering 503 counts as not done. Raises :class:`TimedOut` (with the last reason)."""
    deadline = time.monotonic() + timeout
    last = ""
    while True:
        try:
            if done():
                return
        except Unreachable as exc:
            last = f" (last: {exc.message})"
        except HttpError as exc:
            if exc.status != 503:
                raise CtlError(exc.reason or f"HTTP {exc.status} {exc.error}") from None
            last = f" (last: HTTP 503 {exc.reason})"
        if time.monotonic() >= deadline:
            raise TimedOut(f"operation {command} on node {ctx.client.base_url} timed out. "
                           f"Timeout value used: {round(timeout * 1000)}{last}")
        time.sleep(min(POLL, max(0.0, deadline - time.monotonic())))


_TIMEOUT = click.option("-t", "--timeout", "timeout", type=click.FloatRange(min=0),
                        default=AWAIT_DEFAULT, help="seconds to wait (default 300)")


@click.command("await_startup")
@_TIMEOUT
@output_options
def await_startup(ctx: Context, timeout: float, out: Output) -> None:
    """Waits for the node to start: its management API answers (retried while nothing
    listens yet). Exit 75 when time is up."""
    _await(ctx, "await_startup", timeout,
           lambda: ctx.client.request("GET", path("overview")) is not None)


@click.command("await_online_nodes")
@click.argument("count", type=click.IntRange(min=1))
@_TIMEOUT
@output_options
def await_online_nodes(ctx: Context, count: int, timeout: float, out: Output) -> None:
    """Waits for COUNT nodes to be running in the cluster (``/api/nodes``, as the node
    addressed sees them; retried while it does not listen yet). Exit 75 when time is up."""
    out.progress(f"Will wait for at least {count} nodes to join the cluster of "
                 f"{ctx.client.base_url}. Timeout: {round(timeout)} seconds.")
    _await(ctx, "await_online_nodes", timeout, lambda: sum(
        1 for n in ctx.client.request("GET", path("nodes")) or [] if n.get("running")) >= count)


COMMANDS = [export_definitions, import_definitions, status, cluster_status,
            forget_cluster_node, await_startup, await_online_nodes]
