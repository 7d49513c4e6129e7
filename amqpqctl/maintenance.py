"""``amqpqctl`` rebalancing, maintenance mode and upgrade checks, as RabbitMQ's CLIs have them.

================================================  =======================================
``rebalance all|classic|quorum``                  ``rabbitmq-queues rebalance``:
``[--vhost-pattern RE] [--queue-pattern RE]``     ``POST /api/rebalance/queues``; prints
                                                  RabbitMQ's summary table
``drain``                                         ``rabbitmq-upgrade drain`` (the node whose
                                                  API is addressed)
``revive``                                        ``rabbitmq-upgrade revive``
``check_if_node_is_quorum_critical``              ``rabbitmq-queues`` health check: exit 69
                                                  listing the queues that would lose their
                                                  quorum if the node stopped
``await_online_quorum_plus_one [-t SECONDS]``     ``rabbitmq-upgrade``: waits (120 s by
                                                  default) until no quorum queue of the
                                                  node is at its minimum quorum; exit 69
                                                  with RabbitMQ's text when time is up
================================================  =======================================

Banners, messages and exit codes are RabbitMQ's (``rabbitmq_cli``'s ``DrainCommand``,
``ReviveCommand``, ``RebalanceCommand``, ``CheckIfNodeIsQuorumCriticalCommand``,
``AwaitOnlineQuorumPlusOneCommand``): a failed health check and an error result both exit 69
(EX_UNAVAILABLE: ``ExitCodes.exit_code_for({:error, _})``). The node is the one whose management API amqpqctl talks to
(``--port``), as ``-n NODE`` picks it for RabbitMQ's.

Source: https://www.rabbitmq.com/docs/man/rabbitmq-queues.8,
https://www.rabbitmq.com/docs/man/rabbitmq-upgrade.8, https://www.rabbitmq.com/docs/upgrade.
"""

from __future__ import annotations

import json
import time

import click

from amqpqctl.base import Context, call, output_options
from amqpqctl.client import CtlError, HttpError, path
from amqpqctl.output import Output, emit

EX_UNAVAILABLE = 69  # a failed health check, an error result (RabbitMQ's ExitCodes)
AWAIT_DEFAULT = 120.0  # s, await_online_quorum_plus_one (RabbitMQ's default timeout)
POLL = 1.0  # s between checks while waiting
SINGLE_NODE = "Target node seems to be the only one in a single node cluster, the {} does not apply"


class CheckFailed(CtlError):
    """A health check that failed (exit 69, as rabbitmq-diagnostics)."""

    exit_code = EX_UNAVAILABLE


class CommandError(CtlError):
    """An error result of the command (exit 69: rabbitmqctl's ``{:error, Msg}``)."""

    exit_code = EX_UNAVAILABLE


def _node_name(ctx: Context) -> str:
    return str(call(ctx, "GET", path("overview")).get("node", "?"))


@click.command("rebalance")
@click.argument("type", type=click.Choice(["all", "classic", "quorum"]))
@click.option("--vhost-pattern", default=".*", help="vhosts to rebalance (regular expression)")
@click.option("--queue-pattern", default=".*", help="queues to rebalance (regular expression)")
@output_options
def rebalance(ctx: Context, type: str, vhost_pattern: str, queue_pattern: str,
              out: Output) -> None:
    """Re-balances leaders of replicated queues across up-and-running cluster nodes."""
    banner = {"all": "Re-balancing leaders of all replicated queues...",
              "classic": "Re-balancing leaders of replicated (mirrored, non-exclusive) "
                         "classic queues...",
              "quorum": "Re-balancing leaders of quorum queues..."}[type]
    summary = call(ctx, "POST", path("rebalance", "queues"),
                   {"type": type, "vhost_pattern": vhost_pattern,
                    "queue_pattern": queue_pattern}) or []
    emit(summary, ["Node name", "Number of quorum queues"], out, banner)


