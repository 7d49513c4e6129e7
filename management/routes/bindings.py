"""``/api/bindings``: list, create (``POST .../e/{source}/q/{queue}`` or ``.../e/{dest}``
with ``routing_key`` and ``arguments`` -> 201 with a ``Location`` naming the new binding's
properties key), read and delete one binding by its properties key.

A properties key is ``~`` for an empty routing key without arguments, the quoted routing key
without arguments, else ``key~hash`` (take it from a listing). Binding to a queue needs the
write permission on the queue and read on the exchange; exchange-to-exchange, write on the
destination and read on the source (RabbitMQ's access-control table).
Source: https://www.rabbitmq.com/docs/management#http-api, https://www.rabbitmq.com/docs/access-control.
"""

from __future__ import annotations

from urllib.parse import quote, unquote

from aiohttp import web

from amqp_common.errors import AMQPError
from broker import topology_records as tr
from broker.topology_records import change_topology
from exchanges.binding import Binding, Destination, DestinationKind
from management.auth import accessible_vhosts, check_permission
from management.errors import from_amqp, not_found
from management.routes.common import (
    DEFAULT_EXCHANGE_ALIAS,
    created,
    no_content,
    ok,
    read_json,
    readable_vhost,
    table,
    target_vhost,
    text,
)
from management.serializers import (
    binding_json,
    default_binding_json,
    properties_key,
)
from management.state import state
from vhosts.vhost import VirtualHost

routes = web.RouteTableDef()

_BETWEEN = "/api/bindings/{vhost}/e/{source}/{kind:q|e}/{destination}"


def _all(vhost: VirtualHost) -> list[dict[str, object]]:
    implicit = [default_binding_json(vhost.name, n) for n in sorted(vhost.queues)]
    return implicit + [binding_json(vhost.name, b) for b in vhost.bindings()]


def _ends(request: web.Request, creating: bool = False
          ) -> tuple[VirtualHost, str, Destination]:
    """The path's vhost, source and destination: 401 without access to the vhost first,
    then 404 for an unknown vhost (``vhost_not_found`` when ``creating``)."""
    vhost = target_vhost(request) if creating else readable_vhost(request)
    source = request.match_info["source"]
    source = "" if source == DEFAULT_EXCHANGE_ALIAS else source
    kind: DestinationKind = "queue" if request.match_info["kind"] == "q" else "exchange"
    return vhost, source, Destination(kind, request.match_info["destination"])


def _between(vhost: VirtualHost, source: str, dest: Destination) -> list[Binding]:
    return [b for b in vhost.bindings() if b.source == source and b.destination == dest]


def _check_bind(request: web.Request, vhost: VirtualHost, source: str,
                dest: Destination) -> None:
    check_permission(request, vhost.name, "write", dest.kind, dest.name)
    check_permission(request, vhost.name, "read", "exchange", source)


@routes.get("/api/bindings")
async def list_all(request: web.Request) -> web.Response:
    broker = state(request).broker
    return ok([b for n in accessible_vhosts(request) for b in _all(broker.vhosts[n])])


@routes.get("/api/bindings/{vhost}")
async def list_vhost(request: web.Request) -> web.Response:
    vhost = readable_vhost(request)
    return ok(_all(vhost))


@routes.get(_BETWEEN)
async def list_between(request: web.Request) -> web.Response:
    vhost, source, dest = _ends(request)
    return ok([binding_json(vhost.name, b) for b in _between(vhost, source, dest)])


@routes.post(_BETWEEN)
async def create_binding(request: web.Request) -> web.Response:
    """201 with ``Location``; 401 without access to the vhost, 404 ``vhost_not_found``, 401
    ``Access refused.`` without the permissions, 404 for an unknown exchange or queue."""
    vhost, source, dest = _ends(request, creating=True)
    body = await read_json(request)
    routing_key = text(body, "routing_key", "")
    arguments = dict(table(body, "arguments"))
    _check_bind(request, vhost, source, dest)
    try:
        await change_topology(state(request).broker, tr.Bind(
            vhost.name, dest.kind, dest.name, source, routing_key, arguments, None))
    except AMQPError as exc:
        raise from_amqp(exc) from None
    key = properties_key(routing_key, arguments)
    return created(True, f"{quote(dest.name, safe='')}/{quote(key, safe='')}")


def _find(request: web.Request) -> tuple[VirtualHost, Binding]:
    vhost, source, dest = _ends(request)
    wanted = request.match_info["props"]
    for b in _between(vhost, source, dest):
        key = properties_key(b.routing_key, b.arguments)
        if wanted in (key, unquote(key)):
            return vhost, b
    raise not_found()


@routes.get(_BETWEEN + "/{props}")
async def get_binding(request: web.Request) -> web.Response:
    vhost, b = _find(request)
    return ok(binding_json(vhost.name, b))


@routes.delete(_BETWEEN + "/{props}")
async def delete_binding(request: web.Request) -> web.Response:
    vhost, b = _find(request)
    _check_bind(request, vhost, b.source, b.destination)
    try:
        await change_topology(state(request).broker, tr.Unbind(
            vhost.name, b.destination.kind, b.destination.name, b.source,
            b.routing_key, b.arguments, None))
    except AMQPError as exc:
        raise from_amqp(exc) from None
    return no_content()
