"""Where a replica log file's entries are (:mod:`queue_store.replica_log`): a sparse index
from LSN to file position, and the LSN where each leader epoch's entries begin, so entries can
be read back from an offset (a follower's fetch below what its leader keeps in RAM) and the
epoch of any entry the file holds is known (the fetch's consistency check).

Memory: 20 bytes per :data:`INDEX_EVERY` entries, and one pair per epoch.

Source: Kafka's offset index (a sparse offset -> position map per log segment) and
leader-epoch checkpoint.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right

#: entries between two points of the index
INDEX_EVERY = 64


def _first_lsn(epoch: tuple[int, int]) -> int:
    return epoch[1]


class EntryIndex:
    """The entries of one file after its snapshot section, as they are appended (:meth:`add`).

    Attributes:
        epochs: ``(epoch, LSN before its first entry)`` of each epoch, in order.
    """

    def __init__(self) -> None:
        self._lsn, self._pos, self._epoch = array("Q"), array("Q"), array("I")
        self.epochs: list[tuple[int, int]] = []

    def __bool__(self) -> bool:
        return bool(self._lsn)

    def add(self, lsn: int, pos: int, epoch: int) -> None:
        """The entry after LSN ``lsn``, of ``epoch``, is at file position ``pos``."""
        idx = self._lsn
        if not idx or lsn - idx[-1] >= INDEX_EVERY:
            idx.append(lsn)
            self._pos.append(pos)
            self._epoch.append(epoch)
        if not self.epochs or self.epochs[-1][0] != epoch:
            self.epochs.append((epoch, lsn))

    @property
    def due(self) -> int:
        """The LSN from which :meth:`add` takes a point again (0: the index is empty); an
        entry below it adds nothing but a new epoch."""
        return self._lsn[-1] + INDEX_EVERY if self._lsn else 0

    def epoch_of(self, lsn: int) -> int | None:
        """Epoch of the entry at LSN ``lsn`` (offset ``lsn - 1``; the caller knows the file
        holds it); None when no epoch began at or before it."""
        i = bisect_right(self.epochs, lsn - 1, key=_first_lsn) - 1
        return self.epochs[i][0] if i >= 0 else None

    def locate(self, first: int) -> tuple[int, int, int]:
        """``(lsn, position, epoch)`` of the last point at or before the entry at offset
        ``first`` (scan the file from there; an EPOCH record there may change the epoch).

        Raises:
            IndexError: nothing is indexed at or before it.
        """
        i = bisect_left(self._lsn, first + 1) - 1
        if i < 0:
            raise IndexError(first)
        return self._lsn[i], self._pos[i], self._epoch[i]

    def moved(self, lsn: int, pos: int, epoch: int, shift: int, entries_after: bool) -> None:
        """The file was rewritten: the entries up to LSN ``lsn`` are gone (a snapshot
        section), an EPOCH record of ``epoch`` is at ``pos``, and the entries after ``lsn``
        moved by ``shift`` bytes (``entries_after``: there are some)."""
        keep = bisect_left(self._lsn, lsn)
        lsns, poss, epochs = array("Q", [lsn]), array("Q", [pos]), array("I", [epoch])
        lsns.extend(self._lsn[keep:])
        poss.extend(p + shift for p in self._pos[keep:])
        epochs.extend(self._epoch[keep:])
        self._lsn, self._pos, self._epoch = lsns, poss, epochs
        i = bisect_right(self.epochs, lsn, key=_first_lsn)
        rest = self.epochs[i:]
        if entries_after and i and (not rest or rest[0][1] > lsn):
            rest.insert(0, (self.epochs[i - 1][0], lsn))
        self.epochs = rest
