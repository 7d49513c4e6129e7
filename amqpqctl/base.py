"""What the ``amqpqctl`` commands share: the context, option decorators, error mapping.

A 404 is reported as the vhost or object that does not exist, checked against the vhost
list, so the one error line names the problem.

Source: https://www.rabbitmq.com/docs/man/rabbitmqctl.8,
https://www.rabbitmq.com/docs/management-cli.
"""

from __future__ import annotations

import functools
import html
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from amqpqctl.client import DEFAULT_PORT, ApiClient, CtlError, HttpError, path
from amqpqctl.output import FORMATTERS, Output, emit, pick_columns

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class Context:
    """What every command needs: the API client, the default vhost and output settings.

    ``vhost_on_command_line``: ``-p`` was given before the command (the broker-wide
    commands ``list_channels``, ``export_definitions``, ``import_definitions`` are scoped
    to a vhost only when asked for on the command line, not by an environment variable or
    the configuration file).
    """

    client: ApiClient
    vhost: str
    output: Output
    vhost_on_command_line: bool = False

    def resolve(self, vhost: str | None) -> str:
        """The command's ``-p`` if given, else the global vhost."""
        return vhost if vhost is not None else self.vhost

    def scope(self, vhost: str | None) -> str | None:
        """The vhost a broker-wide command is limited to (None: all of them)."""
        if vhost is not None:
            return vhost
        return self.vhost if self.vhost_on_command_line else None


def vhost_option(f: F) -> F:
    """``-p/--vhost`` after the command name (overrides the global one)."""
    return click.option("-p", "--vhost", "vhost", default=None,
                        help="virtual host (default: the global -p, else /)")(f)


#: the output options every command takes after its name too, as rabbitmqctl
_OUTPUT_OPTIONS = [
    click.option("--formatter", "--format", "formatter", default=None,
                 type=click.Choice(FORMATTERS),
                 help="output format (default: the global --formatter, else table)"),
    click.option("--no-table-headers", is_flag=True, help="no header row"),
    click.option("-q", "--quiet", is_flag=True, help="no informational lines"),
    click.option("-s", "--silent", is_flag=True,
                 help="no informational lines and no header row"),
]


def output_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--formatter``, ``--no-table-headers``, ``-q``, ``-s`` to a command and pass
    it the :class:`Context` and ``out`` (the global output settings with these applied)
    instead of them."""

    @functools.wraps(f)
    def wrapper(*args: Any, formatter: str | None, no_table_headers: bool, quiet: bool,
                silent: bool, **kwargs: Any) -> Any:
        ctx = click.get_current_context().find_object(Context)
        assert ctx is not None  # the group always sets it
        kwargs["out"] = ctx.output.override(formatter, no_table_headers, quiet, silent)
        return f(ctx, *args, **kwargs)

    for option in reversed(_OUTPUT_OPTIONS):
        wrapper = option(wrapper)
    return wrapper


def columns_argument(known: Iterable[str]) -> Callable[[F], F]:
    """The ``[COLUMN]...`` argument of a list command; the shell completes ``known``."""
    names = sorted(known)

    def complete(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
        return [n for n in names if n.startswith(incomplete)]

    return click.argument("columns", nargs=-1, shell_complete=complete)


def json_arg(value: str | None, what: str) -> Any:
    """A JSON command-line value (``--arguments '{"x-max-length": 10}'``)."""
    if value is None:
        return {}
    try:
        return json.loads(value)
    except ValueError:
        raise CtlError(f"{what} is not valid JSON: {value}") from None


def fail(exc: HttpError, ctx: Context, vhost: str | None = None,
         what: str | None = None, missing: str | None = None) -> CtlError:
    """One-line error for an API error; a 404 names the vhost or ``what`` that is missing
    (``missing``: the whole message for that case)."""
    if exc.status == 404:
        if vhost is not None and not vhost_exists(ctx, vhost):
            return CtlError(f"vhost '{vhost}' does not exist")
        if missing is not None:
            return CtlError(missing)
        if what is not None:
            return CtlError(f"{what} does not exist")
        if not exc.reason:  # not the management API's JSON error
            return CtlError(f"{exc.url} answered HTTP 404 {exc.error}: is this the "
                            f"management API? (port {DEFAULT_PORT} by default)")
        return CtlError(exc.reason)
    if exc.status == 401 and exc.reason == "Login failed":
        return CtlError(f"login failed for user '{ctx.client.user}' (HTTP 401): check --user "
                        "and --password")
    if exc.status == 401:
        return CtlError(f"not authorised: {html.unescape(exc.reason)}")
    # RabbitMQ HTML-escapes some reasons (policies: ``[{&lt;&lt;"k"&gt;&gt;,1}]``)
    text = html.unescape(exc.reason) or f"HTTP {exc.status} {exc.error}".strip()
    return CtlError(text)


def vhost_exists(ctx: Context, vhost: str) -> bool:
    try:
        names = {v["name"] for v in ctx.client.get(path("vhosts"))}
    except HttpError:
        return True  # cannot tell: do not claim it is missing
    return vhost in names


def call(ctx: Context, method: str, url: str, body: Any = None, *, vhost: str | None = None,
         what: str | None = None, missing: str | None = None,
         headers: dict[str, str] | None = None) -> Any:
    """One API request; API errors become a :class:`CtlError` naming the problem."""
    try:
        return ctx.client.request(method, url, body, headers)
    except HttpError as exc:
        raise fail(exc, ctx, vhost, what, missing) from None


def show(out: Output, rows: list[dict[str, Any]], requested: tuple[str, ...],
         default: list[str], known: Iterable[str], banner: str) -> None:
    """Print a list command's ``rows``: the ``requested`` columns (checked against ``known``
    and the rows' keys), else ``default`` (JSON: whole rows); ``banner`` is rabbitmqctl's
    informational line (``Listing queues for vhost / ...``)."""
    emit(rows, pick_columns(requested, default, known, rows, out), out, banner)
