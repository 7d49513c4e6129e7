"""``/api/permissions`` and ``/api/topic-permissions``: per-user, per-vhost permissions.

``PUT /api/permissions/{vhost}/{user}`` with ``{"configure", "write", "read"}`` (all three
required); an unknown user or vhost is 400 ``vhost_or_user_not_found``, as RabbitMQ answers.
Administrator only. Source: https://www.rabbitmq.com/docs/management#http-api,
https://www.rabbitmq.com/docs/access-control.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from management.access_changes import ordered_change
from management.auth import require_admin
from management.errors import bad_request, not_found
from management.messages import require_keys
from management.routes.common import created, no_content, ok, read_json, text
from management.serializers import permission_json
from management.state import state

if TYPE_CHECKING:
    from broker.broker import Broker

routes = web.RouteTableDef()


def topic_permission_rows(broker: Broker) -> list[dict[str, Any]]:
    return [{"user": u, "vhost": v, "exchange": tp.exchange, "write": tp.write,
             "read": tp.read}
            for (u, v), entries in sorted(broker.permissions.topic_permissions.items())
            for tp in sorted(entries.values(), key=lambda t: t.exchange)]


def _user_and_vhost(request: web.Request) -> tuple[str, str]:
    broker = state(request).broker
    user, vhost = request.match_info["user"], request.match_info["vhost"]
    if user not in broker.users.users or vhost not in broker.vhosts:
        raise not_found()
    return user, vhost


@routes.get("/api/permissions")
async def list_permissions(request: web.Request) -> web.Response:
    require_admin(request)
    perms = state(request).broker.permissions.permissions
    return ok([permission_json(u, v, p) for (u, v), p in sorted(perms.items())])


@routes.get("/api/permissions/{vhost}/{user}")
async def get_permission(request: web.Request) -> web.Response:
    require_admin(request)
    user, vhost = _user_and_vhost(request)
    p = state(request).broker.permissions.get(user, vhost)
    if p is None:
        raise not_found()
    return ok(permission_json(user, vhost, p))


@routes.put("/api/permissions/{vhost}/{user}")
async def put_permission(request: web.Request) -> web.Response:
    require_admin(request)
    body = await read_json(request)
    require_keys(body, ("configure", "write", "read"))
    broker = state(request).broker
    user, vhost = request.match_info["user"], request.match_info["vhost"]
    if user not in broker.users.users or vhost not in broker.vhosts:
        raise bad_request("vhost_or_user_not_found")
    was_new = await ordered_change(request, {
        "op": "put_permission", "user": user, "vhost": vhost,
        "configure": text(body, "configure"), "write": text(body, "write"),
        "read": text(body, "read")})
    return created(was_new)


@routes.delete("/api/permissions/{vhost}/{user}")
async def delete_permission(request: web.Request) -> web.Response:
    require_admin(request)
    user, vhost = _user_and_vhost(request)
    broker = state(request).broker
    if broker.permissions.get(user, vhost) is None:
        raise not_found()
    await ordered_change(request, {"op": "delete_permission", "user": user, "vhost": vhost})
    return no_content()


@routes.get("/api/topic-permissions")
async def list_topic_permissions(request: web.Request) -> web.Response:
    require_admin(request)
    return ok(topic_permission_rows(state(request).broker))


@routes.get("/api/topic-permissions/{vhost}/{user}")
async def get_topic_permissions(request: web.Request) -> web.Response:
    require_admin(request)
    user, vhost = _user_and_vhost(request)
    rows = [r for r in topic_permission_rows(state(request).broker)
            if r["user"] == user and r["vhost"] == vhost]
    if not rows:
        raise not_found()
    return ok(rows)


@routes.put("/api/topic-permissions/{vhost}/{user}")
async def put_topic_permission(request: web.Request) -> web.Response:
    require_admin(request)
    body = await read_json(request)
    require_keys(body, ("exchange", "write", "read"))
    broker = state(request).broker
    user, vhost = request.match_info["user"], request.match_info["vhost"]
    if user not in broker.users.users or vhost not in broker.vhosts:
        raise bad_request("vhost_or_user_not_found")
    was_new = await ordered_change(request, {
        "op": "put_topic_permission", "user": user, "vhost": vhost,
        "exchange": text(body, "exchange"), "write": text(body, "write"),
        "read": text(body, "read")})
    return created(was_new)


@routes.delete("/api/topic-permissions/{vhost}/{user}")
async def delete_topic_permissions(request: web.Request) -> web.Response:
    require_admin(request)
    user, vhost = _user_and_vhost(request)
    await ordered_change(request, {"op": "delete_topic_permission", "user": user,
                                   "vhost": vhost, "exchange": request.query.get("exchange")})
    return no_content()
