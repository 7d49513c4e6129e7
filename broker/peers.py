"""What the broker and the layers below the AMQP server (``broker/``, ``management/``) call
on the runtime that joins this broker to others: :class:`Workers` is ``broker.workers`` (a
worker of ``--workers N``, or a cluster node: :mod:`amqp_server.workers.runtime`,
:mod:`amqp_server.cluster.node`), :class:`ClusterMembership` is ``broker.cluster`` (a node's
membership in etcd: :mod:`amqp_server.cluster.membership`). Both are None for one process on
one node. The implementations live a layer above and are never imported here.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from broker.topology_records import Record
    from queue_store.queue import Queue


class Workers(Protocol):
    """A worker's (or cluster node's) link to the others, as the layers below it use it.

    Attributes:
        index: this worker's (node's) index, 0 for the first.
        peer_summaries: index -> (the peer's last summary ``{"connections": 3, ...}``,
            loop time it came).
        quorum: a cluster node's quorum queue manager (replicas, membership changes), None
            without a cluster.
    """

    index: int
    peer_summaries: dict[int, tuple[dict[str, Any], float]]
    quorum: Any

    def local_alarm(self, active: bool, reason: str) -> None:
        """This process's memory/disk alarm changed (``reason`` "low on memory"/"low on
        disk"); the broker-wide alarm follows every worker's."""
        ...

    def submit_async(self, op: Record) -> asyncio.Future[Any]:
        """Order topology record ``op`` with the others (the HTTP API); the future has the
        result of applying it here, or its error."""
        ...

    def share_access(self, with_topology: bool) -> None:
        """Users, vhosts, permissions, policies... changed here: the others take the same
        (with the topology too for a definitions import)."""
        ...

    def export_homes(self) -> list[list[Any]]:
        """``[[vhost, queue, worker], ...]`` for every durable queue (definitions.json)."""
        ...

    def import_homes(self, homes: list[list[Any]]) -> None:
        """Where each durable queue lives, read back from definitions.json."""
        ...

    def home_of(self, q: Queue) -> int:
        """The index of the worker (node) queue ``q`` lives on."""
        ...

    def workers(self) -> list[dict[str, Any]]:
        """Every worker's last summary (``{"index": 0, "up": True, "connections": 3, ...}``)."""
        ...

    def totals(self) -> dict[str, int]:
        """``{"connections": n, "channels": n, "consumers": n}`` over every worker."""
        ...

    def elsewhere(self, key: str, name: str | None = None) -> int:
        """What the other workers last reported for ``key`` (e.g. ``"open_by_user"`` with a
        user name, ``"channels_by_user"``), summed."""
        ...

    async def gather_json(self, kind: str,
                          only: list[tuple[str, str]] | None = None) -> list[dict[str, Any]]:
        """The other workers' ``connections``, ``channels``, ``consumers`` or ``queues`` (those
        living on each) as the HTTP API shows them, each with ``worker``; ``only``: for
        ``queues``, just these ``(vhost, name)`` queues."""
        ...

    async def close_elsewhere(self, name: str, text: str) -> bool:
        """Close connection ``name`` wherever it is (320, ``text``); False when no other
        worker has it."""
        ...


class ClusterMembership(Protocol):
    """A cluster node's registration among the others.

    Attributes:
        info: what this node publishes about itself (``{"name": ..., "amqp_port": 5672,
            "cluster_port": ..., ...}``).
    """

    info: dict[str, Any]

    def nodes(self) -> list[dict[str, Any]]:
        """Every node seen: its info and ``running``."""
        ...

    async def forget(self, name: str) -> str:
        """Remove stopped node ``name``: ``"forgotten"``, ``"unknown"`` or ``"running"``."""
        ...

    async def register(self) -> None:
        """Register this node (it is a running member from now on)."""
        ...

    async def stop(self) -> None:
        """Leave the cluster at once."""
        ...
