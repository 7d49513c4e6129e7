"""Users, vhosts, permissions, policies, parameters and limits kept equal on every worker.

With ``--workers N`` the HTTP API is served by worker 0. After a request that changed any of
these, worker 0 sends its whole state of them (:func:`access_document`, a definitions
document without queues, exchanges and bindings, which travel as topology records) as one
ordered record; every other worker makes its own state equal to it (:func:`apply_access`):
what the document lacks is deleted (users, vhosts — closing their connections as on one
node — permissions, policies, parameters, limits), the rest imported as
``POST /api/definitions`` would. A definitions import (``POST /api/definitions``) carries
its queues, exchanges and bindings too (added where missing, never deleted by this path).

In a cluster (``--cluster-etcd``) a change of users, vhosts, permissions, topic permissions
and policies over HTTP is instead a *delta* (:func:`change_access`): ``{"op": "put_user",
...}`` ordered through etcd's log before it is applied anywhere, applied by every node in that
order (:func:`apply_delta`), the asking node answering once it applied its own copy; two
changes made at once on two nodes therefore both hold (also vhost and user limits). A delta
carries a password's hash, never the password. Definitions imports and parameters still
travel as the whole document.

Source: RabbitMQ keeps these in its metadata store, replicated to every node.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from broker.topology_records import AccessChange
from vhosts.definitions import (
    OPERATOR_POLICY,
    DefinitionsError,
    export_definitions,
    import_definitions,
)
from vhosts.extras import INTERNAL_CLUSTER_ID
from vhosts.limits import LimitsError
from vhosts.policies import PolicyError

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


def apply_access(broker: Broker, doc: dict[str, Any]) -> Any:
    """Make ``broker``'s users, vhosts, permissions, policies, parameters and limits those
    of ``doc``. True when done; False when the document does not apply here (logged as an
    error naming the entry and why, e.g. ``parameters[0] (component 'federation-upstream'
    name 'up' in vhost 'fv'): no vhost 'fv'``). A delta (``doc`` with an ``"op"``) is
    applied by :func:`apply_delta`, whose result is returned.

    Never raises: a caller logging the failed record would log ``doc``, password hashes
    included. What is logged here carries no value of the document.
    """
    if "op" in doc:
        return apply_delta(broker, doc)
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
    # the cluster's id stays when a document lacks it (made before this node adopted it)
    cluster_id = broker.extras.global_value(INTERNAL_CLUSTER_ID)
    broker.extras.global_parameters.clear()
    if cluster_id is not None and not any(p.get("name") == INTERNAL_CLUSTER_ID
                                          for p in doc.get("global_parameters") or []):
        broker.extras.set_global(INTERNAL_CLUSTER_ID, cluster_id)
    broker.limits.users.clear()
    broker.limits.vhosts.clear()
    import_definitions(broker, doc)


# ---- deltas (a cluster: ordered through etcd) --------------------------------------------


class Refusal(NamedTuple):
    """A delta not applied, the same on every node: the HTTP status (400, 404) and the
    reason of RabbitMQ's error body (None: the status's default body)."""
    status: int
    reason: Any = None


def orders_access(broker: Broker) -> bool:
    """True when access changes are deltas ordered through etcd (a cluster node)."""
    return broker.workers is not None and broker.cluster is not None


async def change_access(broker: Broker, delta: dict[str, Any]) -> Any:
    """Apply ``delta`` (see :func:`apply_delta`) and return its result (a :class:`Refusal`
    when refused): at once on one node (or a ``--workers N`` broker, which then shares the
    whole document), in a cluster once etcd ordered it and this node applied it."""
    if orders_access(broker):
        assert broker.workers is not None
        return await broker.workers.submit_async(AccessChange(delta))
    return apply_delta(broker, delta)


def apply_delta(broker: Broker, delta: dict[str, Any]) -> Any:
    """Apply one access delta; returns True when it created something (201), False when it
    changed or deleted something (204), or a :class:`Refusal`. Deterministic: the same delta
    on the same state gives the same result on every node.

    Deltas (fields): ``put_user`` (name, password_hash, tags, limits), ``delete_user``
    (name), ``delete_users`` (names), ``put_vhost`` (name, description, tags, creator),
    ``delete_vhost`` (name), ``put_permission`` (user, vhost, configure, write, read),
    ``delete_permission`` (user, vhost), ``put_topic_permission`` (user, vhost, exchange,
    write, read), ``delete_topic_permission`` (user, vhost, exchange or None: all),
    ``put_policy`` / ``put_operator_policy`` (vhost, name, pattern, definition, priority,
    apply_to), ``delete_policy`` / ``delete_operator_policy`` (vhost, name), ``set_limit``
    (kind ``vhost`` or ``user``, name, limit, value), ``clear_limit`` (kind, name, limit),
    ``adopt_cluster_id`` (value: the ``internal_cluster_id`` global parameter, set only
    when there is none).
    """
    handler = _DELTAS.get(str(delta.get("op")))
    if handler is None:
        log.error("access delta %r not understood (written by a newer amqpq?): skipped",
                  str(delta.get("op"))[:40])
        return Refusal(400, "unknown access change")
    try:
        return handler(broker, delta)
    except (KeyError, TypeError, ValueError) as exc:
        log.error("access delta %r malformed: %s", str(delta.get("op"))[:40],
                  type(exc).__name__)
        return Refusal(400, "malformed access change")


def _put_user(broker: Broker, d: dict[str, Any]) -> Any:
    was_new = d["name"] not in broker.users.users
    broker.users.add(d["name"], None, list(d["tags"]), password_hash=d["password_hash"])
    if d.get("limits"):
        try:
            broker.limits.set("user", d["name"], dict(d["limits"]))
        except LimitsError as exc:
            return Refusal(400, str(exc))
    return was_new


def _delete_user(broker: Broker, d: dict[str, Any]) -> Any:
    return False if broker.delete_user(d["name"]) else Refusal(404)


def _delete_users(broker: Broker, d: dict[str, Any]) -> Any:
    for name in d["names"]:
        if name not in broker.users.users:
            return Refusal(400, ["no_such_user", name])
    for name in d["names"]:
        broker.delete_user(name)
    return False


def _put_vhost(broker: Broker, d: dict[str, Any]) -> Any:
    name = d["name"]
    was_new = name not in broker.vhosts
    broker.add_vhost(name)
    broker.extras.set_metadata(name, d.get("description"), d.get("tags"))
    creator = d.get("creator")
    if was_new and creator and broker.permissions.get(creator, name) is None:
        broker.permissions.set(creator, name, ".*", ".*", ".*")
    return was_new


def _delete_vhost(broker: Broker, d: dict[str, Any]) -> Any:
    return False if broker.delete_vhost(d["name"]) else Refusal(404)


def _both_exist(broker: Broker, d: dict[str, Any]) -> bool:
    return d["user"] in broker.users.users and d["vhost"] in broker.vhosts


def _put_permission(broker: Broker, d: dict[str, Any]) -> Any:
    if not _both_exist(broker, d):
        return Refusal(400, "vhost_or_user_not_found")
    was_new = broker.permissions.get(d["user"], d["vhost"]) is None
    try:
        broker.permissions.set(d["user"], d["vhost"], d["configure"], d["write"], d["read"])
    except ValueError as exc:
        return Refusal(400, str(exc))
    return was_new


def _delete_permission(broker: Broker, d: dict[str, Any]) -> Any:
    if not _both_exist(broker, d) or broker.permissions.get(d["user"], d["vhost"]) is None:
        return Refusal(404)
    broker.permissions.clear(d["user"], d["vhost"])
    return False


def _put_topic_permission(broker: Broker, d: dict[str, Any]) -> Any:
    if not _both_exist(broker, d):
        return Refusal(400, "vhost_or_user_not_found")
    entries = broker.permissions.topic_permissions.get((d["user"], d["vhost"]), {})
    was_new = d["exchange"] not in entries
    try:
        broker.permissions.set_topic(d["user"], d["vhost"], d["exchange"], d["write"],
                                     d["read"])
    except ValueError as exc:
        return Refusal(400, str(exc))
    return was_new


def _delete_topic_permission(broker: Broker, d: dict[str, Any]) -> Any:
    if not _both_exist(broker, d) or not broker.permissions.clear_topic(
            d["user"], d["vhost"], d.get("exchange")):
        return Refusal(404)
    return False


def _put_policy(operator: bool) -> Callable[[Broker, dict[str, Any]], Any]:
    def put(broker: Broker, d: dict[str, Any]) -> Any:
        vhost = broker.vhosts.get(d["vhost"])
        if vhost is None:
            return Refusal(404, "vhost_not_found")
        existing = vhost.operator_policies if operator else vhost.policies
        was_new = d["name"] not in existing
        change = vhost.set_operator_policy if operator else vhost.set_policy
        try:
            change(d["name"], d["pattern"], d["definition"], d["priority"], d["apply_to"])
        except PolicyError as exc:
            return Refusal(400, str(exc))
        return was_new
    return put


def _delete_policy(operator: bool) -> Callable[[Broker, dict[str, Any]], Any]:
    def delete(broker: Broker, d: dict[str, Any]) -> Any:
        vhost = broker.vhosts.get(d["vhost"])
        if vhost is None:
            return Refusal(404)
        clear = vhost.clear_operator_policy if operator else vhost.clear_policy
        return False if clear(d["name"]) else Refusal(404)
    return delete


def _adopt_cluster_id(broker: Broker, d: dict[str, Any]) -> Any:
    """The cluster's permanent id, unless it has one already: the first proposal ordered
    wins on every node (:mod:`broker.cluster_identity`)."""
    if broker.extras.global_value(INTERNAL_CLUSTER_ID) is not None:
        return False
    broker.extras.set_global(INTERNAL_CLUSTER_ID, str(d["value"]))
    return True


def _known(broker: Broker, d: dict[str, Any]) -> Refusal | None:
    """A refusal when the vhost or user of a limit delta does not exist."""
    if d["kind"] == "vhost":
        return None if d["name"] in broker.vhosts else Refusal(404, "vhost_not_found")
    if d["name"] not in broker.users.users:
        return Refusal(400, ["no_such_user", d["name"]])
    return None


def _set_limit(broker: Broker, d: dict[str, Any]) -> Any:
    refusal = _known(broker, d)
    if refusal is not None:
        return refusal
    try:
        broker.limits.set(d["kind"], d["name"], {d["limit"]: d["value"]})
    except LimitsError as exc:
        return Refusal(400, str(exc))
    return False


def _clear_limit(broker: Broker, d: dict[str, Any]) -> Any:
    refusal = _known(broker, d)
    if refusal is not None:
        return Refusal(404) if d["kind"] == "user" else refusal
    broker.limits.clear(d["kind"], d["name"], d["limit"])
    return False


_DELTAS: dict[str, Callable[[Broker, dict[str, Any]], Any]] = {
    "put_user": _put_user, "delete_user": _delete_user, "delete_users": _delete_users,
    "put_vhost": _put_vhost, "delete_vhost": _delete_vhost,
    "put_permission": _put_permission, "delete_permission": _delete_permission,
    "put_topic_permission": _put_topic_permission,
    "delete_topic_permission": _delete_topic_permission,
    "put_policy": _put_policy(False), "delete_policy": _delete_policy(False),
    "put_operator_policy": _put_policy(True), "delete_operator_policy": _delete_policy(True),
    "set_limit": _set_limit, "clear_limit": _clear_limit,
    "adopt_cluster_id": _adopt_cluster_id,
}
