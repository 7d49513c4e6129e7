"""The ``amqpqctl`` command group (global options) and its console entry point ``main``.

Global options, each also an environment variable (command line > environment >
configuration file > default; see :mod:`amqpqctl.settings`):

=====================================  ===========================  =====================
option                                 environment                  default
=====================================  ===========================  =====================
``--url http://host:port``             ``AMQPQCTL_URL``             from host and port
``-H/--host``                          ``AMQPQCTL_HOST``            ``127.0.0.1``
``-P/--port``                          ``AMQPQCTL_PORT``            ``15672``
``-u/--username`` (``--user``)         ``AMQPQCTL_USERNAME``        ``guest``
``--password``                         ``AMQPQCTL_PASSWORD``        ``guest``
``-p/-V/--vhost``                      ``AMQPQCTL_VHOST``           ``/``
``--ssl``                              ``AMQPQCTL_SSL``             off (http)
``--ssl-ca-cert-file``...              ``AMQPQCTL_SSL_CA_CERT_FILE``
``--path-prefix``                      ``AMQPQCTL_PATH_PREFIX``     none
``-t/--timeout`` (s per request)       ``AMQPQCTL_TIMEOUT``         ``30``
``--formatter`` (``--format``)         ``AMQPQCTL_FORMATTER``       ``table``
``-c/--config FILE``                   ``AMQPQCTL_CONFIG``          ``~/.amqpqctl.conf``,
                                                                    ``~/.rabbitmqadmin.conf``
``-N/--node SECTION``                  ``AMQPQCTL_NODE``            ``[default]``
=====================================  ===========================  =====================

``-q/--quiet`` (no "Listing ..." lines), ``-s/--silent`` (nor header rows),
``--no-table-headers``, ``--formatter`` and ``-p`` are also accepted after the command.

Exit 0 on success; on failure one line on stderr (``Error: vhost 'x' does not exist``) and
exit 1, 69 when the management API is not reachable (refused, timed out, an AMQP or other
non-HTTP port), 64 for a usage error (unknown command, option or column, bad value), as
rabbitmqctl. ``--version`` prints ``amqpqctl 0.1.0`` (the ``amqpq`` package's metadata).

Shell completion is click's: ``eval "$(_AMQPQCTL_COMPLETE=bash_source amqpqctl)"`` (zsh:
``zsh_source``, fish: ``fish_source``) completes commands, options and column names.

Source: https://www.rabbitmq.com/docs/man/rabbitmqctl.8,
https://www.rabbitmq.com/docs/management-cli,
https://click.palletsprojects.com/en/stable/shell-completion/.
"""

from __future__ import annotations

import os
import sys
from typing import Any, NoReturn

import click
from click.core import ParameterSource

from amqpqctl import (
    access,
    connections,
    federation,
    limits,
    maintenance,
    quorum,
    runtime,
    shovels,
    streams,
    topology,
)
from amqpqctl.base import Context
from amqpqctl.client import ApiClient
from amqpqctl.output import FORMATTERS, Output
from amqpqctl.settings import load_config, resolve

EX_USAGE = 64  # sysexits.h, as rabbitmqctl
EX_SOFTWARE = 70
ENV = "AMQPQCTL_"


def _env(name: str) -> str:
    return ENV + name.upper()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="amqpq", prog_name="amqpqctl",
                      message="%(prog)s %(version)s")
@click.option("--url", "base_uri", default=None, envvar=_env("url"),
              help="management API URL, e.g. https://host:15671 [default: from host, port]")
@click.option("-H", "--host", "hostname", default=None, envvar=_env("host"),
              help="management API host [default: 127.0.0.1]")
@click.option("-P", "--port", default=None, type=int,
              envvar=_env("port"), help="management API port [default: 15672]")
@click.option("-u", "--username", "--user", "username", default=None,
              envvar=_env("username"), help="[default: guest]")
