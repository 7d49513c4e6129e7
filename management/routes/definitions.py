"""``/api/definitions``: export (``GET``) and import (``POST``) the broker's definitions,
all of them or one vhost's (``/api/definitions/{vhost}``). Administrator only.

The export is RabbitMQ 3.10's: non-exclusive queues and non-default exchanges, durable or
not. An import is all-or-nothing and answers 204; a bad document is 400 with the entry
named (``exchanges[0] (name 'x' in vhost '/'): unknown exchange type 'nope'``). A body that
is not a JSON object is 400 ``failed_to_parse_json``, as RabbitMQ says.
Source: https://www.rabbitmq.com/docs/definitions, https://www.rabbitmq.com/docs/management#http-api.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from management.auth import require_admin
from management.errors import bad_request
from management.routes.common import no_content, ok, vhost_of
from management.state import state
from vhosts.definitions import DefinitionsError, export_definitions, import_definitions

routes = web.RouteTableDef()

_PER_VHOST = ("parameters", "policies", "queues", "exchanges", "bindings")


async def _document(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise bad_request("failed_to_parse_json") from None
    if not isinstance(data, dict):
        raise bad_request("failed_to_parse_json")
    return data


def _import(request: web.Request, data: dict[str, Any]) -> web.Response:
    try:
        import_definitions(state(request).broker, data)
    except DefinitionsError as exc:
        raise bad_request(str(exc)) from None
    return no_content()


@routes.get("/api/definitions")
async def get_definitions(request: web.Request) -> web.Response:
    require_admin(request)
    return ok(export_definitions(state(request).broker, include_transient=True))


@routes.post("/api/definitions")
async def post_definitions(request: web.Request) -> web.Response:
    require_admin(request)
    return _import(request, await _document(request))


@routes.get("/api/definitions/{vhost}")
async def get_vhost_definitions(request: web.Request) -> web.Response:
    vhost = vhost_of(request)
    require_admin(request)
    full = export_definitions(state(request).broker, include_transient=True, vhost=vhost.name)
    doc: dict[str, Any] = {"rabbit_version": full["rabbit_version"]}
    for key in _PER_VHOST:
        doc[key] = [{k: v for k, v in entry.items() if k != "vhost"} for entry in full[key]]
    return ok(doc)


@routes.post("/api/definitions/{vhost}")
async def post_vhost_definitions(request: web.Request) -> web.Response:
    vhost = vhost_of(request)
    require_admin(request)
    data = await _document(request)
    scoped: dict[str, Any] = {}
    for key in _PER_VHOST:
        entries = data.get(key) or []
        if not isinstance(entries, list):
            raise bad_request(f"'{key}' must be a list")
        scoped[key] = [{**e, "vhost": vhost.name} if isinstance(e, dict) else e
                       for e in entries]
    return _import(request, scoped)
