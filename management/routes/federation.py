"""``/api/federation-links``: the federation links' status, as
``rabbitmq_federation_management`` serves it.

``GET /api/federation-links`` (every vhost the user may read in),
``GET /api/federation-links/{vhost}``, and
``DELETE /api/federation-links/vhost/{vhost}/{id}/{node}/restart`` (204; 404 when this node
runs no link of that id). Rows come from :meth:`federation.manager.FederationManager.status`:
``node``, ``exchange`` + ``upstream_exchange`` or ``queue`` + ``upstream_queue`` +
``consumer_tag``, ``type``, ``vhost``, ``upstream``, ``id``, ``status`` (``starting``,
``running``, ``error`` + ``error``), ``local_connection`` when running (the link's
connection to this broker, as ``/api/connections`` names it), ``uri`` (no credentials),
``timestamp``. RabbitMQ adds ``local_channel`` (its Erlang channel's statistics) to running
links; amqpq does not.

Source: https://www.rabbitmq.com/docs/federation#status, checked with curl against RabbitMQ
3.10.8 with rabbitmq_federation_management.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from federation import manager_of
from management.auth import OBJECT_REFUSED, accessible_vhosts, require_admin
from management.errors import not_found
from management.routes.common import no_content, ok, readable_vhost
from management.state import state

routes = web.RouteTableDef()


def _rows(request: web.Request) -> list[dict[str, Any]]:
    manager = manager_of(state(request).broker)
    seen = set(accessible_vhosts(request))
    return [r for r in (manager.status() if manager is not None else []) if r["vhost"] in seen]


@routes.get("/api/federation-links")
async def list_links(request: web.Request) -> web.Response:
    """Every federation link of the vhosts the user may read in."""
    return ok(_rows(request))


@routes.get("/api/federation-links/{vhost}")
async def list_vhost_links(request: web.Request) -> web.Response:
    """The links of one vhost (401 without access to it, 404 when it does not exist)."""
    vhost = readable_vhost(request)
    return ok([r for r in _rows(request) if r["vhost"] == vhost.name])


@routes.delete("/api/federation-links/vhost/{vhost}/{id}/{node}/restart")
async def restart_link(request: web.Request) -> web.Response:
    """Restart a link (its connections closed and opened again): 204, 404 when there is
    none (administrator)."""
    vhost = readable_vhost(request, reason=OBJECT_REFUSED)
    require_admin(request)
    manager = manager_of(state(request).broker)
    if manager is None or not manager.restart(vhost.name, request.match_info["id"]):
        raise not_found()
    return no_content()
