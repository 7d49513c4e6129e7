"""AMQP queue semantics: ready messages, consumers, dispatch, requeue, TTL, limits.

Theory of operation
-------------------
A queue holds its *ready* messages in a backing queue (:mod:`queue_store.backing`), each
wrapped in a :class:`QueuedMessage` with a per-queue sequence number. Delivering a message to
a consumer (or Basic.GetOk) moves it out of the ready list; the consuming channel then owns it
as *unacknowledged* until it is acked (gone), rejected/nacked without requeue (dead-lettered
when a dead-letter exchange is set, else gone), or requeued or its channel closes (back to
its original position, by sequence number, flagged redelivered).

Dispatch goes to the highest-priority consumers (``x-priority``) that can take a message now
(:meth:`~queue_store.consumer.Consumer.can_take`: prefetch window not full and its socket
not paused), round-robin among equals; a consumer that cannot take one is skipped, not
waited on (RabbitMQ's ``rabbit_queue_consumers``). With ``x-single-active-consumer`` only the
active consumer gets messages; the next in line takes over when it goes. Whoever frees
capacity (ack, Basic.Qos, socket drained, new consumer) calls :meth:`Queue.dispatch`.
:meth:`Queue.dispatch` and :meth:`Queue.get` are the only places a message is handed out
(expiry, ``x-delivery-count``, no-ack, unacked counts) for every queue kind; a kind with
another rule for which message goes to which consumer (message groups,
:mod:`queue_store.grouped_queue`) overrides only that choice (``_picks``,
``_take_for_get``). Settlement is in :mod:`queue_store.queue_settlement`, recovery at start
in :mod:`queue_store.queue_recovery`.

Expiry: a message's deadline is the lower of the queue's ``x-message-ttl`` and its own
``expiration``; it is expired when it reaches the head of the queue (at dispatch, get, or by a
timer armed for the head's deadline), as RabbitMQ's classic queues do, and dead-lettered with
reason ``expired``. Length limits (``x-max-length``, ``x-max-length-bytes``) count ready
messages; ``drop-head`` drops (dead-letters, reason ``maxlen``) from the head after an append,
``reject-publish``/``reject-publish-dlx`` refuse the new message (:meth:`Queue.publish` returns
the ``REJECTED`` bit, so the channel nacks it under confirms). ``x-expires`` deletes a queue
left without consumers, Basic.Get or redeclare for that long.

Source: AMQP 0-9-1 spec 3.1.4, 1.7.2; RabbitMQ ``rabbit_amqqueue_process``;
https://www.rabbitmq.com/docs/queues, /docs/ttl, /docs/maxlength, /docs/consumer-priority,
/docs/consumers#single-active-consumer.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from amqp_common.errors import ResourceLocked, rs
from amqp_common.timers import TimerHandle, Timers
from queue_store.backing import BackingQueue, QueuedMessage, make_backing_queue
from queue_store.consumer import Consumer
from queue_store.counters import QueueCounters
from queue_store.message import FLAG_EXPIRATION, Message
from queue_store.msg_store import encode_payload
from queue_store.outcomes import (
    ACCEPTED,
    ACCEPTED_UNSYNCED,
    REJECTED,
    PublishContext,
    Settlement,
)
from queue_store.queue_args import QueueSettings, queue_type_of
from queue_store.queue_index import QueueIndex
from queue_store.queue_kind import Requester
from queue_store.queue_recovery import QueueRecovery
from queue_store.queue_settlement import QueueSettlement
from queue_store.storage import VhostStorage

__all__ = ["ACCEPTED", "ACCEPTED_UNSYNCED", "REJECTED", "Consumer", "Delivery", "Queue",
           "QueueHost", "QueuedMessage", "Settlement"]  # Consumer: from queue_store.consumer

#: An outstanding delivery: (message, its queue, the consumer or None for Basic.Get).
Delivery = tuple[QueuedMessage, "Queue", "Consumer | None"]


class QueueHost(Protocol):
    """What a queue needs from the vhost it lives in (:class:`vhosts.vhost.VirtualHost`)."""

    timers: Timers
    storage: VhostStorage | None

    def queue_unused(self, queue: Queue) -> None: ...

    def queue_expired(self, queue: Queue) -> None: ...

    def dead_letter(self, queue: Queue, message: Message, reason: str) -> None: ...


#: Attributes a plain queue may set in ``__init__``: CPython 3.11 keeps an instance's
#: attributes in its fast inline storage only up to 29; a 30th gives every queue a real
#: ``__dict__`` and slows each method call and attribute read on the publish and dispatch
#: path (+2% instructions per message, ``benchmarks.core_micro`` scenario 2). Tested.
MAX_INSTANCE_ATTRIBUTES = 29


class Queue(QueueSettlement, QueueRecovery):
    """One AMQP queue in a vhost (settlement: :mod:`queue_store.queue_settlement`, recovery
    at start: :mod:`queue_store.queue_recovery`).

    Args:
        name, vhost_name: the queue's name and its vhost's name (``rs()`` texts, stats).
        durable, exclusive, auto_delete: Queue.Declare flags.
        exclusive_owner: the connection that declared an exclusive queue (None otherwise).
        arguments: Queue.Declare arguments (``x-...``), already validated.
        settings: effective settings (arguments resolved with policies).
        vhost: the vhost object, as a :class:`QueueHost` (timers, storage, dead lettering,
            deletion callbacks); None for a queue outside any vhost (nothing expires or is
            dead-lettered).
    """

    uses_index = True  # a durable queue keeps a queue index (stream queues have a log)

    def __init__(self, name: str, vhost_name: str, durable: bool = False,
                 exclusive: bool = False, auto_delete: bool = False,
                 exclusive_owner: object | None = None,
                 arguments: dict[str, Any] | None = None,
                 settings: QueueSettings | None = None, vhost: QueueHost | None = None) -> None:
        self.name = name
        self.vhost_name = vhost_name
        self.durable = durable
        self.exclusive = exclusive
        self.auto_delete = auto_delete
        self.exclusive_owner = exclusive_owner
        self.arguments = arguments or {}
        self.kind = queue_type_of(self.arguments)  # "classic" or "quorum"
        self.quorum = self.kind == "quorum"
        self.vhost = vhost
        self.settings = settings or QueueSettings()
        self.storage = vhost.storage if vhost is not None else None
        self.ready: BackingQueue = self._ready_queue()
        # consumers by priority level, highest first; round-robin inside a level
        self._levels: list[tuple[int, deque[Consumer]]] = []
        self._consumer_order: list[Consumer] = []  # subscription order (single active consumer)
        self.unacked_count = 0
        self.deleted = False
        self._seq = 0
        self._had_consumer = False
        self._dispatching = False
        # single active consumer: a cancelled active consumer whose deliveries are unsettled
        self._sac_previous: Consumer | None = None
        self._has_ttl = self.settings.message_ttl is not None
        self._plain = self._is_plain(self.settings)
        self._ttl_timer: TimerHandle | None = None
        self._expiry_timer: TimerHandle | None = None
        self.published = 0  # messages (stats)
        self.delivered = 0  # every delivery and Basic.GetOk (deliver_get)
        self.counters = QueueCounters()  # the rest of message_stats
        self.index: QueueIndex | None = None
        if durable and self.storage is not None and self.uses_index:
            self.index = self.storage.open_index(name)
        self.touch()

    @property
    def global_qos(self) -> bool:
        """False: Basic.Consume under a global prefetch is refused (540; RabbitMQ 3.x quorum
        queues). A property, not an attribute: see ``MAX_INSTANCE_ATTRIBUTES``."""
        return not self.quorum

    def _ready_queue(self) -> BackingQueue:
        """The backing queue of ready messages (paged to the vhost's storage, if any)."""
        storage = self.storage
        factory = storage.backing_queue_factory(self.name) if storage is not None else None
        return make_backing_queue(self.settings.max_priority, factory)

    def __repr__(self) -> str:
        return f"<Queue {self.name!r} vhost={self.vhost_name!r} ready={len(self.ready)}>"

    # ---- settings and access -------------------------------------------------------------

    def apply_settings(self, settings: QueueSettings) -> None:
        """New effective settings (a policy changed); limits and timers apply at once."""
        self.settings = settings
        self._plain = self._is_plain(settings)
        self._has_ttl = self._has_ttl or settings.message_ttl is not None
        self._enforce_limits()
        self.touch()

    @staticmethod
    def _is_plain(s: QueueSettings) -> bool:
        """No TTL, length limit or priority: publish can take the fast path."""
        return s.message_ttl is None and not s.limited and not s.max_priority

    def check_exclusive_access(self, connection: object) -> None:
        """Raises ResourceLocked (405) when an exclusive queue is used by another connection."""
        if self.exclusive and self.exclusive_owner is not connection:
            raise self.locked_error()

    def locked_error(self) -> ResourceLocked:
        """RabbitMQ's 405 for a queue another connection owns or whose exclusivity differs."""
        return ResourceLocked(
            f"cannot obtain exclusive access to locked {rs('queue', self.name, self.vhost_name)}."
            " It could be originally declared on another connection or the exclusive"
            " property value does not match that of the original declaration.")

    def _now(self) -> float:
        return self.vhost.timers.clock() if self.vhost is not None else 0.0

    # ---- publish and dispatch ------------------------------------------------------------

    def publish(self, message: Message) -> int:
        """Append a routed message and deliver it if a consumer can take it.

        Returns :data:`~queue_store.outcomes.PublishResult` bits as a plain int:
        ``REJECTED`` when ``x-overflow`` ``reject-publish``/``reject-publish-dlx`` refused it
        (the queue is full: nack the publisher), ``ACCEPTED_UNSYNCED`` (ROUTED|NEEDS_SYNC)
        when it was written to disk (a persistent message on a durable queue, or any message
        on a quorum queue: confirm after the next fsync), else ``ACCEPTED`` (ROUTED).

        Raises:
            ValueError: the message's ``expiration`` property is not a non-negative integer.
        """
        on_disk = self.index is not None and (self.quorum or message.persistent)
        if self._plain and not message.flags & FLAG_EXPIRATION and not on_disk:
            # fast path: no TTL, limits or priorities to consider (most queues, most messages)
            seq = self._seq = self._seq + 1
            self.published += 1
            qm = QueuedMessage(seq, message)
            if self._levels and not self._dispatching:
                if (self._picks is None and not self._has_ttl and not self.quorum
                        and not len(self.ready) and not self.deleted):
                    # dispatch for a new message that finds nothing ready (no TTL, no
                    # quorum delivery count, no _picks, not on disk): to the next consumer
                    # that can take it, else into ready; without the round trip through
                    # ready, nor a call
                    levels = self._levels
                    if (len(levels) == 1 and len(levels[0][1]) == 1
                            and not self.settings.single_active_consumer):
                        one = levels[0][1][0]  # _next_consumer's one-consumer case
                        consumer = one if (
                            (one.no_ack or not one.prefetch or one.unacked < one.prefetch)
                            and one.channel.can_deliver()) else None
                    else:
                        consumer = self._next_consumer()
                    if consumer is None:
                        self.ready.append(qm)
                        return ACCEPTED
                    self.delivered += 1
                    if not consumer.no_ack:
                        consumer.unacked += 1
                        self.unacked_count += 1
                    self._dispatching = True  # what the delivery causes dispatches later
                    try:
                        consumer.channel.deliver(consumer, qm, self)
                    finally:
                        self._dispatching = False
                    return ACCEPTED
                # messages wait: a dispatch all the same (a consumer on another worker may
                # take one again once its link drained, which dispatches nothing itself),
                # unless the one consumer's prefetch window is full (only a settle, which
                # dispatches, or a new consumer opens it)
                self.ready.append(qm)
                levels = self._levels
                if len(levels) == 1 and len(levels[0][1]) == 1:
                    consumer = levels[0][1][0]
                    if (not consumer.no_ack and consumer.prefetch
                            and consumer.unacked >= consumer.prefetch):
                        return ACCEPTED
                self.dispatch()
                return ACCEPTED
            self.ready.append(qm)
            return ACCEPTED
        s = self.settings
        if s.limited and s.overflow != "drop-head" and self._would_overflow(message):
            if s.overflow == "reject-publish-dlx" and self.vhost is not None:
                self.vhost.dead_letter(self, message, "maxlen")
            return REJECTED
        self._seq += 1
        self.published += 1
        ttl = s.message_ttl
        per_message = message.expiration_ms() if message.flags & FLAG_EXPIRATION else None
        if per_message is not None:
            ttl = per_message if ttl is None else min(ttl, per_message)
        expires_at = None
        if ttl is not None:
            expires_at = self._now() + ttl / 1000.0
            self._has_ttl = True
        priority = message.priority if s.max_priority else 0
        qm = QueuedMessage(self._seq, message, False, expires_at, priority)
        result = ACCEPTED
        index = self.index
        if on_disk:  # on disk: a persistent message, or any on a quorum queue
            storage = self.storage
            qm.indexed = True
            expiry_wall = (self.vhost.timers.wall_ms(expires_at)  # type: ignore[union-attr]
                           if expires_at is not None else 0)
            if len(message.body) < storage.embed_below:  # type: ignore[union-attr]
                index.publish_embedded(qm.seq, encode_payload(message), expiry_wall, priority)
            else:
                qm.msg_id = storage.store.write(message)  # type: ignore[union-attr]
                index.publish(qm.seq, qm.msg_id, expiry_wall, priority)
            self.storage.durability.index_dirty(index)  # type: ignore[union-attr]
            result = ACCEPTED_UNSYNCED
        self.ready.append(qm)
        if self._levels and not self._dispatching:
            self.dispatch()
        if self._has_ttl:
            self._expire_head()
        if s.limited:
            self._enforce_limits()
        return result

    def publish_for(self, message: Message, context: PublishContext) -> int:
        """:meth:`publish` for a publisher described by ``context`` (see
        :class:`~queue_store.outcomes.PublishContext`); only queues that answer later (on
        another worker, replicated) read it. This class's own :meth:`publish`, whatever a
        subclass layers over ``publish``: a kind that checks a message first (deduplication)
        overrides both entry points, and must not check it twice."""
        return Queue.publish(self, message)

    def _refused(self, message: Message) -> None:
        """A message a kind admitted was refused when it came to enter (a replicated queue
        commits it into a full ``reject-publish`` queue): a kind that recorded it forgets."""

    def _holding(self, message: Message) -> None:
        """The queue holds ``message`` without a publish (a new leader's queue built from
        its replica): a kind that records what it holds records it."""

    def _forget(self, qm: QueuedMessage) -> None:
        """``qm`` left the queue for good (acked, dropped, expired, purged): release its
        store reference and record the ack in the queue index."""
        if qm.indexed and self.index is not None:
            index = self.index
            index.ack(qm.seq)
            durability = self.storage.durability  # type: ignore[union-attr]
            durability.index_dirty(index)
            qm.indexed = False
            if index.live == 0 and index.needs_compaction() and not durability.syncing:
                index.compact([])  # drained: start the journal afresh
        if qm.msg_id and self.storage is not None:
            self.storage.store.release(qm.msg_id)
            qm.msg_id = 0

    def _log_delivery(self, qm: QueuedMessage) -> None:
        if qm.indexed and not qm.delivery_logged and self.index is not None:
            qm.delivery_logged = True
            self.index.deliver(qm.seq)
            self.storage.durability.index_dirty(self.index)  # type: ignore[union-attr]

    def _would_overflow(self, message: Message) -> bool:
        s = self.settings
        if s.max_length is not None and len(self.ready) >= s.max_length:
            return True
        return (s.max_length_bytes is not None
                and self.ready.bytes + len(message.body) > s.max_length_bytes)

    def _enforce_limits(self) -> None:
        s = self.settings
        if not s.limited or s.overflow != "drop-head":
            return
        ready = self.ready
        while len(ready) and (
            (s.max_length is not None and len(ready) > s.max_length)
            or (s.max_length_bytes is not None and ready.bytes > s.max_length_bytes)
        ):
            qm = ready.popleft()
            if qm is not None:
                self._drop(qm, "maxlen")
        self._arm_ttl_timer()

    def _expire_head(self) -> None:
        """Expire (dead-letter) messages at the head whose deadline has passed, then arm the
        timer for the next head's deadline."""
        ready = self.ready
        now = self._now()
        while True:
            head = ready.peek()
            if head is None or head.expires_at is None or head.expires_at > now:
                break
            ready.popleft()
            self._drop(head, "expired")
        self._arm_ttl_timer()

    def _drop(self, qm: QueuedMessage, reason: str) -> None:
        """``qm``, taken from the ready list, dies: dead-lettered for ``reason``
        (``"expired"``, ``"maxlen"``, ``"delivery_limit"``) when the queue is in a vhost,
        then gone (:meth:`_forget`)."""
        if self.vhost is not None:
            self.vhost.dead_letter(self, qm.message, reason)
        self._forget(qm)

    def _arm_ttl_timer(self) -> None:
        if not self._has_ttl or self.vhost is None or self.deleted:
            return
        head = self.ready.peek()
        when = head.expires_at if head is not None else None
        timer = self._ttl_timer
        if timer is not None and not timer.cancelled:
            if when is not None and timer.when <= when:
                return
            timer.cancel()
        self._ttl_timer = None
        if when is not None:
            self._ttl_timer = self.vhost.timers.call_later(when - self._now(), self._expire_head)

    def _next_consumer(self) -> Consumer | None:
        if self.settings.single_active_consumer:
            if self._sac_previous is not None and self._sac_previous.unacked > 0:
                return None  # the old active consumer's deliveries are not settled yet
            active = self._consumer_order[0] if self._consumer_order else None
            return active if active is not None and active.can_take() else None
        levels = self._levels
        if len(levels) == 1:
            consumers = levels[0][1]
            if len(consumers) == 1:  # one consumer: no turn to take
                consumer = consumers[0]
                if (consumer.no_ack or not consumer.prefetch
                        or consumer.unacked < consumer.prefetch) and consumer.channel.can_deliver():
                    return consumer
                return None
        for _, consumers in levels:
            for _ in range(len(consumers)):
                consumer = consumers[0]
                consumers.rotate(-1)
                # Consumer.can_take, inlined (once per delivery)
                if (consumer.no_ack or not consumer.prefetch
                        or consumer.unacked < consumer.prefetch) and consumer.channel.can_deliver():
                    return consumer
        return None

    #: which consumer takes which ready message: None, the next consumer by
    #: :meth:`_next_consumer` takes the head of ``ready`` (inlined in :meth:`dispatch`, the
    #: hot path); a queue kind with another rule (message groups) sets a generator method
    #: ``(now) -> Iterator[(consumer, message)]``: ``now`` is the dispatch's clock reading
    #: (seconds, 0.0 without TTL), each message is taken from ``ready`` and yielded in
    #: delivery order, and the generator ends when no more can go out. A class attribute:
    #: an instance has 29 attributes, and CPython 3.11 stops sharing dict keys (every
    #: attribute read gets slower, +1.7% instructions per delivery) from the 30th.
    _picks: Callable[[float], Iterator[tuple[Consumer, QueuedMessage]]] | None = None

    def dispatch(self) -> None:
        """Deliver ready messages to consumers that can take them, until either runs out.

        The one place a message goes to a consumer, whatever the queue kind: one clock
        reading per call; a message strictly past its deadline is dead-lettered (reason
        ``expired``) instead (TTL 0 still reaches a consumer that can take it at once); a
        quorum queue stamps ``x-delivery-count``; a no-ack delivery is gone at once, any
        other is outstanding (the consumer's ``unacked``, ``unacked_count``, the index's
        delivery record) until :meth:`settle`. Which consumer takes which message:
        ``_picks``.
        """
        if self._dispatching or self.deleted:
            return
        self._dispatching = True
        try:
            ready = self.ready
            has_ttl = self._has_ttl
            now = self._now() if has_ttl else 0.0
            picks = None if self._picks is None else self._picks(now)
            while len(ready) and self._levels:
                if picks is None:
                    consumer = self._next_consumer()
                    if consumer is None:
                        break
                    qm = ready.popleft()
                    assert qm is not None
                else:
                    pick = next(picks, None)
                    if pick is None:
                        break
                    consumer, qm = pick
                if has_ttl and qm.expires_at is not None and qm.expires_at < now:
                    self._drop(qm, "expired")
                    continue
                self.delivered += 1
                if self.quorum:
                    self._stamp_delivery_count(qm)
                if consumer.no_ack:
                    consumer.channel.deliver(consumer, qm, self)
                    self._forget(qm)
                    continue
                consumer.unacked += 1
                self.unacked_count += 1
                if qm.indexed:
                    self._log_delivery(qm)
                consumer.channel.deliver(consumer, qm, self)
                if (consumer.prefetch and consumer.unacked >= consumer.prefetch
                        and picks is None and len(self._levels) == 1
                        and len(self._levels[0][1]) == 1):
                    break  # the one consumer's window is full: nobody else to ask
        finally:
            self._dispatching = False
        if self._has_ttl:
            self._arm_ttl_timer()

    #: Basic.Get is counted in ``counters`` (got, got_no_ack, get_empty); False: as
    #: deliveries only (message groups, as they always were)
    _counts_gets = True

    def get(self, no_ack: bool = False) -> QueuedMessage | None:
        """Take a message for Basic.Get (None when there is none: :meth:`_take_for_get`);
        counts as use (x-expires). The one place a message goes to Basic.Get: a quorum
        queue stamps ``x-delivery-count``; with ``no_ack`` the message is gone at once;
        otherwise it is an outstanding delivery until :meth:`settle` ends it.
        """
        self.touch()
        if self._has_ttl:
            self._expire_head()
        qm = self._take_for_get(no_ack)
        counts = self.counters if self._counts_gets else None
        if qm is None:
            if counts is not None:
                counts.get_empty += 1
            return None
        self.delivered += 1
        if self.quorum:
            self._stamp_delivery_count(qm)
        if no_ack:
            if counts is not None:
                counts.got_no_ack += 1
            self._forget(qm)
        else:
            if counts is not None:
                counts.got += 1
            self.unacked_count += 1
            self._log_delivery(qm)
        if self._has_ttl:
            self._expire_head()  # GetOk's message_count must not count expired ones
        return qm

    def request_get(self, requester: Requester, no_ack: bool,
                    then: Callable[[QueuedMessage | None, int], None]) -> None:
        """:meth:`get` now: ``then(message or None, ready messages left)``
        (:class:`~queue_store.queue_kind.QueueKind`; a queue elsewhere answers later)."""
        qm = self.get(no_ack)
        then(qm, self.message_count if qm is not None else 0)

    def request_purge(self, requester: Requester, then: Callable[[int], None]) -> None:
        """:meth:`purge` now: ``then(messages dropped)``."""
        then(self.purge())

    def request_counts(self, requester: Requester,
                       then: Callable[[int, int], None]) -> None:
        """``then(ready messages, consumers)`` now (Queue.DeclareOk)."""
        then(self.message_count, self.consumer_count)

    def request_consume(self, requester: Requester, consumer: Consumer,
                        then: Callable[[], None]) -> None:
        """Accept ``consumer`` now: ``then()`` sends ConsumeOk and calls
        :meth:`add_consumer` (the channel checked exclusivity against this queue)."""
        then()

    def _take_for_get(self, no_ack: bool) -> QueuedMessage | None:
        """Basic.Get's message, taken from ``ready``: the head (expired ones at the head are
        gone already); None when empty. A queue kind with another rule overrides it."""
        return self.ready.popleft()

    def purge(self) -> int:
        """Drop every ready message (not dead-lettered); returns how many (messages)."""
        dropped = 0
        for qm in self.ready.clear():  # paged-out ones come without bodies: none are read
            self._forget(qm)
            dropped += 1
        return dropped

    # ---- consumers -----------------------------------------------------------------------

    @property
    def consumers(self) -> list[Consumer]:
        """Every consumer, in subscription order."""
        return list(self._consumer_order)

    def has_exclusive_consumer(self) -> bool:
        return any(c.exclusive for c in self._consumer_order)

    def add_consumer(self, consumer: Consumer) -> None:
        """Subscribe ``consumer`` and deliver what it can take (the caller checked
        exclusivity and has already sent ConsumeOk)."""
        for priority, consumers in self._levels:
            if priority == consumer.priority:
                consumers.append(consumer)
                break
        else:
            self._levels.append((consumer.priority, deque([consumer])))
            self._levels.sort(key=lambda level: -level[0])
        self._consumer_order.append(consumer)
        self._had_consumer = True
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
            self._expiry_timer = None
        self.dispatch()

    def remove_consumer(self, consumer: Consumer) -> None:
        """Cancel a consumer; an auto-delete queue whose last consumer goes is deleted."""
        if consumer not in self._consumer_order:
            return
        if (self.settings.single_active_consumer and consumer is self._consumer_order[0]
                and consumer.unacked > 0):
            # hand over only once its deliveries are settled, so order is kept (RabbitMQ
            # delivers to the next active consumer after the old one's messages come back)
            self._sac_previous = consumer
        self._consumer_order.remove(consumer)
        for i, (_, consumers) in enumerate(self._levels):
            if consumer in consumers:
                consumers.remove(consumer)
                if not consumers:
                    del self._levels[i]
                break
        if not self._consumer_order:
            if self.auto_delete and self._had_consumer and self.vhost is not None:
                self.vhost.queue_unused(self)
                return
            self.touch()
        elif self.settings.single_active_consumer:
            self.dispatch()  # the next consumer in line is active now

    def touch(self) -> None:
        """The queue was used (declared, Basic.Get, consumer gone): restart ``x-expires``."""
        expires = self.settings.expires
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
            self._expiry_timer = None
        if expires is None or self.vhost is None or self.deleted or self._consumer_order:
            return
        vhost = self.vhost
        self._expiry_timer = vhost.timers.call_later(expires / 1000.0,
                                                     lambda: vhost.queue_expired(self))

    @property
    def message_count(self) -> int:
        """Ready messages (what Queue.DeclareOk and Basic.GetOk report)."""
        return len(self.ready)

    @property
    def next_seq_id(self) -> int:
        """The sequence number the next published message gets (backing_queue_status)."""
        return self._seq + 1

    @property
    def consumer_count(self) -> int:
        return len(self._consumer_order)

    def mark_deleted(self) -> list[Consumer]:
        """Flag the queue deleted, drop its messages and timers; returns the consumers to
        notify."""
        consumers = list(self._consumer_order)
        self._consumer_order.clear()
        self._levels.clear()
        for qm in self.ready.clear():
            self._forget(qm)
        self.ready.close()
        self.deleted = True
        for timer in (self._ttl_timer, self._expiry_timer):
            if timer is not None:
                timer.cancel()
        if self.index is not None and self.storage is not None:
            self.storage.delete_index(self.index)
            self.index = None
        return consumers
