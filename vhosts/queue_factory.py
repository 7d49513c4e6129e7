"""How a vhost builds its queues and whom it tells when one goes: the hook a
:class:`~vhosts.vhost.VirtualHost` is built with.

With one process the vhost builds every queue itself (:class:`LocalQueues`). With worker
processes or a cluster, a queue whose home is elsewhere is a stand-in and a removal is told to
the others: the broker's :class:`BrokerQueues` forwards to the runtime plugged into it once at
start (:meth:`BrokerQueues.plug`); until then, and without one, it builds queues locally.
"""

from __future__ import annotations

from typing import Any, Protocol

from queue_store.grouped_queue import queue_class
from queue_store.queue import Queue


class QueueFactory(Protocol):
    """Builds a vhost's new queues and hears of removed ones."""

    def make_queue(self, name: str, vhost_name: str, home: int | None = None,
                   **kwargs: Any) -> Queue:
        """A new queue ``name`` of vhost ``vhost_name``.

        Args:
            home: the worker (node) the queue lives on, as the ordered declare record says
                (``--workers N``, a cluster); None: the factory decides (one process: here).
            kwargs: :class:`~queue_store.queue.Queue`'s keyword arguments, all given:
                ``durable``, ``exclusive``, ``auto_delete`` (bools), ``exclusive_owner``
                (the owning connection or None), ``arguments`` (the validated
                Queue.Declare arguments, ``{"x-queue-type": "quorum", ...}``), ``settings``
                (:class:`~queue_store.queue_args.QueueSettings`), ``vhost`` (the
                :class:`~queue_store.queue.QueueHost`, the vhost itself).
        """
        ...

    def queue_removed(self, q: Queue, everywhere: bool) -> None:
        """``q`` was removed from its vhost, after its bindings and consumers.
        ``everywhere``: every worker (node) removes it by the same ordered record or
        change (Queue.Delete, a vhost deleted, a worker's death); False: this process
        removed it by itself (auto-delete, ``x-expires``, its exclusive owner closed), so
        the others must be told."""
        ...


class LocalQueues:
    """One process: the queue class the arguments ask for, built here; a removal concerns no
    one else."""

    def make_queue(self, name: str, vhost_name: str, home: int | None = None,
                   **kwargs: Any) -> Queue:
        return queue_class(kwargs["arguments"])(name, vhost_name, **kwargs)

    def queue_removed(self, q: Queue, everywhere: bool) -> None:
        pass


LOCAL_QUEUES = LocalQueues()


class BrokerQueues:
    """The broker's factory, handed to each vhost it creates: local until a worker or
    cluster runtime is plugged in (:meth:`plug`, once, at start), then that runtime's."""

    def __init__(self) -> None:
        self._target: QueueFactory = LOCAL_QUEUES
        self.plugged = False

    def plug(self, factory: QueueFactory) -> None:
        """From now on every vhost of this broker builds its queues with ``factory``.

        Raises:
            RuntimeError: a factory was plugged in already.
        """
        if self.plugged:
            raise RuntimeError("a queue factory is plugged in already")
        self._target = factory
        self.plugged = True

    def make_queue(self, name: str, vhost_name: str, home: int | None = None,
                   **kwargs: Any) -> Queue:
        return self._target.make_queue(name, vhost_name, home, **kwargs)

    def queue_removed(self, q: Queue, everywhere: bool) -> None:
        self._target.queue_removed(q, everywhere)
