"""Timers for queue TTL and expiry, driven by an injected clock (sans-IO).

The broker core never sleeps: it registers callbacks here (``call_later``); the asyncio
edge arms one loop timer for the earliest deadline (``wakeup``) and calls :meth:`Timers.run_due`
when it fires. Tests drive the same object with a fake clock.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable


class TimerHandle:
    """A scheduled callback; ``cancel()`` stops it from running."""

    __slots__ = ("when", "callback", "cancelled")

    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Timers:
    """A heap of deadlines (seconds on ``clock``).

    Args:
        clock: monotonic time source in seconds.
        wakeup: called with the new earliest deadline (seconds on ``clock``) when one is
            added that is earlier than all others (the asyncio edge arms ``loop.call_at``
            with it); None: nobody is woken, the owner calls :meth:`run_due` itself.
        wall: wall-clock time source in seconds since the epoch, read once here: wall
            time is ``clock`` plus the offset between them at construction (Erlang's
            default ``no_time_warp`` mode does the same), so a fake ``clock`` moves the
            wall clock too; what outlives the process (persisted message expiry, stream
            timestamps, delayed-message due times, x-death times) is in wall-clock ms.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 wakeup: Callable[[float], None] | None = None,
                 wall: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.wakeup = wakeup
        #: wall-clock seconds minus ``clock`` seconds (fixed at construction)
        self.wall_offset = wall() - clock()
        self._heap: list[tuple[float, int, TimerHandle]] = []
        self._counter = itertools.count()

    def wall_ms(self, at: float | None = None) -> int:
        """Wall-clock ms since the epoch (int) of the instant ``at`` (seconds on ``clock``;
        None: now)."""
        return int(((self.clock() if at is None else at) + self.wall_offset) * 1000)

    def from_wall_ms(self, ms: float) -> float:
        """The instant (seconds on ``clock``) of wall-clock ``ms`` since the epoch: the
        inverse of :meth:`wall_ms`."""
        return ms / 1000.0 - self.wall_offset

    def call_later(self, delay: float, callback: Callable[[], None]) -> TimerHandle:
        """Run ``callback`` after ``delay`` seconds (at the next :meth:`run_due` past it)."""
        handle = TimerHandle(self.clock() + max(0.0, delay), callback)
        earliest = self._heap[0][0] if self._heap else None
        heapq.heappush(self._heap, (handle.when, next(self._counter), handle))
        if self.wakeup is not None and (earliest is None or handle.when < earliest):
            self.wakeup(handle.when)
        return handle

    def next_deadline(self) -> float | None:
        """The earliest pending deadline, or None."""
        while self._heap and self._heap[0][2].cancelled:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def run_due(self, now: float | None = None) -> int:
        """Run every callback whose deadline has passed; returns how many ran."""
        now = self.clock() if now is None else now
        ran = 0
        while self._heap and self._heap[0][0] <= now:
            _, _, handle = heapq.heappop(self._heap)
            if not handle.cancelled:
                handle.cancelled = True
                handle.callback()
                ran += 1
        return ran
