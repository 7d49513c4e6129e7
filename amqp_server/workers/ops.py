"""Topology changes as plain records: one function applies them, on one worker or on all.

A declare, bind, unbind or delete that reaches the vhost goes through :func:`run`. With one
worker (``broker.workers`` is None) it is applied at once, as before. With several, the
record is sent to the supervisor, which numbers it and sends it to every worker; each
applies it in that order (:meth:`amqp_server.workers.runtime.WorkerRuntime.submit`), and the
worker of the client that asked answers it once its own copy is applied. So every worker
holds the same exchanges, queues and bindings and routes with the same tables; a queue is a
real :class:`~queue_store.queue.Queue` on its home worker and a
:class:`~amqp_server.workers.remote_queue.RemoteQueue` elsewhere.

Records (tuples, first item the kind; ``owner`` is ``(worker, connection serial)`` of an
exclusive queue's connection, or None)::

    ("xdecl", vhost, name, type, durable, auto_delete, internal, arguments)
    ("xdel", vhost, name, if_unused)
    ("bind" | "unbind", vhost, dest_kind, dest_name, source, routing_key, arguments, owner)
    ("qdecl", vhost, name, durable, exclusive, auto_delete, arguments, owner, server_named,
     home)
    ("qdel", vhost, name, if_unused, if_empty, owner)
    ("qforget", vhost, name)          # the home deleted it (auto-delete, x-expires, owner gone)

Applying is deterministic: the same record on the same state raises the same error
(404/405/406 with RabbitMQ's texts) on every worker; only the asking worker reports it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from exchanges.binding import Destination

if TYPE_CHECKING:
    from amqp_server.channel import Channel
    from broker.broker import Broker

Op = tuple[Any, ...]
OwnerOf = Callable[[Any], object | None]


def owner_ref(ch: Channel) -> tuple[int, int]:
    """The ``owner`` item of a record for ``ch``'s connection."""
    workers = ch.connection.broker.workers
    return (workers.index if workers is not None else 0, ch.connection.serial)


def run(ch: Channel, op: Op, then: Callable[[Any], None]) -> None:
    """Apply ``op`` for the client of ``ch`` and call ``then(result)``; with several workers
    both happen once every worker has the change in order (the connection reads no further
    frame until then). Errors raised by applying reach the client as if raised here."""
    conn = ch.connection
    workers = conn.broker.workers
    if workers is None:
        then(apply_op(conn.broker, op, lambda ref: conn))
    else:
        workers.submit(ch, op, then)


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
