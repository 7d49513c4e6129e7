"""Topology changes as plain records, and the one function that applies them.

A declare, bind, unbind or delete (from AMQP, :mod:`amqp_server.topology_methods`, or from the
HTTP API) is a record; :func:`apply_op` applies one to a broker's vhosts. With several
workers the records are ordered by the supervisor and every worker applies each in that
order (:mod:`amqp_server.workers.runtime`), so all hold the same exchanges, queues and
bindings. Applying is deterministic: the same record on the same state raises the same
error (404/405/406 with RabbitMQ's texts) on every worker; only the asking one reports it.

Records (tuples, first item the kind; ``owner`` names the asking connection,
``(worker, connection serial)``, or is None for the HTTP API)::

    ("xdecl", vhost, name, type, durable, auto_delete, internal, arguments)
    ("xdel", vhost, name, if_unused)
    ("bind" | "unbind", vhost, dest_kind, dest_name, source, routing_key, arguments, owner)
    ("qdecl", vhost, name, durable, exclusive, auto_delete, arguments, owner, server_named,
     home)
    ("qdel", vhost, name, if_unused, if_empty, owner)
    ("qforget", vhost, name)          # the home deleted it (auto-delete, x-expires, owner gone)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from exchanges.binding import Destination

if TYPE_CHECKING:
    from broker.broker import Broker

Op = tuple[Any, ...]
OwnerOf = Callable[[Any], object | None]


async def change_topology(broker: Broker, op: Op) -> Any:
    """Apply ``op`` for the HTTP API (no connection): at once with one worker, after every
    worker has it in order with several. Raises what :func:`apply_op` raises."""
    if broker.workers is None:
        return apply_op(broker, op, lambda ref: None)
    return await broker.workers.submit_async(op)


def apply_op(broker: Broker, op: Op, owner_of: OwnerOf) -> Any:
    """Apply one record to ``broker``'s vhosts; returns what the vhost returned (the queue
    for ``qdecl``, the message count for ``qdel``).

    Raises:
        AMQPError: what the vhost raises (NotFound 404, ResourceLocked 405, ...).
        KeyError: an unknown vhost (deleted meanwhile).
    """
    kind, vname = op[0], op[1]
    vhost = broker.vhosts[vname]
    if kind == "xdecl":
        _, _, name, type_name, durable, auto_delete, internal, arguments = op
        return vhost.declare_exchange(name, type_name, False, durable, auto_delete, internal,
                                      arguments)
    if kind == "xdel":
        return vhost.delete_exchange(op[2], op[3])
    if kind in ("bind", "unbind"):
        _, _, dkind, dname, source, rk, arguments, owner = op
        change = vhost.bind if kind == "bind" else vhost.unbind
        return change(Destination(dkind, dname), source, rk, arguments, owner_of(owner))
    if kind == "qdecl":
        _, _, name, durable, exclusive, auto_delete, arguments, owner, server_named, _ = op
        return vhost.declare_queue(name, False, durable, exclusive, auto_delete, arguments,
                                   owner_of(owner), server_named)
    if kind == "qdel":
        _, _, name, if_unused, if_empty, owner = op
        return vhost.delete_queue(name, if_unused, if_empty, owner_of(owner))
    if kind == "qforget":
        q = vhost.queues.get(op[2])
        return 0 if q is None else vhost.remove_queue(q)
    raise ValueError(f"unknown topology record {kind!r}")
