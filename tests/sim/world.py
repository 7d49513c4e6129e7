"""A deterministic simulation of N nodes replicating one queue with
:class:`amqp_server.cluster.replication.Replica` (FoundationDB / TigerBeetle VOPR style).

One seed is one run: every choice (delays, faults, traffic) comes from ``random.Random(seed)``
and events run in (time, sequence) order on a simulated clock, so a failing seed replays
exactly (``python -m tests.sim --seed N --trace``). The world holds:

* **network**: per-record delay, drop, duplication, reordering (a long delay), links cut and
  healed, a node isolated from the others;
* **disk** per node: writes land in ``current``; an fsync copies what was written when it
  was asked into ``synced`` after a delay (slow at times); a crash keeps only ``synced``, a
  kill -9 of the process keeps what it wrote (fsynced at the restart);
* **etcd**: the group's state changed by compare-and-swap only (a conflicting swap loses; a
  stranger's write bumps the version at times); node sessions with a lease refreshed at
  every tick of a running node, so a crashed or paused node is seen down after ``lease``
  and a cleanly stopped one at once (its registration deleted: :meth:`Replica.on_alive`);
  a watch per node delivering every new state after a delay;
* **nodes** that crash, are killed or stop cleanly and restart (a new run, the log read
  back from ``synced``), pause and resume (their events wait), or lose their disk (``wipe``:
  crashed or stopped, back with an empty replica log). A node loses its disk only while the
  rest of the ISR is a majority, and is started again once etcd's ISR no longer lists it
  (an operator replacing a disk waits for the cluster to notice the node gone: a node back
  while still listed could win an election with its empty log, and nothing in the
  protocol tells it that its log is not what it acknowledged);
* **traffic**: publishes to the leader (confirmed on commit), deliveries from its committed
  queue, then an ack or a requeue; quiet spells of 0.5-3 s without any (a follower back
  from a lost disk while nothing was committed meanwhile is where a leader counting its
  progress from before shows: 993c8b7).

Invariants (:class:`tests.sim.checks.Checker`) are checked after every event: no two leaders
commit in one epoch, committed prefixes never diverge, every ISR member has the committed
prefix on disk, delivery counts never go down; at the end, after healing every fault, a
leader has recommitted everything and holds every confirmed message not acknowledged.
"""

from __future__ import annotations

import heapq
import random
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from amqp_server.cluster.isr import Replicas, isr_change, majority
from amqp_server.cluster.replication import Replica
from amqp_server.cluster.replication_rules import Rules, Timing
from amqp_server.cluster.replication_types import (
    Become,
    Cas,
    Commit,
    Fsync,
    GroupState,
    Install,
    Send,
    StepDown,
    Truncate,
    Write,
)
from tests.sim.checks import Checker, QueueView, SimFailure

CLOCK_DRIFT = 0.02  # a node's clock runs up to 2% fast or slow
LEASE_MARGIN = 0.1  # a leader counts its etcd session valid for 90% of the lease
FAULTS = ("crash", "kill", "stop", "wipe", "pause", "cut", "isolate", "slow_fsync",
          "cas_conflict", "flaky_net")
QUIET_CHANCE = 0.02  # a publish starts a quiet spell (0.5-3 s without traffic)
# what run() counts besides: faults the above bring on a record, and what happened
INJECTED = frozenset(FAULTS) | {"etcd_cut", "drop", "duplicate", "reorder"}


@dataclass
class Config:
    """A run's knobs (seconds of simulated time)."""

    nodes: int = 0  # 0: three nodes, or five for one seed in four
    duration: float = 20.0  # faults and traffic
    settle: float = 12.0  # then every fault healed, no traffic
    tick: float = 0.25
    lease: float = 2.0
    timing: Timing = field(default_factory=lambda: Timing(lag_timeout=1.5, fetch_interval=0.4,
                                                          batch=64))
    rules: Rules = field(default_factory=Rules)
    fault_every: float = 1.5  # mean seconds between faults
    publish_every: float = 0.05
    consume_every: float = 0.12
    # a node that lost its disk starts again only once etcd's ISR no longer lists it;
    # False: once its registration is gone, listed or not (what no rule here handles: the
    # first ISR member back after the others went down may be that one, and it takes
    # over with its empty log; docs/cluster.md, Not yet)
    wipe_waits: bool = True
    # the queue's first state records the log id of: every member (True), the leader only
    # (False: the others recorded by the leader once it saw their fetches, as the broker
    # does), or None: every member for even seeds, the leader only for odd ones (an extra
    # swap shifts every later event: seeds found failing before log ids keep their runs
    # when even)
    initial_log_ids: bool | None = None


