"""``/api/policies``: list, set (``PUT`` with ``pattern``, ``definition``, ``priority``,
``apply-to``), read and clear a vhost's policies. Setting one needs the ``policymaker`` or
``administrator`` tag and access to the vhost.

Validation failures answer 400 with RabbitMQ's ``"Validation failed\\n\\n<what>\\n"`` reason.
Source: https://www.rabbitmq.com/docs/management#http-api, https://www.rabbitmq.com/docs/policies.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from amqp_server.management.auth import require_policymaker, require_vhost, visible_vhosts
from amqp_server.management.errors import bad_request, not_found
from amqp_server.management.messages import require_keys
from amqp_server.management.routes.common import (
    created,
    no_content,
    ok,
    read_json,
    readable_vhost,
    vhost_of,
)
from amqp_server.management.state import state
from vhosts.definitions import jsonable
from vhosts.policies import Policy, PolicyError
from vhosts.vhost import VirtualHost

routes = web.RouteTableDef()


def policy_json(vhost: str, p: Policy) -> dict[str, Any]:
    return {"vhost": vhost, "name": p.name, "pattern": p.pattern, "apply-to": p.apply_to,
            "definition": jsonable(p.definition), "priority": p.priority}


def _policies(vhost: VirtualHost) -> list[dict[str, Any]]:
    return [policy_json(vhost.name, p) for _, p in sorted(vhost.policies.items())]


@routes.get("/api/policies")
async def list_all(request: web.Request) -> web.Response:
    broker = state(request).broker
    return ok([p for n in visible_vhosts(request) for p in _policies(broker.vhosts[n])])


@routes.get("/api/policies/{vhost}")
async def list_vhost(request: web.Request) -> web.Response:
    vhost = readable_vhost(request)
    return ok(_policies(vhost))


@routes.get("/api/policies/{vhost}/{name}")
async def get_policy(request: web.Request) -> web.Response:
    vhost = readable_vhost(request)
    p = vhost.policies.get(request.match_info["name"])
    if p is None:
        raise not_found()
    return ok(policy_json(vhost.name, p))


@routes.put("/api/policies/{vhost}/{name}")
async def put_policy(request: web.Request) -> web.Response:
    vhost = vhost_of(request)
    require_policymaker(request)
    require_vhost(request, vhost.name)
    body = await read_json(request)
    require_keys(body, ("pattern", "definition"))
    name = request.match_info["name"]
    pattern, definition = body["pattern"], body["definition"]
    priority = body.get("priority", 0)
    apply_to = body.get("apply-to", "all")
    if not isinstance(pattern, str):
        raise bad_request("Validation failed\n\npattern must be a string\n")
    if not isinstance(definition, dict):
        raise bad_request("Validation failed\n\ndefinition must be an object\n")
    if isinstance(priority, str) and priority.lstrip("-").isdigit():
        priority = int(priority)
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise bad_request("Validation failed\n\npriority must be an integer\n")
    if apply_to not in ("queues", "exchanges", "all", "classic_queues"):
        raise bad_request(f"Validation failed\n\napply-to '{apply_to}' unrecognised; should "
                          "be 'queues', 'exchanges' or 'all'\n")
    was_new = name not in vhost.policies
    try:
        vhost.set_policy(name, pattern, definition, priority, str(apply_to))
    except PolicyError as exc:
        raise bad_request(f"Validation failed\n\n{exc}\n") from None
    return created(was_new)


@routes.delete("/api/policies/{vhost}/{name}")
async def delete_policy(request: web.Request) -> web.Response:
    vhost = vhost_of(request)
    require_policymaker(request)
    require_vhost(request, vhost.name)
    if not vhost.clear_policy(request.match_info["name"]):
        raise not_found()
    return no_content()
