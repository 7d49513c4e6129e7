"""The one interface every kind of queue implements, and who waits for a queue's answer.

Every queue a vhost holds is a :class:`QueueKind`, whatever it is: a classic queue
(:class:`~queue_store.queue.Queue`), with message groups
(:mod:`queue_store.grouped_queue`), deduplicating (:mod:`queue_store.dedup_queue`), a
stream (:mod:`queue_store.stream_queue`), a stand-in for a queue whose home is another
worker or node (:mod:`amqp_server.workers.remote_queue`), or a replicated quorum queue led
here (:mod:`amqp_server.cluster.quorum_queue`: any of the local kinds behind a commit gate).
Callers (channels, the management API) use only this interface and never ask which kind
they hold.

Operations a queue elsewhere cannot answer at once take a continuation: ``request_consume``,
``request_get``, ``request_purge`` and ``request_counts`` call ``then`` at once for a queue
that lives here, and once its home answered for a queue that does not. Meanwhile the
:class:`Requester` (a channel: its connection reads nothing; an HTTP request: its handler
awaits) waits; an error the home raises (an :class:`~amqp_common.errors.AMQPError`, e.g.
403 ``in exclusive use``, 404 when the home is down) is raised inside the continuation the
requester runs, so it reaches the client as if the queue were local.

Source: RabbitMQ's ``rabbit_queue_type`` behaviour (one interface over classic, quorum and
stream queues; ``rabbit_amqqueue`` callers never ask the type).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from queue_store.backing import QueuedMessage
    from queue_store.consumer import Consumer
    from queue_store.message import Message
    from queue_store.outcomes import PublishContext, Settlement

__all__ = ["QueueKind", "Requester"]


class Requester(Protocol):
    """Who waits for a queue's answer (a channel, an HTTP request)."""

    def await_answer(self) -> None:
        """Stop taking new work until :meth:`answered` (a channel's connection stops
        reading frames)."""

    def answered(self, run: Callable[[], None]) -> None:
        """Run the continuation ``run``; an ``AMQPError`` it raises is this requester's
        to report (a channel: channel or connection error; HTTP: the error status)."""


class QueueKind(Protocol):
    """What channels and the management API call on a queue (every kind implements all of
    it). Counts are messages; ``then`` continuations run on the requester's turn."""

    name: str
    vhost_name: str
    kind: str  # "classic", "quorum" or "stream" (x-queue-type)
    durable: bool
    exclusive: bool
    auto_delete: bool
    arguments: dict[str, Any]
    global_qos: bool  # False: Basic.Consume under a global prefetch is refused (540)

    def publish(self, message: Message) -> int:
        """Route ``message`` here; :data:`~queue_store.outcomes.PublishResult` bits."""

    def publish_for(self, message: Message, context: PublishContext) -> int:
        """:meth:`publish` for a publisher that may wait for an answer (``context.waits``
        holds what it waits for when the bits include REMOTE)."""

    def request_consume(self, requester: Requester, consumer: Consumer,
                        then: Callable[[], None]) -> None:
        """Have ``consumer`` accepted (exclusivity decided by the queue's home), then
        ``then()`` (ConsumeOk, then :meth:`add_consumer`)."""

    def add_consumer(self, consumer: Consumer) -> None:
        """Subscribe an accepted consumer and deliver what it can take."""

    def remove_consumer(self, consumer: Consumer) -> None:
        """Unsubscribe (Basic.Cancel, channel closed); its deliveries stay outstanding."""

    def request_get(self, requester: Requester, no_ack: bool,
                    then: Callable[[QueuedMessage | None, int], None]) -> None:
        """Basic.Get: ``then(message or None, messages left)``."""

    def request_purge(self, requester: Requester, then: Callable[[int], None]) -> None:
        """Queue.Purge: ``then(messages dropped)``."""

    def request_counts(self, requester: Requester,
                       then: Callable[[int, int], None]) -> None:
        """Queue.DeclareOk's counts: ``then(ready messages, consumers)``."""

    def settle(self, deliveries: Sequence[tuple[QueuedMessage, Any, Any]],
               outcome: Settlement) -> None:
        """Ack, reject, requeue or return outstanding deliveries of this queue."""

    def dispatch(self) -> None:
        """Deliver what consumers can take now (capacity was freed)."""

    @property
    def message_count(self) -> int:
        """Ready messages (a queue elsewhere: as of its home's last snapshot)."""

    @property
    def consumer_count(self) -> int:
        """Consumers (a queue elsewhere: as of its home's last snapshot)."""