def quick(**changes: Any) -> Config:
    """A shorter run (8 s of faults and traffic, 6 s to settle; ~10 ms of CPU a seed, a
    fifth of the default), for the seeds of ``make test``."""
    base: dict[str, Any] = {"duration": 8.0, "settle": 6.0, "publish_every": 0.1,
                            "consume_every": 0.25, "fault_every": 0.8}
    return Config(**{**base, **changes})


class Disk:
    """A node's replica log file: ``log_id`` is drawn when it is created (a lost disk
    comes back as a new file with a new id: :attr:`Replica.log_id`)."""

    def __init__(self, log_id: int) -> None:
        self.current: list[Any] = []
        self.synced: list[Any] = []
        self.log_id = log_id


class Node:
    def __init__(self, index: int, log_id: int) -> None:
        self.index = index
        self.run = 0  # the process: a restart is a new run
        self.session = 0  # its etcd session (the replica's run)
        self.replica: Replica | None = None  # None: crashed
        self.disk = Disk(log_id)
        self.paused_until = 0.0
        self.slow_fsync_until = 0.0
        self.compacted = 0  # the replica's log start when it crashed
        self.clock_offset = 0.0
        self.clock_rate = 1.0
        self.queue: QueueView | None = None  # when leading
        self.pending: dict[int, int] = {}  # offset -> message id awaiting its confirm


