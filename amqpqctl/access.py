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
    columns_argument,
    output_options,
    show,
    vhost_option,
)
from amqpqctl.client import path
from amqpqctl.output import Output


def _tags(tags: list[str]) -> str:
    return "[" + ", ".join(tags) + "]"


USER_COLUMNS = {"user", "name", "tags", "limits", "hashing_algorithm", "password_hash"}


@click.command("list_users")
@columns_argument(USER_COLUMNS)
@output_options
def list_users(ctx: Context, columns: tuple[str, ...], out: Output) -> None:
    """List users (default columns: user tags; JSON: the API's user objects without the
    password hash unless the password_hash column is asked for)."""
    users = call(ctx, "GET", path("users"))
    table = out.formatter != "json"
    rows: list[dict[str, Any]] = [
        {**{k: v for k, v in u.items() if k != "password_hash" or "password_hash" in columns},
         "user": u["name"], "tags": _tags(u["tags"]) if table else u["tags"],
         "limits": u.get("limits", {})} for u in users]
    show(out, rows, columns, ["user", "tags"], USER_COLUMNS, "Listing users ...")


PERMISSION_COLUMNS = {"user", "vhost", "configure", "write", "read"}


def _user(ctx: Context, name: str) -> dict[str, Any]:
    found: dict[str, Any] = call(ctx, "GET", path("users", name), what=f"user '{name}'")
    return found


@click.command("add_user")
@click.argument("name")
@click.argument("password")
@click.option("--tags", default="", help="comma-separated tags, e.g. administrator")
@output_options
def add_user(ctx: Context, name: str, password: str, tags: str, out: Output) -> None:
    """Create user NAME with PASSWORD."""
    out.progress(f'Adding user "{name}" ...')
    call(ctx, "PUT", path("users", name), {"password": password, "tags": tags})


@click.command("delete_user")
@click.argument("name")
@output_options
def delete_user(ctx: Context, name: str, out: Output) -> None:
    """Delete user NAME (its connections are closed)."""
    out.progress(f'Deleting user "{name}" ...')
    call(ctx, "DELETE", path("users", name), what=f"user '{name}'")


@click.command("change_password")
@click.argument("name")
@click.argument("password")
@output_options
def change_password(ctx: Context, name: str, password: str, out: Output) -> None:
    """Set user NAME's password (its tags are kept)."""
    user = _user(ctx, name)
    out.progress(f'Changing password for user "{name}" ...')
    call(ctx, "PUT", path("users", name), {"password": password, "tags": user["tags"],
                                           "limits": user.get("limits") or {}})


@click.command("set_user_tags")
@click.argument("name")
@click.argument("tags", nargs=-1)
@output_options
def set_user_tags(ctx: Context, name: str, tags: tuple[str, ...], out: Output) -> None:
    """Replace user NAME's tags (none given: no tags); the password is kept."""
    user = _user(ctx, name)
    out.progress(f'Setting tags for user "{name}" to {_tags(list(tags))} ...')
    call(ctx, "PUT", path("users", name),
         {"password_hash": user["password_hash"],
          "hashing_algorithm": user.get("hashing_algorithm"), "tags": list(tags),
          "limits": user.get("limits") or {}})


@click.command("list_permissions")
@columns_argument(PERMISSION_COLUMNS)
@vhost_option
@output_options
def list_permissions(ctx: Context, columns: tuple[str, ...], vhost: str | None,
                     out: Output) -> None:
    """List the permissions of every user in a vhost."""
    vhost = ctx.resolve(vhost)
    rows = call(ctx, "GET", path("vhosts", vhost, "permissions"), vhost=vhost)
    show(out, rows, columns, ["user", "configure", "write", "read"], PERMISSION_COLUMNS,
         f'Listing permissions for vhost "{vhost}" ...')


@click.command("set_permissions")
@click.argument("user")
@click.argument("configure")
@click.argument("write")
@click.argument("read")
@vhost_option
@output_options
def set_permissions(ctx: Context, user: str, configure: str, write: str, read: str,
                    vhost: str | None, out: Output) -> None:
    """Set USER's CONFIGURE WRITE READ regular expressions in a vhost."""
    vhost = ctx.resolve(vhost)
    call(ctx, "GET", path("users", user), what=f"user '{user}'")
    out.progress(f'Setting permissions for user "{user}" in vhost "{vhost}" ...')
    call(ctx, "PUT", path("permissions", vhost, user),
         {"configure": configure, "write": write, "read": read}, vhost=vhost)


@click.command("clear_permissions")
@click.argument("user")
@vhost_option
@output_options
def clear_permissions(ctx: Context, user: str, vhost: str | None, out: Output) -> None:
    """Remove USER's permissions in a vhost."""
    vhost = ctx.resolve(vhost)
    out.progress(f'Clearing permissions for user "{user}" in vhost "{vhost}" ...')
    call(ctx, "DELETE", path("permissions", vhost, user), vhost=vhost,
         missing=f"user '{user}' has no permissions in vhost '{vhost}'")


COMMANDS = [list_users, add_user, delete_user, change_password, set_user_tags,
            list_permissions, set_permissions, clear_permissions]
