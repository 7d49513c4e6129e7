"""``/api/parameters`` and ``/api/global-parameters``: runtime parameters.

The parameters listed are the ones a definitions import brought (kept verbatim, exported
again), the ``shovel`` parameters (dynamic shovels, validated with RabbitMQ's texts by
:mod:`shovel.params` and run by :mod:`shovel.manager`), the ``federation-upstream`` and
``federation-upstream-set`` parameters (:mod:`federation.params`, run by
:mod:`federation.manager`) and, as RabbitMQ 3.10 lists them,
each vhost's limits as component ``vhost-limits``, name ``limits``. Setting a parameter of
any other component is 400 ``component X not found``, as RabbitMQ without the plugin
answers; ``vhost-limits`` parameters set the vhost's limits. Statuses and reasons checked
with curl against RabbitMQ 3.10.8.

Source: https://www.rabbitmq.com/docs/parameters, /docs/management#http-api.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from federation import manager_of as federation_manager_of
from federation.params import COMPONENTS as FEDERATION_COMPONENTS
from federation.params import FederationParamError
from federation.params import validate as validate_federation
from management.auth import (
    OBJECT_REFUSED,
    accessible_vhosts,
    principal,
    require_admin,
    require_policymaker,
)
from management.errors import bad_request, not_found
from management.routes.common import (
    created,
    no_content,
    ok,
    read_json,
    readable_vhost,
    target_vhost,
)
from management.state import state
from shovel import manager_of
from shovel.params import COMPONENT as SHOVEL_COMPONENT
from shovel.params import ShovelParamError, endpoint, validate
from vhosts.limits import LimitsError, validate_limits

routes = web.RouteTableDef()

LIMITS_COMPONENT = "vhost-limits"


def _all(request: web.Request) -> list[dict[str, Any]]:
    """Every parameter in the vhosts the user may read in."""
    broker = state(request).broker
    seen = set(accessible_vhosts(request))
    out = [dict(p) for p in broker.extras.parameters if p.get("vhost") in seen]
    out += [{"value": dict(limits), "vhost": vhost, "component": LIMITS_COMPONENT,
             "name": "limits"}
            for vhost, limits in sorted(broker.limits.vhosts.items()) if vhost in seen]
    return out


@routes.get("/api/parameters")
async def list_parameters(request: web.Request) -> web.Response:
    """Every runtime parameter (policymaker)."""
    require_policymaker(request)
    return ok(_all(request))


@routes.get("/api/parameters/{component}")
async def list_component(request: web.Request) -> web.Response:
    require_policymaker(request)
    component = request.match_info["component"]
    return ok([p for p in _all(request) if p["component"] == component])


@routes.get("/api/parameters/{component}/{vhost}")
async def list_component_vhost(request: web.Request) -> web.Response:
    require_policymaker(request)
    vhost = readable_vhost(request, reason=OBJECT_REFUSED)
    component = request.match_info["component"]
    return ok([p for p in _all(request)
               if p["component"] == component and p["vhost"] == vhost.name])


@routes.get("/api/parameters/{component}/{vhost}/{name}")
async def get_parameter(request: web.Request) -> web.Response:
    """One parameter; 401 ``User not authorised to access object`` without the policymaker
    tag or access to the vhost, then 404 when there is none."""
    require_policymaker(request)
    vhost = readable_vhost(request, reason=OBJECT_REFUSED)
    key = (request.match_info["component"], vhost.name, request.match_info["name"])
    for p in _all(request):
        if (p["component"], p["vhost"], p["name"]) == key:
            return ok(p)
    raise not_found()


@routes.put("/api/parameters/{component}/{vhost}/{name}")
async def put_parameter(request: web.Request) -> web.Response:
    """``shovel``, ``federation-upstream`` and ``federation-upstream-set`` parameters (201
    created, 204 replaced; 400 ``Validation failed`` with RabbitMQ's lines) and ``vhost-limits`` (name ``limits``: 204) can be set; else 400
    component not found. 401 ``User not authorised to access object`` without the policymaker tag or
    access to the vhost, 404 ``vhost_not_found``, then 401 ``Not administrator user`` (amqpq
    keeps vhost limits to administrators; RabbitMQ lets policymakers set this parameter)."""
    require_policymaker(request)
    vhost = target_vhost(request, reason=OBJECT_REFUSED)
    require_admin(request)
    component = request.match_info["component"]
    if component == SHOVEL_COMPONENT:
        return _put_shovel(request, vhost.name, request.match_info["name"],
                           (await read_json(request)).get("value"))
    if component in FEDERATION_COMPONENTS:
        return _put_federation(request, component, vhost.name, request.match_info["name"],
                               (await read_json(request)).get("value"))
    if component != LIMITS_COMPONENT:
        raise bad_request(f"Validation failed\n\ncomponent {component} not found\n")
    try:
        limits = validate_limits("vhost", (await read_json(request)).get("value"))
    except LimitsError as exc:
        raise bad_request(f"Validation failed\n\n{exc}\n") from None
    broker = state(request).broker
    broker.limits.clear("vhost", vhost.name)  # the parameter is the whole set of limits
    broker.limits.set("vhost", vhost.name, limits)
    return no_content()


@routes.delete("/api/parameters/{component}/{vhost}/{name}")
async def delete_parameter(request: web.Request) -> web.Response:
    """204, or 404 when there is no such parameter; rights checked as for a PUT, first."""
    require_policymaker(request)
    vhost = readable_vhost(request, reason=OBJECT_REFUSED)
    require_admin(request)
    component, name = request.match_info["component"], request.match_info["name"]
    broker = state(request).broker
    if component == LIMITS_COMPONENT:
        if not broker.limits.clear("vhost", vhost.name):
            raise not_found()
        return no_content()
    if not broker.extras.remove_parameter(component, vhost.name, name):
        raise not_found()
    if component == SHOVEL_COMPONENT:
        _poke(request)
    if component in FEDERATION_COMPONENTS:
        _poke_federation(request)
    return no_content()


def _put_federation(request: web.Request, component: str, vhost: str, name: str,
                    value: Any) -> web.Response:
    """Store a ``federation-upstream`` / ``federation-upstream-set`` parameter once it
    validates (RabbitMQ's texts) and have the links follow it."""
    errors = validate_federation(component, name, value)
    if errors:
        raise bad_request(FederationParamError("\n".join(errors)).reason)
    new = state(request).broker.extras.put_parameter(component, vhost, name, value)
    _poke_federation(request)
    return created(new)


def _poke_federation(request: web.Request) -> None:
    manager = federation_manager_of(state(request).broker)
    if manager is not None:
        manager.poke()


def _put_shovel(request: web.Request, vhost: str, name: str, value: Any) -> web.Response:
    """Store a shovel parameter once it validates and have the manager (re)start it."""
    errors = validate(name, value) or _local_vhost_errors(request, value)
    if errors:
        raise bad_request(ShovelParamError("\n".join(errors)).reason)
    new = state(request).broker.extras.put_parameter(SHOVEL_COMPONENT, vhost, name, value)
    _poke(request)
    return created(new)


def _local_vhost_errors(request: web.Request, value: dict[str, Any]) -> list[str]:
    """RabbitMQ's check of a local URI (``amqp://``, ``amqp:///vhost``): the user setting
    the shovel must be allowed into that vhost (``user "u" may not connect to vhost "v"``)."""
    who = principal(request)
    broker = state(request).broker
    errors = []
    for key in ("src-uri", "dest-uri"):
        uris = value[key] if isinstance(value[key], list) else [value[key]]
        for uri in uris:
            ep = endpoint(uri)
            if ep.local and (ep.vhost not in broker.vhosts
                             or broker.permissions.get(who.name, ep.vhost) is None):
                errors.append(f'user "{who.name}" may not connect to vhost "{ep.vhost}"')
    return errors


def _poke(request: web.Request) -> None:
    manager = manager_of(state(request).broker)
    if manager is not None:
        manager.poke()


@routes.get("/api/global-parameters")
async def list_global_parameters(request: web.Request) -> web.Response:
    """Global parameters a definitions import brought (administrator)."""
    require_admin(request)
    return ok([dict(p) for p in state(request).broker.extras.global_parameters])


@routes.get("/api/global-parameters/{name}")
async def get_global_parameter(request: web.Request) -> web.Response:
    require_admin(request)
    name = request.match_info["name"]
    for p in state(request).broker.extras.global_parameters:
        if p.get("name") == name:
            return ok(dict(p))
    raise not_found()
