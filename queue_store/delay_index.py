"""The in-RAM order of a delayed exchange's held messages: a compact index by due time.

Theory of operation
-------------------
Each held message is four integers: due time (wall-clock ms), publish sequence, location of
its record on disk and the record's size (bytes). They are kept in one-second *buckets*
(``due // 1000``), each a flat ``array('q')`` (32 bytes a message, no Python object per
message), and a heap of bucket numbers. Only the earliest bucket is *open*: sorted into a
list of tuples by (due, sequence), so messages due at the same ms come out in publish order.
A message added to an already-open second is inserted into that sorted list.

:meth:`DelayIndex.pop_due` takes everything due at or before ``now`` (opening further buckets
as needed); :meth:`DelayIndex.next_due` is the earliest due time (the one timer the exchange
arms). A message is cancelled by (due, sequence): only its bucket is searched.

Memory: 32 bytes per held message plus about 100 bytes per message of the open second.
Everything due in the same second is sorted at once when that second comes up.
"""

from __future__ import annotations

import bisect
import heapq
from array import array
from collections.abc import Iterator

BUCKET_MS = 1000  # one bucket per second of due time
_MAX = 2**63 - 1

Entry = tuple[int, int, int, int]  # (due ms, seq, location, size)


class DelayIndex:
    """Held messages ordered by (due time, publish sequence); see the module docstring."""

    def __init__(self) -> None:
        self._buckets: dict[int, array[int]] = {}
        self._heap: list[int] = []  # bucket numbers > _open_bucket (may hold emptied ones)
        self._open: list[Entry] = []  # sorted; every entry of buckets <= _open_bucket
        self._open_bucket = -1
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def add(self, due: int, seq: int, loc: int, size: int) -> None:
        """Hold one message due at ``due`` (wall-clock ms)."""
        self.count += 1
        bucket = due // BUCKET_MS
        if bucket <= self._open_bucket:
            bisect.insort(self._open, (due, seq, loc, size))
            return
        arr = self._buckets.get(bucket)
        if arr is None:
            arr = self._buckets[bucket] = array("q")
            heapq.heappush(self._heap, bucket)
        arr.extend((due, seq, loc, size))

    def _fill(self) -> None:
        """Open the next bucket while the open list is empty."""
        while not self._open and self._heap:
            bucket = heapq.heappop(self._heap)
            arr = self._buckets.pop(bucket, None)
            self._open_bucket = bucket
            if arr:
                it = iter(arr)
                self._open = sorted(zip(it, it, it, it, strict=True))

    def next_due(self) -> int | None:
        """The earliest due time (ms), or None when nothing is held."""
        self._fill()
        return self._open[0][0] if self._open else None

    def pop_due(self, now: int, limit: int = _MAX) -> list[Entry]:
        """Remove and return up to ``limit`` entries due at or before ``now`` (ms), in
        (due, sequence) order."""
        out: list[Entry] = []
        while len(out) < limit:
            self._fill()
            if not self._open:
                break
            k = bisect.bisect_right(self._open, (now, _MAX))
            k = min(k, limit - len(out))
            if k == 0:
                break
            out.extend(self._open[:k])
            del self._open[:k]
        self.count -= len(out)
        return out

    def remove(self, due: int, seq: int) -> Entry | None:
        """Remove the entry (``due``, ``seq``) (a cancel); None when it is not held."""
        bucket = due // BUCKET_MS
        if bucket <= self._open_bucket:
            i = bisect.bisect_left(self._open, (due, seq))
            if i < len(self._open) and self._open[i][:2] == (due, seq):
                self.count -= 1
                return self._open.pop(i)
            return None
        arr = self._buckets.get(bucket)
        if arr is None:
            return None
        for i in range(0, len(arr), 4):
            if arr[i + 1] == seq and arr[i] == due:
                entry = (arr[i], arr[i + 1], arr[i + 2], arr[i + 3])
                del arr[i:i + 4]
                if not arr:
                    del self._buckets[bucket]  # its heap entry is skipped by _fill
                self.count -= 1
                return entry
        return None

    def entries(self, offset: int = 0) -> Iterator[Entry]:
        """Held entries in (due, sequence) order from position ``offset``; whole buckets
        before it are skipped without sorting them. Do not modify the index while
        iterating."""
        if offset < len(self._open):
            yield from self._open[offset:]
            offset = 0
        else:
            offset -= len(self._open)
        for bucket in sorted(self._buckets):
            arr = self._buckets[bucket]
            n = len(arr) // 4
            if offset >= n:
                offset -= n
                continue
            it = iter(arr)
            yield from sorted(zip(it, it, it, it, strict=True))[offset:]
            offset = 0

    def clear(self) -> list[Entry]:
        """Drop everything; returns what was held (any order)."""
        out = list(self._open)
        for arr in self._buckets.values():
            it = iter(arr)
            out.extend(zip(it, it, it, it, strict=True))
        self._buckets.clear()
        self._heap.clear()
        self._open = []
        self.count = 0
        return out