@click.command("drain")
@output_options
def drain(ctx: Context, out: Output) -> None:
    """Puts the node in maintenance mode. Such nodes will not serve any client traffic or
    host any primary queue replicas."""
    node = _node_name(ctx)
    out.progress(f"Will put node {node} into maintenance mode. The node will no longer serve "
                 "any client traffic!")
    result = call(ctx, "POST", path("maintenance", "drain"), {})
    if out.formatter == "json":
        click.echo(json.dumps(result))


@click.command("revive")
@output_options
def revive(ctx: Context, out: Output) -> None:
    """Puts the node out of maintenance and into regular operating mode. Such nodes will
    again serve client traffic and host primary queue replicas."""
    node = _node_name(ctx)
    out.progress(f"Will put node {node} back into regular operating mode. The node will "
                 "again serve client traffic and host primary queue replicas.")
    call(ctx, "POST", path("maintenance", "revive"), {})


def _critical(ctx: Context) -> tuple[str, dict[str, object]]:
    """(status, body) of the node's ``node-is-quorum-critical`` health check."""
    url = path("health", "checks", "node-is-quorum-critical")
    try:
        return "ok", ctx.client.request("GET", url)
    except HttpError as exc:
        if exc.status != 503:
            raise CtlError(exc.reason or f"HTTP {exc.status} {exc.error}") from None
        return "failed", exc.doc if isinstance(exc.doc, dict) else {}


@click.command("check_if_node_is_quorum_critical")
@output_options
def check_if_node_is_quorum_critical(ctx: Context, out: Output) -> None:
    """Health check that exits with a non-zero code if there are queues with minimum online
    quorum (queues that would lose their quorum if the target node is shut down)."""
    node = _node_name(ctx)
    out.progress(f"Checking if node {node} is critical for quorum of any quorum queues ...")
    status, body = _critical(ctx)
    as_json = out.formatter == "json"
    if body.get("reason") == "single node cluster":
        message = f"Node {node} seems to be the only one in a single node cluster, the " \
                  "check does not apply"
        if as_json:
            message = SINGLE_NODE.format("check")
    elif body.get("maintenance"):
        message = f"Node {node} seems to be in maintenance mode, the check does not apply"
        if as_json:
            message = "Target node seems to be in maintenance mode, the check does not apply"
    elif status == "ok":
        message = f"Node {node} reported no quorum queues with minimum quorum"
        if as_json:
            click.echo(json.dumps({"result": "ok"}))
            return
    else:
        queues = body.get("queues") or []
        assert isinstance(queues, list)
        if as_json:
            click.echo(json.dumps({"result": "error", "queues": queues, "message":
                                   f"Node {node} reported local queues with minimum online "
                                   "quorum"}))
            click.get_current_context().exit(EX_UNAVAILABLE)
        for q in queues:
            click.echo(f"{q['readable_name']} would lose quorum if node {node} is stopped",
                       err=True)
        click.get_current_context().exit(EX_UNAVAILABLE)
        return
    if as_json:
        click.echo(json.dumps({"result": "ok", "message": message}))
    elif not out.quiet:
        click.echo(message)


@click.command("await_online_quorum_plus_one")
@click.option("-t", "--timeout", "timeout", type=float, default=AWAIT_DEFAULT,
              help="seconds to wait (default 120)")
@output_options
def await_online_quorum_plus_one(ctx: Context, timeout: float, out: Output) -> None:
    """Waits for all quorum queues to have an above minimum online quorum. This makes sure
    that no queues would lose their quorum if the target node is shut down."""
    out.progress(f"Will wait for a quorum + 1 of nodes to be online for all quorum queues "
                 f"for {round(timeout)} seconds...")
    deadline = time.monotonic() + timeout
    while True:
        status, body = _critical(ctx)
        if body.get("reason") == "single node cluster":
            if out.banners:
                click.echo(SINGLE_NODE.format("command"))
            return
        if status == "ok":
            return
        if time.monotonic() >= deadline:
            raise CommandError("time is up, no quorum + 1 online replicas came online for at "
                               "least some quorum queues")
        time.sleep(min(POLL, max(0.0, deadline - time.monotonic())))


COMMANDS = [rebalance, drain, revive, check_if_node_is_quorum_critical,
            await_online_quorum_plus_one]
