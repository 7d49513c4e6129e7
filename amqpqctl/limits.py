"""``amqpqctl`` commands for vhost and user limits, as rabbitmqctl spells them.

``set_vhost_limits -p VHOST '{"max-connections": 10, "max-queues": 5}'`` sets each limit
given (the others stay), ``clear_vhost_limits -p VHOST`` removes them all,
``list_vhost_limits [-p VHOST | --global]``; ``set_user_limits USER '{"max-channels": 10}'``,
``clear_user_limits USER NAME|all``, ``list_user_limits [--user USER]``. A bad JSON value
or an unknown limit is one line on stderr and exit 1.

Source: https://www.rabbitmq.com/docs/man/rabbitmqctl.8 (set_vhost_limits, set_user_limits),
https://www.rabbitmq.com/docs/vhosts#limits, /docs/user-limits.
"""

from __future__ import annotations

from typing import Any

import click

from amqpqctl.base import (
    Context,
    call,
    json_arg,
    output_options,
    vhost_option,
)
from amqpqctl.client import CtlError, path
from amqpqctl.output import Output, emit


def _limits_arg(definition: str) -> dict[str, Any]:
    limits = json_arg(definition, "limits")
    if not isinstance(limits, dict) or not limits:
        raise CtlError(f"limits must be a non-empty JSON object, got: {definition}")
    return limits


def _rows(found: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    return [{key: row[key], "limits": row["value"]} for row in found]


@click.command("set_vhost_limits")
@click.argument("definition")
@vhost_option
@output_options
def set_vhost_limits(ctx: Context, definition: str, vhost: str | None, out: Output
                     ) -> None:
    """Set the vhost's limits from a JSON object (max-connections, max-queues)."""
    vhost = ctx.resolve(vhost)
    limits = _limits_arg(definition)
    out.progress(f'Applying limits to vhost "{vhost}" ...')
    for name, value in limits.items():
        call(ctx, "PUT", path("vhost-limits", vhost, name), {"value": value}, vhost=vhost)


@click.command("clear_vhost_limits")
@vhost_option
@output_options
def clear_vhost_limits(ctx: Context, vhost: str | None, out: Output) -> None:
    """Remove every limit of the vhost."""
    vhost = ctx.resolve(vhost)
    out.progress(f'Clearing limits for vhost "{vhost}" ...')
    for row in call(ctx, "GET", path("vhost-limits", vhost), vhost=vhost):
        for name in row["value"]:
            call(ctx, "DELETE", path("vhost-limits", vhost, name), vhost=vhost)


@click.command("list_vhost_limits")
@click.option("--global", "all_vhosts", is_flag=True, help="every vhost's limits")
@vhost_option
@output_options
def list_vhost_limits(ctx: Context, all_vhosts: bool, vhost: str | None, out: Output
                      ) -> None:
    """List the vhost's limits (or every vhost's with --global)."""
    vhost = ctx.resolve(vhost)
    url = path("vhost-limits") if all_vhosts else path("vhost-limits", vhost)
    found = call(ctx, "GET", url, vhost=None if all_vhosts else vhost)
    emit(_rows(found, "vhost"), ["vhost", "limits"], out, "Listing limits ...")


@click.command("set_user_limits")
@click.argument("user")
@click.argument("definition")
@output_options
def set_user_limits(ctx: Context, user: str, definition: str, out: Output) -> None:
    """Set USER's limits from a JSON object (max-connections, max-channels)."""
    limits = _limits_arg(definition)
    call(ctx, "GET", path("users", user), what=f"user '{user}'")
    out.progress(f'Setting user limits to "{definition}" for user "{user}" ...')
    for name, value in limits.items():
        call(ctx, "PUT", path("user-limits", user, name), {"value": value})


@click.command("clear_user_limits")
@click.argument("user")
@click.argument("name")
@output_options
def clear_user_limits(ctx: Context, user: str, name: str, out: Output) -> None:
    """Remove USER's limit NAME, or all of them with NAME ``all``."""
    current = call(ctx, "GET", path("user-limits", user), what=f"user '{user}'")
    names = [n for row in current for n in row["value"]] if name == "all" else [name]
    out.progress(f'Clearing "{name}" limit for user "{user}" ...')
    for limit in names:
        call(ctx, "DELETE", path("user-limits", user, limit), what=f"user '{user}'")


@click.command("list_user_limits")
@click.option("--user", "user", default=None, help="only this user's limits")
@output_options
def list_user_limits(ctx: Context, user: str | None, out: Output) -> None:
    """List the limits of every user (or of --user USER)."""
    url = path("user-limits") if user is None else path("user-limits", user)
    found = call(ctx, "GET", url, what=None if user is None else f"user '{user}'")
    emit(_rows(found, "user"), ["user", "limits"], out, "Listing user limits ...")


COMMANDS = [set_vhost_limits, clear_vhost_limits, list_vhost_limits, set_user_limits,
            clear_user_limits, list_user_limits]
