"""Backing queues: where a queue's ready messages wait, in order.

:class:`MemoryBackingQueue` keeps everything in RAM (every message *alpha*, in RabbitMQ's
terms); :class:`PriorityBackingQueue` is one backing queue per priority level (RabbitMQ's
``rabbit_priority_queue``), highest first, FIFO within a level. Both keep the body-byte
total that ``x-max-length-bytes`` needs.

Source: RabbitMQ ``rabbit_backing_queue`` behaviour, https://www.rabbitmq.com/docs/priority.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from itertools import chain
from typing import Protocol

from queue_store.message import Message


class QueuedMessage:
    """A message's place in one queue: sequence number (publish order), redelivered flag,
    expiry deadline (``expires_at``, seconds on the broker clock, or None), priority, and
    its on-disk state (store reference, queue-index record)."""

    __slots__ = ("seq", "message", "redelivered", "expires_at", "priority", "msg_id",
                 "indexed", "delivery_logged", "size", "returns")

    def __init__(self, seq: int, message: Message, redelivered: bool = False,
                 expires_at: float | None = None, priority: int = 0) -> None:
        self.seq = seq
        self.message = message
        self.redelivered = redelivered
        self.expires_at = expires_at
        self.priority = priority
        self.msg_id = 0  # this queue holds a reference in the message store
        self.indexed = False  # recorded in the queue index (persistent on a durable queue)
        self.delivery_logged = False
        self.size = 0  # body bytes, kept while the body is not in RAM (gamma)
        self.returns = 0  # times given back to the queue (quorum queues' delivery count)

    def __lt__(self, other: QueuedMessage) -> bool:
        return self.seq < other.seq


class BackingQueue(Protocol):
    """The ready-message store of a queue."""

    bytes: int

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[QueuedMessage]: ...

    def append(self, qm: QueuedMessage) -> None: ...

    def popleft(self) -> QueuedMessage | None: ...

    def peek(self) -> QueuedMessage | None: ...

    def requeue(self, qms: list[QueuedMessage]) -> None: ...

    def clear(self) -> Iterable[QueuedMessage]:
        """Empty the queue; every message it held, head first (consume at once; messages
        paged out may come without their bodies, ``message`` None)."""
        ...

    def close(self) -> None: ...

    def set_memory_pressure(self, on: bool) -> None: ...

    def head_seq(self) -> int | None:
        """The seq of the next message to deliver, when known without reading the disk
        (None: empty or not known)."""
        ...

    def state_counts(self) -> dict[str, int]:
        """Messages and body bytes per state: ``alpha``, ``beta``, ``gamma``, ``delta`` and
        ``<state>_bytes`` (see :mod:`queue_store.variable_queue`)."""
        ...


STATES = ("alpha", "beta", "gamma", "delta")


class MemoryBackingQueue(deque):  # type: ignore[type-arg]
    """FIFO of ready messages in RAM; ``requeue`` puts messages back at their original
    positions (by sequence number). A deque itself, so that ``len()``, truth and iteration
    (asked on every publish) are the deque's C calls, not a Python method's."""

    __slots__ = ("bytes",)

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0

    def append(self, qm: QueuedMessage) -> None:
        deque.append(self, qm)
        self.bytes += len(qm.message.body)

    def popleft(self) -> QueuedMessage | None:  # type: ignore[override]
        if not self:
            return None
        qm: QueuedMessage = deque.popleft(self)
        self.bytes -= len(qm.message.body)
        return qm

    def peek(self) -> QueuedMessage | None:
        return self[0] if self else None

    def head_seq(self) -> int | None:
        """The seq of the next message to deliver (None: empty)."""
        return self[0].seq if self else None

    def requeue(self, qms: list[QueuedMessage]) -> None:
        """Merge ``qms`` (sorted by seq) back in by sequence number."""
        if not qms:
            return
        self.bytes += sum(len(qm.message.body) for qm in qms)
        if not self or qms[-1].seq < self[0].seq:
            self.extendleft(reversed(qms))
        else:
            merged = list(heapq.merge(qms, self))
            deque.clear(self)
            self.extend(merged)

    def clear(self) -> list[QueuedMessage]:  # type: ignore[override]
        out = list(self)
        deque.clear(self)
        self.bytes = 0
        return out

    def close(self) -> None:
        """Nothing to release (RAM only)."""

    def set_memory_pressure(self, on: bool) -> None:
        """Nothing to page to (RAM only)."""

    def state_counts(self) -> dict[str, int]:
        """Every message is alpha (RAM only)."""
        return {"alpha": len(self), "beta": 0, "gamma": 0, "delta": 0,
                "alpha_bytes": self.bytes, "beta_bytes": 0, "gamma_bytes": 0, "delta_bytes": 0}


class PriorityBackingQueue:
    """One :class:`MemoryBackingQueue` per priority 0..max_priority; a message's priority is
    capped at ``max_priority`` (RabbitMQ)."""

    __slots__ = ("_levels", "max_priority")

    def __init__(self, max_priority: int,
                 factory: Callable[[int], BackingQueue] | None = None) -> None:
        self.max_priority = max_priority
        make = factory or (lambda level: MemoryBackingQueue())
        self._levels: list[BackingQueue] = [make(level) for level in range(max_priority + 1)]

    @property
    def bytes(self) -> int:  # type: ignore[override]
        return sum(level.bytes for level in self._levels)

    def __len__(self) -> int:
        return sum(len(level) for level in self._levels)

    def __iter__(self) -> Iterator[QueuedMessage]:
        for level in reversed(self._levels):
            yield from level

    def _level(self, qm: QueuedMessage) -> BackingQueue:
        return self._levels[min(max(qm.priority, 0), self.max_priority)]

    def append(self, qm: QueuedMessage) -> None:
        self._level(qm).append(qm)

    def popleft(self) -> QueuedMessage | None:
        for level in reversed(self._levels):
            if len(level):
                return level.popleft()
        return None

    def peek(self) -> QueuedMessage | None:
        for level in reversed(self._levels):
            if len(level):
                return level.peek()
        return None

    def head_seq(self) -> int | None:
        """The seq of the next message to deliver: the highest non-empty level's head."""
        for level in reversed(self._levels):
            if len(level):
                return level.head_seq()
        return None

    def requeue(self, qms: list[QueuedMessage]) -> None:
        by_level: dict[int, list[QueuedMessage]] = {}
        for qm in qms:
            by_level.setdefault(min(max(qm.priority, 0), self.max_priority), []).append(qm)
        for index, items in by_level.items():
            self._levels[index].requeue(items)

    def clear(self) -> Iterable[QueuedMessage]:
        return chain.from_iterable([level.clear() for level in self._levels])

    def close(self) -> None:
        for level in self._levels:
            level.close()

    def set_memory_pressure(self, on: bool) -> None:
        for level in self._levels:
            level.set_memory_pressure(on)

    def state_counts(self) -> dict[str, int]:
        """The sums over the priority levels."""
        out: dict[str, int] = {}
        for level in self._levels:
            for key, value in level.state_counts().items():
                out[key] = out.get(key, 0) + value
        return out


def make_backing_queue(max_priority: int | None,
                       factory: Callable[[int], BackingQueue] | None = None) -> BackingQueue:
    """A priority backing queue for ``x-max-priority`` >= 1, else one FIFO;
    ``factory(level)`` makes each FIFO (default: RAM only)."""
    if max_priority:
        return PriorityBackingQueue(max_priority, factory)
    return factory(0) if factory is not None else MemoryBackingQueue()
