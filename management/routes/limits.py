"""``/api/vhost-limits`` and ``/api/user-limits``: read, set and clear vhost and user limits.

Statuses, bodies and error reasons are RabbitMQ 3.10.8's (checked with curl against the
reference broker): ``PUT .../{name}`` with ``{"value": N}`` answers 204; an unknown limit or a
value that is not an integer is 400 with RabbitMQ's text (vhost limits wrap it in
"Validation failed"); a missing ``value`` is 400 ``[{key_missing,value}]``; an unknown vhost
404 ``vhost_not_found``, an unknown user 400 ``["no_such_user", name]``. Writes need the
administrator tag; vhost limits are listed for the vhosts the user can see, user limits are
listed for administrators (others see an empty list). Changes are persisted with the
definitions (the app's persist middleware).

Source: https://www.rabbitmq.com/docs/management#http-api, /docs/vhosts#limits,
/docs/user-limits.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from management.access_changes import ordered_change
from management.auth import principal, require_admin, require_vhost, visible_vhosts
from management.errors import ApiError, bad_request, not_found
from management.routes.common import no_content, ok, read_json, vhost_of
from management.state import state

routes = web.RouteTableDef()


def _rows(kind: str, limits: dict[str, dict[str, int]], names: list[str]) -> list[dict[str, Any]]:
    """``[{"vhost": "/", "value": {"max-queues": 1}}]`` (``"user"`` for user limits)."""
    return [{kind: name, "value": dict(limits[name])} for name in names if limits.get(name)]


def _user_of(request: web.Request, unknown: ApiError | None = None) -> str:
    """The user named in the path; ``unknown`` (404 by default) when there is none."""
    user = request.match_info["user"]
    if user not in state(request).broker.users.users:
        raise unknown or not_found()
    return user


async def _value(request: web.Request) -> Any:
    body = await read_json(request)
    if "value" not in body:
        raise bad_request("[{key_missing,value}]")
    return body["value"]


# ---- vhost limits ---------------------------------------------------------------------------


@routes.get("/api/vhost-limits")
async def list_vhost_limits(request: web.Request) -> web.Response:
    """Every visible vhost that has limits."""
    return ok(_rows("vhost", state(request).broker.limits.vhosts, visible_vhosts(request)))


@routes.get("/api/vhost-limits/{vhost}")
async def get_vhost_limits(request: web.Request) -> web.Response:
    """The vhost's limits (``[]`` when none); 401 unless the user may read in the vhost or
    is tagged monitoring (who sees every vhost's limits in the list too), then 404 for an
    unknown vhost."""
    if not principal(request).is_monitor:
        require_vhost(request, request.match_info["vhost"])
    vhost = vhost_of(request)
    return ok(_rows("vhost", state(request).broker.limits.vhosts, [vhost.name]))


@routes.put("/api/vhost-limits/{vhost}/{name}")
async def set_vhost_limit(request: web.Request) -> web.Response:
    """Set one limit: 204; 400 for an unknown limit or a bad value (administrator)."""
    require_admin(request)
    broker = state(request).broker
    vhost = request.match_info["vhost"]
    if vhost not in broker.vhosts:
        raise ApiError(404, "not_found", "vhost_not_found")
    value = await _value(request)
    await ordered_change(
        request, {"op": "set_limit", "kind": "vhost", "name": vhost,
                  "limit": request.match_info["name"], "value": value},
        lambda reason: bad_request(f"Validation failed\n\n{reason}\n"))
    return no_content()


@routes.delete("/api/vhost-limits/{vhost}/{name}")
async def clear_vhost_limit(request: web.Request) -> web.Response:
    """Clear one limit: 204 (also when it was not set; 404 for an unknown vhost)."""
    require_admin(request)
    vhost = vhost_of(request)
    await ordered_change(request, {"op": "clear_limit", "kind": "vhost", "name": vhost.name,
                                   "limit": request.match_info["name"]})
    return no_content()


# ---- user limits ----------------------------------------------------------------------------


@routes.get("/api/user-limits")
async def list_user_limits(request: web.Request) -> web.Response:
    """Every user that has limits (administrators; others get ``[]``)."""
    broker = state(request).broker
    names = sorted(broker.users.users) if principal(request).is_admin else []
    return ok(_rows("user", broker.limits.users, names))


@routes.get("/api/user-limits/{user}")
async def get_user_limits(request: web.Request) -> web.Response:
    """The user's limits (administrator; 404 for an unknown user)."""
    require_admin(request)
    user = _user_of(request)
    return ok(_rows("user", state(request).broker.limits.users, [user]))


@routes.put("/api/user-limits/{user}/{name}")
async def set_user_limit(request: web.Request) -> web.Response:
    """Set one limit: 204; 400 for an unknown user or limit, or a bad value."""
    require_admin(request)
    user = _user_of(request, bad_request(["no_such_user", request.match_info["user"]]))
    value = await _value(request)
    await ordered_change(request, {"op": "set_limit", "kind": "user", "name": user,
                                   "limit": request.match_info["name"], "value": value})
    return no_content()


@routes.delete("/api/user-limits/{user}/{name}")
async def clear_user_limit(request: web.Request) -> web.Response:
    """Clear one limit: 204 (also when it was not set; 404 for an unknown user)."""
    require_admin(request)
    user = _user_of(request)
    await ordered_change(request, {"op": "clear_limit", "kind": "user", "name": user,
                                   "limit": request.match_info["name"]})
    return no_content()
