"""Where a queue lives with ``--workers N``: placed by its first use, not by its declare.

A non-durable, non-exclusive classic queue declared by an AMQP client (Queue.Declare) or
over the HTTP API (``PUT /api/queues/{vhost}/{name}``, served by worker 0) without a leader
locator (the queues of a load generator's control connection, of a benchmark, of most
applications' set-up code) is
*unplaced* when declared: every worker holds an :class:`UnplacedQueue` stand-in,
and the queue's home is chosen by the first worker that uses it:

* **Basic.Consume** places it on the consumer's worker, so the queue and its deliveries
  run on the consumer's core and its publishers, handed to the other workers in turn, parse
  and route on theirs (one queue's work over two cores, with the batched link between);
* **a publish** (before any consumer) places it on the publisher's worker (RabbitMQ's
  ``client-local`` leader locator, as for the queues declared before this existed);
* **an ``expires`` policy** places it on the worker that declared it, where its timer runs.

The choice is a :class:`~broker.topology_records.QueuePlace` record ordered like any
topology change: every worker applies the first one for a queue (later ones, from workers
that asked at the same time, change nothing), so every worker agrees on every queue's home.
Until then nothing can be in the queue: a publish routed to it waits here, in order, with
its confirm (if any) owed, and goes to the home once the record is applied here (to the
queue itself when placed here); a consume, a Basic.Get, a purge or a count asked of it on a
worker that already asked to place it waits for the record too, so a client sees its own
publishes. A worker that has not asked answers a Basic.Get, purge or count at once as for an
empty queue, which is what it is.

Until placed, the queue shows the worker that declared it as its ``worker``
(``/api/queues``), and a worker's death does not remove it (nothing of it died). Durable,
exclusive, quorum and stream queues, and queues with an ``x-expires`` or an
``x-queue-leader-locator`` / ``x-queue-master-locator`` argument, live where they are
declared, as before.

Source: RabbitMQ's queue leader locators (``client-local``, ``balanced``) and its queue
processes living apart from the channel processes that publish to them.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from amqp_common.errors import AccessRefused, NotFound, rs
from amqp_server.workers.link_codec import queue_key, split_queue_key
from amqp_server.workers.remote_queue import RemoteQueue
from broker import topology_records as tr
from queue_store.consumer import Consumer
from queue_store.grouped_queue import queue_class
from queue_store.message import Message
from queue_store.outcomes import REJECTED, REMOTE, ROUTED, PublishContext
from queue_store.queue import Queue, QueuedMessage
from queue_store.queue_args import queue_type_of
from queue_store.queue_kind import Requester

if TYPE_CHECKING:
    from amqp_server.workers.remote_client import RemoteClient

__all__ = ["Placement", "UnplacedQueue", "declared_by", "movable", "unplaced_home"]

#: arguments that ask for a placement of their own: the queue stays where it was declared
LOCATOR_ARGS = ("x-queue-leader-locator", "x-queue-master-locator", "x-expires")


def movable(durable: bool, exclusive: bool, arguments: dict[str, Any]) -> bool:
    """Whether a queue declared with these properties is placed by its first use."""
    return (not durable and not exclusive and queue_type_of(arguments) == "classic"
            and not any(a in arguments for a in LOCATOR_ARGS))


def unplaced_home(declarer: int) -> int:
    """The declare record's ``home`` for an unplaced queue declared through worker
    ``declarer`` (negative: no worker index is)."""
    return -1 - declarer


def declared_by(home: int) -> int:
    """The declaring worker of an unplaced queue whose declare record says ``home``."""
    return -1 - home


class UnplacedQueue(RemoteQueue):
    """A queue no worker has used yet (see the module docstring): empty, no consumer; its
    ``home`` is -1 (no link), ``declared_by`` the worker that declared it. Keyword arguments
    as :class:`~queue_store.queue.Queue`'s, kept to build the queue where it is placed."""

    def __init__(self, placement: Placement, declarer: int, name: str, vhost_name: str,
                 **kwargs: Any) -> None:
        super().__init__(placement.client, -1, name, vhost_name, **kwargs)
        self.placement = placement
        self.declared_by = declarer
        self.declared_kwargs = kwargs
        self.home_moves = False
        self._expiring()

    def apply_settings(self, settings: Any) -> None:
        super().apply_settings(settings)
        self._expiring()

    def _expiring(self) -> None:
        """An ``expires`` policy: the queue's timer runs where it lives, so the declaring
        worker places it on itself (it expires there if nobody uses it)."""
        if self.settings.expires is not None and self.declared_by == self.placement.index:
            self.placement.ask(self)

    def __repr__(self) -> str:
        return f"<UnplacedQueue {self.name!r} vhost={self.vhost_name!r}>"

    def publish(self, message: Any) -> int:
        return self.placement.hold(self, message, None)

    def publish_for(self, message: Any, context: PublishContext) -> int:
        return self.placement.hold(self, message, context)

    def request_consume(self, requester: Requester, consumer: Consumer,
                        then: Callable[[], None]) -> None:
        """Place the queue here first, then consume from it where it is (it may have been
        placed elsewhere meanwhile: its home then decides exclusivity)."""

        def placed(q: Queue) -> None:
            if q.consumer_count and (consumer.exclusive or q.has_exclusive_consumer()):
                raise AccessRefused(f"{rs('queue', q.name, q.vhost_name)} in exclusive use")
            consumer.queue = q
            q.request_consume(requester, consumer, then)

        self.placement.claim(self, requester, placed)

    def request_get(self, requester: Requester, no_ack: bool,
                    then: Callable[[QueuedMessage | None, int], None]) -> None:
        self.placement.after_own_claim(self, requester, then, (None, 0),
                                       lambda q: q.request_get(requester, no_ack, then))

    def request_purge(self, requester: Requester, then: Callable[[int], None]) -> None:
        self.placement.after_own_claim(self, requester, then, (0,),
                                       lambda q: q.request_purge(requester, then))

    def request_counts(self, requester: Requester,
                       then: Callable[[int, int], None]) -> None:
        self.placement.after_own_claim(self, requester, then, (0, 0),
                                       lambda q: q.request_counts(requester, then))


