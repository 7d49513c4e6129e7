"""Message groups: the ready messages of a queue declared with ``x-group-by``, kept per key so
that each key's messages go to one consumer at a time, in publish order, while different
keys are consumed in parallel.

Theory of operation
-------------------
:class:`MessageGroups` is the queue's backing queue (it answers the same
:class:`~queue_store.backing.BackingQueue` protocol, so length limits, TTL, purge and recovery
work unchanged) wrapped around the ordinary one, the *inner* FIFO (in RAM or paged to disk by
:mod:`queue_store.variable_queue`). Ready messages are in one of two places::

    staged (RAM, per key)                         inner FIFO (RAM head, paged-out tail)
    key "a": [a1, a3]   key "b": [b2]   ...       [ m7, m8, m9, ... ]

* **Staged**: a :class:`GroupKey` per key with its messages in publish order (``fifo``), its
  *holder* (the consumer with unacknowledged messages of the key, or None) and that holder's
  count of them (``unacked``). Every staged message is older than every message in the inner
  FIFO: a new message is staged at once only while the inner FIFO is empty and the staging
  window (``stage_messages`` / ``stage_bytes``) has room; otherwise it is appended to the inner
  FIFO and staged, in order, when dispatch needs more (each message is staged once).
* **Ready keys**: a FIFO of the keys that have staged messages and no holder: any consumer may
  take them. **Pending keys**: per holder, a FIFO of the keys it holds that have staged
  messages (and room under ``x-group-prefetch``): only that holder may take them.

Dispatch takes the head message of one of a holder's pending keys
(:meth:`MessageGroups.take_pending`), or of the first ready key
(:meth:`MessageGroups.take_free`; :meth:`~MessageGroups.has_free` first, so that the queue
uses a consumer's turn only when a key is free: it hands free keys to consumers in turn, see
:mod:`queue_store.grouped_queue`; the consumer becomes the key's holder), staging more
messages from the inner FIFO when there is no ready key; both FIFOs hold each key at most
once in a valid entry, so finding the next deliverable key is O(1) amortized. Entries that
went stale (the key moved, or its messages expired) are skipped when popped, never searched.

Spilling: when the staging window is full and nothing in it may be taken (every staged key is
held by a busy consumer), each key with more than ``spill_keep`` (32) staged messages keeps
that many in RAM and pages the rest out to a *spill queue* of its own (a paging
:class:`~queue_store.variable_queue.VariableQueue` with no RAM budget, file
``<queue>.<n>.delta``); later messages of the key are appended there too, and the key reads
``spill_keep`` back at a time as it drains (the file is deleted once empty). Staging then
goes on past the busy keys, so a key whose holder is busy does not block the others however
long its backlog (no head-of-line blocking), while RAM holds at most the window plus
``spill_keep`` per spilled key. Only held keys spill, and a consumer's prefetch bounds how
many keys it holds, so there are few spill files. A queue without storage (tests) has no
window: everything is in RAM anyway.

Settling (:meth:`settled`, :meth:`requeue`): each delivery remembers its key by sequence
number. An ack or reject lowers the key's ``unacked``; at zero the key is released: it has no
holder and, when messages are waiting, goes to the back of the ready keys (work moves to
whoever has capacity). A requeued message goes back into its key's FIFO by sequence number,
so ahead of the later messages of the key, and a key released by a requeue goes to the front
of the ready keys.

The global head (:meth:`peek`, :meth:`popleft`: the oldest ready message, which ``x-message-
ttl`` expiry and ``x-max-length`` drop-head take) is found with a heap of the keys' head
sequence numbers, built the first time it is asked for and kept from then on (queues without
TTL or limits never pay for it); stale heap entries are skipped and the heap is rebuilt when
they outnumber the live ones.

Messages without a key (no such header, or a void value) are not grouped: they form one
bucket that is never held, so any consumer takes them, in publish order, in parallel.

Source: the design of ActiveMQ/Artemis message groups (``JMSXGroupID``) and Azure Service Bus
sessions, adapted to AMQP 0-9-1 prefetch; the requeue-to-position rule of RabbitMQ's
``rabbit_amqqueue_process``.
"""

from __future__ import annotations

import heapq
import itertools
import struct
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from typing import Any

from amqp_common.properties import NOT_A_STRING, string_header
from amqp_common.properties import header_value_key as normal_key
from queue_store.backing import BackingQueue, QueuedMessage
from queue_store.message import Message

