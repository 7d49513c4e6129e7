"""``/api/policies``: list, set (``PUT`` with ``pattern``, ``definition``, ``priority``,
``apply-to``), read and clear a vhost's policies. Lists show the vhosts the user may read
in; reading one policy, setting and clearing need the ``policymaker`` or ``administrator``
tag and access to the vhost, checked before whether it exists (RabbitMQ 3.10.8's order).

Validation failures answer 400 with RabbitMQ's ``"Validation failed\\n\\n<what>\\n"`` reason;
a definition key RabbitMQ does not know is refused with its ``[{<<"max-lenght">>,5}] are not
recognised policy settings``, which ``/api/policies`` HTML-escapes (``&lt;&lt;``) and
``/api/operator-policies`` does not, as RabbitMQ 3.10.8's ``rabbit_mgmt_wm_policy`` and
``rabbit_mgmt_wm_operator_policy`` do.
Source: https://www.rabbitmq.com/docs/management#http-api, https://www.rabbitmq.com/docs/policies.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from federation import manager_of as federation_manager_of
from management.access_changes import ordered_change
from management.auth import (
    OBJECT_REFUSED,
    accessible_vhosts,
    require_admin,
    require_policymaker,
)
from management.errors import bad_request, not_found
from management.messages import require_keys
from management.routes.common import (
    created,
    no_content,
    ok,
    read_json,
    readable_vhost,
    target_vhost,
    vhost_of,
)
from management.state import state
from vhosts.definitions import jsonable
from vhosts.policies import APPLY_TO, Policy, escape_html_tags
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
    return ok([p for n in accessible_vhosts(request) for p in _policies(broker.vhosts[n])])


@routes.get("/api/policies/{vhost}")
async def list_vhost(request: web.Request) -> web.Response:
    vhost = readable_vhost(request)
    return ok(_policies(vhost))


@routes.get("/api/policies/{vhost}/{name}")
async def get_policy(request: web.Request) -> web.Response:
    """One policy: 401 ``User not authorised to access object`` without the policymaker tag
    or access to the vhost (RabbitMQ 3.10.8 lists policies to any user of the vhost but
    shows one only to policymakers), then 404."""
    require_policymaker(request)
    vhost = readable_vhost(request, reason=OBJECT_REFUSED)
    p = vhost.policies.get(request.match_info["name"])
    if p is None:
        raise not_found()
    return ok(policy_json(vhost.name, p))


async def _policy_body(request: web.Request, default_apply_to: str
                       ) -> tuple[str, dict[str, Any], int, str]:
    """``(pattern, definition, priority, apply-to)`` of a PUT body; 400 with RabbitMQ's
    "Validation failed" reasons when a field is missing or of the wrong type."""
    body = await read_json(request)
    require_keys(body, ("pattern", "definition"))
    pattern, definition = body["pattern"], body["definition"]
    priority = body.get("priority", 0)
    apply_to = body.get("apply-to", default_apply_to)
    if not isinstance(pattern, str):
        raise bad_request("Validation failed\n\npattern must be a string\n")
    if not isinstance(definition, dict):
        raise bad_request("Validation failed\n\ndefinition must be an object\n")
    if isinstance(priority, str) and priority.lstrip("-").isdigit():
        priority = int(priority)
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise bad_request("Validation failed\n\npriority must be an integer\n")
    if apply_to not in APPLY_TO:
        raise bad_request(f"Validation failed\n\napply-to '{apply_to}' unrecognised; should "
                          "be 'queues', 'exchanges' or 'all'\n")
    return pattern, definition, priority, str(apply_to)


@routes.put("/api/policies/{vhost}/{name}")
async def put_policy(request: web.Request) -> web.Response:
    """201/204; 401 ``User not authorised to access object`` without the policymaker tag or
    access to the vhost, 404 ``vhost_not_found``, 400 for a bad policy."""
    require_policymaker(request)
    vhost = target_vhost(request, reason=OBJECT_REFUSED)
    name = request.match_info["name"]
    pattern, definition, priority, apply_to = await _policy_body(request, "all")
    was_new = await ordered_change(
        request, {"op": "put_policy", "vhost": vhost.name, "name": name, "pattern": pattern,
                  "definition": definition, "priority": priority, "apply_to": apply_to},
        # this endpoint HTML-escapes its reason, as RabbitMQ's does
        lambda reason: bad_request(escape_html_tags(f"Validation failed\n\n{reason}\n")))
    _federation_follows(request)
    return created(was_new)


def _federation_follows(request: web.Request) -> None:
    """Have the federation links follow a policy change now (else within a second)."""
    manager = federation_manager_of(state(request).broker)
    if manager is not None:
        manager.poke()


@routes.delete("/api/policies/{vhost}/{name}")
async def delete_policy(request: web.Request) -> web.Response:
    """204; 401 as for a PUT, then 404 for an unknown vhost or policy."""
    require_policymaker(request)
    vhost = readable_vhost(request, reason=OBJECT_REFUSED)
    name = request.match_info["name"]
    if name not in vhost.policies:
        raise not_found()
    await ordered_change(request, {"op": "delete_policy", "vhost": vhost.name, "name": name})
    _federation_follows(request)
    return no_content()


# ---- operator policies (changed by administrators): limits policies cannot exceed ------


def _operator_policies(vhost: VirtualHost) -> list[dict[str, Any]]:
    return [policy_json(vhost.name, p) for _, p in sorted(vhost.operator_policies.items())]


@routes.get("/api/operator-policies")
async def list_all_operator(request: web.Request) -> web.Response:
    """The operator policies of the vhosts the user may read in (any management user, as
    in RabbitMQ 3.10.8; changing them needs the administrator tag)."""
    broker = state(request).broker
    return ok([p for n in accessible_vhosts(request)
               for p in _operator_policies(broker.vhosts[n])])


@routes.get("/api/operator-policies/{vhost}")
async def list_vhost_operator(request: web.Request) -> web.Response:
    """The vhost's operator policies; 401 without access to it, then 404."""
    return ok(_operator_policies(readable_vhost(request)))


@routes.get("/api/operator-policies/{vhost}/{name}")
async def get_operator_policy(request: web.Request) -> web.Response:
    require_admin(request)
    vhost = vhost_of(request)
    p = vhost.operator_policies.get(request.match_info["name"])
    if p is None:
        raise not_found()
    return ok(policy_json(vhost.name, p))


@routes.put("/api/operator-policies/{vhost}/{name}")
async def put_operator_policy(request: web.Request) -> web.Response:
    """201/204; 400 ``[{<<"foo">>,1}] are not recognised policy settings`` for a key that is
    not a limit (RabbitMQ 3.10.8's text, not HTML-escaped)."""
    require_admin(request)
    vhost = target_vhost(request)
    name = request.match_info["name"]
    pattern, definition, priority, apply_to = await _policy_body(request, "queues")
    was_new = await ordered_change(
        request, {"op": "put_operator_policy", "vhost": vhost.name, "name": name,
                  "pattern": pattern, "definition": definition, "priority": priority,
                  "apply_to": apply_to},
        lambda reason: bad_request(f"Validation failed\n\n{reason}\n"))
    return created(was_new)


@routes.delete("/api/operator-policies/{vhost}/{name}")
async def delete_operator_policy(request: web.Request) -> web.Response:
    require_admin(request)
    vhost = vhost_of(request)
    name = request.match_info["name"]
    if name not in vhost.operator_policies:
        raise not_found()
    await ordered_change(request, {"op": "delete_operator_policy", "vhost": vhost.name,
                                   "name": name})
    return no_content()
