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

from aiohttp import web

from management.errors import not_found
from management.routes.common import ok, readable_vhost
from management.routes.link_status import link_status_routes, visible_rows
from shovel import manager_of

routes = link_status_routes("/api/shovels", "/api/shovels/vhost/{vhost}/{name}/restart",
                            "name", manager_of, "shovel")


@routes.get("/api/shovels/vhost/{vhost}/{name}")
async def get_shovel(request: web.Request) -> web.Response:
    """One shovel's status; 404 when there is none of that name."""
    vhost = readable_vhost(request)
    for row in visible_rows(request, manager_of):
        if (row["vhost"], row["name"]) == (vhost.name, request.match_info["name"]):
            return ok(row)
    raise not_found()