__all__ = ["GET_HOLDER", "GroupKey", "MessageGroups", "key_function", "normal_key"]

#: the messages that may be staged in RAM ahead of the inner FIFO (messages, body bytes)
STAGE_MESSAGES = 50_000
STAGE_BYTES = 32 * 1024 * 1024
PRESSURE_STAGE_MESSAGES = 2_000  # while memory is past the paging threshold
SPILL_KEEP = 32  # messages of a spilled key kept in RAM (and read back at a time)


class _Holder:
    """A holder that is not a consumer (deliveries made by Basic.Get)."""

    def __repr__(self) -> str:
        return "<basic.get>"


#: the holder of keys taken by Basic.Get: never handed more messages of them
GET_HOLDER: Any = _Holder()
_READY: Any = object()  # GroupKey.queued_in: in the ready keys


class GroupKey:
    """One key's state: its staged messages (``fifo``, publish order), its ``holder`` (a
    consumer, :data:`GET_HOLDER`, or None) and the holder's unacknowledged messages of it
    (``unacked``). ``queued_in`` is where its one valid queue entry is (the ready keys, a
    holder's pending keys, or None: nowhere)."""

    __slots__ = ("key", "fifo", "spill", "holder", "unacked", "queued_in")

    def __init__(self, key: Hashable | None) -> None:
        self.key = key
        self.fifo: deque[QueuedMessage] = deque()
        self.spill: BackingQueue | None = None  # later messages, paged out (fifo not empty)
        self.holder: Any = None
        self.unacked = 0
        self.queued_in: Any = None

    def __repr__(self) -> str:
        return (f"<GroupKey {self.key!r} staged={len(self.fifo)} holder={self.holder!r}"
                f" unacked={self.unacked}>")


def key_function(group_by: str) -> Callable[[Message], Hashable | None]:
    """The key of a message for an ``x-group-by`` value (already validated):
    ``routing-key`` (the routing key it was published with) or ``header:<name>`` (that
    header's value; None when absent)."""
    if group_by == "routing-key":
        return _routing_key
    name = group_by[len("header:"):]
    raw_name = name.encode("utf-8")

    def header_key(message: Message) -> Hashable | None:
        try:
            found = string_header(message.properties_raw, message.flags, raw_name)
        except (IndexError, struct.error, KeyError):
            found = NOT_A_STRING
        if found is not NOT_A_STRING:
            return found
        headers = message.headers  # not a string: decode the properties (once per message)
        return normal_key(headers.get(name)) if headers else None

    return header_key


def _routing_key(message: Message) -> Hashable | None:
    return message.routing_key


