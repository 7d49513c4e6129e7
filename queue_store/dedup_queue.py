"""Queue-level message deduplication: a queue declared with ``x-message-deduplication: true``
does not enqueue a message whose ``x-deduplication-header`` equals that of a message it holds.

Theory of operation
-------------------
:class:`DeduplicatingQueue` is a :class:`~queue_store.queue.Queue` with a
:class:`~amqp_common.dedup_cache.DedupCache` of the keys of the messages it holds (ready or
delivered and not yet settled). :meth:`DeduplicatingQueue.publish` records a new message's
key before appending it, and drops a message whose key is held (the answer is ``ACCEPTED``:
the message was routed, so a mandatory publish is not returned and the confirm is an ack, as
the plugin does). The key is forgotten in :meth:`~queue_store.queue.Queue._forget`, the one
place every message passes when it leaves for good: acked, rejected, dead-lettered, expired,
dropped by a length limit, purged, consumed with no-ack, the queue deleted. A requeued
message keeps its key.

Ordinary queues are plain :class:`~queue_store.queue.Queue` objects: they pay nothing.
A deduplicating queue never takes the publish fast path (it reads the message headers).

Arguments: ``x-message-deduplication`` (bool; the plugin's); ``x-cache-size`` (entries,
integer > 0: past it the least recently used key is forgotten, so a duplicate of that message
gets in) and ``x-cache-ttl`` (ms, integer > 0: a key is forgotten that long after its message
arrived even while the message is still queued), both optional, LavinMQ's. Without them the
cache holds exactly the keys of the messages in the queue, as the plugin's queue does. After a
restart the cache starts empty (the plugin flushes it at queue start too).

Source: https://github.com/noxdafox/rabbitmq-message-deduplication (README "Queue level
deduplication", ``rabbit_message_deduplication_queue.ex``: ``is_duplicate/2``, the cache entry
deleted on ack, drop, no-ack fetch and purge); https://lavinmq.com/documentation (message
deduplication: ``x-cache-size``, ``x-cache-ttl`` on queues).
"""

from __future__ import annotations

from typing import Any

from amqp_common.dedup_cache import DedupCache, message_dedup_key
from queue_store.backing import QueuedMessage
from queue_store.message import Message
from queue_store.outcomes import ACCEPTED, REJECTED, PublishContext
from queue_store.queue import Queue
from queue_store.queue_args import QueueSettings


def deduplicating(arguments: dict[str, Any]) -> bool:
    """True when Queue.Declare ``arguments`` turn on queue-level deduplication."""
    return arguments.get("x-message-deduplication") is True


class DeduplicatingQueue(Queue):
    """A queue that drops messages duplicating one it holds (see the module docstring).

    Takes :class:`~queue_store.queue.Queue`'s arguments; ``arguments`` (validated) give
    ``x-cache-size`` and ``x-cache-ttl``.
    """

    def __init__(self, name: str, vhost_name: str, **kwargs: Any) -> None:
        super().__init__(name, vhost_name, **kwargs)
        args = self.arguments
        clock = self.vhost.timers.clock if self.vhost is not None else _zero
        self.dedup = DedupCache(args.get("x-cache-size"), args.get("x-cache-ttl"), clock)
        self.duplicates = 0  # messages dropped as duplicates (stats)
        self._plain = False

    def apply_settings(self, settings: QueueSettings) -> None:
        """As :meth:`Queue.apply_settings`; the publish fast path stays off."""
        super().apply_settings(settings)
        self._plain = False

    def publish(self, message: Message) -> int:
        """:meth:`Queue.publish`, unless the message duplicates one held: then it is dropped
        and the answer is ``ACCEPTED`` (routed: no return, confirm ack)."""
        key = message_dedup_key(message)
        if key is None:
            return super().publish(message)
        if not self.dedup.insert(key):
            self.duplicates += 1
            return ACCEPTED
        result = super().publish(message)
        if result & REJECTED:  # x-overflow reject-publish: it is not in the queue
            self.dedup.remove(key)
        return result

    def publish_for(self, message: Message, context: PublishContext) -> int:
        """:meth:`publish` for a publisher described by ``context``: the same check, then
        the next kind's ``publish_for`` (a replicated queue answers the publisher once its
        replicas have the message, :mod:`amqp_server.cluster.quorum_queue`)."""
        key = message_dedup_key(message)
        if key is None:
            return super().publish_for(message, context)
        if not self.dedup.insert(key):
            self.duplicates += 1
            return ACCEPTED
        result = super().publish_for(message, context)
        if result & REJECTED:
            self.dedup.remove(key)
        return result

    def _refused(self, message: Message) -> None:
        key = message_dedup_key(message)
        if key is not None:
            self.dedup.remove(key)

    def _holding(self, message: Message) -> None:
        key = message_dedup_key(message)
        if key is not None:
            self.dedup.insert(key)

    def _forget(self, qm: QueuedMessage) -> None:
        key = message_dedup_key(qm.message)
        if key is not None:
            self.dedup.remove(key)
        super()._forget(qm)


def _zero() -> float:
    return 0.0
