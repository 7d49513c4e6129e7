"""``amqpqctl`` commands for users and permissions.

``list_users`` prints ``user tags`` and ``list_permissions`` prints ``user configure write
read``, as rabbitmqctl does; ``change_password`` and ``set_user_tags`` keep what they do not
change (the API's PUT replaces the whole user).

Source: https://www.rabbitmq.com/docs/man/rabbitmqctl.8 (user management, access control).
"""

from __future__ import annotations

from typing import Any

import click

from amqpqctl.base import (
    Context,
    call,
    format_option,
    pass_context,
    progress,
    select_columns,
    vhost_option,
)
from amqpqctl.client import path
from amqpqctl.output import emit


def _tags(tags: list[str]) -> str:
    return "[" + ", ".join(tags) + "]"


@click.command("list_users")
@click.argument("columns", nargs=-1)
@format_option
@pass_context
def list_users(ctx: Context, columns: tuple[str, ...], fmt: str | None) -> None:
    """List users (columns: user tags)."""
    _, fmt = ctx.resolve(None, fmt)
    cols = select_columns(columns, ["user", "tags"], {"user", "tags", "limits"})
    users = call(ctx, "GET", path("users"))
    rows: list[dict[str, Any]] = [
        {"user": u["name"], "tags": u["tags"] if fmt == "json" else _tags(u["tags"]),
         "limits": u.get("limits", {})} for u in users]
    emit(rows, cols, fmt, None if ctx.quiet else "Listing users ...")


def _user(ctx: Context, name: str) -> dict[str, Any]:
    found: dict[str, Any] = call(ctx, "GET", path("users", name), what=f"user '{name}'")
    return found


@click.command("add_user")
@click.argument("name")
@click.argument("password")
@click.option("--tags", default="", help="comma-separated tags, e.g. administrator")
@format_option
@pass_context
def add_user(ctx: Context, name: str, password: str, tags: str, fmt: str | None) -> None:
    """Create user NAME with PASSWORD."""
    progress(ctx, fmt, f'Adding user "{name}" ...')
    call(ctx, "PUT", path("users", name), {"password": password, "tags": tags})


@click.command("delete_user")
@click.argument("name")
@format_option
@pass_context
def delete_user(ctx: Context, name: str, fmt: str | None) -> None:
    """Delete user NAME (its connections are closed)."""
    progress(ctx, fmt, f'Deleting user "{name}" ...')
    call(ctx, "DELETE", path("users", name), what=f"user '{name}'")


@click.command("change_password")
@click.argument("name")
@click.argument("password")
@format_option
@pass_context
def change_password(ctx: Context, name: str, password: str, fmt: str | None) -> None:
    """Set user NAME's password (its tags are kept)."""
    user = _user(ctx, name)
    progress(ctx, fmt, f'Changing password for user "{name}" ...')
    call(ctx, "PUT", path("users", name), {"password": password, "tags": user["tags"],
                                           "limits": user.get("limits") or {}})


@click.command("set_user_tags")
@click.argument("name")
@click.argument("tags", nargs=-1)
@format_option
@pass_context
def set_user_tags(ctx: Context, name: str, tags: tuple[str, ...], fmt: str | None) -> None:
    """Replace user NAME's tags (none given: no tags); the password is kept."""
    user = _user(ctx, name)
    progress(ctx, fmt, f'Setting tags for user "{name}" to {_tags(list(tags))} ...')
    call(ctx, "PUT", path("users", name),
         {"password_hash": user["password_hash"],
          "hashing_algorithm": user.get("hashing_algorithm"), "tags": list(tags),
          "limits": user.get("limits") or {}})


@click.command("list_permissions")
@click.argument("columns", nargs=-1)
@vhost_option
@format_option
@pass_context
def list_permissions(ctx: Context, columns: tuple[str, ...], vhost: str | None,
                     fmt: str | None) -> None:
    """List the permissions of every user in a vhost."""
    vhost, fmt = ctx.resolve(vhost, fmt)
    cols = select_columns(columns, ["user", "configure", "write", "read"],
                          {"user", "vhost", "configure", "write", "read"})
    rows = call(ctx, "GET", path("vhosts", vhost, "permissions"), vhost=vhost)
    emit(rows, cols, fmt,
         None if ctx.quiet else f'Listing permissions for vhost "{vhost}" ...')


@click.command("set_permissions")
@click.argument("user")
@click.argument("configure")
@click.argument("write")
@click.argument("read")
@vhost_option
@format_option
@pass_context
def set_permissions(ctx: Context, user: str, configure: str, write: str, read: str,
                    vhost: str | None, fmt: str | None) -> None:
    """Set USER's CONFIGURE WRITE READ regular expressions in a vhost."""
    vhost, _ = ctx.resolve(vhost, fmt)
    call(ctx, "GET", path("users", user), what=f"user '{user}'")
    progress(ctx, fmt, f'Setting permissions for user "{user}" in vhost "{vhost}" ...')
    call(ctx, "PUT", path("permissions", vhost, user),
         {"configure": configure, "write": write, "read": read}, vhost=vhost)


@click.command("clear_permissions")
@click.argument("user")
@vhost_option
@format_option
@pass_context
def clear_permissions(ctx: Context, user: str, vhost: str | None, fmt: str | None) -> None:
    """Remove USER's permissions in a vhost."""
    vhost, _ = ctx.resolve(vhost, fmt)
    progress(ctx, fmt, f'Clearing permissions for user "{user}" in vhost "{vhost}" ...')
    call(ctx, "DELETE", path("permissions", vhost, user), vhost=vhost,
         missing=f"user '{user}' has no permissions in vhost '{vhost}'")


COMMANDS = [list_users, add_user, delete_user, change_password, set_user_tags,
            list_permissions, set_permissions, clear_permissions]
