"""The status routes shovels (:mod:`management.routes.shovels`) and federation links
(:mod:`management.routes.federation`) share, as their RabbitMQ management plugins serve
them: ``GET <base>`` (the rows of every vhost the user may read in), ``GET <base>/{vhost}``
(401 without access to it, 404 when it does not exist) and ``DELETE <restart>`` (an
administrator restarts one link: 204, 404 when this node runs none of that key).

Source: https://www.rabbitmq.com/docs/shovel#status,
https://www.rabbitmq.com/docs/federation#status.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from aiohttp import web

from management.auth import OBJECT_REFUSED, accessible_vhosts, require_admin
from management.errors import not_found
from management.routes.common import no_content, ok, readable_vhost
from management.state import state


class LinkManager(Protocol):
    """What the routes ask of a shovel or federation manager."""

    def status(self) -> list[dict[str, Any]]:
        """Its status rows (each with ``vhost``)."""
        ...

    def restart(self, vhost: str, key: str, /) -> bool:
        """Restart link ``key`` of ``vhost``; False when it runs none."""
        ...


ManagerOf = Callable[[Any], "LinkManager | None"]


def visible_rows(request: web.Request, manager_of: ManagerOf) -> list[dict[str, Any]]:
    """The status rows of this process's manager (``manager_of(broker)``; none without
    one) in the vhosts the user may read in."""
    manager = manager_of(state(request).broker)
    seen = set(accessible_vhosts(request))
    return [r for r in (manager.status() if manager is not None else []) if r["vhost"] in seen]


def link_status_routes(base: str, restart: str, key: str, manager_of: ManagerOf,
                       what: str) -> web.RouteTableDef:
    """The three routes above: ``GET base``, ``GET base/{vhost}``, ``DELETE restart``
    (``restart`` names ``{vhost}`` and ``{key}``, the link's name or id, passed to the
    manager's ``restart``). ``what``: the links' name in the handlers' docstrings."""
    routes = web.RouteTableDef()

    @routes.get(base)
    async def list_all(request: web.Request) -> web.Response:
        return ok(visible_rows(request, manager_of))

    @routes.get(base + "/{vhost}")
    async def list_vhost(request: web.Request) -> web.Response:
        vhost = readable_vhost(request)
        return ok([r for r in visible_rows(request, manager_of) if r["vhost"] == vhost.name])

    @routes.delete(restart)
    async def restart_one(request: web.Request) -> web.Response:
        vhost = readable_vhost(request, reason=OBJECT_REFUSED)
        require_admin(request)
        manager = manager_of(state(request).broker)
        if manager is None or not manager.restart(vhost.name, request.match_info[key]):
            raise not_found()
        return no_content()

    list_all.__doc__ = f"Every {what} of the vhosts the user may read in."
    list_vhost.__doc__ = f"The {what}s of one vhost (401 without access, 404 when missing)."
    restart_one.__doc__ = (f"Restart a {what} (its connections closed and opened again): "
                           "204, 404 when there is none (administrator).")
    return routes
