"""Replica log ids: the rules that keep a replica whose log was lost from leading, as pure
functions over etcd's :class:`~amqp_server.cluster.replication_types.GroupState` (sans-IO,
used by :class:`amqp_server.cluster.replication.Replica`; tested in
``tests/test_log_ids.py`` and by the simulation).

Every replica log draws a random id when it is created, kept with it on disk (a quorum
queue's replica log file, a replicated stream's log directory): a lost disk or a deleted data
directory comes back as a new, empty log with a new id. A follower's Fetch carries it, and
etcd's state records, per ISR member, the id it was admitted with
(:attr:`GroupState.log_ids`):

* the leader's own at the queue's creation and at every election; a follower's from its
  latest fetch when the leader adds it to the ISR (:func:`with_isr`), or, for a new queue's
  first followers, when the leader first sees their fetches (:func:`log_ids_change`);
* a leader counts an ISR member's acknowledgements only while its fetches come from the
  recorded log (:func:`counted`), and drops from the ISR a member whose fetch is from
  another log (:func:`log_ids_change`): it comes back by the normal rule, with its new id;
* a replica may take over only when its log is the recorded one, or none is recorded
  (:func:`not_eligible`): a member with none recorded counted for nothing while in the ISR,
  so nothing committed depends on it. A named leader that may not lead hands the lead to
  another ISR member and leaves the ISR (:func:`hand_over`).

So an empty log never wins an election its lost one was eligible for (before, a node back
from a lost disk while still in the ISR could win with its empty log, and the others
truncated every committed entry to it). When every ISR member's log is gone the queue has no
leader rather than losing its messages silently, as Raft with a majority of disks lost.

A state from before log ids (``log_ids`` None) is counted and elected as before; its
leader's next tick records the ids it knows (:func:`log_ids_change`).

Source: Kafka KIP-858 (log directory ids: a replica's directory lost is told apart from the
one that was in sync) and KIP-966 (eligible leader replicas, unclean shutdown).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

from amqp_server.cluster.replication_types import GroupState

__all__ = ["SameLog", "counted", "elected", "hand_over", "log_ids_change", "not_eligible", "same_log",
           "with_isr"]

SameLog = Callable[[int | None, int], bool]


def same_log(recorded: int | None, log_id: int) -> bool:
    """Is the replica log ``log_id`` the one etcd recorded for its node (``recorded``;
    None: none recorded)?"""
    return recorded == log_id


def counted(s: GroupState, progress: Mapping[int, int], fetched: Mapping[int, int],
            same: SameLog = same_log) -> Mapping[int, int]:
    """The leader's ``progress`` (follower -> entries on its disk) without the ISR members
    whose latest fetch (``fetched``: follower -> its log id) is not from the log recorded
    for them (none recorded yet, or a new log): they count as having nothing."""
    if s.log_ids is None:
        return progress
    recorded = dict(s.log_ids)
    if all(p not in s.isr or same(recorded.get(p), fetched.get(p, 0)) for p in progress):
        return progress
    return {p: v for p, v in progress.items()
            if p not in s.isr or same(recorded.get(p), fetched.get(p, 0))}


def not_eligible(s: GroupState, me: int, log_id: int, same: SameLog = same_log) -> str | None:
    """Why replica ``me`` with log ``log_id`` may not lead under ``s`` (its log is not the
    recorded one), or None when it may (it is, or none is recorded)."""
    recorded = s.log_id(me) if s.log_ids is not None else None
    if recorded is None or same(recorded, log_id):
        return None
    return (f"node {me}'s replica log (id {log_id:x}) is not the one it was in sync with "
            f"(id {recorded:x}): its disk was lost or its data directory deleted; it does not "
            f"lead and waits for a leader to copy the log again")


def elected(s: GroupState, me: int, run: int, log_id: int) -> GroupState:
    """The state of ``me`` (run ``run``, log ``log_id``) taking over from ``s``'s leader."""
    isr = tuple(m for m in s.isr if m == me or m != s.leader)
    new = s.but(leader=me, run=run, epoch=s.epoch + 1, isr=isr)
    if s.log_ids is None:
        return new
    return new.but(log_ids=new.with_log_ids({**dict(s.log_ids), me: log_id}))


def with_isr(s: GroupState, isr: tuple[int, ...], fetched: Mapping[int, int]) -> GroupState:
    """``s`` with the ISR ``isr``: a member added is admitted with the log id of its latest
    fetch (``fetched``: the fetches that made it in sync), a member gone loses its id."""
    new = s.but(isr=isr)
    if s.log_ids is None:
        return new
    ids = dict(s.log_ids)
    ids.update((m, fetched[m]) for m in isr if m not in s.isr and m in fetched)
    return new.but(log_ids=new.with_log_ids(ids))


def hand_over(s: GroupState, me: int, alive: Collection[int], why: str
              ) -> tuple[GroupState, str] | None:
    """Named leader by ``s`` but not eligible (``why``): the state where ``me`` left the ISR
    and another ISR member (a live one if known) is named with no run, so that it takes a
    new epoch of its own; None when ``me`` is the only ISR member (no leader then)."""
    others = tuple(m for m in s.isr if m != me)
    if not others:
        return None
    to = next((m for m in others if m in alive), others[0])
    new = s.but(leader=to, run=0, isr=others)
    if s.log_ids is not None:
        new = new.but(log_ids=new.with_log_ids(dict(s.log_ids)))
    return new, f"node {me} leaves the in-sync replicas and hands the lead to node {to}: {why}"


def log_ids_change(s: GroupState, me: int, log_id: int, fetched: Mapping[int, int],
                   same: SameLog = same_log) -> tuple[GroupState, str] | None:
    """Leader ``me`` (log ``log_id``): the swap, with why, that records the log id of an ISR
    member whose id is not recorded (from its latest fetch, ``fetched``), or drops from the
    ISR a member whose latest fetch is from another log than the recorded one (its disk
    lost); None when etcd's state is right. A state from before log ids gets the ids known."""
    if s.log_ids is None:
        ids = {m: fetched[m] for m in s.isr if m in fetched}
        ids[me] = log_id
        return s.but(log_ids=s.with_log_ids(ids)), "replica log ids recorded"
    recorded = dict(s.log_ids)
    new_ids = {m: fetched[m] for m in s.isr if m != me and m in fetched and m not in recorded}
    if new_ids:  # every one known at once
        names = ", ".join(str(m) for m in sorted(new_ids))
        return (s.but(log_ids=s.with_log_ids({**recorded, **new_ids})),
                f"replica log ids of node(s) {names} recorded")
    for m in s.isr:
        if m == me or m not in fetched:
            continue
        if not same(recorded[m], fetched[m]):
            new = s.but(isr=tuple(x for x in s.isr if x != m))
            return (new.but(log_ids=new.with_log_ids(recorded)),
                    f"node {m} leaves the in-sync replicas: its replica log is new (id "
                    f"{fetched[m]:x}, admitted with {recorded[m]:x}: disk lost or data "
                    f"directory deleted)")
    return None
