"""``/api/exchanges``: list, declare (``PUT`` with ``type``, ``durable``, ``auto_delete``,
``internal``, ``arguments``; type defaults to ``direct``, durable to false, as RabbitMQ 3.10.8
does), delete (``?if-unused=true``), the exchange's bindings, and publishing.

The default exchange is ``amq.default`` in URLs. Declaring and deleting need the configure
permission on the exchange, publishing the write permission (and the topic permission for
topic exchanges), exactly as over AMQP.
Source: https://www.rabbitmq.com/docs/management#http-api, https://www.rabbitmq.com/docs/exchanges.
"""

from __future__ import annotations

from aiohttp import web

from amqp_common.errors import AMQPError
from broker import topology_records as tr
from broker.topology_records import change_topology
from management.auth import accessible_vhosts, check_permission, principal
from management.errors import from_amqp, not_authorised, not_found
from management.messages import publish
from management.rates import Rates
from management.routes.common import (
    created,
    exchange_name,
    flag,
    messaging_vhost,
    no_content,
    ok,
    query_flag,
    read_json,
    readable_vhost,
    table,
    target_vhost,
    text,
)
from management.serializers import binding_json, exchange_json
from management.state import state
from vhosts.vhost import VirtualHost

routes = web.RouteTableDef()


Elsewhere = dict[tuple[str, str], tuple[int, int]]


async def _elsewhere(request: web.Request) -> Elsewhere:
    """The other workers' and nodes' publish counters: ``(vhost, exchange)`` ->
    ``(publish_in, publish_out)`` summed (each counts the publishes of its own clients);
    empty with one worker and no cluster."""
    workers = state(request).broker.workers
    out: Elsewhere = {}
    if workers is None:
        return out
    for item in await workers.gather_json("exchanges"):
        key = (str(item["vhost"]), str(item["name"]))
        got_in, got_out = out.get(key, (0, 0))
        out[key] = (got_in + int(item["publish_in"]), got_out + int(item["publish_out"]))
    return out


def _exchanges_of(vhost: VirtualHost, rates: Rates, elsewhere: Elsewhere
                  ) -> list[dict[str, object]]:
    out = [exchange_json(vhost.name, None)]
    out += [exchange_json(vhost.name, x, rates=rates,
                          elsewhere=elsewhere.get((vhost.name, name), (0, 0)))
            for name, x in sorted(vhost.exchanges.items())]
    return out


@routes.get("/api/exchanges")
async def list_all(request: web.Request) -> web.Response:
    st = state(request)
    elsewhere = await _elsewhere(request)
    return ok([e for n in accessible_vhosts(request)
               for e in _exchanges_of(st.broker.vhosts[n], st.rates, elsewhere)])


@routes.get("/api/exchanges/{vhost}")
async def list_vhost(request: web.Request) -> web.Response:
    vhost = readable_vhost(request)
    return ok(_exchanges_of(vhost, state(request).rates, await _elsewhere(request)))


@routes.get("/api/exchanges/{vhost}/{name}")
async def get_exchange(request: web.Request) -> web.Response:
    vhost = readable_vhost(request)
    name = exchange_name(request)
    if name == "":
        return ok(exchange_json(vhost.name, None, full=True))
    x = vhost.exchanges.get(name)
    if x is None:
        raise not_found()
    elsewhere = (await _elsewhere(request)).get((vhost.name, name), (0, 0))
    return ok(exchange_json(vhost.name, x, full=True, rates=state(request).rates,
                            elsewhere=elsewhere))


@routes.put("/api/exchanges/{vhost}/{name}")
async def put_exchange(request: web.Request) -> web.Response:
    """Declare: 201/204; 401 without access to the vhost, 404 ``vhost_not_found``, 401
    ``Access refused.`` without the configure permission, 400 for a refused declare."""
    vhost = target_vhost(request)
    name = exchange_name(request)
    body = await read_json(request)
    if name == "":
        raise not_authorised("Access refused.")
    check_permission(request, vhost.name, "configure", "exchange", name)
    was_new = name not in vhost.exchanges
    try:
        await change_topology(state(request).broker, tr.ExchangeDeclare(
            vhost.name, name, text(body, "type", "direct"), flag(body, "durable"),
            flag(body, "auto_delete"), flag(body, "internal"), dict(table(body, "arguments"))))
    except AMQPError as exc:
        raise from_amqp(exc) from None
    return created(was_new)


@routes.delete("/api/exchanges/{vhost}/{name}")
async def delete_exchange(request: web.Request) -> web.Response:
    """204; 401 without access to the vhost, then 404 for an unknown vhost or exchange,
    then 401 ``Access refused.`` without the configure permission."""
    vhost = readable_vhost(request)
    name = exchange_name(request)
    if name == "" or name.startswith("amq."):
        raise not_authorised("Access refused.")
    if name not in vhost.exchanges:
        raise not_found()
    check_permission(request, vhost.name, "configure", "exchange", name)
    try:
        await change_topology(state(request).broker, tr.ExchangeDelete(
            vhost.name, name, query_flag(request, "if-unused")))
    except AMQPError as exc:
        raise from_amqp(exc) from None
    return no_content()


@routes.get("/api/exchanges/{vhost}/{name}/bindings/{direction:source|destination}")
async def exchange_bindings(request: web.Request) -> web.Response:
    vhost = readable_vhost(request)
    name = exchange_name(request)
    if name != "" and name not in vhost.exchanges:
        raise not_found()
    if request.match_info["direction"] == "source":
        found = [b for b in vhost.bindings() if b.source == name]
    else:
        found = [b for b in vhost.bindings()
                 if b.destination.kind == "exchange" and b.destination.name == name]
    return ok([binding_json(vhost.name, b) for b in found])


@routes.post("/api/exchanges/{vhost}/{name}/publish")
async def publish_message(request: web.Request) -> web.Response:
    """``{"routed": bool}``; 401 without access to the vhost (``Access refused.`` for an
    unknown one), 401 without the write permission, 400 for a bad body
    (:func:`management.messages.publish`)."""
    vhost = messaging_vhost(request)
    name = exchange_name(request)
    body = await read_json(request)
    check_permission(request, vhost.name, "write", "exchange", name)
    user = principal(request).name
    broker = state(request).broker

    def check_topic(exchange: str, routing_key: str) -> None:
        broker.permissions.check_topic(user, vhost.name, "write", exchange, routing_key)

    routed = publish(vhost, name, body, user, check_topic)
    return ok({"routed": routed})
