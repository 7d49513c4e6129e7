"""The management API's routes, one module per resource.

Source: https://www.rabbitmq.com/docs/management#http-api.
"""

from __future__ import annotations

from aiohttp import web

from management.routes import (
    bindings,
    connections,
    definitions,
    delayed,
    exchanges,
    federation,
    health,
    limits,
    maintenance,
    move,
    nodes,
    overview,
    parameters,
    permissions,
    policies,
    queues,
    quorum,
    shovels,
    users,
    vhosts,
)


def all_routes() -> list[web.RouteTableDef]:
    """Every route table, in matching order."""
    return [overview.routes, nodes.routes, vhosts.routes, users.routes, permissions.routes,
            delayed.routes, exchanges.routes, quorum.routes, queues.routes, bindings.routes,
            policies.routes,
            connections.routes, definitions.routes, limits.routes, parameters.routes,
            shovels.routes, federation.routes,
            maintenance.routes, health.routes, move.routes]
