"""Rebalancing, maintenance mode and the quorum health check of a cluster node, over HTTP.

==================================================  ========================================
``POST /api/rebalance/queues``                      RabbitMQ 3.13's: rebalance quorum queue
                                                    leaders (``rabbitmq-queues rebalance``);
                                                    body ``{"type", "vhost_pattern",
                                                    "queue_pattern"}`` (all optional); 200
                                                    with RabbitMQ's summary ``[{"Node name",
                                                    "Number of quorum queues"}]`` (RabbitMQ
                                                    answers 204 and rebalances in the
                                                    background; one amqpq node: 204)
``GET /api/health/checks/node-is-quorum-critical``  RabbitMQ's: 200 ``{"status":"ok"}``, or
                                                    503 ``{"status":"failed","reason":
                                                    "There are quorum queues that would
                                                    lose their quorum if the target node is
                                                    shut down","queues":[...]}``; amqpq adds
                                                    ``maintenance`` (this node is drained)
``GET /api/maintenance``                            amqpq's: ``{"node", "draining",
                                                    "drained": [node...]}``
``POST /api/maintenance/drain``                     amqpq's (``rabbitmq-upgrade drain``):
                                                    200 ``{"moved", "kept", "closed"}``
``POST /api/maintenance/revive``                    amqpq's (``rabbitmq-upgrade revive``):
                                                    204
==================================================  ========================================

RabbitMQ runs drain and revive over its CLI's Erlang distribution, not HTTP; amqpq's
``amqpqctl`` speaks HTTP only, hence the two ``/api/maintenance`` routes (administrator
only). Without a cluster the health check answers ok (a single node, as RabbitMQ),
rebalancing 204, and drain/revive work as on RabbitMQ's single node
(:mod:`amqp_server.node_maintenance`: listeners and connections closed, nothing to move;
with ``--workers N``, every worker's clients and the supervisor's listeners).

Source: RabbitMQ 3.13's ``rabbit_mgmt_wm_rebalance_queues``,
``rabbit_mgmt_wm_health_check_node_is_quorum_critical``, ``rabbit_maintenance``.
"""

from __future__ import annotations

import re
from typing import Any

from aiohttp import web

from management.auth import require_admin
from management.errors import bad_request
from management.routes.common import no_content, ok, read_json
from management.state import state

routes = web.RouteTableDef()

CRITICAL_REASON = ("There are quorum queues that would lose their quorum if the target node "
                   "is shut down")


def _node(request: web.Request) -> Any:
    """This node's runtime when it is a cluster node, else None."""
    workers = state(request).broker.workers
    return workers if getattr(workers, "maintenance", None) is not None else None


def _cluster_node(request: web.Request) -> Any:
    require_admin(request)
    node = _node(request)
    if node is None:
        raise bad_request("maintenance mode is not available on this process")
    return node


@routes.post("/api/rebalance/queues")
async def rebalance(request: web.Request) -> web.Response:
    """Move quorum queue leaders so each running node leads about as many
    (:meth:`~amqp_server.cluster.quorum_admin.QuorumAdmin.rebalance`); one node: 204, nothing to
    move (as RabbitMQ answers)."""
    require_admin(request)
    node = _node(request)
    body = await read_json(request) if request.can_read_body else {}
    kind = body.get("type", "all")
    if kind not in ("all", "classic", "quorum"):
        raise bad_request(f"type {kind} is not supported. Try one of all, classic, quorum.")
    patterns = [str(body.get(key) or ".*") for key in ("vhost_pattern", "queue_pattern")]
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise bad_request(f"{pattern} is not a regular expression: {exc}") from None
    if node is None:
        return no_content()
    if kind == "classic":  # amqpq's classic queues are not replicated: nothing to move
        return ok([])
    return ok(await node.quorum.admin.rebalance(*patterns))


@routes.get("/api/health/checks/node-is-quorum-critical")
async def quorum_critical(request: web.Request) -> web.Response:
    """200 when stopping this node loses no quorum queue its quorum, else 503 with them."""
    node = _node(request)
    if node is None or len({*node.hub.names, node.index}) <= 1:
        return ok({"status": "ok", "reason": "single node cluster"})
    queues = [{"name": name, "virtual_host": vhost, "type": "quorum",
               "readable_name": f"queue '{name}' in vhost '{vhost}'"}
              for vhost, name in node.quorum.admin.critical_queues()]
    maintenance = node.maintenance.draining
    if not queues:
        return ok({"status": "ok", "maintenance": maintenance})
    return web.json_response({"status": "failed", "reason": CRITICAL_REASON,
                              "queues": queues, "maintenance": maintenance}, status=503)


def _single_node(request: web.Request) -> Any:
    """A broker of one process without a cluster: its maintenance mode
    (:class:`~amqp_server.node_maintenance.LocalMaintenance`), else None."""
    require_admin(request)
    return state(request).broker.maintenance if _node(request) is None else None


@routes.get("/api/maintenance")
async def maintenance_state(request: web.Request) -> web.Response:
    local = _single_node(request)
    if local is not None:
        return ok(local.status(state(request).node))
    node = _cluster_node(request)
    return ok({"node": node.hub.m.node, "draining": node.maintenance.draining,
               "drained": sorted(node.quorum.drained)})


@routes.post("/api/maintenance/drain")
async def drain(request: web.Request) -> web.Response:
    """Put this node in maintenance (:meth:`~amqp_server.cluster.maintenance.Maintenance.
    drain`; one node: :meth:`~amqp_server.node_maintenance.LocalMaintenance.drain`)."""
    local = _single_node(request)
    if local is not None:
        return ok(await local.drain())
    node = _cluster_node(request)
    return ok(await node.maintenance.drain())


@routes.post("/api/maintenance/revive")
async def revive(request: web.Request) -> web.Response:
    """Take this node out of maintenance."""
    local = _single_node(request)
    if local is not None:
        await local.revive()
        return no_content()
    node = _cluster_node(request)
    await node.maintenance.revive()
    return no_content()
