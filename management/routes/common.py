"""Helpers shared by the route modules: request bodies, path objects, status codes.

RabbitMQ answers a PUT that creates an object with 201 Created, one that updates it with
204 No Content, a DELETE with 204, and a missing object named in the path with 404
``Object Not Found``.

Source: https://www.rabbitmq.com/docs/management#http-api.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from management.auth import VHOST_REFUSED, require_vhost
from management.bodies import check_table, parse_json
from management.errors import ApiError, bad_request, not_authorised, not_found
from management.listing import LIST_DATA
from management.state import state
from vhosts.vhost import VirtualHost

DEFAULT_EXCHANGE_ALIAS = "amq.default"  # the default exchange ("") in URLs


async def read_json(request: web.Request) -> dict[str, Any]:
    """The JSON object in the body ({} for an empty body); 400 ``not_json`` otherwise, 400
    when it nests too deeply (:func:`management.bodies.parse_json`)."""
    raw = await request.read()
    if not raw.strip():
        return {}
    data = parse_json(raw)
    if not isinstance(data, dict):
        raise bad_request("not_json")
    return data


def vhost_of(request: web.Request, key: str = "vhost") -> VirtualHost:
    """The vhost named in the path; 404 when it does not exist. Only after the user's
    rights were checked (:func:`readable_vhost` and friends check them first)."""
    vhost = state(request).broker.vhosts.get(request.match_info[key])
    if vhost is None:
        raise not_found()
    return vhost


def readable_vhost(request: web.Request, key: str = "vhost",
                   reason: str = VHOST_REFUSED) -> VirtualHost:
    """The vhost named in the path, when the user may read in it: 401 ``User not authorised
    to access virtual host`` (or ``reason``) when it exists and the user may not, then 404
    ``Object Not Found`` when it does not exist (RabbitMQ's order: rights first)."""
    require_vhost(request, request.match_info[key], reason)
    return vhost_of(request, key)


def target_vhost(request: web.Request, key: str = "vhost",
                 reason: str = VHOST_REFUSED) -> VirtualHost:
    """The vhost of a PUT or POST that creates something in it: as :func:`readable_vhost`,
    but an unknown vhost is 404 ``{"error": "not_found", "reason": "vhost_not_found"}``, as
    RabbitMQ 3.10.8 answers a declare, a binding or a policy in one."""
    require_vhost(request, request.match_info[key], reason)
    vhost = state(request).broker.vhosts.get(request.match_info[key])
    if vhost is None:
        raise ApiError(404, "not_found", "vhost_not_found")
    return vhost


def messaging_vhost(request: web.Request, key: str = "vhost") -> VirtualHost:
    """The vhost of an HTTP publish or get: as :func:`readable_vhost`, but an unknown vhost
    is 401 ``Access refused.`` (RabbitMQ 3.10.8 opens an AMQP channel there, which fails)."""
    require_vhost(request, request.match_info[key])
    vhost = state(request).broker.vhosts.get(request.match_info[key])
    if vhost is None:
        raise not_authorised("Access refused.")
    return vhost


def flag(body: dict[str, Any], key: str, default: bool = False) -> bool:
    """A boolean body field (RabbitMQ also takes ``"true"``/``"false"`` strings)."""
    value = body.get(key, default)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if not isinstance(value, bool):
        raise bad_request(f"{key} must be true or false")
    return value


def query_flag(request: web.Request, key: str) -> bool:
    return request.query.get(key, "false").lower() == "true"


def table(body: dict[str, Any], key: str) -> dict[str, Any]:
    """The body's ``key`` object, an AMQP field table (``arguments``): 400 when it is not an
    object or nests more than AMQP's 64 levels."""
    value = body.get(key) or {}
    if not isinstance(value, dict):
        raise bad_request(f"{key} must be an object")
    check_table(value, key)
    return value


def text(body: dict[str, Any], key: str, default: str | None = None) -> str:
    value = body.get(key, default)
    if not isinstance(value, str):
        raise bad_request(f"{key} must be a string")
    return value


def created(was_new: bool, location: str | None = None) -> web.Response:
    """201 Created for a new object, 204 No Content for an update."""
    if was_new:
        headers = {"Location": location} if location else None
        return web.Response(status=201, headers=headers)
    return web.Response(status=204)


def no_content() -> web.Response:
    return web.Response(status=204)


def exchange_name(request: web.Request, key: str = "name") -> str:
    """The exchange named in the path (``amq.default`` is the default exchange ``""``)."""
    name = request.match_info[key]
    return "" if name == DEFAULT_EXCHANGE_ALIAS else name


def ok(data: Any) -> web.Response:
    """200 with ``data`` as JSON; a list is also kept on the response for the list query
    parameters (:mod:`management.listing`)."""
    response = web.json_response(data)
    if isinstance(data, list):
        response[LIST_DATA] = data
    return response
