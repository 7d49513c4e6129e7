"""What the ``amqpqctl`` commands share: the context, option decorators, error mapping.

A 404 is reported as the vhost or object that does not exist, checked against the vhost
list, so the one error line names the problem.

Source: https://www.rabbitmq.com/docs/man/rabbitmqctl.8,
https://www.rabbitmq.com/docs/management-cli.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from amqpqctl.client import DEFAULT_PORT, ApiClient, CtlError, HttpError, path
from amqpqctl.output import emit_message

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class Context:
    """What every command needs: the API client and the global defaults."""

    client: ApiClient
    vhost: str
    fmt: str
    quiet: bool

    def resolve(self, vhost: str | None, fmt: str | None) -> tuple[str, str]:
        return (vhost if vhost is not None else self.vhost,
                fmt if fmt is not None else self.fmt)


pass_context = click.make_pass_decorator(Context)


def vhost_option(f: F) -> F:
    """``-p/--vhost`` after the command name (overrides the global one)."""
    return click.option("-p", "--vhost", "vhost", default=None,
                        help="virtual host (default: the global -p, else /)")(f)


def format_option(f: F) -> F:
    return click.option("--format", "--formatter", "fmt", default=None,
                        type=click.Choice(["table", "json"]),
                        help="output format (default: the global --format)")(f)


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


def select_columns(requested: tuple[str, ...], default: list[str], known: set[str]
                   ) -> list[str]:
    """The columns to print; an unknown one is an error naming it."""
    columns = list(requested) or default
    unknown = [c for c in columns if c not in known]
    if unknown:
        raise CtlError(f"unknown column(s): {', '.join(unknown)}; known: "
                       f"{', '.join(sorted(known))}")
    return columns


def progress(ctx: Context, fmt: str | None, message: str) -> None:
    """A rabbitmqctl-style progress line, unless ``--quiet`` or JSON output."""
    if not ctx.quiet:
        emit_message(message, ctx.resolve(None, fmt)[1])
