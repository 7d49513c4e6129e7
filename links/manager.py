"""What the managers of links (:mod:`shovel.manager`, :mod:`federation.manager`) share: a
loop that reconciles the running links with what is asked for (at once on ``start`` and
``poke``, then every second), stopping cancels the loop and every link's task; the
rendezvous hashing that picks the one running node of a cluster which runs a link; and
RabbitMQ's status timestamp.

Layer: :mod:`links`; the broker and its cluster are only looked at through the attributes
named here (duck-typed), nothing of theirs is imported.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Iterable
from typing import Any

RECONCILE_EVERY = 1.0  # s between two reconciliations when nothing pokes the manager


def timestamp(when: float) -> str:
    """RabbitMQ's status timestamp of ``when`` (epoch seconds): ``2026-11-27 5:58:07``
    (local time, hour unpadded), as ``GET /api/shovels`` and ``/api/federation-links``
    show it."""
    t = time.localtime(when)
    return (f"{t.tm_year}-{t.tm_mon:02d}-{t.tm_mday:02d} "
            f"{t.tm_hour}:{t.tm_min:02d}:{t.tm_sec:02d}")


def runs_here(cluster: Any, node: str, key: Iterable[str]) -> bool:
    """Whether this node runs the link named by ``key`` (e.g. ``(vhost, name)``): always
    without a cluster (``cluster`` None); in a cluster, when this node is the running node
    with the highest SHA-256 of ``node\\0key...`` (rendezvous hashing, so a link moves only
    when its node leaves), and never while no node is known to be running (a node that
    has not read the members yet: starting the link there too would run it twice, and a
    federation link's upstream queue would be declared by two owners).

    ``cluster`` needs ``nodes()`` (dicts with ``name`` and ``running``) and ``info``
    (``name``: this node's; ``node`` when absent)."""
    if cluster is None:
        return True
    running = [n["name"] for n in cluster.nodes() if n.get("running")]
    if not running:
        return False
    parts = tuple(key)

    def weight(candidate: str) -> bytes:
        return hashlib.sha256("\0".join((candidate, *parts)).encode()).digest()

    return max(running, key=weight) == cluster.info.get("name", node)


class ReconcilingManager:
    """Base of a manager whose ``reconcile()`` starts and stops link tasks to match what
    is asked for. Subclasses implement :meth:`reconcile`, :meth:`_tasks` (every task
    ``stop`` cancels and waits for) and :meth:`_stopped` (forget them once done).

    Args:
        log: where a failed periodic reconciliation is logged (with its traceback).
        what: what fails then, for the log line (``shovel parameters``...).
    """

    def __init__(self, log: logging.Logger, what: str) -> None:
        self._log, self._what = log, what
        self._loop_task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Reconcile now, then every :data:`RECONCILE_EVERY` seconds (in the running event
        loop) until :meth:`stop`."""
        self.reconcile()
        self._loop_task = asyncio.get_running_loop().create_task(self._follow())

    async def stop(self) -> None:
        """Stop reconciling, cancel every task of :meth:`_tasks` and wait for them to end,
        then :meth:`_stopped`."""
        if self._loop_task is not None:
            self._loop_task.cancel()
        tasks = self._tasks()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._stopped()

    def poke(self) -> None:
        """What is asked for changed: reconcile now rather than within a second."""
        self.reconcile()

    def reconcile(self) -> None:
        """Start the links asked for that do not run, stop those no longer asked for."""
        raise NotImplementedError

    def _tasks(self) -> list[asyncio.Task[None]]:
        raise NotImplementedError

    def _stopped(self) -> None:
        raise NotImplementedError

    async def _follow(self) -> None:
        while True:
            await asyncio.sleep(RECONCILE_EVERY)
            try:
                self.reconcile()
            except Exception:
                self._log.exception("%s could not be applied", self._what)
