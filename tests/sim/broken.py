"""Replication rules with one known flaw each, that the simulation must catch (a check
that no seed can fail is no check): ``tests/test_replication_sim.py`` asserts each fails a
seed. The ISR rejoin rule before #30 is :func:`tests.sim.world.old_rejoin_rules`; the
replication before replica log ids is ``BROKEN_WITHOUT_WIPE_WAIT["log ids ignored"]``."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping

from amqp_server.cluster.isr import Replicas, high_watermark, isr_change
from amqp_server.cluster.replication_rules import Rules
from tests.sim.world import old_rejoin_rules


def _hw_without_the_proposed_isr(r: Replicas) -> int | None:
    """The high watermark over etcd's ISR only: a member being added is not counted while
    the swap is on its way (the code before #30; Kafka's KIP-497 counts it)."""
    return high_watermark(dataclasses.replace(r, proposed=None))


def _the_most_it_ever_said(counted: int | None, fetched: int | None) -> int | None:
    """What a follower has on disk as the most any of its fetches said, kept when its node
    leaves etcd's live nodes (the code before 993c8b7 and 9fd7502): a node back with its
    replica log lost counts what it had, and rejoins the ISR on it."""
    if fetched is None:
        return counted
    return max(counted or 0, fetched)


def _expand_at_the_high_watermark_only(r: Replicas, linked: Collection[int],
                                       ready: Collection[int], silent_for: Mapping[int, float],
                                       mark: int) -> tuple[tuple[int, ...], str] | None:
    """Rejoin once at the leader's current high watermark, forgetting its epoch start (a
    new leader's high watermark starts below what the last leader committed)."""
    return isr_change(dataclasses.replace(r, committed=0), linked, ready, silent_for)


def _any_log_is_the_same(recorded: int | None, log_id: int) -> bool:
    """Every replica log is the one recorded for its node (log ids ignored: the code before
    them): a node back from a lost disk while still in the ISR may lead with its empty log
    (seed 724 with ``Config(wipe_waits=False)``)."""
    return True


BROKEN: dict[str, Rules] = {
    "old rejoin rule": old_rejoin_rules(),
    "high watermark without the proposed ISR": Rules(high_watermark=_hw_without_the_proposed_isr),
    "rejoin without the epoch start": Rules(isr_change=_expand_at_the_high_watermark_only),
    "progress kept across a lost disk": Rules(progress=_the_most_it_ever_said),
}

# rules that fail seeds only when a node back from a lost disk may start while etcd's ISR
# still lists it (``Config(wipe_waits=False)``)
BROKEN_WITHOUT_WIPE_WAIT: dict[str, Rules] = {
    "log ids ignored": Rules(same_log=_any_log_is_the_same),
}
