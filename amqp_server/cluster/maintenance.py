"""Maintenance mode of a cluster node: RabbitMQ's ``rabbitmq-upgrade drain`` and ``revive``.

``drain`` (``amqpqctl drain``, ``POST /api/maintenance/drain`` on the node's API) puts the
node in maintenance, in RabbitMQ's order (``rabbit_maintenance:drain/0``):

1. mark it in etcd (``/amqpq/<cluster>/maintenance/<node>``): no node places a new quorum
   queue leader on it, rebalancing gives it none (:mod:`amqp_server.cluster.placement`);
2. close its client listeners (AMQP, AMQPS): clients reconnect to the other nodes;
3. close its client connections with ``320 CONNECTION_FORCED - Node was put into maintenance
   mode``;
4. hand every quorum queue it leads to an in-sync member
   (:meth:`~amqp_server.cluster.quorum_admin.QuorumAdmin.move_leaders_off`).

On a node of several workers (``--workers N``: each worker is a cluster member,
:mod:`amqp_server.cluster.node`) the mark is the node's: the worker that got the request
drains itself as above, and every other worker of the node, seeing its node's mark come
through etcd's watch (:attr:`QuorumManager.on_node_mark`), does steps 2 to 4 for itself; a
worker's "listeners" are the supervisor's, which closes its listening sockets when a worker
asks (and opens them again at ``revive``). ``revive`` clears the mark: every worker listens
again.

The node stays a cluster member: its replicas keep following, its node links and management
API stay up. ``revive`` clears the mark and listens again. The mark is kept in etcd, so a
node restarted while in maintenance starts with its client listeners closed until it is
revived (the upgrade recipe: drain, stop, upgrade, start, ``await_online_quorum_plus_one``,
revive).

Source: https://www.rabbitmq.com/docs/upgrade#maintenance-mode, RabbitMQ's
``rabbit_maintenance`` and ``rabbitmq-upgrade`` drain/revive commands.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from amqp_server.cluster.quorum import QuorumManager

log = logging.getLogger("amqpq.cluster")

#: the reason connections are closed with (RabbitMQ's ``rabbit_maintenance:drain/0``)
DRAIN_REASON = "CONNECTION_FORCED - Node was put into maintenance mode"


class ClientListeners(Protocol):
    """The server's client listeners (AMQP, AMQPS), closed and opened again."""

    async def suspend_listeners(self) -> None:
        """Stop accepting client connections (the listening sockets are closed)."""

    async def resume_listeners(self) -> None:
        """Accept client connections again, on the same ports."""


class ListenerSwitch:
    """A node's client listeners under maintenance mode, shared by a cluster node's
    :class:`Maintenance` and a single node's
    :class:`~amqp_server.node_maintenance.LocalMaintenance`: closed once and opened again
    once (each flag set before its await: a drain asked over HTTP and the same node's mark
    seen on etcd's watch may both get there), and kept closed from the start while the node
    is marked (:attr:`draining`, the subclass's mark)."""

    #: where :meth:`attach` says the node starts drained
    _log = log

    def __init__(self) -> None:
        self.listeners: ClientListeners | None = None
        self.suspended = False

    @property
    def draining(self) -> bool:
        """The node is marked as in maintenance."""
        raise NotImplementedError

    async def attach(self, listeners: ClientListeners) -> None:
        """The server listens: keep its listeners, and close them at once if the node is
        still in maintenance from before a restart."""
        self.listeners = listeners
        if self.draining:
            self._log.warning("this node is in maintenance mode (drained before it stopped): "
                              "client listeners stay closed until it is revived")
            await self._suspend()

    async def _suspend(self) -> None:
        """Close the listeners once."""
        was, self.suspended = self.suspended, True
        if self.listeners is not None and not was:
            await self.listeners.suspend_listeners()

    async def _resume_listeners(self) -> bool:
        """Listen again once; whether the listeners were reopened."""
        was, self.suspended = self.suspended, False
        if self.listeners is not None and was:
            await self.listeners.resume_listeners()
            return True
        return False


class Maintenance(ListenerSwitch):
    """A node's maintenance mode (module docstring).

    Args:
        quorum: the node's quorum queues (the mark in etcd, leader transfers).
        broker: the node's broker (its client connections, ``broker.connections``).
    """

    def __init__(self, quorum: QuorumManager, broker: Any) -> None:
        super().__init__()
        self.quorum = quorum
        self.broker = broker
        self._draining_here = False  # this process's own drain is under way or done
        self._tasks: set[Any] = set()
        quorum.on_node_mark = self._node_marked

    @property
    def draining(self) -> bool:
        """This node is marked as in maintenance (etcd's view)."""
        return self.quorum.hub.m.node in self.quorum.drained

    async def drain(self) -> dict[str, int]:
        """Put the node in maintenance (module docstring); returns ``{"moved", "kept",
        "closed"}``: quorum queue leaders handed over, leaders kept (no in-sync member to
        take them), client connections closed (this process's: the node's other workers
        drain themselves when they see the mark)."""
        log.warning("this node is being put into maintenance mode")
        self._draining_here = True
        await self.quorum.set_maintenance(True)
        return await self._drain_here()

    async def _drain_here(self) -> dict[str, int]:
        """Steps 2 to 4 of the module docstring, for this process."""
        self._draining_here = True
        await self._suspend()
        connections = list(self.broker.connections)
        for conn in connections:
            conn.close(320, DRAIN_REASON)
        moved, kept = await self.quorum.admin.move_leaders_off()
        log.warning("this node is in maintenance mode: %d quorum queue leaders transferred, "
                    "%d kept, %d client connections closed", moved, kept, len(connections))
        return {"moved": moved, "kept": kept, "closed": len(connections)}

    async def revive(self) -> None:
        """Take the node out of maintenance: clear the mark, listen to clients again."""
        await self.quorum.set_maintenance(False)
        await self._resume()

    async def _resume(self) -> None:
        """Listen again once (the flag first, :class:`ListenerSwitch`)."""
        self._draining_here = False
        if await self._resume_listeners():
            log.warning("this node is out of maintenance mode: serving clients again")

    def _node_marked(self, on: bool) -> None:
        """etcd's watch brought this node's maintenance mark (``on``) or its removal: a
        worker of the node that did not ask drains itself (or serves again)."""
        if self.listeners is None:  # still starting: attach() looks at the mark
            return
        if on and not self._draining_here:
            task = asyncio.ensure_future(self._drain_here())
        elif not on and (self.suspended or self._draining_here):
            task = asyncio.ensure_future(self._resume())
        else:
            return
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
