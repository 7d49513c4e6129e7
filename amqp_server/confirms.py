"""Publisher confirms bookkeeping for one channel (Confirm.Select mode).

Each publish gets the next sequence number (the delivery tag of the Basic.Ack/Nack the
publisher will see). A sequence number is *unconfirmed* until every queue it was routed to has
taken responsibility for it. :meth:`Confirms.drain` turns what was settled since the last drain
into as few Basic.Ack/Nack as possible: one ``multiple=True`` ack covers every settled tag
below the oldest still-unconfirmed one, as RabbitMQ's ``rabbit_confirms`` does.

Source: https://www.rabbitmq.com/docs/confirms#publisher-confirms; AMQP 0-9-1 extension
``confirm.select``.
"""

from __future__ import annotations

from itertools import compress, repeat
from operator import is_


class Confirms:
    """Sequence numbers of one confirm-mode channel.

    ``next_seq()`` gives 1, 2, 3...; ``confirm(seq)``/``reject(seq)`` settle one;
    ``drain()`` returns ``[(delivery_tag, multiple, ack)]`` to send, in order.
    """

    __slots__ = ("_seq", "_unconfirmed", "_acked", "_nacked", "confirmed")

    def __init__(self) -> None:
        self._seq = 0
        self._unconfirmed: dict[int, None] = {}  # insertion order == seq order
        self._acked: list[int] = []
        self._nacked: list[int] = []
        self.confirmed = 0  # sequence numbers acked to the publisher (stats)

    def next_seq(self, pending: bool = False) -> int:
        """Allocate the next sequence number; ``pending`` keeps it unconfirmed until
        :meth:`confirm`/:meth:`reject`, otherwise it is confirmed at once."""
        self._seq += 1
        if pending:
            self._unconfirmed[self._seq] = None
        else:
            self._acked.append(self._seq)
        return self._seq

    def confirm(self, seq: int) -> None:
        if self._unconfirmed.pop(seq, 0) is None:
            self._acked.append(seq)

    def confirm_many(self, seqs: list[int]) -> None:
        """:meth:`confirm` of each of ``seqs`` (a group confirmed together), in C loops:
        the pending ones leave the unconfirmed set and join the acked list."""
        popped = map(self._unconfirmed.pop, seqs, repeat(0))  # None: it was pending
        self._acked.extend(compress(seqs, map(is_, popped, repeat(None))))

    def reject(self, seq: int) -> None:
        if self._unconfirmed.pop(seq, 0) is None:
            self._nacked.append(seq)

    def reject_many(self, seqs: list[int]) -> None:
        """:meth:`reject` of each of ``seqs`` (a group nacked together, e.g. a failed fsync):
        the pending ones leave the unconfirmed set and join the nacked list."""
        popped = map(self._unconfirmed.pop, seqs, repeat(0))  # None: it was pending
        self._nacked.extend(compress(seqs, map(is_, popped, repeat(None))))

    @property
    def unconfirmed_count(self) -> int:
        """Sequence numbers not yet settled (published, awaiting their confirm)."""
        return len(self._unconfirmed)

    @property
    def sequence(self) -> int:
        """Sequence numbers handed out so far (publishes received in confirm mode)."""
        return self._seq

    @property
    def dirty(self) -> bool:
        return bool(self._acked or self._nacked)

    def drain(self) -> list[tuple[int, bool, bool]]:
        """The (delivery_tag, multiple, is_ack) confirms to send now, oldest first."""
        out: list[tuple[int, bool, bool]] = []
        if self._nacked:
            out.extend((seq, False, False) for seq in sorted(self._nacked))
            self._nacked.clear()
        if not self._acked:
            return out
        acked = sorted(self._acked)
        self._acked.clear()
        self.confirmed += len(acked)
        oldest = next(iter(self._unconfirmed), None)
        below = acked if oldest is None else [s for s in acked if s < oldest]
        above = [] if oldest is None else [s for s in acked if s > oldest]
        # every tag below the oldest unconfirmed one is settled: one multiple ack covers them
        # (a nack sent earlier in ``out`` for a lower tag was already resolved client-side)
        if len(below) > 1:
            out.append((below[-1], True, True))
        elif below:
            out.append((below[0], False, True))
        out.extend((s, False, True) for s in above)
        out.sort(key=lambda item: item[0])
        return out
