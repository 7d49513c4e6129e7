"""``amqpqctl`` quorum queue membership commands, as ``rabbitmq-queues`` has them.

``add_member [-p VHOST] QUEUE NODE``, ``delete_member [-p VHOST] QUEUE NODE``,
``grow NODE all|even [--vhost-pattern RE] [--queue-pattern RE]`` and ``shrink NODE``, through
RabbitMQ's HTTP endpoints (``/api/queues/quorum/...``, :mod:`management.routes.quorum`), so
they work against RabbitMQ 3.13+ too. A cluster node answers them; one node says they need a
cluster.

Source: https://www.rabbitmq.com/docs/man/rabbitmq-queues.8.
"""

from __future__ import annotations

import json

import click

from amqpqctl.base import Context, call, output_options, vhost_option
from amqpqctl.client import path
from amqpqctl.output import Output


def _member(ctx: Context, queue: str, node: str, vhost: str | None, out: Output,
            add: bool) -> None:
    vhost = ctx.resolve(vhost)
    out.progress(f"{'Adding' if add else 'Removing'} a replica for queue {queue} on node "
                 f"{node}...")
    call(ctx, "POST" if add else "DELETE",
         path("queues", "quorum", vhost, queue, "replicas", "add" if add else "delete"),
         {"node": node}, vhost=vhost, what=f"queue '{queue}'")


@click.command("add_member")
@click.argument("queue")
@click.argument("node")
@vhost_option
@output_options
def add_member(ctx: Context, queue: str, node: str, vhost: str | None, out: Output) -> None:
    """Add NODE as a member (replica) of quorum queue QUEUE."""
    _member(ctx, queue, node, vhost, out, True)


@click.command("delete_member")
@click.argument("queue")
@click.argument("node")
@vhost_option
@output_options
def delete_member(ctx: Context, queue: str, node: str, vhost: str | None, out: Output) -> None:
    """Remove NODE's replica of quorum queue QUEUE."""
    _member(ctx, queue, node, vhost, out, False)


@click.command("grow")
@click.argument("node")
@click.argument("strategy", type=click.Choice(["all", "even"]))
@click.option("--vhost-pattern", default=".*", help="vhosts to grow (regular expression)")
@click.option("--queue-pattern", default=".*", help="queues to grow (regular expression)")
@output_options
def grow(ctx: Context, node: str, strategy: str, vhost_pattern: str, queue_pattern: str,
         out: Output) -> None:
    """Add NODE as a member of every matching quorum queue (even: only those with an even
    number of members)."""
    out.progress(f"Growing {strategy} quorum queues on {node}...")
    call(ctx, "POST", path("queues", "quorum", "replicas", "on", node, "grow"),
         {"strategy": strategy, "vhost_pattern": vhost_pattern,
          "queue_pattern": queue_pattern})


@click.command("shrink")
@click.argument("node")
@output_options
def shrink(ctx: Context, node: str, out: Output) -> None:
    """Remove NODE's replicas of every quorum queue (a queue's only member stays)."""
    out.progress(f"Shrinking quorum queues on {node}...")
    result = call(ctx, "DELETE", path("queues", "quorum", "replicas", "on", node, "shrink"))
    if out.formatter == "json":
        click.echo(json.dumps(result, indent=1))
        return
    for item in result.get("deleted", []):
        click.echo(f"{item['vhost']}\t{item['name']}\tok")
    for item in result.get("errors", []):
        click.echo(f"{item['vhost']}\t{item['name']}\terror: {item['error']}")


COMMANDS = [add_member, delete_member, grow, shrink]
