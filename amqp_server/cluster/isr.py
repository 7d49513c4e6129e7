"""The in-sync replica rules of a replicated quorum queue, as pure functions (sans-IO).

The leader of a quorum queue (:class:`~amqp_server.cluster.replication.Replica`)
commits a message once every in-sync replica has it on disk (the *high watermark*), and
only an in-sync replica may take over when the leader dies. The rules that keep "every
in-sync replica holds every committed message" true live here, with no clock, socket or
etcd of their own, so they are tested directly (``tests/test_isr.py``):

* **High watermark**: the lowest LSN on disk over the *maximal* ISR: the ISR etcd holds,
  plus a member being added or still being removed while that change is on its way to etcd
  (Kafka's maximal ISR, KIP-497). Counting the member being added means nothing commits
  without it from the moment the leader proposes it, so it cannot enter the ISR lacking a
  message committed while etcd was asked. It exists only while the members in sync both
  before and after the change are a majority.
* **Shrink**: a follower leaves when its link is down, or when it is behind the leader's
  log and has not acknowledged for :data:`LAG_TIMEOUT` seconds.
* **Expand**: a follower rejoins only once it has, on disk, everything committed so far
  (Kafka: its log end reached the high watermark) and its fetch matched this epoch's log. The
  old rule (what the leader had on disk a second ago) let a follower back in without
  messages committed meanwhile, so it could win the next election and lose them.

Source: Kafka replication design (ISR, high watermark, KIP-497 ``AlterPartition``: the
leader uses the maximal ISR while a change is pending); RabbitMQ quorum queues (a message is
confirmed once a quorum has it).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

__all__ = ["LAG_TIMEOUT", "Replicas", "high_watermark", "isr_change", "majority"]

LAG_TIMEOUT = 5.0  # seconds without an acknowledgement before a lagging follower leaves


def majority(members: Collection[int]) -> int:
    """Members needed for a quorum: more than half."""
    return len(members) // 2 + 1


@dataclass(frozen=True)
class Replicas:
    """What the leader knows of its queue's replicas (LSNs count log operations).

    Attributes:
        me: the leader's node index.
        members: every member (etcd's state).
        isr: the in-sync replicas etcd holds.
        proposed: the ISR the leader asked etcd for and has not heard back about (None:
            no change on its way).
        durable: the leader's LSN on disk.
        log_end: the leader's last LSN (appended, maybe not on disk yet).
        progress: follower -> LSN it acknowledged on disk.
        committed: the highest LSN committed so far (0: none).
    """

    me: int
    members: tuple[int, ...]
    isr: tuple[int, ...]
    proposed: tuple[int, ...] | None
    durable: int
    log_end: int
    progress: Mapping[int, int]
    committed: int

    def on_disk(self, member: int) -> int:
        """LSN ``member`` has on disk, as far as the leader knows."""
        return self.durable if member == self.me else self.progress.get(member, 0)


def high_watermark(r: Replicas) -> int | None:
    """The LSN every replica of the maximal ISR has on disk; None while the replicas in
    sync before and after a pending change are not a majority (nothing commits)."""
    counted = set(r.isr)
    steady = set(r.isr)
    if r.proposed is not None:
        counted |= set(r.proposed)
        steady &= set(r.proposed)
    if len(steady) < majority(r.members):
        return None
    return min(r.on_disk(m) for m in counted)


def isr_change(r: Replicas, linked: Collection[int], ready: Collection[int],
               silent_for: Mapping[int, float]) -> tuple[tuple[int, ...], str] | None:
    """The ISR change the leader should ask etcd for now, with why, or None.

    Args:
        r: the replicas (no change on its way: ``r.proposed`` is None).
        linked: members whose link from the leader is up.
        ready: followers whose fetch matched this epoch's log (their log up to the
            fetched offset is the leader's).
        silent_for: follower -> seconds since its last acknowledgement (or since this
            node leads, whichever is later).
    """
    for m in r.isr:
        if m == r.me:
            continue
        behind = r.progress.get(m, 0) < r.log_end
        if m not in linked or (behind and silent_for.get(m, 0.0) > LAG_TIMEOUT):
            return tuple(x for x in r.isr if x != m), f"node {m} leaves the in-sync replicas"
    hw = high_watermark(r)
    floor = max(r.committed, hw or 0)  # everything committed, and what may commit now
    for m in r.members:
        if m not in r.isr and m in ready and m in linked and r.progress.get(m, 0) >= floor:
            return tuple(sorted({*r.isr, m})), f"node {m} is in sync again"
    return None
