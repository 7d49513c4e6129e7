"""``/api/exchanges/{vhost}/{name}/delayed``: the messages an ``x-delayed-message`` exchange
holds, listed page by page in due order, and cancelled one by one.

* ``GET .../delayed?page=1&page_size=100`` (page_size at most 500): RabbitMQ's page object
  (``items``, ``page``, ``page_count``, ``page_size``, ``item_count``, ``total_count``,
  ``filtered_count``); each item has ``id``, ``due`` (wall-clock ms since the epoch),
  ``due_in`` (ms from now, 0 when overdue), ``delay`` (its ``x-delay``), ``exchange``,
  ``routing_key``, ``properties``, ``payload_bytes``, ``payload`` and ``payload_encoding``
  (``string`` when UTF-8, else ``base64``), as ``/api/queues/.../get`` shows a message.
* ``DELETE .../delayed/{id}``: 204, or 404 when no held message has that id (delivered,
  cancelled, or never listed).

Both need the ``read`` permission on the exchange (as getting and purging a queue's
messages do). Another exchange type answers 400 ``not a delayed exchange``. The plugin has no
such API (it only reports a count); this is amqpq's.
"""

from __future__ import annotations

import base64
from typing import Any

from aiohttp import web

from management.auth import check_permission
from management.errors import bad_request, not_found
from management.messages import properties_json
from management.routes.common import exchange_name, readable_vhost
from queue_store.message import Message
from vhosts.delayed import DelayedMessages, message_delay

routes = web.RouteTableDef()
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 500


def _holder(request: web.Request) -> DelayedMessages:
    vhost = readable_vhost(request)
    name = exchange_name(request)
    x = vhost.exchanges.get(name)
    if x is None:
        raise not_found()
    check_permission(request, vhost.name, "read", "exchange", name)
    if x.delayed is None:
        raise bad_request(f"exchange '{name}' is not a delayed exchange (x-delayed-message)")
    holder: DelayedMessages = x.delayed
    return holder


def _item(message_id: str, due: int, now: int, message: Message) -> dict[str, Any]:
    body = message.body
    try:
        text: str | None = body.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    return {
        "id": message_id, "due": due, "due_in": max(0, due - now),
        "delay": message_delay(message), "exchange": message.exchange,
        "routing_key": message.routing_key, "properties": properties_json(message),
        "payload_bytes": len(body),
        "payload": text if text is not None else base64.b64encode(body).decode(),
        "payload_encoding": "string" if text is not None else "base64",
    }


@routes.get("/api/exchanges/{vhost}/{name}/delayed")
async def list_delayed(request: web.Request) -> web.Response:
    holder = _holder(request)
    try:
        page = int(request.query.get("page", "1"))
        size = int(request.query.get("page_size", str(DEFAULT_PAGE_SIZE)))
    except ValueError:
        raise bad_request("Pagination parameters are invalid") from None
    if page < 1 or not 1 <= size <= MAX_PAGE_SIZE:
        raise bad_request("Pagination parameters are invalid")
    total = len(holder)
    now = holder.wall_ms()
    items = [_item(i, due, now, m) for i, due, m in holder.listing((page - 1) * size, size)]
    pages = -(-total // size)
    return web.json_response({
        "filtered_count": total, "item_count": len(items), "items": items, "page": page,
        "page_count": pages, "page_size": size, "total_count": total})


@routes.delete("/api/exchanges/{vhost}/{name}/delayed/{id}")
async def cancel_delayed(request: web.Request) -> web.Response:
    holder = _holder(request)
    if not holder.cancel(request.match_info["id"]):
        raise not_found()
    return web.Response(status=204)