class World:
    """One simulated run (module docstring). ``run()`` returns the fault counts."""

    def __init__(self, seed: int, config: Config | None = None, trace: bool = False) -> None:
        self.seed = seed
        self.cfg = cfg = config or Config()
        self.rng = random.Random(seed)
        n = cfg.nodes or (5 if self.rng.random() < 0.25 else 3)
        self.trace = trace
        self.now = 0.0
        self.events: list[tuple[float, int, str, tuple[Any, ...]]] = []
        self.seq = 0
        self.check = Checker(seed)
        self.faults: Counter[str] = Counter()
        # log ids count up (not from rng: the same seed makes the same run as before ids)
        self.log_ids = 1000
        self.nodes = [Node(i, self._new_log_id()) for i in range(n)]
        for node in self.nodes:
            node.clock_offset = self.rng.uniform(0, 1000)
            node.clock_rate = 1 + self.rng.uniform(-CLOCK_DRIFT, CLOCK_DRIFT)
        self.runs = 0
        self.cut: set[tuple[int, int]] = set()
        self.isolated: dict[int, float] = {}
        self.etcd_cut: set[int] = set()  # nodes that cannot reach etcd
        self.lost: set[int] = set()  # wiped nodes not back yet (Checker.isr_holds_committed)
        self.net = {"drop": 0.0, "dup": 0.0, "reorder": 0.0}
        self.flaky_until = 0.0
        self.quiet_until = 0.0  # no traffic until then
        self.next_id = 0
        self.faulting = True
        self.dirty = False
        # etcd
        members = tuple(range(n))
        self.version = 1
        self.expiry = [0.0] * n
        self.was_alive = [True] * n
        for node in self.nodes:
            self._start(node)
        first = self.nodes[0]
        assert first.replica is not None
        # a new queue: the leader's log id recorded, the others' too or once it saw their
        # fetches (Config.initial_log_ids)
        every = cfg.initial_log_ids if cfg.initial_log_ids is not None else seed % 2 == 0
        ids = tuple((n.index, n.disk.log_id) for n in self.nodes if every or n is first)
        self.state = GroupState(0, first.run, 1, members, members, self.version, ids)
        for node in self.nodes:
            self._watch(node, 0.0)
            self.at(self.rng.uniform(0, cfg.tick), "tick", node.index, node.run)
        self.at(self.rng.expovariate(1 / cfg.fault_every), "fault")
        self.at(0.1, "publish")
        self.at(0.3, "consume")

    def _new_log_id(self) -> int:
        self.log_ids += 1
        return self.log_ids

    # ---- the event loop ----------------------------------------------------------------------

    def at(self, delay: float, kind: str, *args: Any) -> None:
        self.seq += 1
        heapq.heappush(self.events, (self.now + delay, self.seq, kind, args))

    def run(self) -> Counter[str]:
        cfg = self.cfg
        end = cfg.duration
        self.at(end, "heal_all")
        limit = end + cfg.settle
        while self.events:
            t, _seq, kind, args = heapq.heappop(self.events)
            if t > limit:
                break
            self.now = self.check.now = t
            if self.trace:
                print(f"{t:9.4f} {kind} {args!r:.160}")
            getattr(self, "_ev_" + kind)(*args)
            if self.dirty:  # a disk synced, a commit or an ISR change: check the ISR
                self.dirty = False
                self.check.isr_holds_committed(self.state.isr,
                                               [n.disk.synced for n in self.nodes], self.lost,
                                               [n.index for n in self.nodes
                                                if n.replica is not None])
        self._final()
        self.faults["elections"] += self.state.epoch - 1
        self.faults["confirmed"] += len(self.check.confirmed)
        self.faults["committed_entries"] += len(self.check.committed)
        return self.faults

    def _live(self, node: Node, run: int, kind: str, args: tuple[Any, ...]) -> Replica | None:
        """The node's replica if this event is for its current run; a paused node's events
        wait for its resumption."""
        if node.replica is None or node.run != run:
            return None
        if node.paused_until > self.now:
            self.seq += 1
            heapq.heappush(self.events, (node.paused_until, self.seq, kind, args))
            return None
        return node.replica

    # ---- nodes ----------------------------------------------------------------------------

    def _start(self, node: Node) -> None:
        self.runs += 1
        node.run = node.session = self.runs
        self.expiry[node.index] = max(self.expiry[node.index], self.now + self.cfg.lease)
        node.disk.current = list(node.disk.synced)
        synced = node.disk.synced
        # the log read back from its snapshot (committed entries) and tail, or whole
        start = node.compacted if len(synced) >= node.compacted and self.rng.random() < 0.7 \
            else 0
        node.replica = Replica(node.index, node.run, synced[start:], self.cfg.timing,
                               self.cfg.rules, start=start,
                               start_epoch=synced[start - 1][0] if start else 0,
                               snapshot=tuple(synced[:start]) if start else None,
                               log_id=node.disk.log_id)
        node.queue = None
        node.pending.clear()

    def _ev_tick(self, i: int, run: int) -> None:
        node = self.nodes[i]
        r = self._live(node, run, "tick", (i, run))
        if r is None:
            return
        if i not in self.etcd_cut:  # the lease keep-alive
            if self.expiry[i] <= self.now:  # expired: a new session, a new run
                self.runs += 1
                self.faults["new_session"] += 1
                node.session = self.runs
            self.expiry[i] = self.now + self.cfg.lease
            # on the node's clock, less a margin for its drift (LEASE_MARGIN)
            until = self.clock(node) + self.cfg.lease * (1 - LEASE_MARGIN)
            self._do(node, r.session(node.session, until))
        alive = self._alive()
        r.on_alive(alive)
        self._do(node, r.tick(self.clock(node)))
        upto = min(r.committed, r.durable)
        if upto - r.start >= 16 and self.rng.random() < 0.2:  # the driver compacts its log
            prefix = tuple(r.snapshot or ()) + tuple(r.entries(r.start, upto))
            r.compact(upto, prefix)
            self.faults["compaction"] += 1
        self.at(self.cfg.tick, "tick", i, run)

    def clock(self, node: Node) -> float:
        """The node's clock: its own offset, and a rate off by up to CLOCK_DRIFT."""
        return node.clock_offset + self.now * node.clock_rate

    def _alive(self) -> list[int]:
        alive = []
        for i, t in enumerate(self.expiry):
            up = t > self.now
            if self.was_alive[i] and not up:
                self.faults["lease_expiry"] += 1
            self.was_alive[i] = up
            if up:
                alive.append(i)
        return alive

    def _do(self, node: Node, actions: list[Any]) -> None:
        """Carry out a replica's actions."""
        r = node.replica
        assert r is not None
        for a in actions:
            if isinstance(a, Send):
                self._send(node.index, a.to, a.record)
            elif isinstance(a, Write):
                if a.first != len(node.disk.current):
                    self.check.fail(f"node {node.index} writes at {a.first}, file ends at "
                                    f"{len(node.disk.current)}")
                node.disk.current.extend(a.entries)
            elif isinstance(a, Truncate):
                del node.disk.current[a.offset:]
            elif isinstance(a, Install):  # the sim's snapshot: the entries it stands for
                self.faults["snapshot_installed"] += 1
                if len(a.state) != a.offset:
                    self.check.fail(f"node {node.index}: a snapshot of {len(a.state)} entries "
                                    f"at offset {a.offset}")
                node.disk.current = list(a.state)
            elif isinstance(a, Fsync):
                slow = node.slow_fsync_until > self.now
                delay = self.rng.uniform(0.05, 0.6) if slow else self.rng.uniform(0.001, 0.01)
                self.at(delay, "fsync", node.index, node.run, a.token, list(node.disk.current))
            elif isinstance(a, Cas):
                self.at(self.rng.uniform(0.001, 0.02), "cas", node.index, node.run, a.new)
            elif isinstance(a, Commit):
                self.dirty = True
                full = list(r.snapshot or ()) + r.log  # the sim's snapshot: its entries
                self.check.on_commit(node.index, r.epoch, full, a.end)
                if node.queue is not None:
                    node.queue.apply(a.start, r.entries(a.start, a.end))
                for off in range(a.start, a.end):
                    mid = node.pending.pop(off, None)
                    if mid is not None:
                        self.check.confirmed.add(mid)
            elif isinstance(a, Become):
                node.queue = QueueView()
                node.queue.apply(0, tuple(r.snapshot or ()) + tuple(r.entries(r.start,
                                                                             a.committed)))
                node.pending.clear()
            elif isinstance(a, StepDown):
                node.queue = None
                node.pending.clear()  # nacked: the publisher resends

    def _ev_fsync(self, i: int, run: int, token: tuple[int, int], snapshot: list[Any]) -> None:
        node = self.nodes[i]
        r = self._live(node, run, "fsync", (i, run, token, snapshot))
        if r is None:
            return
        node.disk.synced = snapshot
        self.dirty = True
        self._do(node, r.fsync_done(token, self.clock(node)))

    # ---- network -----------------------------------------------------------------------------

    def _send(self, src: int, dst: int, record: Any) -> None:
        if (src, dst) in self.cut or src in self.isolated or dst in self.isolated:
            return
        rng = self.rng
        flaky = self.flaky_until > self.now
        if flaky and rng.random() < self.net["drop"]:
            self.faults["drop"] += 1
            return
        copies = 2 if flaky and rng.random() < self.net["dup"] else 1
        if copies == 2:
            self.faults["duplicate"] += 1
        for _ in range(copies):
            delay = rng.uniform(0.0005, 0.005)
            if flaky and rng.random() < self.net["reorder"]:
                delay += rng.uniform(0.01, 0.3)
                self.faults["reorder"] += 1
            self.at(delay, "msg", src, dst, record)

    def _ev_msg(self, src: int, dst: int, record: Any) -> None:
        node = self.nodes[dst]
        r = self._live(node, node.run, "msg", (src, dst, record))
        if r is not None:
            self._do(node, r.receive(src, record, self.clock(node)))

    # ---- etcd --------------------------------------------------------------------------------

    def _watch(self, node: Node, delay: float) -> None:
        self.at(delay, "watch", node.index, node.run, self.state)

    def _ev_watch(self, i: int, run: int, state: GroupState) -> None:
        node = self.nodes[i]
        r = self._live(node, run, "watch", (i, run, state))
        if r is not None and i in self.etcd_cut:
            self.at(0.05, "watch", i, run, state)  # the watch catches up once reconnected
        elif r is not None:
            self._do(node, r.on_state(state, self.clock(node)))

    def _put(self, state: GroupState) -> None:
        self.version += 1
        self.state = state.but(version=self.version)
        self.dirty = True
        for node in self.nodes:
            if node.replica is not None:
                self._watch(node, self.rng.uniform(0.001, 0.03))

    def _ev_cas(self, i: int, run: int, new: GroupState) -> None:
        cut = i in self.etcd_cut
        if cut and self.rng.random() < 0.5:  # the request never reached etcd
            won: bool | None = False
        else:
            won = new.version == self.state.version
            if won:
                self._put(new)
            else:
                self.faults["cas_lost"] += 1
        if cut:  # the answer is lost: the client times out
            self.faults["cas_unknown"] += 1
            self.at(1.0, "cas_result", i, run, new.version, None)
        else:
            self.at(self.rng.uniform(0.001, 0.02), "cas_result", i, run, new.version, won)

    def _ev_cas_result(self, i: int, run: int, base: int, won: bool | None) -> None:
        node = self.nodes[i]
        r = self._live(node, run, "cas_result", (i, run, base, won))
        if r is not None:
            r.cas_result(base, won)

    # ---- traffic -------------------------------------------------------------------------------

    def _leader(self) -> Node | None:
        """A running node that believes it leads (a client's view: clients of a cut-off
        old leader still reach it); one of them at random when two do."""
        leaders = [node for node in self.nodes if node.replica is not None
                   and node.replica.leading and node.paused_until <= self.now]
        if len(leaders) > 1:
            self.faults["two_leaders_seen"] += 1
            return self.rng.choice(leaders)
        return leaders[0] if leaders else None

    def _ev_publish(self) -> None:
        if not self.faulting:
            return
        if self.quiet_until > self.now:  # a quiet spell: no publish, no consume
            self.at(self.quiet_until - self.now, "publish")
            return
        if self.rng.random() < QUIET_CHANCE:
            self.quiet_until = self.now + self.rng.uniform(0.5, 3.0)
            self.faults["quiet"] += 1
        node = self._leader()
        if node is not None and node.replica is not None:
            self.next_id += 1
            offset, actions = node.replica.append(("enq", self.next_id), self.clock(node))
            if offset is not None:
                node.pending[offset] = self.next_id
            self._do(node, actions)
        self.at(self.rng.expovariate(1 / self.cfg.publish_every), "publish")

    def _ev_consume(self) -> None:
        if not self.faulting:
            return
        if self.quiet_until > self.now:
            self.at(self.quiet_until - self.now, "consume")
            return
        node = self._leader()
        if node is not None and node.queue is not None and node.replica is not None \
                and node.replica.serving(self.clock(node)):
            ready = node.queue.deliverable()
            if ready:
                mid = ready[0] if self.rng.random() < 0.7 else self.rng.choice(ready)
                self.check.delivered(mid, node.queue.messages[mid])
                node.queue.out.add(mid)
                op = "ack" if self.rng.random() < 0.75 else "ret"
                _, actions = node.replica.append((op, mid), self.clock(node))
                self._do(node, actions)
        self.at(self.rng.expovariate(1 / self.cfg.consume_every), "consume")

    # ---- faults --------------------------------------------------------------------------------

    def _ev_fault(self) -> None:
        if not self.faulting:
            return
        rng = self.rng
        kind = rng.choice(FAULTS)
        node = rng.choice(self.nodes)
        i = node.index
        if kind == "wipe" and len(set(self.state.isr) - self.lost - {i}) \
                < majority(self.state.members):
            kind = ""  # only while the rest of the ISR can take over (see _ev_restart)
        elif kind in ("crash", "kill", "stop", "wipe") and node.replica is not None:
            # crash: the machine fails, what was not fsynced is lost; kill: the process
            # dies (kill -9), what it wrote survives in the page cache, and the restarted
            # process fsyncs its file before reading it; wipe: a crash whose disk is lost
            # (replaced, or the replica log deleted): it comes back with an empty log
            node.compacted = node.replica.start
            node.replica = None
            node.queue = None
            node.pending.clear()
            if kind == "wipe":  # crashed, or stopped cleanly half the time (SIGTERM)
                if rng.random() < 0.5:
                    self.expiry[i] = min(self.expiry[i], self.now)
                node.disk = Disk(self._new_log_id())
                node.compacted = 0
                self.lost.add(i)
                self.dirty = True
            elif kind == "crash":
                node.disk.current = list(node.disk.synced)
            else:  # a clean stop (SIGTERM) also deletes its etcd registration at once
                if kind == "stop":
                    self.expiry[i] = min(self.expiry[i], self.now)
                node.disk.synced = list(node.disk.current)
                self.dirty = True
            self.at(rng.uniform(0.05, 4.0), "restart", i)
        elif kind == "pause" and node.replica is not None and node.paused_until <= self.now:
            node.paused_until = self.now + rng.uniform(0.1, 4.0)
        elif kind == "cut":
            j = rng.choice([n.index for n in self.nodes if n.index != i])
            self.cut |= {(i, j), (j, i)}
            self.at(rng.uniform(0.2, 5.0), "heal", i, j)
        elif kind == "isolate" and i not in self.isolated:
            self.isolated[i] = self.now
            if rng.random() < 0.5:
                self.etcd_cut.add(i)
                self.faults["etcd_cut"] += 1
            self.at(rng.uniform(0.2, 5.0), "rejoin", i)
        elif kind == "slow_fsync":
            node.slow_fsync_until = self.now + rng.uniform(0.5, 4.0)
        elif kind == "cas_conflict":  # a stranger rewrites the value: a pending swap loses
            self._put(self.state)
        elif kind == "flaky_net":
            self.flaky_until = self.now + rng.uniform(0.5, 4.0)
            self.net = {"drop": rng.uniform(0, 0.3), "dup": rng.uniform(0, 0.3),
                        "reorder": rng.uniform(0, 0.3)}
        else:
            kind = ""
        if kind:
            self.faults[kind] += 1
            if self.trace:
                print(f"{'':9} ^ {kind} of node {i}")
        self.at(rng.expovariate(1 / self.cfg.fault_every), "fault")

    def _ev_restart(self, i: int) -> None:
        node = self.nodes[i]
        if node.replica is not None:
            return
        if i in self.lost and ((self.cfg.wipe_waits and i in self.state.isr)
                               or self.expiry[i] + self.cfg.tick > self.now):
            # a node whose disk was lost comes back once etcd's ISR no longer lists it (the
            # others noticed it gone: its silence, or its lease): back while still listed,
            # nothing tells that its empty log is not what it acknowledged, and it may take
            # over (cfg.wipe_waits). And always, as a real node's start waits for its last
            # registration to be gone (membership.py, _wait_name_free), once the others had
            # a tick to see it gone: a node back unseen is, to a leader, the run whose
            # fetches it counted (crashed and killed nodes here may come back unseen,
            # harsher than a real node, and pass)
            self.faults["wipe_waits"] += 1
            self.at(self.cfg.tick, "restart", i)
            return
        if self.cfg.wipe_waits:
            self.lost.discard(i)  # out of the ISR: checked like any other from now on
        self._start(node)
        self._watch(node, 0.001)  # it reads the state at start
        self.at(0.002, "tick", i, node.run)

    def _ev_heal(self, i: int, j: int) -> None:
        self.cut -= {(i, j), (j, i)}

    def _ev_rejoin(self, i: int) -> None:
        self.isolated.pop(i, None)
        self.etcd_cut.discard(i)

    def _ev_heal_all(self) -> None:
        """The end of the faults: every link healed, every node running, no traffic."""
        self.faulting = False
        self.cut.clear()
        self.isolated.clear()
        self.etcd_cut.clear()
        self.flaky_until = 0.0
        for node in self.nodes:
            node.paused_until = min(node.paused_until, self.now)
            node.slow_fsync_until = 0.0
            if node.replica is None and node.index not in self.lost:  # (its restart waits)
                self._ev_restart(node.index)

    def _final(self) -> None:
        node = self.nodes[self.state.leader]
        r = node.replica
        if r is None or not r.leading or r.state != self.state:
            self.check.fail("no leader after the cluster settled")
            return
        self.check.final(node.queue, r.committed)


def run_seed(seed: int, config: Config | None = None, trace: bool = False) -> Counter[str]:
    """Run one seed; raises :class:`SimFailure` (naming the seed) when an invariant breaks."""
    return World(seed, config, trace).run()


__all__ = ["INJECTED", "Config", "SimFailure", "World", "old_rejoin_rules", "quick", "run_seed"]


def old_rejoin_isr_change(r: Replicas, linked: Collection[int], ready: Collection[int],
                          silent_for: Mapping[int, float], mark: int
                          ) -> tuple[tuple[int, ...], str] | None:
    """The ISR rule before #30: shrink as now, but a follower rejoins once it has on disk
    what the leader had at the previous tick (``mark``), not everything committed."""
    change = isr_change(r, linked, ready, silent_for)
    if change is not None and len(change[0]) < len(r.isr):
        return change
    for m in r.members:
        if m not in r.isr and m in linked and m in ready and r.progress.get(m, 0) >= mark:
            return tuple(sorted({*r.isr, m})), f"node {m} is in sync again (old rule)"
    return None


def old_rejoin_rules() -> Rules:
    """:class:`Rules` with :func:`old_rejoin_isr_change`."""
    return Rules(isr_change=old_rejoin_isr_change)
