"""The replication rules a :class:`amqp_server.cluster.replication.Replica` follows, and its
timings: :class:`Timing` (what it waits for), :class:`Rules` (the ISR change, the high
watermark, the follower progress the leader counts and the log-id check, swappable so tests
can plug in a broken one: ``tests/sim/broken.py``) and the default rules.

Source: Kafka replication (ISR changes, KIP-966's replica log check); moved out of
``replication.py`` unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from amqp_server.cluster.isr import Replicas, high_watermark, isr_change
from amqp_server.cluster.log_ids import same_log

__all__ = ["IsrRule", "Rules", "Timing", "kafka_isr_change", "latest_fetch_progress"]

IsrRule = Callable[[Replicas, Collection[int], Collection[int], Mapping[int, float], int],
                   "tuple[tuple[int, ...], str] | None"]


def kafka_isr_change(r: Replicas, linked: Collection[int], ready: Collection[int],
                     silent_for: Mapping[int, float], mark: int) -> tuple[tuple[int, ...], str] | None:
    """The ISR change to ask for (:func:`amqp_server.cluster.isr.isr_change`); ``mark`` (the
    leader's durable offset at the previous tick) is what the rule before #30 used, and is
    ignored here."""
    return isr_change(r, linked, ready, silent_for)


def latest_fetch_progress(counted: int | None, fetched: int | None) -> int | None:
    """What a leader counts as on a follower's disk (entries), given what it counted before
    (None: nothing) and the news: the on-disk offset the follower's latest fetch says
    (``min(durable, offset)``), or None when its node left etcd's live nodes. The latest
    fetch is what counts, and a node that left is forgotten (None) until it fetches again:
    a follower that restarted with its replica log lost has less than it had (993c8b7,
    9fd7502; the rule before counted the most it ever said, and kept it)."""
    return fetched


@dataclass(frozen=True)
class Timing:
    """Seconds (simulated or real) the replica waits for things.

    Attributes:
        lag_timeout: a follower silent this long leaves the ISR (isr.LAG_TIMEOUT in prod).
        fetch_interval: a follower with no answer fetches again after this.
        batch: most entries in one Records.
        push_hw: a leader whose high watermark moved answers the parked fetches at once
            (an empty Records with the new high watermark), instead of with the next
            append: followers that serve reads (a replicated stream's consumers) learn the
            committed offset without waiting for more data.
    """

    lag_timeout: float = 5.0
    fetch_interval: float = 0.5
    batch: int = 256
    push_hw: bool = False


@dataclass(frozen=True)
class Rules:
    """The replication rules (swappable so tests can plug in a broken one:
    ``tests/sim/broken.py``).

    Attributes:
        isr_change: the ISR change to ask etcd for (:func:`kafka_isr_change`).
        high_watermark: what is committed (:func:`amqp_server.cluster.isr.high_watermark`).
        progress: what the leader counts on a follower's disk (:func:`latest_fetch_progress`).
        same_log: whether a replica log is the one recorded for its node
            (:func:`amqp_server.cluster.log_ids.same_log`).
    """

    isr_change: IsrRule = kafka_isr_change
    high_watermark: Callable[[Replicas], int | None] = high_watermark
    progress: Callable[[int | None, int | None], int | None] = latest_fetch_progress
    same_log: Callable[[int | None, int], bool] = same_log
