"""The HTTP API's changes of users, vhosts, permissions and policies, as deltas.

A route checks the request (rights, body, existence: its usual answers) and hands the change
to :func:`ordered_change` as a delta of :func:`broker.access_sync.apply_delta`: applied at
once on one node, ordered through etcd in a cluster before any node applies it (the request
is answered once this node applied its own copy; the whole-document broadcast of
``--workers N`` is then skipped for it). A delta refused when applied (another node's change
came first: the user deleted meanwhile...) gives the answer the route would have given.

Source: https://www.rabbitmq.com/docs/management#http-api (status codes: 201 created, 204
changed or deleted, 400, 404).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from broker.access_sync import Refusal, change_access, orders_access
from management.errors import ApiError, bad_request, not_found
from management.state import state

#: set on a request whose change was ordered as a delta (management.app skips the broadcast)
ORDERED = "amqpq.access_ordered"


async def ordered_change(request: web.Request, delta: dict[str, Any],
                         refused: Callable[[Any], ApiError] = bad_request) -> Any:
    """Apply ``delta`` (see the module docstring); returns its result (True: created).

    Raises:
        ApiError: 404 (``Object Not Found``) or 400 (``refused(reason)``) when the delta was
            refused where it was applied.
    """
    broker = state(request).broker
    if orders_access(broker):
        request[ORDERED] = True
    result = await change_access(broker, delta)
    if isinstance(result, Refusal):
        if result.status == 404:
            raise not_found()
        raise refused(result.reason)
    return result
