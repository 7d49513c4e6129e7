"""Helpers shared by the route modules: request bodies, path objects, status codes.

RabbitMQ answers a PUT that creates an object with 201 Created, one that updates it with
204 No Content, a DELETE with 204, and a missing object named in the path with 404
``Object Not Found``.

Source: https://www.rabbitmq.com/docs/management#http-api.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from management.auth import require_vhost
from management.errors import bad_request, not_found
from management.listing import LIST_DATA
from management.state import state
from vhosts.vhost import VirtualHost

DEFAULT_EXCHANGE_ALIAS = "amq.default"  # the default exchange ("") in URLs


async def read_json(request: web.Request) -> dict[str, Any]:
    """The JSON object in the body ({} for an empty body); 400 ``not_json`` otherwise."""
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise bad_request("not_json") from None
    if not isinstance(data, dict):
        raise bad_request("not_json")
    return data


def vhost_of(request: web.Request, key: str = "vhost") -> VirtualHost:
    """The vhost named in the path; 404 when it does not exist."""
    vhost = state(request).broker.vhosts.get(request.match_info[key])
    if vhost is None:
        raise not_found()
    return vhost


def readable_vhost(request: web.Request, key: str = "vhost") -> VirtualHost:
    """The vhost named in the path, when the user may read in it: 404 when it does not
    exist, 401 ``User not authorised to access virtual host`` otherwise."""
    vhost = vhost_of(request, key)
    require_vhost(request, vhost.name)
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
    value = body.get(key) or {}
    if not isinstance(value, dict):
        raise bad_request(f"{key} must be an object")
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
