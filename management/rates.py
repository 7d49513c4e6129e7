"""Per-second rates of the management API's counters (``publish_details.rate`` and friends).

Rates are computed when an object is read: each read records a sample ``(time, value)`` per
counter, and the rate is the change since the oldest sample of the last ``window`` seconds
(or since the previous read, when reads are further apart), so a dashboard polling every few
seconds sees RabbitMQ-like rates without a sampling timer. The first read of a counter shows
0.0, as RabbitMQ does before its first sample. Counters not read for ``forget_after`` seconds
(deleted queues...) are dropped.

Source: https://www.rabbitmq.com/docs/management#stats-rates (``rates_mode`` basic).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Hashable


class Rates:
    """Samples of named counters and their per-second rates.

    Args:
        window: seconds of samples kept per counter (the rate's span when read often).
        forget_after: seconds after which a counter nobody reads is dropped.
        clock: monotonic time in seconds (tests pass a fake one).
    """

    def __init__(self, window: float = 10.0, forget_after: float = 600.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.window = window
        self.forget_after = forget_after
        self.clock = clock
        self._samples: dict[Hashable, deque[tuple[float, float]]] = {}
        self._next_sweep = clock() + forget_after

    def rate(self, key: Hashable, value: float) -> float:
        """Record ``value`` of counter ``key`` now; its change per second (>= 0.0, 1 decimal)
        since the oldest sample of the window, 0.0 on the first read."""
        now = self.clock()
        if now >= self._next_sweep:
            self._sweep(now)
        samples = self._samples.get(key)
        if samples is None:
            samples = self._samples[key] = deque()
        # keep one sample at or beyond the window as the baseline
        while len(samples) > 1 and now - samples[1][0] >= self.window:
            samples.popleft()
        base = samples[0] if samples else None
        samples.append((now, value))
        if base is None or now <= base[0]:
            return 0.0
        return round(max(value - base[1], 0.0) / (now - base[0]), 1)

    def _sweep(self, now: float) -> None:
        self._next_sweep = now + self.forget_after
        stale = [k for k, s in self._samples.items() if now - s[-1][0] > self.forget_after]
        for key in stale:
            del self._samples[key]
