"""Direct reply-to: RPC replies straight to a consumer, with no reply queue.

A client consumes from the pseudo-queue ``amq.rabbitmq.reply-to`` in no-ack mode, then
publishes requests with ``reply_to = "amq.rabbitmq.reply-to"``; the broker rewrites that to
``amq.rabbitmq.reply-to.<key>``, a name only this channel answers to. A reply published to
the default exchange with that routing key is delivered to the channel's reply consumer
directly.

Source: https://www.rabbitmq.com/docs/direct-reply-to
"""

from __future__ import annotations

import base64
import os
from typing import TYPE_CHECKING

from amqp_common.errors import PreconditionFailed
from amqp_common.properties import join_properties, shortstr, split_properties
from queue_store.message import Message

if TYPE_CHECKING:
    from amqp_server.channel import Channel

PSEUDO_QUEUE = "amq.rabbitmq.reply-to"
PREFIX = PSEUDO_QUEUE + "."


class ReplyToRegistry:
    """Reply keys -> channels with a direct reply-to consumer (one per broker)."""

    def __init__(self) -> None:
        self._channels: dict[str, Channel] = {}
        self.worker: int | None = None  # with several workers: this one's index

    def register(self, channel: Channel) -> str:
        """A new unguessable reply address for ``channel`` (with several workers it starts
        with ``w<index>.``, so a reply published on another worker finds its way here)."""
        key = base64.urlsafe_b64encode(os.urandom(18)).decode()
        if self.worker is not None:
            key = f"w{self.worker}.{key}"
        self._channels[key] = channel
        return PREFIX + key

    def unregister(self, address: str) -> None:
        self._channels.pop(address[len(PREFIX):], None)

    def lookup(self, routing_key: str) -> Channel | None:
        """The channel a ``amq.rabbitmq.reply-to.<key>`` routing key addresses, if any."""
        return self._channels.get(routing_key[len(PREFIX):])

    def worker_of(self, routing_key: str) -> int | None:
        """The worker a reply address names (``w<index>.`` keys), else None."""
        key = routing_key[len(PREFIX):]
        head, dot, _ = key.partition(".")
        if dot and head[:1] == "w" and head[1:].isdigit():
            return int(head[1:])
        return None


def check_reply_consumer(no_ack: bool) -> None:
    """Raises PreconditionFailed (406) unless the reply consumer is no-ack (RabbitMQ)."""
    if not no_ack:
        raise PreconditionFailed("reply consumer cannot acknowledge")


def rewrite_reply_to(message: Message, address: str | None) -> Message:
    """``message`` with its ``reply_to`` pseudo-queue replaced by this channel's address.

    Raises:
        PreconditionFailed (406): the channel has no reply consumer.
    """
    if address is None:
        raise PreconditionFailed("fast reply consumer does not exist")
    fields = split_properties(message.properties_raw)
    fields["reply_to"] = shortstr(address)
    return Message(message.exchange, message.routing_key, message.ex_rk_raw,
                   join_properties(fields), message.body)
