"""``/api/shovels``: the dynamic shovels' status, as ``rabbitmq_shovel_management`` serves it.

``GET /api/shovels`` (every vhost the user may read in), ``GET /api/shovels/{vhost}``,
``GET /api/shovels/vhost/{vhost}/{name}`` (one shovel: 404 when this node runs none of that
name; RabbitMQ 3.10.8 answers the vhost's whole list there, 3.13 the one shovel), and
``DELETE /api/shovels/vhost/{vhost}/{name}/restart`` (204; 404 as above). Rows come from
:meth:`shovel.manager.ShovelManager.status`: ``node``, ``timestamp``, ``name``, ``vhost``,
``type`` ``dynamic``, ``state`` (``starting``, ``running``, ``terminated``), the ends while
running (URIs without credentials), ``reason`` when terminated.

Source: https://www.rabbitmq.com/docs/shovel#status, checked with curl against RabbitMQ
3.10.8 with rabbitmq_shovel_management.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from management.auth import OBJECT_REFUSED, accessible_vhosts, require_admin
from management.errors import not_found
from management.routes.common import no_content, ok, readable_vhost
from management.state import state
from shovel import manager_of

routes = web.RouteTableDef()


def _rows(request: web.Request) -> list[dict[str, Any]]:
    manager = manager_of(state(request).broker)
    seen = set(accessible_vhosts(request))
    return [r for r in (manager.status() if manager is not None else []) if r["vhost"] in seen]


@routes.get("/api/shovels")
async def list_shovels(request: web.Request) -> web.Response:
    """Every shovel of the vhosts the user may read in."""
    return ok(_rows(request))


@routes.get("/api/shovels/{vhost}")
async def list_vhost_shovels(request: web.Request) -> web.Response:
    """The shovels of one vhost (401 without access to it, 404 when it does not exist)."""
    vhost = readable_vhost(request)
    return ok([r for r in _rows(request) if r["vhost"] == vhost.name])


@routes.get("/api/shovels/vhost/{vhost}/{name}")
async def get_shovel(request: web.Request) -> web.Response:
    """One shovel's status; 404 when there is none of that name."""
    vhost = readable_vhost(request)
    for row in _rows(request):
        if (row["vhost"], row["name"]) == (vhost.name, request.match_info["name"]):
            return ok(row)
    raise not_found()


@routes.delete("/api/shovels/vhost/{vhost}/{name}/restart")
async def restart_shovel(request: web.Request) -> web.Response:
    """Restart a shovel (its connections are closed and opened again): 204, 404 when
    there is none (administrator: shovels are set by administrators in amqpq)."""
    vhost = readable_vhost(request, reason=OBJECT_REFUSED)
    require_admin(request)
    manager = manager_of(state(request).broker)
    if manager is None or not manager.restart(vhost.name, request.match_info["name"]):
        raise not_found()
    return no_content()