class MessageGroups:
    """A queue's ready messages grouped by key (see the module docstring).

    Args:
        inner: the ordinary FIFO (:class:`~queue_store.backing.MemoryBackingQueue` or a
            paging :class:`~queue_store.variable_queue.VariableQueue`); not a priority queue.
        key_of: a message's key (:func:`key_function`).
        key_prefetch: most unacknowledged messages of one key (0: no limit but the
            consumer's prefetch), ``x-group-prefetch``.
        stage_messages, stage_bytes: the staging window (messages, body bytes).
    """

    def __init__(self, inner: BackingQueue, key_of: Callable[[Message], Hashable | None],
                 key_prefetch: int = 0, stage_messages: int = STAGE_MESSAGES,
                 stage_bytes: int = STAGE_BYTES,
                 spill_factory: Callable[[], BackingQueue] | None = None) -> None:
        self.inner = inner
        self.spill_factory = spill_factory
        self.spill_keep = SPILL_KEEP
        self.key_of = key_of
        self.key_prefetch = key_prefetch
        self.stage_messages = self._base_stage_messages = stage_messages
        self.stage_bytes = stage_bytes
        self.keys: dict[Hashable | None, GroupKey] = {}
        self.ready_keys: deque[GroupKey] = deque()
        self.pending: dict[Any, deque[GroupKey]] = {}  # holder -> its keys it may take now
        self.held: dict[Any, int] = {}  # holder -> keys it holds
        self.gone: set[Any] = set()  # cancelled consumers that still hold keys
        self.inflight: dict[int, GroupKey] = {}  # seq of a delivered message -> its key
        self.staged = 0  # messages (spilled ones included)
        self.staged_bytes = 0
        self.spilled = 0  # messages in the keys' spill queues (on disk)
        self.spilled_bytes = 0
        self._heap: list[tuple[int, int, GroupKey]] | None = None  # (head seq, tick, key)
        self._tick = itertools.count()
        self.stagings = 0  # messages moved from the inner FIFO by dispatch (_stage_one)

    # ---- BackingQueue protocol -----------------------------------------------------------

    @property
    def bytes(self) -> int:
        return self.staged_bytes + self.inner.bytes

    def __len__(self) -> int:
        return self.staged + len(self.inner)

    def __iter__(self) -> Iterator[QueuedMessage]:
        """Staged messages in publish order, then the inner FIFO's (its RAM part)."""
        yield from heapq.merge(*[list(g.fifo) for g in self.keys.values() if g.fifo])
        yield from self.inner

    def append(self, qm: QueuedMessage) -> None:
        """A new ready message (publish, recovery): staged now when it can be (order)."""
        if not len(self.inner) and self._window_has_room():
            self._stage(qm)
        else:
            self.inner.append(qm)

    def peek(self) -> QueuedMessage | None:
        """The oldest ready message (None when empty)."""
        g = self._oldest() if self.staged else None
        return g.fifo[0] if g is not None else self.inner.peek()

    def popleft(self) -> QueuedMessage | None:
        """Remove and return the oldest ready message, whatever its key (expiry, drop-head)."""
        g = self._oldest() if self.staged else None
        if g is None:
            return self.inner.popleft()
        qm = self._pop_head(g)
        self._maybe_drop(g)
        return qm

    def requeue(self, qms: list[QueuedMessage]) -> None:
        """Delivered messages come back (sorted by seq): each into its key's FIFO by sequence
        number; a key whose holder has none of it unacknowledged any more is released to the
        front of the ready keys, otherwise its holder may take it again."""
        touched: dict[int, tuple[GroupKey, list[QueuedMessage]]] = {}
        for qm in qms:
            g = self.inflight.pop(qm.seq, None)
            if g is None:  # not handed out by us (not expected): file it under its key
                g = self._key(self.key_of(qm.message))
            else:
                g.unacked -= 1
            entry = touched.get(id(g))
            if entry is None:
                touched[id(g)] = (g, [qm])
            else:
                entry[1].append(qm)
        for g, back in touched.values():
            fifo = g.fifo
            if not fifo or back[-1].seq < fifo[0].seq:
                fifo.extendleft(reversed(back))
            else:
                g.fifo = fifo = deque(heapq.merge(back, fifo))
            self.staged += len(back)
            self.staged_bytes += sum(len(qm.message.body) for qm in back)
            self._push_head(g)
            if g.unacked == 0:
                self._release(g, front=True)
            else:
                self._enqueue(g)

    def clear(self) -> list[QueuedMessage]:
        """Drop every ready message (purge, delete); keys with unacknowledged messages stay
        held. Returns the dropped messages in publish order."""
        out: list[QueuedMessage] = []
        for g in self.keys.values():
            out.extend(g.fifo)
            g.fifo.clear()
            g.queued_in = None
            if g.spill is not None:
                out.extend(g.spill.clear())
                g.spill.close()
                g.spill = None
        out.sort()
        out.extend(self.inner.clear())
        self.keys = {k: g for k, g in self.keys.items() if g.unacked}
        self.ready_keys.clear()
        self.pending.clear()
        self.staged = self.staged_bytes = self.spilled = self.spilled_bytes = 0
        self._heap = None
        return out

    def close(self) -> None:
        self.inner.close()

    def set_memory_pressure(self, on: bool) -> None:
        """Memory past the paging threshold: a small staging window, and the inner FIFO
        pages out (messages already staged stay in RAM)."""
        self.stage_messages = PRESSURE_STAGE_MESSAGES if on else self._base_stage_messages
        self.inner.set_memory_pressure(on)

    # ---- dispatch ------------------------------------------------------------------------

    def has_free(self) -> bool:
        """Whether a key is free (has staged messages and no holder), staging messages from
        the inner FIFO while none is (which may file keys into their holders' pending keys:
        :attr:`stagings` counts the messages staged so); the first ready key is then a valid
        entry. Lets the queue choose a consumer only when there is a free key for it."""
        ready_keys = self.ready_keys
        while True:
            while ready_keys:
                g = ready_keys[0]
                if g.queued_in is _READY:
                    if g.fifo:
                        return True
                    g.queued_in = None
                    ready_keys.popleft()
                    self._maybe_drop(g)  # its messages expired or were dropped
                else:
                    ready_keys.popleft()  # stale: the key was filed elsewhere since
            if not self._stage_one() and not self._spill_blocked():
                return False

    def take_free(self) -> tuple[GroupKey, QueuedMessage] | None:
        """The head message of the first free key (:meth:`has_free`), None when no key is
        free. Which consumer takes it is the caller's choice (consumers in turn); the caller
        then calls :meth:`hold` (a delivery to ack) or :meth:`put_back` (no-ack, expired)."""
        if not self.has_free():
            return None
        g = self.ready_keys.popleft()
        g.queued_in = None
        return g, self._pop_head(g)

    def take_pending(self, holder: Any) -> tuple[GroupKey, QueuedMessage] | None:
        """The head of one of ``holder``'s pending keys (None: it has none)."""
        dq = self.pending.get(holder)
        if dq is None:
            return None
        g = self._pop_valid(dq, holder)
        if not dq:
            del self.pending[holder]
        return None if g is None else (g, self._pop_head(g))

    def hold(self, g: GroupKey, qm: QueuedMessage, holder: Any) -> None:
        """``qm`` (just taken from ``g``) was delivered to ``holder`` to be acknowledged:
        ``holder`` holds ``g`` until it has settled all of its messages (a message without a
        key is tracked, never held)."""
        if g.key is not None and g.holder is None:
            g.holder = holder
            self.held[holder] = self.held.get(holder, 0) + 1
        g.unacked += 1
        self.inflight[qm.seq] = g
        self._enqueue(g)

    def put_back(self, g: GroupKey) -> None:
        """The message taken from ``g`` is gone without being held (no-ack, expired)."""
        self._enqueue(g)
        self._maybe_drop(g)

    def settled(self, qm: QueuedMessage) -> None:
        """A delivered message left for good (ack, reject, dead-lettered, dropped): one
        fewer unacknowledged for its key, released at zero. Any other message: nothing."""
        g = self.inflight.pop(qm.seq, None)
        if g is None:
            return
        g.unacked -= 1
        if g.unacked == 0:
            self._release(g)
        else:
            self._enqueue(g)  # room again under x-group-prefetch

    def holder_gone(self, holder: Any) -> None:
        """A consumer was cancelled: its keys stay held until its deliveries are settled,
        but nothing more is handed to it."""
        self.pending.pop(holder, None)
        if holder in self.held:
            self.gone.add(holder)

    # ---- stats ---------------------------------------------------------------------------

    @property
    def key_count(self) -> int:
        """Keys with staged or unacknowledged messages (messages without a key not counted)."""
        return len(self.keys) - (None in self.keys)

    def keys_held_by(self, holder: Any) -> int:
        return self.held.get(holder, 0)

    # ---- internals -----------------------------------------------------------------------

    def _key(self, key: Hashable | None) -> GroupKey:
        g = self.keys.get(key)
        if g is None:
            g = self.keys[key] = GroupKey(key)
        return g

    def _stage(self, qm: QueuedMessage) -> None:
        g = self._key(self.key_of(qm.message))
        size = len(qm.message.body)
        self.staged += 1
        self.staged_bytes += size
        if g.spill is not None:  # behind the messages already paged out
            g.spill.append(qm)
            self.spilled += 1
            self.spilled_bytes += size
            return
        g.fifo.append(qm)
        if len(g.fifo) == 1:
            self._push_head(g)
            self._enqueue(g)

    def _stage_one(self) -> bool:
        """Move the inner FIFO's head into its key's FIFO; False when it cannot (empty, or
        the staging window is full)."""
        if not len(self.inner) or not self._window_has_room():
            return False
        qm = self.inner.popleft()
        if qm is None:
            return False
        self.stagings += 1
        self._stage(qm)
        return True

    def _window_has_room(self) -> bool:
        return (self.staged - self.spilled < self.stage_messages
                and self.staged_bytes - self.spilled_bytes < self.stage_bytes)

    def _spill_blocked(self) -> bool:
        """The staging window is full of messages nobody may take now (their keys are held):
        page out all but the first ``SPILL_KEEP`` of each such key (to a spill queue of its
        own, read back as the key drains), so that staging can look further. False when
        there is nothing to page out (or nowhere to)."""
        if self.spill_factory is None or self._window_has_room():
            return False
        moved = 0
        for g in self.keys.values():
            fifo = g.fifo
            if len(fifo) <= self.spill_keep:
                continue
            tail = [fifo.pop() for _ in range(len(fifo) - self.spill_keep)]
            tail.reverse()
            if g.spill is None:
                spill = g.spill = self.spill_factory()
                for qm in tail:
                    spill.append(qm)
            else:  # requeued messages made the RAM part grow: ahead of what is paged out
                g.spill.requeue(tail)
            self.spilled += len(tail)
            self.spilled_bytes += sum(len(qm.message.body) for qm in tail)
            moved += len(tail)
        return moved > 0

    def _refill(self, g: GroupKey) -> None:
        """``g``'s RAM messages ran out: read the next ones back from its spill queue."""
        spill = g.spill
        assert spill is not None
        for _ in range(self.spill_keep):
            qm = spill.popleft()
            if qm is None:
                break
            g.fifo.append(qm)
            self.spilled -= 1
            self.spilled_bytes -= len(qm.message.body)
        if not len(spill):
            spill.close()
            g.spill = None

    def _enqueue(self, g: GroupKey, front: bool = False) -> None:
        """File ``g`` where it can be taken from, if it has staged messages and can be: the
        ready keys (no holder) or its holder's pending keys (room under the key prefetch)."""
        if not g.fifo:
            return
        holder = g.holder
        if holder is None:
            if g.queued_in is _READY:
                return
            g.queued_in = _READY
            if front:
                self.ready_keys.appendleft(g)
            else:
                self.ready_keys.append(g)
            return
        if (holder is GET_HOLDER or holder in self.gone or g.queued_in is holder
                or (self.key_prefetch and g.unacked >= self.key_prefetch)):
            return
        g.queued_in = holder
        dq = self.pending.get(holder)
        if dq is None:
            self.pending[holder] = deque((g,))
        else:
            dq.append(g)

    def _pop_valid(self, dq: deque[GroupKey], owner: Any) -> GroupKey | None:
        """The first key of ``dq`` whose entry is still valid, with messages."""
        while dq:
            g = dq.popleft()
            if g.queued_in is not owner:
                continue  # stale: the key was filed elsewhere since
            g.queued_in = None
            if g.fifo:
                return g
            self._maybe_drop(g)  # its messages expired or were dropped
        return None

    def _pop_head(self, g: GroupKey) -> QueuedMessage:
        qm = g.fifo.popleft()
        self.staged -= 1
        self.staged_bytes -= len(qm.message.body)
        if not g.fifo and g.spill is not None:
            self._refill(g)
        if g.fifo:
            self._push_head(g)
        return qm

    def _release(self, g: GroupKey, front: bool = False) -> None:
        """``g``'s holder has no unacknowledged message of it left."""
        holder = g.holder
        if holder is not None:
            g.holder = None
            n = self.held[holder] - 1
            if n:
                self.held[holder] = n
            else:
                del self.held[holder]
                self.gone.discard(holder)
        if g.fifo:
            self._enqueue(g, front)
        else:
            self._maybe_drop(g)

    def _maybe_drop(self, g: GroupKey) -> None:
        """Forget a key with nothing staged and nothing unacknowledged."""
        if not g.fifo and not g.unacked and self.keys.get(g.key) is g:
            del self.keys[g.key]

    def _push_head(self, g: GroupKey) -> None:
        heap = self._heap
        if heap is None:
            return
        if len(heap) > 2 * len(self.keys) + 64:
            self._heap = None  # mostly stale entries: rebuilt from the live heads
            return
        heapq.heappush(heap, (g.fifo[0].seq, next(self._tick), g))

    def _oldest(self) -> GroupKey | None:
        """The key whose head is the oldest staged message (None only if ``staged`` is
        wrong, not expected)."""
        heap = self._heap
        if heap is None:
            tick = self._tick
            heap = self._heap = [(g.fifo[0].seq, next(tick), g)
                                 for g in self.keys.values() if g.fifo]
            heapq.heapify(heap)
        while heap:
            seq, _, g = heap[0]
            if g.fifo and g.fifo[0].seq == seq:
                return g
            heapq.heappop(heap)
        return None
