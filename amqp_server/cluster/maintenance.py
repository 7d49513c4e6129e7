"""Maintenance mode of a cluster node: RabbitMQ's ``rabbitmq-upgrade drain`` and ``revive``.

``drain`` (``amqpqctl drain``, ``POST /api/maintenance/drain`` on the node's API) puts the
node in maintenance, in RabbitMQ's order (``rabbit_maintenance:drain/0``):

1. mark it in etcd (``/amqpq/<cluster>/maintenance/<node>``): no node places a new quorum
   queue leader on it, rebalancing gives it none (:mod:`amqp_server.cluster.placement`);
2. close its client listeners (AMQP, AMQPS): clients reconnect to the other nodes;
3. close its client connections with ``320 CONNECTION_FORCED - Node was put into maintenance
   mode``;
4. hand every quorum queue it leads to an in-sync member
   (:meth:`~amqp_server.cluster.quorum.QuorumManager.move_leaders_off`).

The node stays a cluster member: its replicas keep following, its node links and management
API stay up. ``revive`` clears the mark and listens again. The mark is kept in etcd, so a
node restarted while in maintenance starts with its client listeners closed until it is
revived (the upgrade recipe: drain, stop, upgrade, start, ``await_online_quorum_plus_one``,
revive).

Source: https://www.rabbitmq.com/docs/upgrade#maintenance-mode, RabbitMQ's
``rabbit_maintenance`` and ``rabbitmq-upgrade`` drain/revive commands.
"""

from __future__ import annotations

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


class Maintenance:
    """A node's maintenance mode (module docstring).

    Args:
        quorum: the node's quorum queues (the mark in etcd, leader transfers).
        broker: the node's broker (its client connections, ``broker.connections``).
    """

    def __init__(self, quorum: QuorumManager, broker: Any) -> None:
        self.quorum = quorum
        self.broker = broker
        self.listeners: ClientListeners | None = None
        self.suspended = False

    @property
    def draining(self) -> bool:
        """This node is marked as in maintenance (etcd's view)."""
        return self.quorum.hub.m.node in self.quorum.drained

    async def attach(self, listeners: ClientListeners) -> None:
        """The server listens: keep its listeners, and close them at once if the node is
        still in maintenance from before a restart."""
        self.listeners = listeners
        if self.draining:
            log.warning("this node is in maintenance mode (drained before it stopped): "
                        "client listeners stay closed until it is revived")
            await self._suspend()

    async def _suspend(self) -> None:
        if self.listeners is not None and not self.suspended:
            await self.listeners.suspend_listeners()
        self.suspended = True

    async def drain(self) -> dict[str, int]:
        """Put the node in maintenance (module docstring); returns ``{"moved", "kept",
        "closed"}``: quorum queue leaders handed over, leaders kept (no in-sync member to
        take them), client connections closed."""
        log.warning("this node is being put into maintenance mode")
        await self.quorum.set_maintenance(True)
        await self._suspend()
        connections = list(self.broker.connections)
        for conn in connections:
            conn.close(320, DRAIN_REASON)
        moved, kept = await self.quorum.move_leaders_off()
        log.warning("this node is in maintenance mode: %d quorum queue leaders transferred, "
                    "%d kept, %d client connections closed", moved, kept, len(connections))
        return {"moved": moved, "kept": kept, "closed": len(connections)}

    async def revive(self) -> None:
        """Take the node out of maintenance: clear the mark, listen to clients again."""
        await self.quorum.set_maintenance(False)
        if self.listeners is not None and self.suspended:
            await self.listeners.resume_listeners()
        self.suspended = False
        log.warning("this node is out of maintenance mode: serving clients again")