class Placement:
    """This worker's side of placing queues by their first use (see the module docstring).

    Args:
        index: this worker's index.
        client: this worker's :class:`RemoteClient` (publishes that waited for a home go to
            it as any publish; their confirms are its local results).
        submit: sends a record for ordering (:meth:`Topology.submit_async`).
    """

    def __init__(self, index: int, client: RemoteClient,
                 submit: Callable[[tr.QueuePlace], asyncio.Future[Any]]) -> None:
        self.index = index
        self.client = client
        self.submit = submit
        # qkey -> publishes routed to it here before it was placed: (message, the local
        # key its publisher waits on or None), in publish order
        self._held: dict[bytes, deque[tuple[Message, tuple[int, int] | None]]] = {}
        # qkey -> (requester, continuation given the placed queue) waiting for the record
        self._waiting: dict[bytes, list[tuple[Requester, Callable[[Queue], None]]]] = {}
        self._claimed: set[bytes] = set()  # queues this worker asked to place

    def make(self, declarer: int, name: str, vhost_name: str, **kwargs: Any) -> UnplacedQueue:
        """The stand-in of a queue declared unplaced through worker ``declarer``."""
        return UnplacedQueue(self, declarer, name, vhost_name, **kwargs)

    # ---- what the stand-in asks ----------------------------------------------------------

    def hold(self, q: UnplacedQueue, message: Message, context: PublishContext | None) -> int:
        """A publish routed to ``q``: kept, in order, until ``q`` is placed (here, if no
        other worker asked first); PublishResult bits as for a queue on another worker."""
        key = self.client.local_pending(context)
        held = self._held.get(q.qkey)
        if held is None:
            held = self._held[q.qkey] = deque()
        held.append((message, key))
        self.ask(q)
        return ROUTED | REMOTE if key is not None else ROUTED

    def claim(self, q: UnplacedQueue, requester: Requester,
              then: Callable[[Queue], None]) -> None:
        """Ask to place ``q`` here; ``then(the queue where it was placed)`` runs on
        ``requester``'s turn once the record is applied here (404 if ``q`` was deleted)."""
        self._waiting.setdefault(q.qkey, []).append((requester, then))
        requester.await_answer()
        self.ask(q)

    def after_own_claim(self, q: UnplacedQueue, requester: Requester, then: Callable[..., None],
                        empty: tuple[Any, ...], placed: Callable[[Queue], None]) -> None:
        """A Basic.Get, purge or count of ``q``: answered ``then(*empty)`` at once unless this
        worker asked to place it (its publishes wait for the home): then ``placed(queue)``
        once it is placed."""
        if q.qkey not in self._claimed:
            then(*empty)
            return
        self._waiting.setdefault(q.qkey, []).append((requester, placed))
        requester.await_answer()

    def ask(self, q: UnplacedQueue) -> None:
        """Ask (once) that ``q`` be placed on this worker: a QueuePlace record."""
        if q.qkey in self._claimed:
            return
        self._claimed.add(q.qkey)
        future = self.submit(tr.QueuePlace(q.vhost_name, q.name, self.index))
        future.add_done_callback(_retrieve)

    # ---- the ordered record --------------------------------------------------------------

    def apply(self, op: tr.QueuePlace, vhost: Any) -> Queue | None:
        """Apply a QueuePlace record to ``vhost`` (the record's): an unplaced queue becomes
        the queue (on ``op.worker``) or a stand-in of it; what waited for it here goes on.
        Returns the queue object now in the vhost, None when it is gone."""
        q = vhost.queues.get(op.name)
        if isinstance(q, UnplacedQueue):
            kwargs = dict(q.declared_kwargs, settings=q.settings)
            if op.worker == self.index:
                q = queue_class(kwargs["arguments"])(op.name, op.vhost, **kwargs)
            else:
                q = RemoteQueue(self.client, op.worker, op.name, op.vhost, **kwargs)
            vhost.queues[op.name] = q
        self._release(queue_key(op.vhost, op.name), q)
        return q

    def _release(self, qkey: bytes, q: Queue | None) -> None:
        """Publishes held for ``qkey`` go to ``q`` in order; the requests that waited run."""
        self._claimed.discard(qkey)
        held = self._held.pop(qkey, None)
        if held:
            for message, key in held:
                self._publish(q, message, key)
        for requester, then in self._waiting.pop(qkey, []):
            requester.answered(_continue(q, qkey, then))

    def _publish(self, q: Queue | None, message: Message, key: tuple[int, int] | None) -> None:
        if q is None:  # deleted before it was placed: dropped, as a publish to a queue gone
            if key is not None:
                self.client.local_result(key, ROUTED)
            return
        context = PublishContext(None, key is not None)
        result = q.publish_for(message, context)
        if key is None:
            return
        client = self.client
        if context.waits:  # its home answers (a queue on another worker)
            client.after_results(context.waits, lambda: client.local_result(key, ROUTED),
                                 lambda: client.local_result(key, REJECTED))
        else:
            client.local_result(key, REJECTED if result & REJECTED else ROUTED)


def _continue(q: Queue | None, qkey: bytes, then: Callable[[Queue], None]
              ) -> Callable[[], None]:
    """The continuation of a request that waited for ``qkey``'s placement: 404 when the
    queue was deleted first."""
    def run() -> None:
        if q is None:
            vname, name = split_queue_key(qkey)
            raise NotFound(f"no {rs('queue', name, vname)}")
        then(q)
    return run


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()  # applied on every worker alike; nothing to report here
