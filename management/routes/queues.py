"""``/api/queues``: list, declare (``PUT`` with ``durable``, ``auto_delete``, ``arguments``;
durable defaults to false as in RabbitMQ 3.10.8), delete (``?if-unused=true&if-empty=true``),
purge (``DELETE .../contents``), get messages (``POST .../get``) and the queue's bindings.

Declaring and deleting need the configure permission on the queue, purging and getting the
read permission, as over AMQP. Another connection's exclusive queue cannot be deleted,
purged or read (400, RabbitMQ's RESOURCE_LOCKED text).
Source: https://www.rabbitmq.com/docs/management#http-api, https://www.rabbitmq.com/docs/queues.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from amqp_common.errors import AMQPError
from broker import topology_records as tr
from broker.topology_records import change_topology
from management import queue_requests
from management.auth import accessible_vhosts, check_permission
from management.cluster_view import queues_from_homes
from management.errors import ApiError, from_amqp, not_found
from management.messages import get_messages, parse_get
from management.routes.common import (
    created,
    flag,
    messaging_vhost,
    no_content,
    ok,
    query_flag,
    read_json,
    readable_vhost,
    table,
    target_vhost,
)
from management.serializers import (
    UnackedTotals,
    binding_json,
    default_binding_json,
    queue_json,
)
from management.state import state
from queue_store.queue import Queue
from vhosts.vhost import VirtualHost

routes = web.RouteTableDef()
#: up to this many queues living elsewhere are asked for by name, more by "all of yours"
ASK_BY_NAME = 100


def _queue(request: web.Request, vhost: VirtualHost) -> Queue:
    q = vhost.queues.get(request.match_info["name"])
    if q is None:
        raise not_found()
    return q


def _unlocked(q: Queue) -> None:
    """400 for another connection's exclusive queue (the API has no connection)."""
    try:
        q.check_exclusive_access(None)
    except AMQPError as exc:
        raise from_amqp(exc) from None


async def _as_homes_show(request: web.Request, queues: list[Queue],
                         full: bool = False) -> list[dict[str, object]]:
    """``queues`` as the API shows them, those on another worker or node as their home
    does (counts, rates), each with the ``node`` it lives on (a quorum queue: its leader)."""
    st = state(request)
    workers = st.broker.workers
    homes = []
    elsewhere = [] if workers is None else [
        (q.vhost_name, q.name) for q in queues if workers.home_of(q) != workers.index]
    if workers is not None and elsewhere:  # a long list: all of theirs; a few: just those
        homes = await workers.gather_json(
            "queues", None if len(elsewhere) > ASK_BY_NAME else elsewhere)
    unacked = UnackedTotals.collect(st.broker)
    return queues_from_homes(st, queues, homes,
                             lambda q: queue_json(q, st, unacked, full), full)


@routes.get("/api/queues")
async def list_all(request: web.Request) -> web.Response:
    """Every queue of the vhosts the user may see, on every node and worker."""
    st = state(request)
    return ok(await _as_homes_show(request, [
        q for n in accessible_vhosts(request)
        for _, q in sorted(st.broker.vhosts[n].queues.items())]))


@routes.get("/api/queues/{vhost}")
async def list_vhost(request: web.Request) -> web.Response:
    vhost = readable_vhost(request)
    return ok(await _as_homes_show(request, [q for _, q in sorted(vhost.queues.items())]))


@routes.get("/api/queues/{vhost}/{name}")
async def get_queue(request: web.Request) -> web.Response:
    vhost = readable_vhost(request)
    found = await _as_homes_show(request, [_queue(request, vhost)], full=True)
    return ok(found[0])


@routes.put("/api/queues/{vhost}/{name}")
async def put_queue(request: web.Request) -> web.Response:
    """Declare: 201/204; 401 without access to the vhost, 404 ``vhost_not_found``, 401
    ``Access refused.`` without the configure permission, 400 for a refused declare."""
    vhost = target_vhost(request)
    name = request.match_info["name"]
    body = await read_json(request)
    check_permission(request, vhost.name, "configure", "queue", name)
    was_new = name not in vhost.queues
    durable, arguments = flag(body, "durable"), dict(table(body, "arguments"))
    try:
        await change_topology(state(request).broker, tr.QueueDeclare(
            vhost.name, name, durable, False, flag(body, "auto_delete"), arguments, None,
            False, _home(request, vhost, name, durable, arguments, was_new)))
    except AMQPError as exc:
        raise from_amqp(exc) from None
    return created(was_new)


def _home(request: web.Request, vhost: Any, name: str, durable: bool,
          arguments: dict[str, Any], is_new: bool) -> int:
    """The declare record's ``home`` of a queue declared over HTTP: this node (a cluster:
    where its leader locator places a quorum queue) or worker 0; with ``--workers N`` a new
    transient classic queue is placed by its first use, as one declared over AMQP
    (:mod:`amqp_server.workers.placement`)."""
    workers = state(request).broker.workers
    if workers is None:
        return 0
    home = int(workers.declare_home(vhost, name, arguments))
    return int(workers.first_use_home(home, durable, False, arguments)) if is_new else home


@routes.delete("/api/queues/{vhost}/{name}")
async def delete_queue(request: web.Request) -> web.Response:
    """204; 401 without access to the vhost, then 404 for an unknown vhost or queue, then
    401 ``Access refused.`` without the configure permission."""
    vhost = readable_vhost(request)
    q = _queue(request, vhost)
    check_permission(request, vhost.name, "configure", "queue", q.name)
    _unlocked(q)
    try:
        await change_topology(state(request).broker, tr.QueueDelete(
            vhost.name, q.name, query_flag(request, "if-unused"),
            query_flag(request, "if-empty"), None))
    except AMQPError as exc:
        raise from_amqp(exc) from None
    return no_content()


@routes.delete("/api/queues/{vhost}/{name}/contents")
async def purge_queue(request: web.Request) -> web.Response:
    """204; the same order as deleting, with the read permission."""
    vhost = readable_vhost(request)
    q = _queue(request, vhost)
    check_permission(request, vhost.name, "read", "queue", q.name)
    _unlocked(q)
    try:
        await queue_requests.purge(q)  # at its home when it lives on another worker or node
    except AMQPError as exc:
        raise from_amqp(exc) from None
    return no_content()


@routes.post("/api/queues/{vhost}/{name}/get")
async def get_from_queue(request: web.Request) -> web.Response:
    """The messages (:func:`management.messages.get_messages`); 401 without access to the
    vhost (``Access refused.`` for an unknown one) or the read permission, then 404."""
    vhost = messaging_vhost(request)
    body = await read_json(request)
    count, ackmode, encoding, truncate = parse_get(body)
    name = request.match_info["name"]
    check_permission(request, vhost.name, "read", "queue", name)
    q = vhost.queues.get(name)
    if q is None:  # RabbitMQ answers from the AMQP channel here, code prefix included
        raise ApiError(404, "not_found", f"NOT_FOUND - no queue '{name}' in vhost "
                                         f"'{vhost.name}'")
    _unlocked(q)
    try:
        return ok(await get_messages(q, count, ackmode, encoding, truncate))
    except AMQPError as exc:
        raise from_amqp(exc) from None


@routes.get("/api/queues/{vhost}/{name}/bindings")
async def queue_bindings(request: web.Request) -> web.Response:
    vhost = readable_vhost(request)
    q = _queue(request, vhost)
    found = [binding_json(vhost.name, b) for b in vhost.bindings()
             if b.destination.kind == "queue" and b.destination.name == q.name]
    return ok([default_binding_json(vhost.name, q.name), *found])
