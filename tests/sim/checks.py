"""What the simulation checks, and the queue a leader serves from its committed log.

:class:`QueueView` is the simulated broker's quorum queue on a leader: built from committed
entries only (``("enq", id)``, ``("ack", id)``, ``("ret", id)``), so a delivery count never
comes from an operation that may still be lost. :class:`Checker` holds the run's truth: the
committed prefix every leader's commits must agree with, who committed in which epoch, the
confirmed messages and the highest delivery count seen per message.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any


class SimFailure(AssertionError):
    """An invariant broke; the message names the seed, so the run replays exactly."""


class QueueView:
    """A leader's queue state from its committed entries.

    Attributes:
        messages: message id -> delivery count (committed, not acknowledged).
        out: ids delivered by this leader whose ack or return is not committed yet.
        applied: entries applied so far.
    """

    def __init__(self) -> None:
        self.messages: dict[int, int] = {}
        self.out: set[int] = set()
        self.gone: set[int] = set()
        self.applied = 0

    def apply(self, start: int, entries: Iterable[tuple[int, Any]]) -> None:
        assert start == self.applied, (start, self.applied)
        for _epoch, (op, mid) in entries:
            self.applied += 1
            if op == "enq":
                if mid not in self.gone:
                    self.messages[mid] = 0
            elif op == "ack":
                self.messages.pop(mid, None)
                self.gone.add(mid)
                self.out.discard(mid)
            elif op == "ret" and mid in self.messages:
                self.messages[mid] += 1
                self.out.discard(mid)

    def deliverable(self) -> list[int]:
        return [m for m in self.messages if m not in self.out]


class Checker:
    """The invariants of a run (each raises :class:`SimFailure` naming the seed)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.committed: list[tuple[int, Any]] = []  # the longest committed prefix seen
        self.committer: dict[int, int] = {}  # epoch -> node that committed in it
        self.confirmed: set[int] = set()
        self.counts: dict[int, int] = {}  # message id -> highest delivery count seen
        self.now = 0.0

    def fail(self, what: str) -> None:
        raise SimFailure(f"seed {self.seed}: t={self.now:.3f}: {what}")

    def on_commit(self, node: int, epoch: int, log: Sequence[tuple[int, Any]], end: int) -> None:
        """Leader ``node`` of ``epoch`` committed ``log[:end]``."""
        other = self.committer.setdefault(epoch, node)
        if other != node:
            self.fail(f"two leaders committed in epoch {epoch}: nodes {other} and {node}")
        c = self.committed
        common = min(end, len(c))
        if list(log[:common]) != c[:common]:
            first = next(i for i in range(common) if log[i] != c[i])
            self.fail(f"node {node} (epoch {epoch}) committed {log[first]!r} at offset "
                      f"{first}, where {c[first]!r} was committed")
        if end > len(c):
            c.extend(log[len(c):end])

    def isr_holds_committed(self, isr: Collection[int], disks: Sequence[list[Any]],
                            lost: set[int] = frozenset(), running: Collection[int] = ()
                            ) -> None:
        """Every in-sync replica has the committed prefix on disk (fsynced).

        ``lost``: nodes whose disk was wiped, not back yet. No rule keeps one in sync at
        the moment its disk goes (nor when an acknowledgement it sent before arrives after,
        or a change adding it that was asked before), so each is let off until it is
        ``running`` again and out of the ISR (then taken out of ``lost``; the world takes
        out one it restarts once out of the ISR): from then on it is checked like any
        other (a leader that puts it back without the prefix fails the run)."""
        c = self.committed
        n = len(c)
        for m in sorted(lost):
            if m in running and m not in isr:
                lost.discard(m)
        for m in isr:
            if m in lost:
                continue
            d = disks[m]
            if len(d) < n or d[:n] != c:
                have = next((i for i in range(min(n, len(d))) if d[i] != c[i]), min(n, len(d)))
                self.fail(f"node {m} is in the ISR with {have} of {n} committed entries "
                          f"on disk")

    def delivered(self, mid: int, count: int) -> None:
        seen = self.counts.get(mid, 0)
        if count < seen:
            self.fail(f"message {mid} delivered with count {count} after {seen}")
        self.counts[mid] = count

    def final(self, view: QueueView | None, leader_committed: int) -> None:
        """After the faults stop and the cluster settles: a leader recommitted everything,
        and every confirmed message not acknowledged is in its queue."""
        if view is None:
            self.fail("no leader after the cluster settled")
            return
        if leader_committed < len(self.committed):
            self.fail(f"the leader committed {leader_committed} of {len(self.committed)} "
                      f"entries after the cluster settled")
        acked = {mid for _e, (op, mid) in self.committed if op == "ack"}
        lost = sorted(m for m in self.confirmed - acked if m not in view.messages)
        if lost:
            self.fail(f"confirmed messages lost: {lost[:10]}")
