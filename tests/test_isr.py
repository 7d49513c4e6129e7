"""The in-sync replica rules of a quorum queue (:mod:`amqp_server.cluster.isr`), as pure
functions: the promise "every replica in the ISR has every committed message" is checked on
examples and on random runs of a small model (hypothesis), and the old rejoin rule (a
follower back in once it had what the leader had on disk a second before) is shown to break
it (#30)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amqp_server.cluster.isr import LAG_TIMEOUT, Replicas, high_watermark, isr_change

ALL = {1, 2, 3}


def replicas(isr: tuple[int, ...], progress: dict[int, int], *, durable: int = 100,
             log_end: int | None = None, committed: int = 0,
             proposed: tuple[int, ...] | None = None) -> Replicas:
    return Replicas(1, (1, 2, 3), isr, proposed, durable,
                    durable if log_end is None else log_end, progress, committed)


def old_rule(r: Replicas, mark: int) -> tuple[int, ...] | None:
    """The rule before #30: back in once it has what the leader had on disk a tick ago."""
    for m in r.members:
        if m not in r.isr and r.progress.get(m, 0) >= mark:
            return tuple(sorted({*r.isr, m}))
    return None


def test_a_follower_rejoins_only_with_everything_committed() -> None:
    # node 3 left; since then 1 and 2 committed up to 100; node 3 has 90, what the leader
    # had on disk a second ago
    r = replicas((1, 2), {2: 100, 3: 90}, committed=100)
    assert old_rule(r, mark=90) == (1, 2, 3)  # the old rule let it in without 91..100
    assert isr_change(r, ALL, ALL, {}) is None
    caught_up = replicas((1, 2), {2: 100, 3: 100}, committed=100)
    assert isr_change(caught_up, ALL, ALL, {}) == ((1, 2, 3), "node 3 is in sync again")


def test_a_follower_without_this_epochs_snapshot_or_link_stays_out() -> None:
    r = replicas((1, 2), {2: 100, 3: 100}, committed=100)
    assert isr_change(r, ALL, {2}, {}) is None  # no snapshot of this epoch yet
    assert isr_change(r, {1, 2}, ALL, {}) is None  # its link is down


def test_while_a_member_is_being_added_nothing_commits_without_it() -> None:
    # 1 and 2 have 120; node 3 has 100 (all that was committed when it was proposed)
    steady = replicas((1, 2), {2: 120, 3: 100}, durable=120)
    assert high_watermark(steady) == 120
    adding = replicas((1, 2), {2: 120, 3: 100}, durable=120, proposed=(1, 2, 3))
    assert high_watermark(adding) == 100


def test_while_a_member_is_being_removed_it_still_counts() -> None:
    removing = replicas((1, 2, 3), {2: 120, 3: 80}, durable=120, proposed=(1, 2))
    assert high_watermark(removing) == 80
    assert high_watermark(replicas((1, 2), {2: 120, 3: 80}, durable=120)) == 120


def test_no_high_watermark_below_a_majority() -> None:
    assert high_watermark(replicas((1,), {})) is None
    # 1,2,3 -> 1: only 1 is in sync both before and after
    assert high_watermark(replicas((1, 2, 3), {2: 5, 3: 5}, proposed=(1,))) is None


@pytest.mark.parametrize(("linked", "silent", "progress", "expected"), [
    ({1, 3}, 0.0, 100, ((1, 3), "node 2 leaves the in-sync replicas")),  # link down
    (ALL, LAG_TIMEOUT + 1, 50, ((1, 3), "node 2 leaves the in-sync replicas")),  # lagging
    (ALL, 1.0, 50, None),  # behind but acknowledging
    (ALL, LAG_TIMEOUT + 1, 100, None),  # quiet but has everything
])
def test_shrink(linked: set[int], silent: float, progress: int,
                expected: tuple[tuple[int, ...], str] | None) -> None:
    r = replicas((1, 2, 3), {2: progress, 3: 100})
    assert isr_change(r, linked, ALL, {2: silent, 3: 0.0}) == expected


# ---- random runs of a small model -----------------------------------------------------------

Rule = Callable[[Replicas, int], tuple[int, ...] | None]


def new_rule(r: Replicas, mark: int) -> tuple[int, ...] | None:
    change = isr_change(r, ALL, ALL, {m: 0.0 for m in r.members})
    return None if change is None else change[0]


def run(rule: Rule, steps: list[tuple[int, int]], maximal: bool = True) -> None:
    """Leader 1 of members 1,2,3: appends, its fsyncs, follower fetches, ISR proposals
    accepted or refused by etcd, commits, a follower dropped from the ISR; after every step,
    every ISR member has every committed LSN on disk. ``maximal`` False: the high watermark
    ignores a proposed ISR (the code before #30)."""
    log_end = durable = committed = 0
    mark = 0  # the leader's LSN on disk at the previous proposal ("a second ago")
    progress = {2: 0, 3: 0}
    isr: tuple[int, ...] = (1, 2, 3)
    proposed: tuple[int, ...] | None = None
    for action, arg in steps:
        r = Replicas(1, (1, 2, 3), isr, proposed, durable, log_end, progress, committed)
        if action == 0:
            log_end += 1 + arg % 5
        elif action == 1:
            durable = log_end
        elif action == 2:  # follower 2 or 3 fetches some and fsyncs
            m = 2 + arg % 2
            progress[m] = min(log_end, progress[m] + 1 + arg % 7)
        elif action == 3 and proposed is None:
            proposed = rule(r, mark)
            mark = durable
        elif action == 4 and proposed is not None:
            isr, proposed = proposed, None  # etcd took it
        elif action == 5:
            proposed = None  # etcd refused it (someone changed the state first)
        elif action == 6:
            seen = r if maximal else Replicas(1, (1, 2, 3), isr, None, durable, log_end,
                                              progress, committed)
            hw = high_watermark(seen)
            if hw is not None:
                committed = max(committed, hw)
        elif action == 7 and proposed is None and len(isr) == 3:
            proposed = tuple(m for m in isr if m != 2 + arg % 2)  # a follower went silent
        for m in isr:
            on_disk = durable if m == 1 else progress[m]
            assert on_disk >= committed, (m, on_disk, committed, isr)


STEPS = st.lists(st.tuples(st.integers(0, 7), st.integers(0, 20)), max_size=120)


@settings(max_examples=300, deadline=None)
@given(STEPS)
def test_every_isr_member_has_every_committed_message(steps: list[tuple[int, int]]) -> None:
    run(new_rule, steps)


def test_the_model_catches_the_old_rejoin_rule() -> None:
    """Node 3 is dropped and falls behind; it is proposed back once it has what the leader
    had at the last proposal; commits go on without it until etcd takes the change: in
    the ISR, it lacks committed messages. The new rules hold on the same run."""
    steps = [(7, 1), (4, 0),  # node 3 leaves: ISR 1,2
             (0, 4), (1, 0), (2, 5), (2, 4), (6, 0),  # 5 appended, on every disk, committed
             (3, 0),  # node 3 proposed back (old: it has >= the last mark; new: everything)
             (0, 4), (1, 0), (2, 4), (6, 0),  # 5 more on nodes 1 and 2: commit
             (4, 0)]  # etcd takes the proposal
    with pytest.raises(AssertionError):
        run(old_rule, steps, maximal=False)
    run(new_rule, steps)