@click.option("--password", default=None, envvar=_env("password"), help="[default: guest]")
@click.option("-p", "-V", "--vhost", default=None, envvar=_env("vhost"),
              help="virtual host [default: /]")
@click.option("--ssl/--no-ssl", "ssl", default=None, envvar=_env("ssl"),
              help="HTTPS [default: off]")
@click.option("--ssl-ca-cert-file", default=None, envvar=_env("ssl_ca_cert_file"),
              type=click.Path(dir_okay=False), help="PEM CA certificates to verify with")
@click.option("--ssl-cert-file", default=None, envvar=_env("ssl_cert_file"),
              type=click.Path(dir_okay=False), help="PEM client certificate")
@click.option("--ssl-key-file", default=None, envvar=_env("ssl_key_file"),
              type=click.Path(dir_okay=False), help="PEM client key")
@click.option("-k", "--ssl-insecure", "ssl_insecure", is_flag=True, default=None,
              envvar=_env("ssl_insecure"), help="do not verify the server's certificate")
@click.option("--ssl-disable-hostname-verification", is_flag=True, default=None,
              envvar=_env("ssl_disable_hostname_verification"),
              help="do not check the certificate's host name")
@click.option("--path-prefix", default=None, envvar=_env("path_prefix"),
              help="URL path before /api [default: none]")
@click.option("-t", "--timeout", "request_timeout", default=None,
              type=click.FloatRange(min=0, min_open=True), envvar=_env("timeout"),
              help="seconds per request [default: 30]")
@click.option("--formatter", "--format", "formatter", default=None,
              type=click.Choice(FORMATTERS), envvar=_env("formatter"),
              help="output format [default: table]")
@click.option("--no-table-headers", is_flag=True, help="no header row")
@click.option("-q", "--quiet", is_flag=True, help="no informational lines")
@click.option("-s", "--silent", is_flag=True, help="no informational lines, no header row")
@click.option("-c", "--config", default=None, envvar=_env("config"),
              help="rabbitmqadmin-style INI file [default: ~/.amqpqctl.conf, else "
                   "~/.rabbitmqadmin.conf, if there]")
@click.option("-N", "--node", default=None, envvar=_env("node"),
              help="section of the configuration file [default: default]")
@click.pass_context
def cli(ctx: click.Context, no_table_headers: bool, quiet: bool, silent: bool,
        config: str | None, node: str | None, **given: Any) -> None:
    """Manage an amqpq (or RabbitMQ) broker through its management HTTP API."""
    settings = resolve(given, load_config(config, node))
    client = ApiClient(settings.base_url, settings.username, settings.password,
                       settings.timeout, settings.ssl_context)
    output = Output(settings.formatter or "table").override(None, no_table_headers, quiet,
                                                             silent)
    ctx.obj = Context(client, settings.vhost, output,
                      ctx.get_parameter_source("vhost") == ParameterSource.COMMANDLINE)


for _module in (topology, access, connections, runtime, limits, streams, quorum, maintenance,
                shovels, federation):
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
        _die(f"{exc.format_message()}{_from_environment(exc, argv)} (see "
             f"'{_command_path(exc, argv)} --help')", EX_USAGE)
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


def _from_environment(exc: click.UsageError, argv: list[str] | None) -> str:
    """`` (from AMQPQCTL_PORT)`` when the bad value came from that environment variable
    (click names only the option)."""
    param: click.Parameter | None = getattr(exc, "param", None)
    envvar = param.envvar if param is not None else None
    if param is None or not isinstance(envvar, str) or envvar not in os.environ:
        return ""
    args = sys.argv[1:] if argv is None else argv
    opts = {*param.opts, *param.secondary_opts}
    if any(a.split("=", 1)[0] in opts for a in args):
        return ""
    return f" (from {envvar})"


def _die(message: str, code: int) -> NoReturn:
    click.echo(f"Error: {' '.join(message.split())}", err=True)
    sys.exit(code)
