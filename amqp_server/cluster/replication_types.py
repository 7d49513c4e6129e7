"""The vocabulary of :mod:`amqp_server.cluster.replication`: etcd's group state, the records
replicas send each other, and the actions the state machine asks its driver to carry out.

All are frozen dataclasses holding plain values, so a driver (asyncio with etcd and node
links, or the deterministic simulation in ``tests/sim``) can compare, copy and log them.
Offsets count log entries from 0; an entry is ``(epoch, payload)`` where the payload is
opaque to replication (the queue's operation).

Source: Kafka replication protocol (Fetch with ``lastFetchedEpoch``, ``divergingEpoch``
answers, KIP-101 / KIP-279 / KIP-320 leader epochs, ``AlterPartition`` ISR changes).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

__all__ = [
    "Become", "Cas", "Commit", "Diverging", "Entry", "Fetch", "Fsync", "GroupState", "Install",
    "Records", "Send", "Snapshot", "StepDown", "Truncate", "Write",
]

Entry = tuple[int, Any]  # (leader epoch that appended it, payload)


@dataclass(frozen=True)
class GroupState:
    """One replicated queue's state in etcd (changed only by compare-and-swap).

    Attributes:
        leader: node index of the leader.
        run: the leader's incarnation (a number unique per process start) that won this
            epoch: a restarted node never leads an epoch it took before the restart.
        epoch: leader epoch, +1 at every election.
        members: every replica's node.
        isr: the in-sync replicas (the leader included).
        version: etcd's modification revision of the value (the compare of a swap).
        log_ids: ``(node, log id)`` for ISR members: the id of the replica log each was
            admitted with (Kafka KIP-858's directory id; :attr:`Fetch.log_id`), sorted by
            node. A member with none recorded (a new queue's initial followers until the
            leader saw their first fetch) counts for nothing committed until the leader
            records it, and may lead (nothing was committed with it in the ISR). None: a
            state written before log ids (counted and elected as before; the leader's
            next tick records the ids).
    """

    leader: int
    run: int
    epoch: int
    members: tuple[int, ...]
    isr: tuple[int, ...]
    version: int = 0
    log_ids: tuple[tuple[int, int], ...] | None = None

    def but(self, **changes: Any) -> GroupState:
        """A copy with ``changes`` (the proposed value of a swap)."""
        return replace(self, **changes)

    def log_id(self, node: int) -> int | None:
        """The log id recorded for ``node`` (None: none recorded)."""
        for m, log_id in self.log_ids or ():
            if m == node:
                return log_id
        return None

    def with_log_ids(self, ids: dict[int, int]) -> tuple[tuple[int, int], ...]:
        """``ids`` restricted to this state's ISR, as :attr:`log_ids` wants them."""
        return tuple(sorted((m, i) for m, i in ids.items() if m in self.isr))


# ---- records between replicas ---------------------------------------------------------------


@dataclass(frozen=True)
class Fetch:
    """Follower -> leader: "send me entries from ``offset``" (Kafka Fetch). It is also the
    follower's acknowledgement: ``durable`` entries are on its disk.

    Attributes:
        epoch: the leader epoch the follower follows.
        offset: the follower's log end.
        last_epoch: epoch of the entry at ``offset - 1`` (0 for an empty log): the leader
            checks it against its own log (KIP-320) before counting or answering.
        durable: entries the follower has fsynced (<= offset).
        log_id: the id of the follower's replica log, drawn when the log was created (a
            lost disk or deleted data directory gives a new one; 0: unknown): the leader
            counts the fetch only for the log the ISR admitted (:attr:`GroupState.log_ids`).
    """

    epoch: int
    offset: int
    last_epoch: int
    durable: int
    log_id: int = 0


@dataclass(frozen=True)
class Records:
    """Leader -> follower: entries from ``first`` (whose predecessor has ``prev_epoch``),
    and the leader's high watermark."""

    epoch: int
    first: int
    prev_epoch: int
    entries: tuple[Entry, ...]
    hw: int


@dataclass(frozen=True)
class Diverging:
    """Leader -> follower: your entry at ``offset - 1`` (of epoch ``last_epoch``, as your
    fetch said) is not mine: my largest epoch not above yours is ``end_epoch`` and it ends at
    ``end_offset``; truncate and fetch again. A follower whose log end or last epoch is no
    longer the fetch's ignores it (a late or duplicated answer must not cut a log that has
    caught up meanwhile)."""

    epoch: int
    offset: int
    last_epoch: int
    end_epoch: int
    end_offset: int


@dataclass(frozen=True)
class Snapshot:
    """Leader -> follower that fetched below the leader's compacted log start: the state
    after the entries below ``offset`` (opaque: the driver's, e.g. the queue's live
    messages), whose last entry had epoch ``last_epoch``; then it fetches from ``offset``."""

    epoch: int
    offset: int
    last_epoch: int
    state: Any
    hw: int


# ---- actions for the driver ------------------------------------------------------------------


@dataclass(frozen=True)
class Send:
    """Send ``record`` (Fetch, Records or Diverging) to node ``to``; it may be lost."""

    to: int
    record: Fetch | Records | Diverging | Snapshot


@dataclass(frozen=True)
class Write:
    """Append ``entries`` to the replica's file at offset ``first`` (its current end)."""

    first: int
    entries: tuple[Entry, ...]


@dataclass(frozen=True)
class Truncate:
    """Cut the replica's file to ``offset`` entries (a divergent tail of an older epoch)."""

    offset: int


@dataclass(frozen=True)
class Install:
    """Replace the replica's file by ``state`` (a snapshot at ``offset``, whose last entry
    had epoch ``last_epoch``) and no entries; an Fsync follows."""

    offset: int
    last_epoch: int
    state: Any


@dataclass(frozen=True)
class Fsync:
    """fsync the replica's file, then call ``Replica.fsync_done(token)``."""

    token: tuple[int, int]  # (truncation generation, log end when asked)


@dataclass(frozen=True)
class Cas:
    """Replace etcd's state by ``new`` if its version is still ``new.version``; then call
    ``Replica.cas_result(new.version, won)``; etcd's watch brings the value back."""

    new: GroupState
    why: str


@dataclass(frozen=True)
class Commit:
    """Leader: entries ``[start, end)`` are committed: apply them to the queue and confirm
    their publishers (``Replica.entries(start, end)``)."""

    start: int
    end: int


@dataclass(frozen=True)
class Become:
    """This replica leads ``epoch`` from now; entries below ``committed`` are known
    committed (the rest of its log commits once the ISR has it)."""

    epoch: int
    committed: int


@dataclass(frozen=True)
class StepDown:
    """This replica stopped leading ``epoch``: fail publishes not committed, cancel
    consumers; it follows the next leader."""

    epoch: int
