"""The HTTP API's changes of users, vhosts, permissions and policies, as deltas.

A route checks the request (rights, body, existence: its usual answers) and hands the change
to :func:`ordered_change` as a delta of :func:`broker.access_sync.apply_delta`: applied at
once on one node, ordered through etcd in a cluster before any node applies it (the request
is answered once this node applied its own copy; the whole-document broadcast of
``--workers N`` is then skipped for these paths: :func:`shares_document`). A delta refused when applied (another node's change
came first: the user deleted meanwhile...) gives the answer the route would have given.

Source: https://www.rabbitmq.com/docs/management#http-api (status codes: 201 created, 204
changed or deleted, 400, 404).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from broker.access_sync import ACCESS_PATHS, Refusal, change_access, orders_access
from management.errors import ApiError, bad_request, not_found
from management.state import state

if TYPE_CHECKING:
    from broker.broker import Broker

#: paths whose changes are deltas: in a cluster their requests never broadcast the whole
#: access document (not even a refused one: that document could land after a later delta)
DELTA_PATHS = ("/api/users", "/api/vhosts", "/api/permissions", "/api/topic-permissions",
               "/api/policies", "/api/operator-policies", "/api/vhost-limits",
               "/api/user-limits")


def shares_document(broker: Broker, path: str) -> bool:
    """True when a changing request on ``path`` is followed by the whole access document
    for the other workers or nodes (:meth:`Workers.share_access`): ``--workers N``, and in
    a cluster the paths that are not deltas yet (definitions imports, parameters)."""
    if broker.workers is None or not path.startswith(ACCESS_PATHS):
        return False
    return not (orders_access(broker) and path.startswith(DELTA_PATHS))


async def ordered_change(request: web.Request, delta: dict[str, Any],
                         refused: Callable[[Any], ApiError] = bad_request) -> Any:
    """Apply ``delta`` (see the module docstring); returns its result (True: created).

    Raises:
        ApiError: 404 (``Object Not Found``) or 400 (``refused(reason)``) when the delta was
            refused where it was applied.
    """
    result = await change_access(state(request).broker, delta)
    if isinstance(result, Refusal):
        if result.status == 404:
            raise not_found() if result.reason is None else \
                ApiError(404, "not_found", result.reason)
        raise refused(result.reason)
    return result
