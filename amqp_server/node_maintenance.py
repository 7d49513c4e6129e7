"""Maintenance mode of a broker without a cluster: RabbitMQ's ``rabbitmq-upgrade drain`` and
``revive`` on a single node.

RabbitMQ drains a single node as it drains a cluster member (``rabbit_maintenance:drain/0``):
it marks the node as being drained, suspends its client listeners, closes its client
connections with ``320 CONNECTION_FORCED - Node was put into maintenance mode``, and skips
the quorum queue leader transfer ("no candidate (online, not under maintenance) nodes to
transfer to"); its management API stays up. ``revive`` listens again and clears the mark.
The mark lives in RabbitMQ's metadata store, so a node restarted while drained keeps its
listeners suspended until it is revived.

Here the mark is a file, ``DATA_DIR/maintenance``, read at start (:meth:`LocalMaintenance.
attach`). A cluster node's maintenance is :mod:`amqp_server.cluster.maintenance` (the mark in
etcd, leaders moved off). With ``--workers N`` worker 0 (which serves the API) drains the
broker: the supervisor, which accepts the clients, closes its listening sockets when asked
(:class:`SupervisorListeners`), and every other worker's clients are closed through the
workers' ``close`` request (:meth:`~amqp_server.workers.worker_stats.PeerStats.
close_elsewhere`).

Source: https://www.rabbitmq.com/docs/upgrade#maintenance-mode, ``rabbit_maintenance.erl``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from amqp_server.cluster.maintenance import DRAIN_REASON, ListenerSwitch

if TYPE_CHECKING:
    from broker.broker import Broker

log = logging.getLogger("amqpq.server")

MARK_FILE = "maintenance"  # in the data dir while the node is drained

__all__ = ["MARK_FILE", "LocalMaintenance", "SupervisorListeners"]


class SupervisorListeners:
    """The client listeners of a ``--workers N`` broker: the supervisor's, closed and opened
    again by a ``("listen", on)`` record on the worker's link to it.

    Args:
        send_hub: sends a control record to the supervisor
            (:meth:`~amqp_server.workers.links.Links.send_hub`).
    """

    def __init__(self, send_hub: Callable[[tuple[Any, ...]], None]) -> None:
        self.send_hub = send_hub

    async def suspend_listeners(self) -> None:
        """Ask the supervisor to close its listening sockets."""
        self.send_hub(("listen", False))

    async def resume_listeners(self) -> None:
        """Ask the supervisor to listen again on the same ports."""
        self.send_hub(("listen", True))


class LocalMaintenance(ListenerSwitch):
    """A single node's maintenance mode (module docstring); the mark is ``MARK_FILE``.

    Args:
        broker: the node's broker (its client connections and quorum queues).
        data_dir: where the mark is kept (``MARK_FILE``).
    """

    _log = log

    def __init__(self, broker: Broker, data_dir: Path) -> None:
        super().__init__()
        self.broker = broker
        self.mark = Path(data_dir) / MARK_FILE

    @property
    def draining(self) -> bool:
        """The node is marked as in maintenance."""
        return self.mark.exists()

    def status(self, node: str) -> dict[str, Any]:
        """``GET /api/maintenance``'s answer for node ``node`` (this one's name):
        ``{"node", "draining", "drained": [node...]}``, as a cluster node answers it."""
        draining = self.draining
        return {"node": node, "draining": draining, "drained": [node] if draining else []}

    async def drain(self) -> dict[str, int]:
        """Mark the node, close its client listeners, close its client connections (320);
        returns ``{"moved", "kept", "closed"}``: no quorum queue leader can move (no other
        node), so ``kept`` counts the quorum queues, ``closed`` the connections.

        Raises:
            OSError: the mark cannot be written (the node is left as it was).
        """
        log.warning("This node is being put into maintenance (drain) mode")
        self.mark.write_text("draining\n", encoding="ascii")
        await self._suspend()
        connections = list(self.broker.connections)
        for conn in connections:
            conn.close(320, DRAIN_REASON)
        closed = len(connections) + await self._close_elsewhere()
        log.warning("Closed %d local client connections", closed)
        kept = sum(1 for vhost in self.broker.vhosts.values()
                   for q in vhost.queues.values() if q.quorum)
        if kept:
            log.warning("Skipping leadership transfer of quorum queues: no candidate (online, "
                        "not under maintenance) nodes to transfer to!")
        return {"moved": 0, "kept": kept, "closed": closed}

    async def _close_elsewhere(self) -> int:
        """``--workers N``: close the other workers' client connections (320); how many."""
        workers = self.broker.workers
        if workers is None:
            return 0
        closed = 0
        for conn in await workers.gather_json("connections"):
            if await workers.close_elsewhere(str(conn["name"]), DRAIN_REASON):
                closed += 1
        return closed

    async def revive(self) -> None:
        """Listen to clients again and clear the mark (RabbitMQ's order)."""
        log.info("This node is being revived from maintenance (drain) mode")
        await self._resume_listeners()
        self.mark.unlink(missing_ok=True)
        log.warning("this node is out of maintenance mode: serving clients again")
