"""Users, vhosts, permissions, policies, parameters and limits kept equal on every worker.

With ``--workers N`` the HTTP API is served by worker 0. After a request that changed any of
these, worker 0 sends its whole state of them (:func:`access_document`, a definitions
document without queues, exchanges and bindings, which travel as topology records) as one
ordered record; every other worker makes its own state equal to it (:func:`apply_access`):
what the document lacks is deleted (users, vhosts — closing their connections as on one
node — permissions, policies, parameters, limits), the rest imported as
``POST /api/definitions`` would. A definitions import (``POST /api/definitions``) carries
its queues, exchanges and bindings too (added where missing, never deleted by this path).

Source: RabbitMQ keeps these in its metadata store, replicated to every node.
"""

from __future__ import annotations

import logging
import traceback
from typing import TYPE_CHECKING, Any

from vhosts.definitions import (
    OPERATOR_POLICY,
    DefinitionsError,
    export_definitions,
    import_definitions,
)

if TYPE_CHECKING:
    from broker.broker import Broker

log = logging.getLogger("amqpq.workers")  # the workers apply these documents

#: HTTP paths whose changes :func:`access_document` carries (``/api/definitions``: all)
ACCESS_PATHS = ("/api/users", "/api/vhosts", "/api/permissions", "/api/topic-permissions",
                "/api/policies", "/api/operator-policies", "/api/parameters",
                "/api/global-parameters", "/api/vhost-limits", "/api/user-limits",
                "/api/limits", "/api/definitions")


def access_document(broker: Broker, with_topology: bool = False) -> dict[str, Any]:
    """The definitions document to send; queues, exchanges and bindings only when
    ``with_topology`` (a definitions import)."""
    doc = export_definitions(broker, include_transient=with_topology)
    if not with_topology:
        doc["queues"], doc["exchanges"], doc["bindings"] = [], [], []
    return doc


def apply_access(broker: Broker, doc: dict[str, Any]) -> bool:
    """Make ``broker``'s users, vhosts, permissions, policies, parameters and limits those
    of ``doc``. True when done; False when the document does not apply here (logged as an
    error naming the entry and why, e.g. ``parameters[0] (component 'federation-upstream'
    name 'up' in vhost 'fv'): no vhost 'fv'``).

    Never raises: a caller logging the failed record would log ``doc``, password hashes
    included. What is logged here carries no value of the document.
    """
    try:
        _apply(broker, doc)
    except DefinitionsError as exc:  # its message names the entry, never a hash
        log.error("access change (users, vhosts, permissions, policies, limits) not "
                  "applied on this worker: %s", exc)
        return False
    except Exception as exc:
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        log.error("access change (users, vhosts, permissions, policies, limits) not "
                  "applied on this worker: %s at %s:%d", type(exc).__name__,
                  frame.filename, frame.lineno)
        return False
    return True


def _apply(broker: Broker, doc: dict[str, Any]) -> None:
    users = {u["name"] for u in doc["users"]}
    for name in [n for n in broker.users.users if n not in users]:
        broker.delete_user(name)
    vhosts = {v["name"] for v in doc["vhosts"]}
    for name in [n for n in broker.vhosts if n not in vhosts]:
        broker.delete_vhost(name)
    perms = {(p["user"], p["vhost"]) for p in doc["permissions"]}
    for user, vhost in [k for k in broker.permissions.permissions if k not in perms]:
        broker.permissions.clear(user, vhost)
    broker.permissions.topic_permissions.clear()
    policies = {(p["vhost"], p["name"]) for p in doc["policies"]}
    operator = {(p["vhost"], p["name"]) for p in doc["parameters"]
                if p.get("component") == OPERATOR_POLICY}
    for vhost in broker.vhosts.values():
        for name in [n for n in vhost.policies if (vhost.name, n) not in policies]:
            vhost.clear_policy(name)
        for name in [n for n in vhost.operator_policies if (vhost.name, n) not in operator]:
            vhost.clear_operator_policy(name)
    broker.extras.parameters.clear()
    broker.extras.global_parameters.clear()
    broker.limits.users.clear()
    broker.limits.vhosts.clear()
    import_definitions(broker, doc)
