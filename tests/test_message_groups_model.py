"""Model-based property test of the message-group dispatch rule (hypothesis state machine).

Random publishes (4 keys and messages without a key), consumers that subscribe, pause,
cancel and die, Basic.Get, and consumers that process in order: each acks or rejects the
oldest message it holds of a key, or requeues one together with the later ones of that key it
holds (as a consumer that keeps order must). After every step:

* no two holders (consumers, Basic.Get) have unacknowledged messages of one key;
* each delivery of a key is the oldest ready message of that key;
* free keys go to consumers in turn: a delivery of a key nobody holds (or of a message
  without a key) goes to the next consumer, round-robin in subscription order, that can take
  more (the queue's rotation, mirrored here); the turn passes only then, never when a holder
  gets the next messages of its own key;
* for every key, the first acknowledgements come in publish order;
* with an unbounded staging window, or one that pages held keys' messages out, no consumer that can take a message is left idle while a
  message it may take (of a free key, or of a key it holds) is ready: nothing blocks;
* the queue's counts (ready, unacked, each consumer's unacked) are the model's.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from queue_store.backing import MemoryBackingQueue, QueuedMessage
from queue_store.consumer import Consumer
from queue_store.grouped_queue import GroupedQueue
from queue_store.outcomes import Settlement
from queue_store.queue import Queue
from tests.queue_features.support import World

KEYS = ["a", "b", "c", "d", None]
GET = "GET"


class LogChannel:
    """A consumer's channel: deliveries go to one log shared by every channel (global order)."""

    def __init__(self, log: list[tuple[Any, QueuedMessage]]) -> None:
        self.open = True
        self.log = log

    def can_deliver(self) -> bool:
        return self.open

    def deliver(self, consumer: Consumer, qm: QueuedMessage, queue: Queue) -> None:
        self.log.append((consumer, qm))

    def consumer_cancelled_by_broker(self, consumer: Consumer) -> None:
        raise AssertionError("not expected")


class GroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.world = World()
        self.log: list[tuple[Any, QueuedMessage]] = []
        self.seen = 0  # log entries already checked
        self.next_id = 0
        self.key_of: dict[int, str | None] = {}
        self.ready: dict[str | None, set[int]] = {k: set() for k in KEYS}
        # holder (Consumer or GET) -> outstanding deliveries in delivery order
        self.outstanding: dict[Any, list[QueuedMessage]] = {GET: []}
        self.acked: dict[str | None, list[int]] = {k: [] for k in KEYS}
        self.consumers: list[Consumer] = []  # subscribed
        self.turn: deque[Consumer] = deque()  # the queue's round-robin of consumers
        self.key_prefetch = 0
        self.unbounded = True

    @initialize(key_prefetch=st.sampled_from([0, 0, 1, 2]),
                window=st.sampled_from([3, 5, 10**6]))
    def declare(self, key_prefetch: int, window: int) -> None:
        """``window`` 3: a staging window that can fill up with held keys' messages (head-of-
        line blocking allowed); 5: the same with spilling (the four keys cannot fill it, 1
        message each kept in RAM: nothing may block); 10**6: no limit."""
        args: dict[str, Any] = {"x-group-by": "header:k"}
        if key_prefetch:
            args["x-group-prefetch"] = key_prefetch
        self.q = self.world.declare("g", **args)
        assert isinstance(self.q, GroupedQueue)
        self.q.groups.stage_messages = window
        if window == 5:
            self.q.groups.spill_factory = MemoryBackingQueue
            self.q.groups.spill_keep = 1
        self.key_prefetch = key_prefetch
        self.unbounded = window != 3

    # ---- helpers -------------------------------------------------------------------------

    def _id(self, qm: QueuedMessage) -> int:
        return int(qm.message.body)

    def _absorb(self) -> None:
        """Check the deliveries made since the last step against the model, in order."""
        while self.seen < len(self.log):
            consumer, qm = self.log[self.seen]
            self.seen += 1
            mid = self._id(qm)
            key = self.key_of[mid]
            assert mid in self.ready[key], f"{mid} delivered but not ready"
            assert mid == min(self.ready[key]), f"key {key}: {mid} before {min(self.ready[key])}"
            if not isinstance(consumer, _GetConsumer) and (key is None or not self._holders(key)):
                expected = self._next_in_turn()
                assert consumer is expected, (
                    f"free key {key} went to {consumer.tag}, not {getattr(expected, 'tag', None)}")
            self.ready[key].discard(mid)
            if not consumer.no_ack:
                holder = GET if isinstance(consumer, _GetConsumer) else consumer
                self.outstanding[holder].append(qm)

    def _next_in_turn(self) -> Consumer | None:
        """The consumer that takes the next free key: the queue's rotation (each consumer
        looked at goes to the back), the first that can take more."""
        for _ in range(len(self.turn)):
            consumer = self.turn[0]
            self.turn.rotate(-1)
            channel = consumer.channel
            assert isinstance(channel, LogChannel)
            full = (not consumer.no_ack and consumer.prefetch
                    and len(self.outstanding[consumer]) >= consumer.prefetch)
            if channel.open and not full:
                return consumer
        return None

    def _holders(self, key: str | None) -> set[Any]:
        return {h for h, qms in self.outstanding.items()
                if any(self.key_of[self._id(qm)] == key for qm in qms)}

    def _settle(self, holder: Any, qms: list[QueuedMessage], outcome: Settlement) -> None:
        for qm in qms:
            self.outstanding[holder].remove(qm)
            mid = self._id(qm)
            key = self.key_of[mid]
            if outcome == Settlement.REQUEUE:
                self.ready[key].add(mid)
            elif outcome == Settlement.ACK:
                self.acked[key].append(mid)
        consumer = None if holder == GET else holder
        self.q.settle([(qm, self.q, consumer) for qm in qms], outcome)
        self._absorb()

    def _pick(self, data: st.DataObject) -> tuple[Any, QueuedMessage]:
        holders = [h for h, qms in self.outstanding.items() if qms]
        holder = data.draw(st.sampled_from(holders))
        return holder, data.draw(st.sampled_from(self.outstanding[holder]))

    def _later_of_key(self, holder: Any, qm: QueuedMessage) -> list[QueuedMessage]:
        """``qm`` and the messages of its key ``holder`` got after it (delivery order)."""
        key = self.key_of[self._id(qm)]
        out = self.outstanding[holder]
        i = out.index(qm)
        return [qm] + [o for o in out[i + 1:] if self.key_of[self._id(o)] == key]

    def _oldest_of_key(self, holder: Any, qm: QueuedMessage) -> QueuedMessage:
        key = self.key_of[self._id(qm)]
        return next(o for o in self.outstanding[holder] if self.key_of[self._id(o)] == key)

    def _has_outstanding(self) -> bool:
        return any(self.outstanding.values())

    # ---- rules ---------------------------------------------------------------------------

    @rule(key=st.sampled_from(KEYS), n=st.integers(1, 4))
    def publish(self, key: str | None, n: int) -> None:
        for _ in range(n):
            mid = self.next_id
            self.next_id += 1
            self.key_of[mid] = key
            self.ready[key].add(mid)
            headers = {"k": key} if key is not None else {}
            self.world.publish("g", str(mid).encode(), headers=headers)
            self._absorb()

    @precondition(lambda self: len(self.consumers) < 4)
    @rule(prefetch=st.integers(0, 3), no_ack=st.booleans())
    def subscribe(self, prefetch: int, no_ack: bool) -> None:
        tag = f"c{len(self.outstanding)}"
        consumer = Consumer(tag, tag.encode(), LogChannel(self.log), self.q,
                            no_ack and prefetch == 0, False, prefetch)
        self.outstanding[consumer] = []
        self.consumers.append(consumer)
        self.turn.append(consumer)
        self.q.add_consumer(consumer)
        self._absorb()

    @precondition(lambda self: bool(self.consumers))
    @rule(data=st.data())
    def pause_or_resume(self, data: st.DataObject) -> None:
        consumer = data.draw(st.sampled_from(self.consumers))
        channel = consumer.channel
        assert isinstance(channel, LogChannel)
        channel.open = not channel.open
        if channel.open:
            self.q.dispatch()  # the socket drained
        self._absorb()

    @precondition(lambda self: bool(self.consumers))
    @rule(data=st.data(), die=st.booleans())
    def cancel(self, data: st.DataObject, die: bool) -> None:
        """Basic.Cancel (its deliveries stay to be settled), or the channel closes (they are
        requeued first, as :meth:`Channel.release` does)."""
        consumer = data.draw(st.sampled_from(self.consumers))
        if die:
            assert isinstance(consumer.channel, LogChannel)
            consumer.channel.open = False
            if self.outstanding[consumer]:
                self._settle(consumer, list(self.outstanding[consumer]), Settlement.REQUEUE)
        self.consumers.remove(consumer)
        self.turn.remove(consumer)
        self.q.remove_consumer(consumer)
        self._absorb()

    @rule(no_ack=st.booleans())
    def basic_get(self, no_ack: bool) -> None:
        qm = self.q.get(no_ack)
        if qm is None:
            free = [k for k in KEYS if self.ready[k] and (k is None or not self._holders(k))]
            assert not free or not self.unbounded, f"Basic.Get found nothing, {free} are free"
            return
        self.log.append((_GetConsumer(no_ack), qm))
        self._absorb()

    @precondition(_has_outstanding)
    @rule(data=st.data(), outcome=st.sampled_from(["ack", "ack", "ack", "reject"]))
    def process_oldest(self, data: st.DataObject, outcome: str) -> None:
        holder, qm = self._pick(data)
        oldest = self._oldest_of_key(holder, qm)
        self._settle(holder, [oldest], Settlement.ACK if outcome == "ack" else Settlement.REJECT)

    @precondition(_has_outstanding)
    @rule(data=st.data())
    def requeue_with_later(self, data: st.DataObject) -> None:
        holder, qm = self._pick(data)
        self._settle(holder, self._later_of_key(holder, qm), Settlement.REQUEUE)

    # ---- invariants ----------------------------------------------------------------------

    @invariant()
    def one_holder_per_key(self) -> None:
        for key in KEYS:
            if key is not None:
                assert len(self._holders(key)) <= 1, f"key {key}: {self._holders(key)}"

    @invariant()
    def first_acks_in_publish_order(self) -> None:
        for key in KEYS:
            if key is not None:
                assert self.acked[key] == sorted(self.acked[key]), (key, self.acked[key])

    @invariant()
    def counts_match(self) -> None:
        if not hasattr(self, "q"):
            return
        assert self.q.message_count == sum(len(s) for s in self.ready.values())
        assert self.q.unacked_count == sum(len(v) for v in self.outstanding.values())
        for consumer in self.consumers:
            assert consumer.unacked == len(self.outstanding[consumer])

    @invariant()
    def nothing_blocks(self) -> None:
        if not self.unbounded:
            return
        for consumer in self.consumers:
            if not consumer.can_take():
                continue
            for key in KEYS:
                if not self.ready[key]:
                    continue
                holders = self._holders(key)
                if key is None or not holders:
                    takeable = True
                else:
                    held = [o for o in self.outstanding.get(consumer, [])
                            if self.key_of[self._id(o)] == key]
                    takeable = holders == {consumer} and not consumer.no_ack and (
                        not self.key_prefetch or len(held) < self.key_prefetch)
                assert not takeable, f"{consumer.tag} idle while key {key} could go to it"


class _GetConsumer:
    """Stands for Basic.Get in the delivery log."""

    def __init__(self, no_ack: bool) -> None:
        self.no_ack = no_ack


TestGroupMachine = GroupMachine.TestCase
TestGroupMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None,
                                     suppress_health_check=[HealthCheck.too_slow])
