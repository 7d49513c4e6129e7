"""The live messages of a quorum queue replica's log (:mod:`queue_store.replica_log`), without
the messages: per message its offset, the position of its ENQ record in the log file and the
record's length (20 bytes, in typed arrays, no object per message), and its returns count
where not 0.

Slots are kept in offset order (the order ENQ records are written in); a message that left is
marked dead in place and the dead slots at the front are cut off now and then, so a FIFO
backlog costs 20 bytes per live message. A position is :data:`UNWRITTEN` until the record is
in the file (the leader's operations are applied before their Write).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator

from queue_store.replica_log_records import read_runs

#: a slot whose ENQ record is not in the file yet (the leader's, until its Write)
UNWRITTEN = -2
#: a slot whose message left
DEAD = -1


class MessageSlots:
    """The live messages' places (module docstring).

    Attributes:
        count: live messages.
        live_bytes: bytes of their ENQ records.
        next_offset: one past the highest offset added.
    """

    def __init__(self) -> None:
        self._offsets = array("Q")
        self._pos = array("q")
        self._len = array("I")
        self._first = 0  # the slots before it are all dead
        self._returns: dict[int, int] = {}
        self._killed: list[int] | None = None  # offsets that left since freeze()
        self.count = self.live_bytes = 0

    def _find(self, offset: int) -> int:
        offsets = self._offsets
        i = bisect_left(offsets, offset, self._first)
        if i < len(offsets) and offsets[i] == offset and self._pos[i] != DEAD:
            return i
        return -1

    def __contains__(self, offset: int) -> bool:
        return self._find(offset) >= 0

    def add(self, offset: int, pos: int, length: int, returns: int = 0) -> None:
        """Message ``offset`` entered, its record at ``pos`` (or :data:`UNWRITTEN`)."""
        offsets = self._offsets
        if offsets and offsets[-1] >= offset:  # not in order (not expected): keep it sorted
            i = bisect_left(offsets, offset, self._first)
            if i < len(offsets) and offsets[i] == offset:
                if self._pos[i] != DEAD:
                    self._kill(i)
                self._pos[i], self._len[i] = pos, length
            else:
                offsets.insert(i, offset)
                self._pos.insert(i, pos)
                self._len.insert(i, length)
                self._first = min(self._first, i)
        else:
            offsets.append(offset)
            self._pos.append(pos)
            self._len.append(length)
        self.count += 1
        self.live_bytes += length
        if returns:
            self._returns[offset] = returns

    def add_many(self, offsets: list[int], positions: list[int], lengths: list[int]) -> None:
        """:meth:`add` of each message (``returns`` 0): appended at once when they are
        consecutive offsets after every slot (a follower's Write of its leader's ENQ
        records), else one by one."""
        mine = self._offsets
        if not offsets or (mine and mine[-1] >= offsets[0]) \
                or offsets != list(range(offsets[0], offsets[0] + len(offsets))):
            for offset, pos, length in zip(offsets, positions, lengths, strict=True):
                self.add(offset, pos, length)
            return
        mine.extend(offsets)
        self._pos.extend(positions)
        self._len.extend(lengths)
        self.count += len(offsets)
        self.live_bytes += sum(lengths)

    def remove(self, offset: int) -> bool:
        """Message ``offset`` left; False if it was not here."""
        i = self._find(offset)
        if i < 0:
            return False
        self._kill(i)
        return True

    def _kill(self, i: int) -> None:
        pos = self._pos
        pos[i] = DEAD
        offset = self._offsets[i]
        if self._killed is not None:
            self._killed.append(offset)
        self.count -= 1
        self.live_bytes -= self._len[i]
        self._returns.pop(offset, None)
        first, n = self._first, len(pos)
        while first < n and pos[first] == DEAD:
            first += 1
        if first > 4096 and first * 2 > n:  # cut the dead slots off the front
            del self._offsets[:first], pos[:first], self._len[:first]
            first = 0
        self._first = first

    def set_returns(self, offset: int, returns: int) -> bool:
        """Message ``offset`` went back ``returns`` times so far; False if not here."""
        if self._find(offset) < 0:
            return False
        if returns:
            self._returns[offset] = returns
        else:
            self._returns.pop(offset, None)
        return True

    def returns(self, offset: int) -> int:
        return self._returns.get(offset, 0)

    def placed(self, offset: int, pos: int) -> None:
        """Message ``offset``'s record was written at ``pos`` (one that left stays gone)."""
        offsets = self._offsets
        i = bisect_left(offsets, offset, self._first)
        if i < len(offsets) and offsets[i] == offset and self._pos[i] == UNWRITTEN:
            self._pos[i] = pos

    def placed_many(self, offsets: list[int], positions: list[int]) -> None:
        """:meth:`placed` of each message of ``offsets`` (in offset order: a Write of the
        leader's operations) at the matching position; each found where the one before
        ended, without a search, when they are consecutive slots (they are: the unwritten
        slots are the last ones)."""
        if not offsets:
            return
        offs, pos = self._offsets, self._pos
        n = len(offs)
        i = bisect_left(offs, offsets[0], self._first)
        for offset, p in zip(offsets, positions, strict=True):
            if i >= n or offs[i] != offset:
                i = bisect_left(offs, offset, self._first)
            if i < n and offs[i] == offset and pos[i] == UNWRITTEN:
                pos[i] = p
            i += 1

    def offsets(self) -> list[int]:
        """The live messages' offsets, in order."""
        pos, first = self._pos, self._first
        return [o for i, o in enumerate(self._offsets) if i >= first and pos[i] != DEAD]

    def place(self, offset: int) -> tuple[int, int] | None:
        """``(position, length)`` of live message ``offset``'s record in the file (None: not
        here, or not written yet)."""
        i = self._find(offset)
        if i < 0 or self._pos[i] < 0:
            return None
        return self._pos[i], self._len[i]

    def records(self, fd: int) -> Iterator[tuple[int, memoryview]]:
        """``(offset, ENQ record)`` of every live message written to the file ``fd``, in
        order, read in runs (:func:`~queue_store.replica_log_records.read_runs`)."""
        return read_runs(fd, self._offsets, self._pos, self._len, self._first)

    # ---- a rewrite of the file aside (compaction) ------------------------------------------

    def freeze(self) -> tuple[array[int], array[int], array[int], dict[int, int]]:
        """Copies of the slots (offsets, positions, lengths; dead ones included) and the
        returns counts, as they are now; the messages that leave from now on are noted for
        :meth:`moved`."""
        first = self._first
        self._killed = []
        return (self._offsets[first:], self._pos[first:], self._len[first:],
                dict(self._returns))

    def thaw(self) -> None:
        """The rewrite was dropped: stop noting what leaves."""
        self._killed = None

    def moved(self, offsets: array[int], new_pos: array[int], lens: array[int],
              shift: int) -> None:
        """The file was rewritten: the frozen slots (``offsets``, ``lens``) are at
        ``new_pos`` (-1: dead then), the messages that left since stay gone, and those added
        since (after the frozen ones) moved by ``shift`` bytes."""
        killed, self._killed = self._killed or [], None
        for offset in killed:
            i = bisect_left(offsets, offset)
            if i < len(offsets) and offsets[i] == offset:
                new_pos[i] = DEAD
        last = offsets[-1] if offsets else 0
        mine = self._offsets
        for i in range(bisect_right(mine, last, self._first), len(mine)):
            p = self._pos[i]
            offsets.append(mine[i])
            new_pos.append(p + shift if p >= 0 else p)
            lens.append(self._len[i])
        first = 0
        while first < len(new_pos) and new_pos[first] == DEAD:
            first += 1
        self._offsets, self._pos, self._len, self._first = offsets, new_pos, lens, first
