"""``/api/connections``, ``/api/channels``, ``/api/consumers``: what clients are connected
and consuming. ``DELETE /api/connections/{name}`` closes a connection with 320
CONNECTION_FORCED ``Closed via management plugin`` (or the ``X-Reason`` header's text).

Monitoring and administrator users see every connection, other users their own.
Source: https://www.rabbitmq.com/docs/management#http-api, https://www.rabbitmq.com/docs/connections.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from management.auth import principal, visible_vhosts
from management.errors import ApiError, not_found
from management.routes.common import no_content, ok, vhost_of
from management.serializers import (
    channel_json,
    channel_name,
    connection_json,
    connection_name,
    consumer_json,
    open_channels,
)
from management.state import state

if TYPE_CHECKING:
    from amqp_server.channel import Channel
    from amqp_server.connection import Connection

routes = web.RouteTableDef()


def _visible(request: web.Request, user: str | None) -> bool:
    who = principal(request)
    return who.is_monitor or user == who.name


def _connections(request: web.Request) -> list[Connection]:
    st = state(request)
    found = [c for c in st.broker.connections if c.vhost_name and _visible(request, c.user)]
    return sorted(found, key=lambda c: connection_name(c, st))


async def _elsewhere(request: web.Request, kind: str) -> list[dict[str, Any]]:
    """``--workers N``: the other workers' connections, channels or consumers (as this
    API shows them, ``worker`` added), those the user may see; [] with one worker."""
    workers = state(request).broker.workers
    if workers is None:
        return []
    found = await workers.gather_json(kind)
    if kind == "consumers":
        return found
    return [item for item in found if _visible(request, item.get("user"))]


@routes.get("/api/connections")
async def list_connections(request: web.Request) -> web.Response:
    st = state(request)
    return ok([connection_json(c, st) for c in _connections(request)]
              + await _elsewhere(request, "connections"))


def _connection(request: web.Request) -> Connection:
    st = state(request)
    name = request.match_info["name"]
    for c in _connections(request):
        if connection_name(c, st) == name:
            return c
    raise not_found()


async def _one_elsewhere(request: web.Request, kind: str) -> dict[str, Any]:
    """The other workers' or nodes' connection or channel named in the path (one the user
    may see); 404 when none has it."""
    name = request.match_info["name"]
    for item in await _elsewhere(request, kind):
        if item.get("name") == name:
            return item
    raise not_found()


@routes.get("/api/connections/{name}")
async def get_connection(request: web.Request) -> web.Response:
    """The connection, wherever it is (another worker's or node's as it shows it); 404."""
    try:
        return ok(connection_json(_connection(request), state(request)))
    except ApiError:
        return ok(await _one_elsewhere(request, "connections"))


@routes.delete("/api/connections/{name}")
async def close_connection(request: web.Request) -> web.Response:
    reason = request.headers.get("X-Reason", "Closed via management plugin")
    workers = state(request).broker.workers
    try:
        conn = _connection(request)
    except ApiError:
        if workers is None or not await workers.close_elsewhere(
                request.match_info["name"], f"CONNECTION_FORCED - {reason}"):
            raise
        return no_content()
    conn.close(320, f"CONNECTION_FORCED - {reason}")
    return no_content()


@routes.get("/api/connections/{name}/channels")
async def connection_channels(request: web.Request) -> web.Response:
    """The connection's channels, wherever it is; 404 for an unknown connection."""
    st = state(request)
    try:
        conn = _connection(request)
    except ApiError:
        found = await _one_elsewhere(request, "connections")
        return ok(sorted((ch for ch in await _elsewhere(request, "channels")
                          if ch["connection_details"]["name"] == found["name"]),
                         key=lambda ch: int(ch["number"])))
    return ok([channel_json(ch, st) for _, ch in sorted(conn.channels.items())])


def _channels(request: web.Request) -> list[Channel]:
    st = state(request)
    found = [ch for ch in open_channels(st.broker) if _visible(request, ch.connection.user)]
    return sorted(found, key=lambda ch: channel_name(ch, st))


@routes.get("/api/channels")
async def list_channels(request: web.Request) -> web.Response:
    st = state(request)
    return ok([channel_json(ch, st) for ch in _channels(request)]
              + await _elsewhere(request, "channels"))


@routes.get("/api/channels/{name}")
async def get_channel(request: web.Request) -> web.Response:
    st = state(request)
    for ch in _channels(request):
        if channel_name(ch, st) == request.match_info["name"]:
            return ok(channel_json(ch, st))
    return ok(await _one_elsewhere(request, "channels"))  # another worker's or node's


def _consumers(request: web.Request, vhosts: set[str]) -> list[dict[str, object]]:
    st = state(request)
    return [consumer_json(c, st) for ch in _channels(request)
            for c in ch.consumers.values()
            if c.queue.vhost_name in vhosts]


async def _all_consumers(request: web.Request, vhosts: set[str]) -> list[dict[str, Any]]:
    elsewhere = [c for c in await _elsewhere(request, "consumers")
                 if c["queue"]["vhost"] in vhosts
                 and _visible(request, c["channel_details"].get("user"))]
    return _consumers(request, vhosts) + elsewhere


@routes.get("/api/consumers")
async def list_consumers(request: web.Request) -> web.Response:
    return ok(await _all_consumers(request, set(visible_vhosts(request))))


@routes.get("/api/consumers/{vhost}")
async def list_vhost_consumers(request: web.Request) -> web.Response:
    """The vhost's consumers on the channels the user may see (its own; every one for
    monitoring users, as ``/api/consumers``); 404 for an unknown vhost. As in RabbitMQ
    3.10.8, no vhost permission is needed: the channel filter already applies."""
    vhost = vhost_of(request)
    return ok(await _all_consumers(request, {vhost.name}))
