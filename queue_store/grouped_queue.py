"""Queues declared with ``x-group-by``: per-key order with parallel consumers.

Theory of operation
-------------------
:class:`GroupedQueue` is a :class:`~queue_store.queue.Queue` whose backing queue is a
:class:`~queue_store.message_groups.MessageGroups` (the per-key FIFOs, ready keys and holders;
its docstring has the data structure) and whose dispatch follows the group rule:

* ``x-group-by`` = ``routing-key`` or ``header:<name>`` names a message's key. While a
  consumer holds unacknowledged messages of a key, no other consumer (and no Basic.Get)
  receives messages of that key; the holder itself receives the next ones while its prefetch
  (and ``x-group-prefetch``, the most unacknowledged messages of one key, default no limit)
  allows. When it has settled them all, the key is free for any consumer.
* Dispatch first gives each holder that can take more (prefetch, ``x-group-prefetch``) the
  waiting messages of the keys it holds: a consumer's own keys come before free keys. Then
  *free keys are handed to consumers in turn*: the head of the next free key goes to the next
  consumer, round-robin among those that can take more (the highest ``x-priority`` level with
  room first; with single active consumer only the active one), which then holds the key and
  takes its next messages as its prefetch allows; then the next free key to the next consumer,
  and so on. The turn passes only when a consumer takes a free key (delivering a held key's
  messages does not use a turn), so keys spread over idle consumers whatever their prefetch
  (ActiveMQ assigns new groups round-robin, too). Messages without a key are one free
  "key" per message, so they go round-robin as on a plain queue.
* A requeued message (reject, nack, recover, channel closed) goes back ahead of the later
  messages of its key (by sequence number). Order therefore holds across redeliveries as long
  as a consumer does not acknowledge a later message of a key after requeueing an earlier
  one (it cannot, with ``x-group-prefetch: 1`` or a consumer prefetch of 1; a consumer that
  dies returns all of its messages at once, in order).
* No-ack consumers take messages without holding keys (a no-ack delivery is settled at once).
* Expiry (``x-message-ttl``, ``expiration``) and ``x-max-length`` drop-head act on the oldest
  ready message, whatever its key, and a message found expired when its key is dispatched is
  dead-lettered instead of delivered; counts, dead lettering and the queue index are those of
  the plain queue.
* Restart: messages are recovered in publish order and grouped again; holders are not
  persistent (every consumer is gone), so each key starts free.

The publish path of other queues is untouched: they are plain ``Queue`` objects.
``x-max-priority`` is refused with ``x-group-by`` (406): a priority would overtake the
order of a key.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterator
from typing import Any

from queue_store.backing import BackingQueue, QueuedMessage
from queue_store.consumer import Consumer
from queue_store.dedup_queue import DeduplicatingQueue, deduplicating
from queue_store.message_groups import (
    GET_HOLDER,
    SPILL_KEEP,
    STAGE_MESSAGES,
    GroupKey,
    MessageGroups,
    key_function,
)
from queue_store.queue import Queue
from queue_store.queue_args import queue_type_of
from queue_store.stream_queue import StreamQueue
from queue_store.variable_queue import VariableQueue

__all__ = ["GroupedDeduplicatingQueue", "GroupedQueue", "grouped", "queue_class"]


def grouped(arguments: dict[str, Any]) -> bool:
    """True when Queue.Declare ``arguments`` ask for message groups."""
    return arguments.get("x-group-by") is not None


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class GroupedQueue(Queue):
    """A queue with message groups (see the module docstring); takes
    :class:`~queue_store.queue.Queue`'s arguments; ``arguments`` (validated) hold
    ``x-group-by`` and optionally ``x-group-prefetch``."""

    def __init__(self, name: str, vhost_name: str, **kwargs: Any) -> None:
        super().__init__(name, vhost_name, **kwargs)
        self.group_by = _text(self.arguments["x-group-by"])
        spill = None
        window = sys.maxsize  # everything is in RAM anyway: no window
        if self.storage is not None:
            spill, window = self._spill_factory(self.storage.backing_queue_factory(name)), \
                STAGE_MESSAGES
        self.groups = MessageGroups(self.ready, key_function(self.group_by),
                                    int(self.arguments.get("x-group-prefetch") or 0),
                                    stage_messages=window, spill_factory=spill)
        self.ready = self.groups

    @staticmethod
    def _spill_factory(paging: Callable[[int], BackingQueue]) -> Callable[[], BackingQueue]:
        """Spill queues of held keys: paging FIFOs with no RAM budget, read back
        ``SPILL_KEEP`` messages at a time (files ``<queue>.<n>.delta``, n >= 1000, next to
        the queue's own paging file; deleted when drained, and at start)."""
        numbers = itertools.count(1000)

        def make() -> BackingQueue:
            vq = paging(next(numbers))
            if isinstance(vq, VariableQueue):
                vq.ram_messages = vq._base_ram_messages = 0
                vq.beta_messages = 0  # straight to delta: nothing per message in RAM
                vq.read_batch = SPILL_KEEP
            return vq

        return make

    # ---- which message next ----------------------------------------------------------------

    _counts_gets = False  # Basic.Get counted as deliveries only, as it always was

    def _picks(self, now: float) -> Iterator[tuple[Consumer, QueuedMessage]]:
        """The group rule for :meth:`Queue.dispatch` (which hands each message out): holders
        that can take more first take the waiting messages of their keys (with single active
        consumer only the active one); then the head of each free key goes to the next
        consumer in turn (:meth:`Queue._next_consumer`: priorities, round-robin, prefetch,
        single active consumer), which at once takes the next messages of that key as it
        can. The round-robin advances only for free keys. Holders are looked at again only
        after staging from the inner FIFO (which may give them waiting messages); dispatch
        stops when no consumer can take more or no key is free. ``now``: the dispatch's
        clock reading (seconds; 0.0 without TTL)."""
        groups = self.groups
        sac = self.settings.single_active_consumer
        stagings = -1
        while len(groups):
            if stagings != groups.stagings:  # the first time, or staging filed held keys
                stagings = groups.stagings
                if groups.pending:
                    if sac:
                        active = self._next_consumer()
                        holders = [active] if active in groups.pending else []
                    else:
                        holders = list(groups.pending)
                    for holder in holders:
                        while holder.can_take():
                            found = groups.take_pending(holder)
                            if found is None:
                                break
                            yield self._taken(holder, found, now)
            if not groups.has_free():
                if stagings == groups.stagings:
                    return
                continue  # staged messages of held keys only: serve their holders
            consumer = self._next_consumer()  # a turn is used only when a key is free
            if consumer is None:
                return
            found = groups.take_free()
            assert found is not None
            yield self._taken(consumer, found, now)
            while consumer.can_take():  # the next messages of the key it now holds
                found = groups.take_pending(consumer)
                if found is None:
                    break
                yield self._taken(consumer, found, now)

    def _taken(self, consumer: Consumer, found: tuple[GroupKey, QueuedMessage], now: float
               ) -> tuple[Consumer, QueuedMessage]:
        """``found`` (key, message) goes to ``consumer``: the key is held for it, or put
        back when nothing will be outstanding (a no-ack consumer, or the message is
        strictly past its deadline at ``now``: dispatch dead-letters it)."""
        g, qm = found
        if consumer.no_ack or (qm.expires_at is not None and qm.expires_at < now):
            self.groups.put_back(g)
        else:
            self.groups.hold(g, qm, consumer)
        return consumer, qm

    def _take_for_get(self, no_ack: bool) -> QueuedMessage | None:
        """Basic.Get: the head message of the next free key (None when no key is free),
        dead-lettering those found at or past their deadline. The key is held until the
        delivery is settled, as for a consumer (put back at once with ``no_ack``)."""
        groups = self.groups
        while True:
            found = groups.take_free()
            if found is None:
                return None
            g, qm = found
            if self._has_ttl and qm.expires_at is not None and qm.expires_at <= self._now():
                groups.put_back(g)
                self._drop(qm, "expired")
                continue
            if no_ack:
                groups.put_back(g)
            else:
                groups.hold(g, qm, GET_HOLDER)
            return qm

    # ---- settlement and consumers --------------------------------------------------------

    def _forget(self, qm: QueuedMessage) -> None:
        self.groups.settled(qm)
        super()._forget(qm)

    def remove_consumer(self, consumer: Consumer) -> None:
        """As :meth:`Queue.remove_consumer`; the consumer's keys stay held until its
        deliveries are settled (acked, or requeued when its channel closes)."""
        self.groups.holder_gone(consumer)
        super().remove_consumer(consumer)

    # ---- stats ---------------------------------------------------------------------------

    def group_stats(self) -> dict[str, Any]:
        """For the management API: ``{"group_by", "keys", "keys_held", "holders": [(holder,
        keys held, unacked messages)]}`` with every consumer (subscription order), then
        cancelled consumers and Basic.Get (holder :data:`GET_HOLDER`) still holding keys.
        ``keys`` counts the keys with messages in RAM (staged) or unacknowledged."""
        groups = self.groups
        holders: list[tuple[Any, int, int]] = []
        seen = set()
        for consumer in self._consumer_order:
            seen.add(id(consumer))
            holders.append((consumer, groups.keys_held_by(consumer), consumer.unacked))
        unacked: dict[int, int] = {}
        for g in groups.inflight.values():
            if g.holder is not None and id(g.holder) not in seen:
                unacked[id(g.holder)] = unacked.get(id(g.holder), 0) + 1
        for holder, keys in groups.held.items():
            if id(holder) not in seen:
                holders.append((holder, keys, unacked.get(id(holder), 0)))
        return {"group_by": self.group_by, "keys": groups.key_count,
                "keys_held": sum(groups.held.values()), "holders": holders}


class GroupedDeduplicatingQueue(GroupedQueue, DeduplicatingQueue):
    """``x-group-by`` and ``x-message-deduplication`` together."""


def queue_class(arguments: dict[str, Any]) -> type[Queue]:
    """The queue class for validated Queue.Declare ``arguments``."""
    if queue_type_of(arguments) == "stream":
        return StreamQueue
    if grouped(arguments):
        return GroupedDeduplicatingQueue if deduplicating(arguments) else GroupedQueue
    return DeduplicatingQueue if deduplicating(arguments) else Queue
