"""RabbitMQ's quorum queue replica endpoints (what ``rabbitmq-queues`` does, over HTTP):
add or remove one queue's member, grow or shrink every quorum queue on a node.

=====================================================================  ======================
``POST /api/queues/quorum/{vhost}/{name}/replicas/add`` ``{"node"}``    204; 400, 404
``DELETE /api/queues/quorum/{vhost}/{name}/replicas/delete``            202; 400, 404
``{"node"}``
``POST /api/queues/quorum/replicas/on/{node}/grow``                     204
``{"strategy": "all"|"even", "vhost_pattern", "queue_pattern"}``
``DELETE /api/queues/quorum/replicas/on/{node}/shrink``                 200 ``{"deleted",
                                                                        "errors"}``
=====================================================================  ======================

Only a cluster (``--cluster-etcd``) has replicas: on one node these answer 400. Changes go to
etcd (:meth:`amqp_server.cluster.quorum_admin.QuorumAdmin.change_members`); a new member copies
the queue from the leader and joins the in-sync replicas once caught up.

Source: RabbitMQ 3.13's ``rabbit_mgmt_wm_quorum_queue_replicas_*`` handlers;
https://www.rabbitmq.com/docs/man/rabbitmq-queues.8.
"""

from __future__ import annotations

import re
from typing import Any

from aiohttp import web

from management.auth import require_admin
from management.errors import bad_request, not_found
from management.routes.common import no_content, ok, read_json
from management.state import state

routes = web.RouteTableDef()

_REFUSED = {"already a member": "node {node} is already a member of {what}",
            "not a member": "node {node} is not a member of {what}",
            "last member": "{what} has only one member: delete the queue instead",
            "busy": "{what} kept changing: try again"}


def _quorum(request: web.Request) -> Any:
    require_admin(request)
    workers = state(request).broker.workers
    manager = getattr(workers, "quorum", None) if workers is not None else None
    if manager is None:
        raise bad_request("quorum queue replicas need a cluster (--cluster-etcd)")
    return manager.admin


async def _change(request: web.Request, add: bool) -> str:
    manager = _quorum(request)
    vhost, name = request.match_info["vhost"], request.match_info["name"]
    node = (await read_json(request)).get("node")
    if not isinstance(node, str) or not node:
        raise bad_request("node is required")
    answer = await manager.change_members(vhost, name, node, add)
    what = f"quorum queue '{name}' in vhost '{vhost}'"
    if answer == "no queue":
        raise not_found()
    if answer == "no node":
        raise bad_request(f"node {node} is not a member of the cluster")
    if answer != "ok":
        raise bad_request(_REFUSED[answer].format(node=node, what=what))
    return answer


@routes.post("/api/queues/quorum/{vhost}/{name}/replicas/add")
async def add_member(request: web.Request) -> web.Response:
    """Add a node to one quorum queue's members (``rabbitmq-queues add_member``)."""
    await _change(request, True)
    return no_content()


@routes.delete("/api/queues/quorum/{vhost}/{name}/replicas/delete")
async def delete_member(request: web.Request) -> web.Response:
    """Remove a node from one quorum queue's members (``rabbitmq-queues delete_member``)."""
    await _change(request, False)
    return web.Response(status=202)


def _pattern(body: dict[str, Any], key: str) -> re.Pattern[str]:
    try:
        return re.compile(str(body.get(key) or ".*"))
    except re.error as exc:
        raise bad_request(f"{key} is not a regular expression: {exc}") from None


@routes.post("/api/queues/quorum/replicas/on/{node}/grow")
async def grow(request: web.Request) -> web.Response:
    """Add the node to every matching quorum queue (``strategy`` all, or even: those with an
    even number of members), as ``rabbitmq-queues grow``."""
    manager = _quorum(request)
    node = request.match_info["node"]
    body = await read_json(request)
    strategy = body.get("strategy", "all")
    if strategy not in ("all", "even"):
        raise bad_request("strategy must be all or even")
    vhosts, queues = _pattern(body, "vhost_pattern"), _pattern(body, "queue_pattern")
    index = manager.node_index(node)
    if index is None:
        raise bad_request(f"node {node} is not a member of the cluster")
    for vhost, name, members in manager.quorum_queues():
        if index in members or not vhosts.search(vhost) or not queues.search(name):
            continue
        if strategy == "even" and len(members) % 2:
            continue
        await manager.change_members(vhost, name, node, True)
    return no_content()


@routes.delete("/api/queues/quorum/replicas/on/{node}/shrink")
async def shrink(request: web.Request) -> web.Response:
    """Remove the node from every quorum queue it is a member of (``rabbitmq-queues
    shrink``): ``{"deleted": [...], "errors": [...]}`` (a queue's only member stays)."""
    manager = _quorum(request)
    node = request.match_info["node"]
    index = manager.node_index(node)
    if index is None:
        raise bad_request(f"node {node} is not a member of the cluster")
    deleted, errors = [], []
    for vhost, name, members in manager.quorum_queues():
        if manager.member_on({"members": members}, node) is None:
            continue  # (a node of several workers: its member may be on any of them)
        answer = await manager.change_members(vhost, name, node, False)
        item = {"vhost": vhost, "name": name}
        if answer == "ok":
            deleted.append(item)
        else:
            errors.append({**item, "error": answer})
    return ok({"deleted": deleted, "errors": errors})
