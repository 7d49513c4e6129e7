"""Topology changes of AMQP clients: :func:`run` applies a record for a channel.

The records and :func:`~broker.topology_records.apply_op` are in
:mod:`broker.topology_records`. With one worker (``broker.workers`` is None) a record is
applied at once, as before. With several, it is sent to the supervisor, which numbers it and
sends it to every worker; each applies it in that order
(:meth:`amqp_server.workers.runtime.WorkerRuntime.submit`), and the worker of the client
that asked answers it once its own copy is applied. A queue is a real
:class:`~queue_store.queue.Queue` on its home worker and a
:class:`~amqp_server.workers.remote_queue.RemoteQueue` elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from broker.topology_records import Op, OwnerOf, apply_op

if TYPE_CHECKING:
    from amqp_server.channel import Channel

__all__ = ["Op", "OwnerOf", "OwnerStub", "apply_op", "caught_up", "owner_ref", "run"]


class OwnerStub:
    """An exclusive queue's owner connection on another worker (identity only)."""

    __slots__ = ("worker", "serial")

    def __init__(self, worker: int, serial: int) -> None:
        self.worker, self.serial = worker, serial


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


def caught_up(ch: Channel, missing: bool, then: Callable[[], None]) -> None:
    """``then()`` (a passive declare), but on a cluster node whose copy of the metadata lacks
    the object (``missing``) only once the node applied everything etcd had when asked: a
    queue declared on another node a moment ago is found, not refused with 404
    (:meth:`amqp_server.cluster.node.NodeRuntime.catch_up`)."""
    workers = ch.connection.broker.workers
    if missing and workers is not None:
        workers.catch_up(ch, then)
    else:
        then()
