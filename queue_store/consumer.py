"""Consumers of a queue: one :class:`Consumer` per Basic.Consume, and what a queue needs from
the channel it delivers to (:class:`ConsumerChannel`).

A consumer can take a message when its prefetch window is not full (``unacked <
prefetch``, 0 = unlimited; no-ack consumers have none) and its channel can deliver (the
channel's global prefetch, its socket's back-pressure). The queue
(:meth:`queue_store.queue.Queue.dispatch`) picks among them and keeps ``unacked`` through
:meth:`~queue_store.queue.Queue.settle`.

Source: https://www.rabbitmq.com/docs/consumer-prefetch, /docs/consumer-priority;
RabbitMQ ``rabbit_queue_consumers``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from queue_store.backing import QueuedMessage

if TYPE_CHECKING:
    from queue_store.queue import Queue

__all__ = ["Consumer", "ConsumerChannel"]


class ConsumerChannel(Protocol):
    """What a queue needs from the channel a consumer lives on."""

    def can_deliver(self) -> bool: ...

    def deliver(self, consumer: Consumer, qm: QueuedMessage, queue: Queue) -> None: ...

    def consumer_cancelled_by_broker(self, consumer: Consumer) -> None: ...


class Consumer:
    """One Basic.Consume subscription.

    Attributes:
        tag: consumer tag (str); ``tag_raw`` the same as an encoded shortstr.
        prefetch: per-consumer prefetch_count (messages; 0 = unlimited), from Basic.Qos
            global=false at consume time.
        priority: ``x-priority`` consumer argument (higher first; default 0).
        unacked: deliveries to this consumer not yet settled (messages).
    """

    __slots__ = ("tag", "tag_raw", "channel", "queue", "no_ack", "exclusive", "prefetch",
                 "priority", "unacked", "arguments")

    def __init__(self, tag: str, tag_raw: bytes, channel: ConsumerChannel, queue: Queue,
                 no_ack: bool, exclusive: bool, prefetch: int, priority: int = 0,
                 arguments: dict[str, Any] | None = None) -> None:
        self.tag = tag
        self.tag_raw = tag_raw
        self.channel = channel
        self.queue = queue
        self.no_ack = no_ack
        self.exclusive = exclusive
        self.prefetch = prefetch
        self.priority = priority
        self.unacked = 0
        self.arguments = arguments or {}

    def can_take(self) -> bool:
        if not self.no_ack and self.prefetch and self.unacked >= self.prefetch:
            return False
        return self.channel.can_deliver()
