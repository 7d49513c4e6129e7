"""Topology changes in one order for every worker (node): a part of the runtime.

A declare, bind, unbind or delete of a client (:func:`amqp_server.workers.ops.run`), a change
made over HTTP (:meth:`Topology.submit_async`) and an access change
(:meth:`Topology.share_access`) are records (:mod:`broker.topology_records`) handed to a
:class:`Sequencer`, which puts every process's records in one order and brings them back to
every process as ``apply`` records (:meth:`Topology.on_apply`). Each process applies them in
that order; the asking process answers its client once its own copy is applied (its
connection reads nothing meanwhile), or resolves the HTTP API's future.

Two sequencers: the supervisor of a ``--workers N`` broker (:class:`SupervisorSequencer`,
over the supervisor link) and etcd for a cluster
(:class:`amqp_server.cluster.node.EtcdSequencer`, a log in etcd). They differ in
:meth:`Sequencer.catch_up`: the supervisor sends records in order, so a worker has applied
everything ordered before a client's method when it reads it; a cluster node may not have,
and waits for etcd (a passive declare of a queue declared a moment ago on another node).

Source: RabbitMQ's metadata store (Mnesia, Khepri): one order of changes for every node.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from amqp_common.errors import AMQPError, NotFound
from amqp_server.workers import ops
from amqp_server.workers.links import Links
from amqp_server.workers.ops import OwnerStub
from broker import topology_records as tr
from broker.access_sync import access_document, apply_access
from queue_store.queue_kind import Requester

if TYPE_CHECKING:
    from amqp_server.channel import Channel
    from broker.broker import Broker

__all__ = ["Sequencer", "SupervisorSequencer", "Topology"]

log = logging.getLogger("amqpq.workers")


class Sequencer(Protocol):
    """Puts the records of every worker (node) in one order and brings them back to each as
    ``("apply", origin, op_id, wire)`` control records."""

    def submit(self, op_id: int, wire: Any) -> None:
        """Order record ``wire`` (:func:`broker.topology_records.to_wire`); ``op_id`` 0: no
        one waits for it here."""

    def catch_up(self, requester: Requester, then: Callable[[], None]) -> None:
        """``then()`` once this process applied every record ordered before the call;
        ``requester`` waits meanwhile when that is not at once."""


class SupervisorSequencer:
    """The supervisor of a ``--workers N`` broker orders the records (over ``links``)."""

    def __init__(self, links: Links) -> None:
        self.links = links

    def submit(self, op_id: int, wire: Any) -> None:
        self.links.send_hub(("submit", op_id, wire))

    def catch_up(self, requester: Requester, then: Callable[[], None]) -> None:
        """At once: the supervisor sends records in order, before anything that follows."""
        then()


class Topology:
    """A worker's (node's) side of the ordered topology (see the module docstring).

    Args:
        broker: the broker the records are applied to.
        index: this worker's (node's) index (``origin`` of its own records).
        sequencer: who orders the records.
        worker_down: handles a WorkerDown record (after the dead worker's owner stubs are
            forgotten): forget what died with it, cancel what used it.
        applied: called after each record is applied (records that waited for a queue).
        place: applies a QueuePlace record to its vhost (:meth:`Placement.apply
            <amqp_server.workers.placement.Placement.apply>`); None: such records change
            nothing here.
    """

    def __init__(self, broker: Broker, index: int, sequencer: Sequencer,
                 worker_down: Callable[[int], None], applied: Callable[[], None],
                 place: Callable[[tr.QueuePlace, Any], Any] | None = None) -> None:
        self.broker = broker
        self.index = index
        self.sequencer = sequencer
        self.worker_down = worker_down
        self.applied = applied
        self.place = place
        self.count = 0  # records applied (log)
        self._ops = itertools.count(1)
        # op_id -> (channel, continuation) of a client's method, or the HTTP API's future
        self._pending: dict[int, Any] = {}
        self._stubs: dict[tuple[int, int], OwnerStub] = {}

    # ---- records out ---------------------------------------------------------------------

    def submit(self, ch: Channel, op: ops.Op, then: Callable[[Any], None]) -> None:
        """Send ``op`` for ordering; ``then(result)`` runs once applied here (see
        :func:`amqp_server.workers.ops.run`); ``ch``'s connection reads nothing meanwhile."""
        op_id = next(self._ops)
        self._pending[op_id] = (ch, then)
        ch.await_answer()
        self.sequencer.submit(op_id, tr.to_wire(op))

    def submit_async(self, op: ops.Op) -> asyncio.Future[Any]:
        """Send ``op`` for ordering (the HTTP API); the future has the result of applying
        it here, or the error."""
        op_id = next(self._ops)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[op_id] = future
        self.sequencer.submit(op_id, tr.to_wire(op))
        return future

    def share_access(self, with_topology: bool) -> None:
        """Users, vhosts, permissions, policies... changed here (the HTTP API): the other
        workers take the same (:mod:`broker.access_sync`)."""
        doc = access_document(self.broker, with_topology)
        self.sequencer.submit(0, tr.to_wire(tr.AccessChange(doc)))

    def forget(self, vhost: str, name: str) -> None:
        """This process (the queue's home) removed queue ``name`` by itself (auto-delete,
        ``x-expires``, its owner gone): the others remove their stand-ins."""
        self.sequencer.submit(0, tr.to_wire(tr.QueueForget(vhost, name)))

    def catch_up(self, ch: Channel, then: Callable[[], None]) -> None:
        """``then()`` once this process applied every record ordered before the call
        (:meth:`Sequencer.catch_up`)."""
        self.sequencer.catch_up(ch, then)

    # ---- records in ----------------------------------------------------------------------

    def on_apply(self, origin: int, op_id: int, wire: Any) -> None:
        """The ordered record ``wire`` of process ``origin`` (its ``op_id``): applied; the
        client or HTTP request that asked for it here is answered."""
        if origin == self.index and op_id == 0:
            return  # told to the others about a change made here
        if (op := tr.from_wire(wire)) is None:
            return  # an unknown kind or a newer version: logged once, skipped
        pending = self._pending.pop(op_id, None) if origin == self.index else None
        if isinstance(pending, asyncio.Future):
            try:
                result = self._apply(op, self._stub)
            except Exception as exc:
                pending.set_exception(exc)
            else:
                pending.set_result(result)
            self.applied()
            self.broker.after_batch()
            return
        if pending is None:
            try:
                self._apply(op, self._stub)
            except AMQPError:
                pass  # the asking worker reports it; the state is the same everywhere
            except Exception:
                log.exception("topology record %s failed", tr.summary(op))
            self.applied()
            return
        ch, then = pending
        conn = ch.connection
        own = (self.index, conn.serial)
        error: Exception | None = None
        result = None
        try:
            result = self._apply(op, lambda ref: conn if ref == own else self._stub(ref))
        except Exception as exc:
            error = exc
            if not isinstance(exc, AMQPError):
                log.exception("topology record %s failed", tr.summary(op))
        self.applied()

        def answer() -> None:
            if error is not None:
                raise error
            then(result)

        ch.answered(answer)
        self.broker.after_batch()

    def _stub(self, ref: Any) -> object | None:
        """The owner of an exclusive queue of another process's connection ``ref``
        (``(worker, serial)``): one stub per connection."""
        if ref is None:
            return None
        stub = self._stubs.get(ref)
        if stub is None:
            stub = self._stubs[ref] = OwnerStub(ref[0], ref[1])
        return stub

    def _apply(self, op: ops.Op, owner_of: ops.OwnerOf) -> Any:
        self.count += 1
        if isinstance(op, tr.WorkerDown):
            self._stubs = {k: v for k, v in self._stubs.items() if k[0] != op.worker}
            return self.worker_down(op.worker)
        if isinstance(op, tr.AccessChange):
            return apply_access(self.broker, op.document)
        if op.vhost not in self.broker.vhosts:
            raise NotFound(f"no vhost '{op.vhost}'")
        if isinstance(op, tr.QueuePlace):
            return None if self.place is None else self.place(op, self.broker.vhosts[op.vhost])
        return ops.apply_op(self.broker, op, owner_of)
