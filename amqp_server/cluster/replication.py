"""One replica of a replicated queue as a sans-IO state machine (no asyncio, clock or I/O).

Theory of operation
-------------------
A :class:`Replica` is fed events by a driver and answers each with a list of actions
(:mod:`amqp_server.cluster.replication_types`), in the style of h11: inputs are
:meth:`~Replica.append` (the leader's queue logged an operation), :meth:`~Replica.receive`
(a record from another replica), :meth:`~Replica.on_state` (etcd's watch brought the group's
state), :meth:`~Replica.cas_result`, :meth:`~Replica.fsync_done`, :meth:`~Replica.session`
(the node's etcd lease was refreshed), :meth:`~Replica.on_alive` (etcd's live nodes),
:meth:`~Replica.compact` and :meth:`~Replica.tick` (time passes; ``now`` in seconds of the
node's clock, from the driver); outputs are Send, Write, Truncate, Install, Fsync, Cas (ISR
changes and elections, as etcd compare-and-swap), Commit (confirms), Become and StepDown.
Leadership and membership live in etcd; the data path is Kafka's:

* **Log**: entries ``(epoch, payload)`` at offsets 0, 1, ...; the *leader-epoch checkpoint*
  lists ``(epoch, start offset)`` (Kafka's leader-epoch-checkpoint file; here derived from
  the entries, which carry their epoch). The driver compacts committed entries into a
  snapshot of its own state; a follower that fetches below the leader's log start gets the
  :class:`Snapshot`, then the tail.
* **Fetch**: a follower asks its leader for entries from its log end, naming the epoch of its
  last entry; the leader answers with entries, or with :class:`Diverging` when that entry is
  not in its log (the follower truncates to the end of that epoch, KIP-101/KIP-320, and asks
  again). A fetch also carries the follower's fsynced offset: its acknowledgement. With
  nothing to send, the leader parks the fetch and answers it at the next append.
* **High watermark**: entries every member of the (maximal) ISR has on disk are committed
  (:func:`amqp_server.cluster.isr.high_watermark`; nothing below a majority).
* **ISR**: the leader asks etcd to drop a follower silent for ``lag_timeout``, or whose node
  left etcd's live nodes (:meth:`~Replica.on_alive`: a stopped node, at once), and to add one
  back once it has, on disk, everything committed *and* the leader's log as of its election
  (its epoch start offset, Kafka's ``isFollowerInSync``): every ISR member then holds every
  committed entry, so any of them may win the next election.
* **Elections**: when etcd says the leader's node is down, every ISR member swaps the state
  for ``leader = itself, epoch + 1``; one wins. A replica leads only an epoch it won in this
  run of the process (:attr:`GroupState.run`): a node that restarts finding itself leader
  takes a new epoch first, so two different entries never share an (offset, epoch).
* **Fencing**: records are tagged with the epoch; a follower takes entries only from the
  leader of the epoch it follows, a leader answers only fetches of its epoch, and steps down
  when it sees a newer epoch (a fetch or etcd).
* **Delivering**: the leader's queue delivers only while :meth:`~Replica.serving`: its
  epoch start is committed and its etcd session surely alive.
* **Log ids**: a replica whose log is not the one etcd recorded for it when it joined the
  ISR (its disk lost) neither leads nor counts until re-admitted
  (:mod:`amqp_server.cluster.log_ids`, KIP-858/KIP-966).

Source: Kafka replication (ISR, high watermark, leader epochs: KIP-101, KIP-279, KIP-320,
KIP-497); h11's sans-IO design; tested by the deterministic simulation in ``tests/sim``.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

from amqp_server.cluster.isr import Replicas
from amqp_server.cluster.log_ids import (
    counted,
    elected,
    hand_over,
    log_ids_change,
    not_eligible,
    with_isr,
)
from amqp_server.cluster.replication_rules import Rules, Timing
from amqp_server.cluster.replication_types import (
    Become,
    Cas,
    Commit,
    Diverging,
    Entry,
    Fetch,
    Fsync,
    GroupState,
    Install,
    Records,
    Send,
    Snapshot,
    StepDown,
    Truncate,
    Write,
)

__all__ = ["Replica"]

Action = Any  # one of replication_types' action classes
_MAX = float("inf")
_TIMING, _RULES = Timing(), Rules()  # the defaults (frozen: shared by every replica)


@dataclass
class _Lead:
    """What a leader tracks for its epoch."""

    epoch_start: int
    since: float
    progress: dict[int, int] = field(default_factory=dict)  # follower -> durable offset
    last_fetch: dict[int, float] = field(default_factory=dict)
    ready: set[int] = field(default_factory=set)  # followers whose fetch matched this epoch
    log_ids: dict[int, int] = field(default_factory=dict)  # follower -> its latest fetch's log id
    ids_match: bool | None = None  # every fetched log id is the recorded one (None: unknown)
    parked: dict[int, Fetch] = field(default_factory=dict)
    mark: int = 0  # durable offset at the previous tick (the old rule's mark)


class Replica:
    """One node's replica of one replicated queue (module docstring).

    Args:
        me: this node's index.
        run: this process's incarnation (unique per start; etcd's ``run`` of an epoch won).
        entries: the log as read from disk at start (all of it durable).
        timing, rules: see :class:`Timing`, :class:`Rules`.
        log_id: the id of this replica's log (drawn at its creation, read back from disk;
            0: unknown), sent in every fetch (module docstring, "Log ids").

    Every input returns the actions to carry out, in order.
    """

    def __init__(self, me: int, run: int, entries: Sequence[Entry] = (),
                 timing: Timing = _TIMING, rules: Rules = _RULES, *, start: int = 0,
                 start_epoch: int = 0, snapshot: Any = None, log_id: int = 0) -> None:
        self.me, self.run = me, run
        self.log_id = log_id
        # why this replica may not take over although listed in the ISR (its log is not
        # the one recorded for it), for the driver to log; None when it may
        self.not_eligible: str | None = None
        self.timing, self.rules = timing, rules
        self.start = start  # offset of log[0]: what is before is in the snapshot
        self.start_epoch = start_epoch  # epoch of the entry at start - 1
        self.snapshot = snapshot  # the driver's state at ``start`` (opaque here)
        self.log: list[Entry] = []
        # the leader-epoch checkpoint: (epoch, offset of its first entry) in order, for
        # the entries in ``log`` (Kafka's leader-epoch-checkpoint; here rebuilt from the
        # entries, which carry their epoch)
        self.epochs: list[tuple[int, int]] = []
        self._extend(entries)
        self.durable = self.log_end
        self.gen = 0  # truncations so far: an fsync asked before one does not count
        self._syncing = False
        self.state: GroupState | None = None
        self.epoch = 0  # the epoch this replica leads or follows
        self.lead: _Lead | None = None
        # leader: entries committed; follower: the leader's high watermark as far as known
        # (a snapshot holds committed entries only)
        self.committed = start
        self._changing: int | None = None  # version a swap of ours is based on
        self.proposed: tuple[int, ...] | None = None  # ISR asked of etcd (maximal ISR)
        self._proposed_base = 0  # the version that ISR swap is based on
        self.lease_until = float("inf")  # this node's etcd session is valid until then
        self.alive: frozenset[int] = frozenset()
        self._fetched_at = -1e9  # follower: when the last fetch was sent

    # ---- views -------------------------------------------------------------------------

    @property
    def leading(self) -> bool:
        return self.lead is not None

    def serving(self, now: float) -> bool:
        """May the leader's queue deliver now? Only when everything in the log when elected
        is committed (before, an operation the last leader committed, a return say, may not
        be applied yet and a delivery count could go down; Kafka's leader answers
        OFFSET_NOT_AVAILABLE until its high watermark reaches its epoch start, KIP-207), and
        while this node's etcd session is surely alive (after it, another node may have
        been elected: a paused or cut-off leader stops delivering stale state)."""
        return (self.lead is not None and self.committed >= self.lead.epoch_start
                and now < self.lease_until)

    @property
    def log_end(self) -> int:
        return self.start + len(self.log)

    def entries(self, start: int, end: int) -> list[Entry]:
        """Entries ``[start, end)`` of this replica's log (for a Commit action);
        ``start`` is not below :attr:`start` (before it: :attr:`snapshot`)."""
        assert start >= self.start, (start, self.start)
        return self.log[start - self.start:end - self.start]

    def last_epoch(self, offset: int | None = None) -> int:
        """Epoch of the entry before ``offset`` (default: the log end); 0 before the first."""
        offset = self.log_end if offset is None else offset
        if offset > self.start:
            return self.log[offset - 1 - self.start][0]
        return self.start_epoch if offset == self.start else 0

    def epoch_end(self, epoch: int) -> tuple[int, int]:
        """Kafka's OffsetsForLeaderEpoch: the largest epoch <= ``epoch`` in this log and the
        offset where it ends (the start of the next epoch, or the log end); (0, 0) if none."""
        i = bisect_right(self.epochs, (epoch, _MAX)) - 1
        if i >= 0:
            e = self.epochs[i][0]
            return e, self.epochs[i + 1][1] if i + 1 < len(self.epochs) else self.log_end
        if self.start and self.start_epoch <= epoch:
            return self.start_epoch, self.start
        return 0, 0  # compacted away (or none): the follower starts over from a snapshot

    def _extend(self, entries: Iterable[Entry]) -> None:
        epochs, log = self.epochs, self.log
        for entry in entries:
            if not epochs or epochs[-1][0] != entry[0]:
                epochs.append((entry[0], self.start + len(log)))
            log.append(entry)

    def replicas(self) -> Replicas:
        """The leader's view for the ISR rules (:mod:`amqp_server.cluster.isr`); the epoch
        start offset counts as committed (a follower below it lacks what the last leader
        may have committed)."""
        assert self.state is not None and self.lead is not None
        return Replicas(self.me, self.state.members, self.state.isr, self.proposed,
                        self.durable, self.log_end, self._counted(),
                        max(self.committed, self.lead.epoch_start))

    def _counted(self) -> Mapping[int, int]:
        """The leader's progress per follower, less ISR members whose latest fetch is not
        from the log recorded for them (:func:`amqp_server.cluster.log_ids.counted`; its
        outcome known to be all of it until a state or a fetched log id changes)."""
        assert self.state is not None and self.lead is not None
        lead = self.lead
        if lead.ids_match is None:
            lead.ids_match = counted(self.state, lead.log_ids, lead.log_ids,
                                     self.rules.same_log) is lead.log_ids
        if lead.ids_match:
            return lead.progress
        return counted(self.state, lead.progress, lead.log_ids, self.rules.same_log)

    # ---- inputs: leader --------------------------------------------------------------------

    def append(self, payload: Any, now: float) -> tuple[int | None, list[Action]]:
        """The leader's queue logged ``payload``: its offset (None when not leading: the
        driver nacks it), and the actions (write, fsync, answer parked fetches)."""
        return self.append_many((payload,), now)

    def append_many(self, payloads: Sequence[Any], now: float
                    ) -> tuple[int | None, list[Action]]:
        """:meth:`append` of several payloads (an event-loop turn's operations) in order:
        the first one's offset, one Write, parked fetches answered once."""
        if self.lead is None:
            return None, []
        offset, epoch = self.log_end, self.epoch
        entries = tuple(zip(repeat(epoch), payloads))
        if entries:  # _extend's loop for entries of one epoch
            if not self.epochs or self.epochs[-1][0] != epoch:
                self.epochs.append((epoch, offset))
            self.log.extend(entries)
        out: list[Action] = [Write(offset, entries)]
        self._sync(out)
        for peer, f in list(self.lead.parked.items()):
            self._answer(peer, f, out)
        return offset, out

    def _answer(self, peer: int, f: Fetch, out: list[Action]) -> None:
        """Answer a fetch that matched this log: entries from its offset, or park it."""
        assert self.lead is not None
        if f.offset >= self.log_end:
            self.lead.parked[peer] = f
            return
        self.lead.parked.pop(peer, None)
        if f.offset < self.start:  # compacted past it: the state at start, then the tail
            out.append(Send(peer, Snapshot(self.epoch, self.start, self.start_epoch,
                                           self.snapshot, self.committed)))
            return
        first = f.offset - self.start
        chunk = tuple(self.log[first:first + self.timing.batch])
        out.append(Send(peer, Records(self.epoch, f.offset, self.last_epoch(f.offset), chunk,
                                      self.committed)))

    def _on_fetch(self, peer: int, f: Fetch, now: float, out: list[Action]) -> None:
        if f.epoch > self.epoch:  # a newer leader exists: stop committing until etcd says
            self._step_down(out)
            return
        if self.lead is None or f.epoch < self.epoch or self.state is None \
                or peer not in self.state.members:
            return
        lead = self.lead
        lead.last_fetch[peer] = now
        if lead.log_ids.get(peer) != f.log_id:
            lead.log_ids[peer] = f.log_id
            lead.ids_match = None
            if peer in self.state.isr and self.state.log_ids is not None:
                self._check_log_ids(out)  # to record, or not the recorded log: ask etcd now
        if f.offset < self.start:  # below what this log still holds: nothing to check
            # a member that restarted with less than it had (its log lost) is not in sync
            lead.ready.discard(peer)
            self._count(peer, min(f.durable, f.offset))
            self._answer(peer, f, out)
            return
        if f.offset > 0:
            found, end = self.epoch_end(f.last_epoch)
            if found != f.last_epoch or end < f.offset:
                out.append(Send(peer, Diverging(self.epoch, f.offset, f.last_epoch, found,
                                                end)))
                return
        # its log up to f.offset is ours: what it has on disk there counts
        lead.ready.add(peer)
        # what it has now (not the most it ever had: a member that restarted with less,
        # its log lost, must not count what it lost; an older fetch arriving late only
        # holds commits back until the next one)
        self._count(peer, min(f.durable, f.offset))
        self._answer(peer, f, out)
        self._advance(out)

    def _count(self, peer: int, fetched: int | None) -> None:
        """Leader: what ``peer`` has on disk as of the news ``fetched`` (:attr:`Rules.progress`;
        None: its node left etcd's live nodes); forgotten, and not ready, when the rule
        says None."""
        assert self.lead is not None
        counted = self.rules.progress(self.lead.progress.get(peer), fetched)
        if counted is None:
            self.lead.progress.pop(peer, None)
            self.lead.ready.discard(peer)
        else:
            self.lead.progress[peer] = counted

    def _advance(self, out: list[Action]) -> None:
        """Commit what the maximal ISR has on disk."""
        if self.lead is None or self.state is None or self.me not in self.state.isr:
            return
        hw = self.rules.high_watermark(self.replicas())
        if hw is not None and hw > self.committed:
            out.append(Commit(self.committed, hw))
            self.committed = hw
            if self.timing.push_hw:
                for peer, f in self.lead.parked.items():  # still parked: answered again
                    out.append(Send(peer, Records(self.epoch, f.offset,
                                                  self.last_epoch(f.offset), (), hw)))

    # ---- inputs: follower -----------------------------------------------------------------

    def _fetch(self, out: list[Action], now: float) -> None:
        if self.lead is None and self.state is not None and self.state.leader != self.me \
                and self.me in self.state.members:
            self._fetched_at = now
            out.append(Send(self.state.leader, Fetch(self.epoch, self.log_end,
                                                     self.last_epoch(), self.durable,
                                                     self.log_id)))

    def _on_records(self, peer: int, r: Records, now: float, out: list[Action]) -> None:
        if self.lead is not None or self.state is None or peer != self.state.leader \
                or r.epoch != self.epoch:
            return
        if r.first != self.log_end or self.last_epoch() != r.prev_epoch:
            return  # an answer to an older fetch (reordered or duplicated)
        if r.entries:
            self._extend(r.entries)
            out.append(Write(r.first, r.entries))
            self._sync(out)
        self.committed = max(self.committed, min(r.hw, self.log_end))
        if len(r.entries) == self.timing.batch or not r.entries:
            self._fetch(out, now)  # more to take (else the fsync's end fetches: the ack)

    def _on_diverging(self, peer: int, d: Diverging, now: float, out: list[Action]) -> None:
        if self.lead is not None or self.state is None or peer != self.state.leader \
                or d.epoch != self.epoch:
            return
        if d.offset != self.log_end or d.last_epoch != self.last_epoch():
            return  # the answer to an older fetch
        _, mine = self.epoch_end(d.end_epoch)
        cut = min(d.end_offset, mine, self.log_end)
        if cut < self.start:  # the snapshot itself is not the leader's: start over
            self.start, self.start_epoch, self.snapshot = 0, 0, None
            self.log.clear()
            self.epochs.clear()
            cut = 0
        if cut < self.log_end or cut == 0:
            self._truncate(cut, out)
        self._fetch(out, now)

    def _on_snapshot(self, peer: int, s: Snapshot, now: float, out: list[Action]) -> None:
        if self.lead is not None or self.state is None or peer != self.state.leader \
                or s.epoch != self.epoch or s.offset <= self.log_end:
            return  # not our leader's, or we have that much already (a late answer)
        self.start, self.start_epoch, self.snapshot = s.offset, s.last_epoch, s.state
        self.log.clear()
        self.epochs.clear()
        self.durable = 0
        self.committed = s.offset
        self.gen += 1
        out.append(Install(s.offset, s.last_epoch, s.state))
        self._sync(out)

    def compact(self, upto: int, snapshot: Any) -> bool:
        """The driver stored ``snapshot``, its state after the entries below ``upto``:
        drop them from the log (only committed entries on disk: ``upto`` is not above
        :attr:`committed` nor :attr:`durable`). A follower fetching below ``upto`` gets
        the snapshot, then the tail. False if ``upto`` is not allowed (nothing done)."""
        if not self.start < upto <= min(self.committed, self.durable):
            return False
        self.start_epoch = self.log[upto - 1 - self.start][0]
        del self.log[:upto - self.start]
        epochs = self.epochs
        while len(epochs) > 1 and epochs[1][1] <= upto:  # epochs wholly compacted
            del epochs[0]
        if epochs and not self.log:
            epochs.clear()
        self.start, self.snapshot = upto, snapshot
        return True

    def _truncate(self, offset: int, out: list[Action]) -> None:
        del self.log[offset - self.start:]
        while self.epochs and self.epochs[-1][1] >= offset:
            self.epochs.pop()
        self.durable = min(self.durable, offset)
        self.committed = min(self.committed, offset)
        self.gen += 1
        out.append(Truncate(offset))

    # ---- inputs: both ------------------------------------------------------------------------

    def receive(self, peer: int, record: Fetch | Records | Diverging | Snapshot,
                now: float) -> list[Action]:
        """A record from node ``peer`` (any order, maybe duplicated or stale)."""
        out: list[Action] = []
        if isinstance(record, Fetch):
            self._on_fetch(peer, record, now, out)
        elif isinstance(record, Records):
            self._on_records(peer, record, now, out)
        elif isinstance(record, Diverging):
            self._on_diverging(peer, record, now, out)
        elif isinstance(record, Snapshot):
            self._on_snapshot(peer, record, now, out)
        return out

    def _sync(self, out: list[Action]) -> None:
        if not self._syncing and self.durable < self.log_end:
            self._syncing = True
            out.append(Fsync((self.gen, self.log_end)))

    def fsync_done(self, token: tuple[int, int], now: float) -> list[Action]:
        """An fsync asked by ``Fsync(token)`` finished (the file is on disk up to there,
        unless a truncation came meanwhile: then it does not count)."""
        out: list[Action] = []
        self._syncing = False
        gen, end = token
        before = self.durable
        if gen == self.gen:
            self.durable = max(self.durable, min(end, self.log_end))
        self._sync(out)
        if self.lead is not None:
            self._advance(out)
        elif self.durable > before:
            self._fetch(out, now)  # the acknowledgement
        return out

    def on_alive(self, alive: Collection[int]) -> None:
        """etcd's live nodes (sessions whose lease has not expired). A leader asks for a
        follower whose node is not among them to leave the ISR at its next :meth:`tick`,
        without waiting ``lag_timeout`` (a cleanly stopped node deletes its registration at
        once, a killed one's expires with its lease). The leader forgets what such a
        follower had on disk: it may come back with less (its log lost), and must fetch
        again to count."""
        self.alive = frozenset(alive)
        lead = self.lead
        if lead is not None:
            for member in [m for m in lead.progress if not self._registered(m)]:
                self._count(member, None)

    def _registered(self, member: int) -> bool:
        """Is ``member``'s node registered in etcd, as far as this node knows? Yes while
        this node itself is not among the live nodes (not known yet, or its own session
        lapsed: the list says nothing then)."""
        return member in self.alive or self.me not in self.alive

    def on_state(self, state: GroupState, now: float) -> list[Action]:
        """etcd's watch brought the group's state (older versions are ignored)."""
        out: list[Action] = []
        if self.state is not None and state.version <= self.state.version:
            return out
        self.state = state
        if self.lead is not None:
            self.lead.ids_match = None
        if self._changing is not None and state.version > self._changing:
            self._changing = None
        if self.proposed is not None and state.version > self._proposed_base:
            self.proposed = None  # etcd's state says what the ISR is now
        if state.leader == self.me:
            if not self._eligible(state):  # its log is not the one the state names
                self._step_down(out)
            elif state.run != self.run:
                self._step_down(out)
                self._elect(out, f"node {self.me} restarted as the leader")
            elif self.lead is None or state.epoch > self.epoch:
                self._become(state.epoch, now, out)
            else:
                self._check_log_ids(out)  # the next member to record, without a tick
                self._advance(out)
            return out
        if self.lead is not None:
            self._step_down(out)
        if state.epoch != self.epoch:
            self.epoch = state.epoch
            self._fetch(out, now)
        return out

    def _become(self, epoch: int, now: float, out: list[Action]) -> None:
        self.epoch = epoch
        self.committed = min(self.committed, self.log_end)
        self.lead = _Lead(epoch_start=self.log_end, since=now, mark=self.durable)
        out.append(Become(epoch, self.committed))
        self._sync(out)
        self._advance(out)

    def _step_down(self, out: list[Action]) -> None:
        if self.lead is not None:
            self.lead = None
            out.append(StepDown(self.epoch))

    def cas_result(self, base: int, won: bool | None) -> None:
        """etcd answered the swap based on version ``base``: True (won), False (lost: etcd
        holds a newer version) or None (unknown, a timeout). Another swap may be tried from
        now; a proposed ISR stays counted by the high watermark until the watch brings a
        state newer than ``base`` (even a lost swap: a retry may lose because the first
        try won), and a leader whose proposal's outcome is unknown asks for it again."""
        if self._changing == base:
            self._changing = None

    def session(self, run: int, valid_until: float) -> list[Action]:
        """etcd confirmed this node's session ``run`` until ``valid_until`` (a keep-alive
        answered; measured from when it was sent). A new ``run`` (the old lease expired:
        others may have elected a leader meanwhile) is a new incarnation: a leader steps
        down and takes a new epoch before leading again."""
        out: list[Action] = []
        self.lease_until = valid_until
        if run != self.run:
            self.run = run
            self._step_down(out)
        return out

    def _cas(self, new: GroupState, why: str, out: list[Action]) -> None:
        assert self.state is not None
        self._changing = self.state.version
        if new.isr != self.state.isr and new.leader == self.state.leader:
            self._proposed_base = self.state.version
        out.append(Cas(new.but(version=self.state.version), why))

    def _eligible(self, s: GroupState) -> bool:
        """May this replica lead with state ``s`` (:func:`amqp_server.cluster.log_ids.
        not_eligible`)? Sets :attr:`not_eligible` to say why not."""
        self.not_eligible = not_eligible(s, self.me, self.log_id, self.rules.same_log)
        return self.not_eligible is None

    def _elect(self, out: list[Action], why: str) -> None:
        s = self.state
        if s is None or self._changing is not None or self.me not in s.isr:
            return
        if self._eligible(s):
            self._cas(elected(s, self.me, self.run, self.log_id), why, out)
        elif s.leader == self.me and self.not_eligible is not None:
            change = hand_over(s, self.me, self.alive, self.not_eligible)
            if change is not None:
                self._cas(change[0], change[1], out)

    def _check_log_ids(self, out: list[Action]) -> bool:
        """Leader: ask etcd to record an ISR member's log id, or to drop a member whose log
        is new (:func:`amqp_server.cluster.log_ids.log_ids_change`), unless a change is on
        its way; True when asked."""
        s = self.state
        if self.lead is None or s is None or self._changing is not None \
                or self.proposed is not None:
            return False
        change = log_ids_change(s, self.me, self.log_id, self.lead.log_ids, self.rules.same_log)
        if change is None:
            return False
        new, why = change
        if new.isr != s.isr:
            self.proposed = new.isr  # the high watermark counts the ISR without it now
        self._cas(new, why, out)
        return True

    def tick(self, now: float) -> list[Action]:
        """Time passed: fetch again, change the ISR, or take over from a dead leader."""
        out: list[Action] = []
        s = self.state
        if s is None:
            return out
        lead = self.lead
        if lead is None:
            if s.leader == self.me and (s.run != self.run or self.not_eligible is not None):
                self._elect(out, f"node {self.me} restarted as the leader")
            elif s.leader not in self.alive and self.me in self.alive:
                self._elect(out, f"node {self.me} takes over from node {s.leader}")
            elif now - self._fetched_at >= self.timing.fetch_interval:
                self._fetch(out, now)
            return out
        if self._changing is None and self.proposed is not None:
            self._cas(with_isr(s, self.proposed, lead.log_ids),
                      "the in-sync replicas asked again", out)
        elif self._changing is None and self._check_log_ids(out):
            pass
        elif self._changing is None:
            silent = {m: now - max(lead.last_fetch.get(m, lead.since), lead.since)
                      for m in s.members if m != self.me}
            linked = {self.me} | {m for m, t in silent.items()
                                  if t < self.timing.lag_timeout and self._registered(m)}
            change = self.rules.isr_change(self.replicas(), linked, lead.ready, silent,
                                           lead.mark)
            if change is not None:
                self.proposed = change[0]  # counted by the high watermark from now on
                self._cas(with_isr(s, change[0], lead.log_ids), change[1], out)
        lead.mark = self.durable
        self._advance(out)
        return out
