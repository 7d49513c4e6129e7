"""``/api/vhosts``: list, create (``PUT`` with ``description``/``tags``), delete, and the
vhost's permissions, connections and channels.

Creating a vhost grants the creating user full permissions in it, as the management plugin
does. Source: https://www.rabbitmq.com/docs/management#http-api, https://www.rabbitmq.com/docs/vhosts.
"""

from __future__ import annotations

from aiohttp import web

from management.access_changes import ordered_change
from management.auth import principal, require_admin, visible_vhosts
from management.errors import bad_request, not_found
from management.routes.common import (
    created,
    no_content,
    ok,
    read_json,
    readable_vhost,
    vhost_of,
)
from management.serializers import (
    channel_json,
    connection_json,
    open_channels,
    permission_json,
    vhost_json,
)
from management.state import state
from vhosts.definitions import parse_tags

routes = web.RouteTableDef()


@routes.get("/api/vhosts")
async def list_vhosts(request: web.Request) -> web.Response:
    st = state(request)
    return ok([vhost_json(st.broker, n, st.node, st.rates) for n in visible_vhosts(request)])


@routes.get("/api/vhosts/{vhost}")
async def get_vhost(request: web.Request) -> web.Response:
    require_admin(request)  # before the 404, as RabbitMQ: the tag is checked first
    vhost = vhost_of(request)
    st = state(request)
    return ok(vhost_json(st.broker, vhost.name, st.node, st.rates))


@routes.put("/api/vhosts/{vhost}")
async def put_vhost(request: web.Request) -> web.Response:
    who = require_admin(request)
    name = request.match_info["vhost"]
    body = await read_json(request)
    description = body.get("description")
    if description is not None and not isinstance(description, str):
        raise bad_request("description must be a string")
    try:
        tags = parse_tags(body["tags"]) if "tags" in body else None
    except ValueError as exc:
        raise bad_request(str(exc)) from None
    was_new = await ordered_change(request, {
        "op": "put_vhost", "name": name, "description": description, "tags": tags,
        "creator": who.name})
    return created(was_new)


@routes.delete("/api/vhosts/{vhost}")
async def delete_vhost(request: web.Request) -> web.Response:
    require_admin(request)
    name = request.match_info["vhost"]
    if name not in state(request).broker.vhosts:
        raise not_found()
    await ordered_change(request, {"op": "delete_vhost", "name": name})
    return no_content()


@routes.get("/api/vhosts/{vhost}/permissions")
async def vhost_permissions(request: web.Request) -> web.Response:
    require_admin(request)
    vhost = vhost_of(request)
    perms = state(request).broker.permissions.permissions
    return ok([permission_json(u, v, p) for (u, v), p in sorted(perms.items())
               if v == vhost.name])


@routes.get("/api/vhosts/{vhost}/topic-permissions")
async def vhost_topic_permissions(request: web.Request) -> web.Response:
    require_admin(request)
    vhost = vhost_of(request)
    from management.routes.permissions import topic_permission_rows

    return ok([r for r in topic_permission_rows(state(request).broker)
               if r["vhost"] == vhost.name])


@routes.get("/api/vhosts/{vhost}/connections")
async def vhost_connections(request: web.Request) -> web.Response:
    vhost = readable_vhost(request)
    st = state(request)
    who = principal(request)
    return ok([connection_json(c, st) for c in st.broker.connections
               if c.vhost_name == vhost.name and (who.is_monitor or c.user == who.name)])


@routes.get("/api/vhosts/{vhost}/channels")
async def vhost_channels(request: web.Request) -> web.Response:
    vhost = readable_vhost(request)
    st = state(request)
    who = principal(request)
    return ok([channel_json(ch, st) for ch in open_channels(st.broker)
               if ch.connection.vhost_name == vhost.name
               and (who.is_monitor or ch.connection.user == who.name)])
