"""The ``amqpqctl`` command group (global options) and its console entry point ``main``.

Global options (``-p`` and ``--format`` are also accepted after the command):
``--url http://host:port`` or ``--host``/``--port`` (127.0.0.1:15672), ``--user``/``--password``
(guest/guest), ``-p/--vhost`` ("/"), ``--format table|json``, ``-q/--quiet`` (no "Listing ..."
lines). Exit 0 on success; on failure one line on stderr (``Error: vhost 'x' does not
exist``) and exit 1, or 69 when the broker is not reachable, as rabbitmqctl.

Source: https://www.rabbitmq.com/docs/man/rabbitmqctl.8,
https://www.rabbitmq.com/docs/management-cli.
"""

from __future__ import annotations

import click

from amqp_server.ctl import access, limits, runtime, topology
from amqp_server.ctl.base import Context
from amqp_server.ctl.client import ApiClient


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--url", default=None, help="management API URL (default http://HOST:PORT)")
@click.option("--host", default="127.0.0.1", show_default=True, help="management API host")
@click.option("--port", default=15672, show_default=True, type=int,
              help="management API port")
@click.option("--user", "-u", default="guest", show_default=True)
@click.option("--password", default="guest", show_default=True)
@click.option("-p", "--vhost", default="/", show_default=True, help="virtual host")
@click.option("--format", "--formatter", "fmt", default="table", show_default=True,
              type=click.Choice(["table", "json"]))
@click.option("-q", "--quiet", is_flag=True, help="no informational lines")
@click.option("--timeout", default=30.0, show_default=True, help="seconds per request")
@click.pass_context
def cli(ctx: click.Context, url: str | None, host: str, port: int, user: str, password: str,
        vhost: str, fmt: str, quiet: bool, timeout: float) -> None:
    """Manage an amqpq (or RabbitMQ) broker through its management HTTP API."""
    if url is None:
        shown = f"[{host}]" if ":" in host else host
        url = f"http://{shown}:{port}"
    ctx.obj = Context(ApiClient(url, user, password, timeout), vhost, fmt, quiet)


for _module in (topology, access, runtime, limits):
    for _command in _module.COMMANDS:
        cli.add_command(_command)


def main() -> None:
    """Console entry point ``amqpqctl``."""
    cli(prog_name="amqpqctl")
