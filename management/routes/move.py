"""``POST /api/queues/{vhost}/{name}/move``: move a queue's ready messages to another queue of
the same vhost, inside the broker (amqpq's own endpoint; the web UI's "Move messages").

RabbitMQ's UI does this with a dynamic shovel (``rabbitmq_shovel``) from the queue to the
destination queue; this endpoint does what that shovel does, without a plugin: each message
is taken from the source as an unacknowledged Basic.Get, republished to the destination
through the default exchange (exchange ``""``, routing key = the destination's name, the
same properties and body, as a shovel with ``dest-queue`` publishes), and only then acked
on the source. A destination that refuses a message (``x-overflow`` ``reject-publish``)
gets it requeued on the source and the move stops there, so nothing is lost. Both sides are
written to disk by the batch that ends the request (the persist middleware), as the
Basic.Get, Basic.Publish and Basic.Ack of one client's batch of frames would be.

Body: ``{"destination": "q2", "count": 100}`` (``count`` optional: every message ready when
the request arrives). Answer: ``{"moved": N, "remaining": M}`` (M: ready on the source).
Needs the read permission on the source queue and write on the default exchange, as a
Basic.Get and a Basic.Publish would. Errors: 401 without access to the vhost (before
anything else), 404 for a missing vhost or queue, 400 for a
missing or same destination, another connection's exclusive queue (RESOURCE_LOCKED text).

Source: https://www.rabbitmq.com/docs/shovel-dynamic (what the UI's move does).
"""

from __future__ import annotations

from aiohttp import web

from amqp_common.errors import AMQPError
from management import queue_requests
from management.auth import check_permission
from management.errors import ApiError, bad_request, from_amqp, not_found
from management.messages import require_keys
from management.routes.common import ok, read_json, readable_vhost, text
from queue_store.message import Message
from queue_store.outcomes import REJECTED, Settlement
from queue_store.queue import Queue

routes = web.RouteTableDef()


def _unlocked(q: Queue) -> None:
    try:
        q.check_exclusive_access(None)
    except AMQPError as exc:
        raise from_amqp(exc) from None


async def move_messages(source: Queue, destination: Queue, limit: int) -> int:
    """Move up to ``limit`` ready messages from ``source`` to ``destination``; returns how
    many moved. Each one is acked on the source only after the destination took it; one
    the destination refuses goes back to the source (flagged redelivered) and ends the move.
    A source on another worker or node gives its messages from its home; a destination
    there takes them as a publish does (its refusal arrives later: not seen here). Raises
    AMQPError (the source's home is down: 404)."""
    moved = 0
    while moved < limit:
        qm, _ = await queue_requests.get(source, False)
        if qm is None:
            break
        old = qm.message
        copy = Message.create("", destination.name, old.properties_raw, old.body)
        result = destination.publish(copy)
        if result & REJECTED:
            source.settle([(qm, source, None)], Settlement.REQUEUE)
            break
        source.settle([(qm, source, None)], Settlement.ACK)
        moved += 1
    return moved


@routes.post("/api/queues/{vhost}/{name}/move")
async def move(request: web.Request) -> web.Response:
    """``{"moved", "remaining"}``; 401 without access to the vhost, before any 404."""
    vhost = readable_vhost(request)
    body = await read_json(request)
    require_keys(body, ("destination",))
    target = text(body, "destination")
    source = vhost.queues.get(request.match_info["name"])
    if source is None:
        raise not_found()
    check_permission(request, vhost.name, "read", "queue", source.name)
    check_permission(request, vhost.name, "write", "exchange", "")
    destination = vhost.queues.get(target)
    if destination is None:
        raise ApiError(404, "not_found", f"no queue '{target}' in vhost '{vhost.name}'")
    if destination is source:
        raise bad_request("source and destination are the same queue")
    _unlocked(source)
    _unlocked(destination)
    limit = body.get("count", source.message_count)
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
        raise bad_request(["not_int", "count"])
    try:
        moved = await move_messages(source, destination, limit)
    except AMQPError as exc:
        raise from_amqp(exc) from None
    return ok({"moved": moved, "remaining": source.message_count})
