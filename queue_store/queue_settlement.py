"""How outstanding deliveries of a queue end: ack, reject, requeue (:class:`QueueSettlement`,
a part of :class:`~queue_store.queue.Queue`), and a quorum queue's delivery count.

A delivery handed out by :meth:`Queue.dispatch` or :meth:`Queue.get` is outstanding until
:meth:`QueueSettlement.settle` ends it: acked (gone), rejected (dead-lettered, reason
``rejected``, when the queue has a dead-letter exchange) or requeued (back at its original
position by sequence number, flagged redelivered). A quorum queue counts each message's
returns: the next delivery carries ``x-delivery-count``, and a message returned more often
than ``delivery-limit`` is dead-lettered (reason ``delivery_limit``) instead of requeued.

Source: AMQP 0-9-1 spec 1.8.3.13-1.8.3.17 (ack, reject, recover, nack); RabbitMQ
``rabbit_amqqueue_process`` (requeue to position), ``rabbit_fifo`` (delivery-limit),
https://www.rabbitmq.com/docs/quorum-queues#poison-message-handling.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from amqp_common.properties import Long, with_header
from queue_store.backing import QueuedMessage
from queue_store.consumer import Consumer
from queue_store.message import Message
from queue_store.outcomes import Settlement

if TYPE_CHECKING:
    from queue_store.queue import Delivery

__all__ = ["QueueSettlement"]

_ACK, _REQUEUE, _REJECT = Settlement.ACK, Settlement.REQUEUE, Settlement.REJECT

#: Property bytes with ``x-delivery-count`` set, by (properties, count): messages of one
#: publisher mostly share their properties, and re-encoding them per delivery cost half of a
#: quorum queue's consuming CPU (py-spy). Cleared when it reaches _STAMPED_MAX entries.
_STAMPED: dict[tuple[bytes, int], bytes] = {}
_STAMPED_MAX = 4096


class QueueSettlement:
    """The settlement methods of :class:`~queue_store.queue.Queue` (a base class of it, not
    used alone): they read and change the queue's ``unacked_count``, ``counters``,
    ``ready``, ``index``, ``_sac_previous`` and call its ``_forget``, ``_drop``,
    ``dispatch`` and ``_expire_head``."""

    def settle(self, deliveries: Sequence[Delivery], outcome: Settlement) -> None:
        """End outstanding deliveries of this queue: the one place that changes its
        delivery counters (``unacked_count``, each consumer's ``unacked``, the single active
        consumer hand-over), then acks, requeues or rejects them and dispatches.

        Args:
            deliveries: ``(message, this queue, consumer or None for Basic.Get)`` each, as
                :meth:`dispatch` and :meth:`get` handed them out.
            outcome: ACK (gone), REQUEUE (back at its original place, flagged redelivered;
                a quorum queue counts the return), REJECT (dead-lettered, reason
                ``rejected``, or dropped).
        """
        n = len(deliveries)
        self.unacked_count -= n
        if outcome == _ACK:  # the common case first: gone
            self.counters.acked += n
            for qm, _, consumer in deliveries:
                if consumer is not None:
                    consumer.unacked -= 1
                    if consumer is self._sac_previous:
                        self._consumer_settled(consumer, 0)
                self._forget(qm)
            self.dispatch()
            return
        if outcome == _REQUEUE:
            self.counters.requeued += n
            for _, _, consumer in deliveries:
                if consumer is not None:
                    self._consumer_settled(consumer)
            self._requeue([d[0] for d in deliveries])
            return
        self.counters.rejected += n
        reject = self.vhost is not None and not self.deleted
        for qm, _, consumer in deliveries:
            if consumer is not None:
                consumer.unacked -= 1
                if consumer is self._sac_previous:
                    self._consumer_settled(consumer, 0)
            if reject:
                self.vhost.dead_letter(self, qm.message, "rejected")  # type: ignore[union-attr]
            self._forget(qm)
        self.dispatch()

    def _consumer_settled(self, consumer: Consumer, count: int = 1) -> None:
        """One fewer outstanding delivery for ``consumer`` (``count`` 0: already counted);
        a cancelled single active consumer with none left hands over."""
        consumer.unacked -= count
        if consumer is self._sac_previous and consumer.unacked <= 0:
            self._sac_previous = None

    def _requeue(self, messages: list[QueuedMessage]) -> None:
        """Put messages back at their original positions, flagged redelivered."""
        if self.deleted:
            return
        back = sorted(messages)
        if not back:
            return
        for qm in back:
            qm.redelivered = True
        if self.quorum:
            back = self._count_returns(back)
        if back:
            self.ready.requeue(back)
        self.dispatch()
        if self._has_ttl:
            self._expire_head()

    def _count_returns(self, back: list[QueuedMessage]) -> list[QueuedMessage]:
        """Quorum queue: one more return each; a message past ``delivery-limit`` is
        dead-lettered (reason ``delivery_limit``) or dropped instead of requeued."""
        limit = self.settings.delivery_limit
        kept = []
        for qm in back:
            qm.returns += 1
            if qm.indexed and self.index is not None:  # the count survives a restart
                self.index.returned(qm.seq, qm.returns)
                self.storage.durability.index_dirty(self.index)  # type: ignore[union-attr]
            if limit is not None and qm.returns > limit:
                self._drop(qm, "delivery_limit")
            else:
                kept.append(qm)
        return kept

    def _stamp_delivery_count(self, qm: QueuedMessage) -> None:
        """Quorum queue: the delivery carries ``x-delivery-count`` (earlier returns)."""
        message = qm.message
        key = (message.properties_raw, qm.returns)
        props = _STAMPED.get(key)
        if props is None:
            try:
                props = with_header(message.properties_raw, "x-delivery-count",
                                    Long(qm.returns))
            except ValueError:  # not expected: properties were checked at publish
                return
            if len(props) <= 1024:  # bounded: 4096 entries of 1 KB at most
                if len(_STAMPED) >= _STAMPED_MAX:
                    _STAMPED.clear()
                _STAMPED[key] = props
        stamped = Message(message.exchange, message.routing_key, message.ex_rk_raw, props,
                          message.body)
        stamped.store_id = message.store_id
        qm.message = stamped
