"""The ``amqpqctl`` command group (global options) and its console entry point ``main``.

Global options (``-p`` and ``--format`` are also accepted after the command):
``--url http://host:port`` or ``--host``/``--port`` (127.0.0.1:15672), ``--user``/``--password``
(guest/guest), ``-p/--vhost`` ("/"), ``--format table|json``, ``-q/--quiet`` (no "Listing ..."
lines). Exit 0 on success; on failure one line on stderr (``Error: vhost 'x' does not
exist``) and exit 1, 69 when the management API is not reachable (refused, timed out, an
AMQP or other non-HTTP port), 64 for a usage error, as rabbitmqctl. ``--version`` prints
``amqpqctl 0.1.0`` (the ``amqpq`` package's metadata) and exits 0.

Source: https://www.rabbitmq.com/docs/man/rabbitmqctl.8,
https://www.rabbitmq.com/docs/management-cli.
"""

from __future__ import annotations

import sys
from typing import NoReturn

import click

from amqpqctl import access, limits, runtime, topology
from amqpqctl.base import Context
from amqpqctl.client import ApiClient

EX_USAGE = 64  # sysexits.h, as rabbitmqctl
EX_SOFTWARE = 70


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="amqpq", prog_name="amqpqctl",
                      message="%(prog)s %(version)s")
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


def main(argv: list[str] | None = None) -> NoReturn:
    """Console entry point ``amqpqctl``: runs the command and exits with its status.

    Every failure is one line on stderr: ``Error: <what>`` and exit 1 (69 when the
    management API cannot be reached); a usage error (unknown command or option, bad
    value) adds where to find help and exits 64 (``EX_USAGE``), as rabbitmqctl (no command
    at all: the help on stdout, exit 64); an unexpected exception is reported by type and
    message, exit 70 (``EX_SOFTWARE``).
    """
    try:
        result = cli.main(args=argv, prog_name="amqpqctl", standalone_mode=False)
    except click.UsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # click >= 8.2: no command given
            click.echo(exc.format_message())
            sys.exit(EX_USAGE)
        _die(f"{exc.format_message()} (see '{_command_path(exc, argv)} --help')", EX_USAGE)
    except click.ClickException as exc:
        _die(exc.format_message(), exc.exit_code)
    except (click.Abort, KeyboardInterrupt):
        _die("interrupted", 130)
    except Exception as exc:  # a bug: still one line, no traceback
        _die(f"internal error: {type(exc).__name__}: {exc}", EX_SOFTWARE)
    # standalone_mode=False returns --help's and ctx.exit()'s status, else the command's None
    sys.exit(result if isinstance(result, int) else 0)


def _command_path(exc: click.UsageError, argv: list[str] | None) -> str:
    """``amqpqctl list_queues`` for an error in that command's arguments (click's parser
    errors do not always carry the command's context)."""
    if exc.ctx is not None:
        return exc.ctx.command_path
    args = sys.argv[1:] if argv is None else argv
    name = next((a for a in args if a in cli.commands), None)
    return f"amqpqctl {name}" if name else "amqpqctl"


def _die(message: str, code: int) -> NoReturn:
    click.echo(f"Error: {' '.join(message.split())}", err=True)
    sys.exit(code)
