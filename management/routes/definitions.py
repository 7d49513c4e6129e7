"""``/api/definitions``: export (``GET``) and import (``POST``) the broker's definitions,
all of them or one vhost's (``/api/definitions/{vhost}``). Administrator only.

The export is RabbitMQ 3.10's: non-exclusive queues and non-default exchanges, durable or
not. An import is all-or-nothing and answers 204; a bad document is 400 with the entry
named (``exchanges[0] (name 'x' in vhost '/'): unknown exchange type 'nope'``); a ``shovel``
parameter is validated as ``PUT /api/parameters/shovel/...`` does (:mod:`shovel.params`). A body that
is not a JSON object is 400 ``failed_to_parse_json``, as RabbitMQ says; one not sent as
``application/json`` is 415. The administrator tag is checked before whether the vhost of
``/api/definitions/{vhost}`` exists, as RabbitMQ 3.10.8 does.
Source: https://www.rabbitmq.com/docs/definitions, https://www.rabbitmq.com/docs/management#http-api.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from federation.params import COMPONENTS as FEDERATION_COMPONENTS
from federation.params import validate as validate_federation
from management.auth import require_admin
from management.bodies import check_table, media_type, parse_json, unsupported_media_type
from management.errors import ApiError, bad_request
from management.routes.common import no_content, ok, vhost_of
from management.state import state
from shovel.params import COMPONENT as SHOVEL_COMPONENT
from shovel.params import validate
from vhosts.definitions import DefinitionsError, export_definitions, import_definitions
from vhosts.policies import escape_html_tags

routes = web.RouteTableDef()

_PER_VHOST = ("parameters", "policies", "queues", "exchanges", "bindings")


async def _document(request: web.Request) -> dict[str, Any]:
    """The posted definitions: 415 unless sent as ``application/json`` (RabbitMQ 3.10.8's
    answer; its multipart upload form is not taken, the web UI posts the file's JSON), 400
    ``failed_to_parse_json``, 400 for a body or an entry's ``arguments`` nested too deeply
    (:mod:`management.bodies`)."""
    if media_type(request.headers.get("Content-Type", "")) != "application/json":
        raise unsupported_media_type()
    data = parse_json(await request.read(), "failed_to_parse_json")
    if not isinstance(data, dict):
        raise bad_request("failed_to_parse_json")
    for key in ("queues", "exchanges", "bindings"):
        entries = data.get(key)
        for i, entry in enumerate(entries if isinstance(entries, list) else []):
            if isinstance(entry, dict) and isinstance(entry.get("arguments"), dict):
                check_table(entry["arguments"], f"{key}[{i}].arguments")
    return data


def _check_shovels(data: dict[str, Any]) -> None:
    """400 for a ``shovel``, ``federation-upstream`` or ``federation-upstream-set``
    parameter RabbitMQ would refuse, with its texts and where:
    ``Validation failed\n\n<lines>\n (/vhost/shovel/name)`` (checked against 3.10.8)."""
    entries = data.get("parameters")
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            continue
        component, name = entry.get("component"), entry.get("name")
        if component == SHOVEL_COMPONENT:
            errors = validate(str(name), entry.get("value"))
        elif component in FEDERATION_COMPONENTS:
            errors = validate_federation(str(component), str(name), entry.get("value"))
        else:
            continue
        if errors:
            lines = "\n".join(errors)
            raise bad_request(escape_html_tags(
                f"Validation failed\n\n{lines}\n ({entry.get('vhost')}/{component}/{name})"))


def _import(request: web.Request, data: dict[str, Any]) -> web.Response:
    _check_shovels(data)
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
    require_admin(request)  # first: RabbitMQ tells only administrators whether a vhost exists
    vhost = vhost_of(request)  # 404 (RabbitMQ 3.10.8: 400 vhost_not_found; amqpqctl reads 404)
    full = export_definitions(state(request).broker, include_transient=True, vhost=vhost.name)
    doc: dict[str, Any] = {"rabbit_version": full["rabbit_version"]}
    for key in _PER_VHOST:
        doc[key] = [{k: v for k, v in entry.items() if k != "vhost"} for entry in full[key]]
    return ok(doc)


@routes.post("/api/definitions/{vhost}")
async def post_vhost_definitions(request: web.Request) -> web.Response:
    require_admin(request)
    vhost = state(request).broker.vhosts.get(request.match_info["vhost"])
    if vhost is None:
        raise ApiError(404, "not_found", "vhost_not_found")
    data = await _document(request)
    scoped: dict[str, Any] = {}
    for key in _PER_VHOST:
        entries = data.get(key) or []
        if not isinstance(entries, list):
            raise bad_request(f"'{key}' must be a list")
        scoped[key] = [{**e, "vhost": vhost.name} if isinstance(e, dict) else e
                       for e in entries]
    return _import(request, scoped)
