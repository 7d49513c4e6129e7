"""HTTP basic authentication against the broker's users, and RabbitMQ's management tags.

Every ``/api`` request carries basic credentials checked with
:meth:`~vhosts.users.UserStore.authenticate` and the client's address, so ``guest`` works
from loopback only, as on RabbitMQ. Then, as RabbitMQ 3.10 does (checked with curl):

* a user without one of the tags ``management``, ``policymaker``, ``monitoring``,
  ``administrator`` gets 401 ``Not management user``;
* users, permissions, topic permissions, definitions, creating/deleting vhosts (and reading
  one vhost) need ``administrator``: 401 ``Not administrator user``;
* ``/api/vhosts``, ``/api/vhost-limits`` and the ``/api/overview`` totals cover every vhost
  for ``monitoring``/``administrator`` users; lists of queues, exchanges, bindings, policies
  and parameters cover every vhost for administrators only, and for other users (monitoring
  ones included) the vhosts they have permissions in; reading inside one vhost needs
  permissions there (or ``administrator``): 401 ``User not authorised to access virtual
  host``, checked before whether the object named in the path exists (404);
* changing queues, exchanges and bindings, publishing and getting messages are checked
  against the user's configure/write/read permissions exactly as over AMQP (a refusal is
  401 ``Access refused.``), even for administrators;
* policies need ``policymaker`` or ``administrator``: 401 ``User not authorised to access
  object``.

Source: https://www.rabbitmq.com/docs/management#permissions, ``rabbit_mgmt_util.erl``.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from amqp_common.errors import AMQPError
from management.errors import ApiError, from_amqp, login_failed, not_authorised
from management.state import state
from vhosts.permissions import Perm

MANAGEMENT_TAGS = frozenset({"management", "policymaker", "monitoring", "administrator"})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Principal:
    """The authenticated user of a request."""

    name: str
    tags: tuple[str, ...]

    @property
    def is_admin(self) -> bool:
        return "administrator" in self.tags

    @property
    def is_monitor(self) -> bool:
        return self.is_admin or "monitoring" in self.tags

    @property
    def is_policymaker(self) -> bool:
        return self.is_admin or "policymaker" in self.tags


def parse_basic(header: str | None) -> tuple[str, str] | None:
    """(user, password) from an ``Authorization: Basic ...`` header, or None."""
    if not header or not header.lower().startswith("basic "):
        return None
    try:
        raw = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = raw.partition(":")
    return (user, password) if sep else None


# aiohttp >= 3.12 wants typed request keys; older versions take a plain string
PRINCIPAL_KEY: Any = (web.RequestKey("amqpq_principal", Principal)
                      if hasattr(web, "RequestKey") else "amqpq_principal")


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Authenticate ``/api`` requests; others (the web UI's files) pass unauthenticated."""
    if not request.path.startswith("/api/"):
        return await handler(request)
    credentials = parse_basic(request.headers.get("Authorization"))
    if credentials is None:
        # RabbitMQ answers a request without credentials with an empty 401
        raise web.HTTPUnauthorized(headers={"WWW-Authenticate":
                                            'Basic realm="RabbitMQ Management"'})
    broker = state(request).broker
    user = broker.users.authenticate(credentials[0], credentials[1], request.remote)
    if user is None:
        raise login_failed()
    if not MANAGEMENT_TAGS.intersection(user.tags):
        raise not_authorised("Not management user")
    request[PRINCIPAL_KEY] = Principal(user.name, tuple(user.tags))
    return await handler(request)


def principal(request: web.Request) -> Principal:
    """The request's authenticated user."""
    found: Principal = request[PRINCIPAL_KEY]
    return found


def require_admin(request: web.Request) -> Principal:
    """Raises 401 ``Not administrator user`` unless the user is an administrator."""
    who = principal(request)
    if not who.is_admin:
        raise not_authorised("Not administrator user")
    return who


def require_monitor(request: web.Request) -> Principal:
    """Raises 401 ``Not monitor user`` unless the user is tagged monitoring or administrator."""
    who = principal(request)
    if not who.is_monitor:
        raise not_authorised("Not monitor user")
    return who


def require_policymaker(request: web.Request) -> Principal:
    """Raises 401 ``User not authorised to access object`` unless the user is tagged
    policymaker or administrator."""
    who = principal(request)
    if not who.is_policymaker:
        raise not_authorised("User not authorised to access object")
    return who


def can_see_vhost(request: web.Request, vhost: str) -> bool:
    """True when the user may read inside ``vhost`` (a permission there, or administrator)."""
    who = principal(request)
    return who.is_admin or state(request).broker.permissions.get(who.name, vhost) is not None


VHOST_REFUSED = "User not authorised to access virtual host"
OBJECT_REFUSED = "User not authorised to access object"


def require_vhost(request: web.Request, vhost: str, reason: str = VHOST_REFUSED) -> Principal:
    """Raises 401 ``User not authorised to access virtual host`` (or ``reason``) when the
    vhost exists and the user may not read in it.

    A vhost that does not exist passes, so the route's 404 comes next: RabbitMQ's
    ``is_authorized_vhost`` checks access before the resource exists, and so does every
    route here, so a user learns nothing about the queues, exchanges, bindings, policies or
    limits of a vhost it cannot access (only whether the vhost exists, as RabbitMQ 3.10.8
    answers 404 for an unknown vhost; its AMQP Connection.Open tells that too).
    """
    if vhost in state(request).broker.vhosts and not can_see_vhost(request, vhost):
        raise not_authorised(reason)
    return principal(request)


def visible_vhosts(request: web.Request) -> list[str]:
    """The vhosts listed for this user in ``/api/vhosts``, ``/api/vhost-limits`` and counted
    in ``/api/overview``: all for monitoring/administrator users, else those it has
    permissions in."""
    if principal(request).is_monitor:
        return sorted(state(request).broker.vhosts)
    return accessible_vhosts(request)


def accessible_vhosts(request: web.Request) -> list[str]:
    """The vhosts the user may read in (all for administrators, else those it has
    permissions in): what lists of queues, exchanges, bindings, policies and parameters
    show, monitoring users included, as RabbitMQ 3.10.8's ``filter_vhost`` does."""
    who = principal(request)
    broker = state(request).broker
    names = sorted(broker.vhosts)
    if who.is_admin:
        return names
    return [n for n in names if broker.permissions.get(who.name, n) is not None]


def check_permission(request: web.Request, vhost: str, perm: Perm, kind: str,
                     name: str) -> None:
    """The AMQP permission check of the operation: raises 401 ``Access refused.``."""
    try:
        state(request).broker.permissions.check(principal(request).name, vhost, perm, kind,
                                                name)
    except AMQPError as exc:
        raise from_amqp(exc) from None


__all__ = ["OBJECT_REFUSED", "VHOST_REFUSED", "ApiError", "Principal", "accessible_vhosts",
           "auth_middleware", "can_see_vhost", "check_permission", "principal",
           "require_admin", "require_policymaker", "require_vhost", "visible_vhosts"]
