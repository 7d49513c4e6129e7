"""What a publish did, as bits every producer of messages reads the same way.

:meth:`vhosts.vhost.VirtualHost.publish` is the one entry point for producers (an AMQP
channel's Basic.Publish, the HTTP API's publish, dead lettering): it routes, enqueues, and
answers with a :class:`PublishResult`; :meth:`queue_store.queue.Queue.publish` answers one
queue's part with the same bits. The channel turns them into a mandatory return
(not ``ROUTED``), a publisher confirm nack (``REJECTED``), a confirm after the next fsync
(``NEEDS_SYNC``) or after the batch's writes (``NEEDS_WRITE``, a stream); ``DUPLICATE`` alone (an ``x-message-deduplication`` exchange dropped it) is
neither returned nor nacked; the HTTP API into ``{"routed": ...}`` or RabbitMQ's "rejected" 400.

The hot path uses the plain ``int`` constants below (IntFlag arithmetic costs microseconds);
``PublishResult(value)`` names them where speed does not matter.

Source: https://www.rabbitmq.com/docs/confirms#when-publishes-are-confirmed,
https://www.rabbitmq.com/docs/maxlength#overflow-behaviour.
"""

from __future__ import annotations

from enum import IntEnum, IntFlag


class PublishResult(IntFlag):
    """Bits of a publish's outcome; ``UNROUTABLE`` (0) when no queue was reached."""

    UNROUTABLE = 0
    ROUTED = 1  # at least one queue was reached (a mandatory publish is not returned)
    REJECTED = 2  # a queue refused it (x-overflow reject-publish): nack the publisher
    NEEDS_SYNC = 4  # written to disk: confirm only after the next fsync
    DUPLICATE = 8  # dropped by a deduplication exchange: not returned, confirm ack
    REMOTE = 16  # sent to a queue on another worker: confirm when its home answers
    NOT_LEADER = 32  # with REJECTED: refused by a node that does not lead the quorum queue
    NEEDS_WRITE = 64  # appended to a stream: confirm once written (no fsync, as RabbitMQ)


UNROUTABLE = 0
ROUTED = 1
REJECTED = 2
NEEDS_SYNC = 4
DUPLICATE = 8
REMOTE = 16
NOT_LEADER = 32
NEEDS_WRITE = 64
#: Queue.publish's answers: taken; refused; taken and written to disk; taken and written
#: at the end of the batch (a stream).
ACCEPTED = ROUTED
ACCEPTED_UNSYNCED = ROUTED | NEEDS_SYNC
ACCEPTED_UNWRITTEN = ROUTED | NEEDS_WRITE


class PublishContext:
    """What one publish waits for beyond its :class:`PublishResult` bits, and who made it:
    passed explicitly to :meth:`vhosts.vhost.VirtualHost.publish` (and on to
    :meth:`queue_store.queue.Queue.publish_for`) only when something reads it (a broker with
    worker processes or a cluster); None everywhere else, so a one-process publish pays for
    nothing. A channel keeps one and reuses it; a dead letter made during that publish is
    its own publish (no context): it never joins the publisher's confirm or flow.

    Attributes:
        publisher: the connection to stop reading when a link this publish filled is full
            (RabbitMQ's credit_flow); None: nobody to hold back.
        want_results: the publisher waits for an answer (confirms, a transaction): queues
            on other workers and replicated queues answer it, and say so in ``waits``.
        waits: ``(worker, pub_id)`` of each answer to wait for (REMOTE in the result); the
            caller takes the list after the publish.
    """

    __slots__ = ("publisher", "want_results", "waits")

    def __init__(self, publisher: object = None, want_results: bool = False) -> None:
        self.publisher = publisher
        self.want_results = want_results
        self.waits: list[tuple[int, int]] = []


class Settlement(IntEnum):
    """How an outstanding delivery ends (:meth:`queue_store.queue.Queue.settle`)."""

    ACK = 0  # Basic.Ack: gone
    REQUEUE = 1  # Basic.Reject/Nack requeue=true, Basic.Recover, channel closed: back in place
    REJECT = 2  # Basic.Reject/Nack requeue=false: dead-lettered (reason rejected) or dropped
