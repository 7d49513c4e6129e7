"""The broker-wide RAM budget of the variable queues, shared among the queues holding
messages, so that many queues with backlogs cost as little RAM as one (RabbitMQ's memory
monitor giving each queue its ``target_ram_count``).

Each tick (once a second) :meth:`RamBudget.rebalance` divides ``ram_messages`` /
``ram_bytes`` (alpha: messages with their bodies in RAM) and ``beta_messages`` (beta: index
entries in RAM) evenly among the queues that hold messages, never more per queue than the
per-queue defaults of :mod:`queue_store.variable_queue` and never fewer alpha messages than
``MIN_RAM_MESSAGES``; a queue far over its new share moves its tail out at once
(:meth:`VariableQueue.set_budget`). One queue alone keeps the per-queue defaults (200,000
alpha, 1,000,000 beta), so a single deep backlog behaves as before.

Source: RabbitMQ ``rabbit_memory_monitor`` (``desired_duration`` -> ``target_ram_count``).
"""

from __future__ import annotations

import weakref

from queue_store.variable_queue import BETA_MESSAGES, RAM_BYTES, RAM_MESSAGES, VariableQueue

TOTAL_RAM_MESSAGES = 200_000  # alpha messages over all queues (~500 B each in RAM)
TOTAL_RAM_BYTES = 128 * 1024 * 1024  # alpha body bytes over all queues
TOTAL_BETA_MESSAGES = 1_000_000  # beta index entries over all queues (46 bytes each)
MIN_RAM_MESSAGES = 100  # per queue with messages, however many there are


class RamBudget:
    """The shared budget and the variable queues it is divided among (weakly held).

    Args:
        ram_messages, ram_bytes, beta_messages: the broker-wide totals (messages, bytes,
            index entries).
    """

    def __init__(self, ram_messages: int = TOTAL_RAM_MESSAGES,
                 ram_bytes: int = TOTAL_RAM_BYTES,
                 beta_messages: int = TOTAL_BETA_MESSAGES) -> None:
        self.ram_messages = ram_messages
        self.ram_bytes = ram_bytes
        self.beta_messages = beta_messages
        self._queues: weakref.WeakSet[VariableQueue] = weakref.WeakSet()
        self.share = (RAM_MESSAGES, RAM_BYTES, BETA_MESSAGES)  # the last one given

    def register(self, vq: VariableQueue) -> VariableQueue:
        """Include ``vq`` in the division (from its next rebalance on); returns it."""
        self._queues.add(vq)
        return vq

    def presize(self, queues: int) -> None:
        """Recovery is about to fill ``queues`` queues: give every registered queue the share
        of that many now, so the first ones restored do not take the whole budget."""
        self._divide(queues)
        for vq in list(self._queues):
            vq.set_budget(*self.share)

    def _divide(self, n: int) -> None:
        n = max(n, 1)
        self.share = (max(MIN_RAM_MESSAGES, min(RAM_MESSAGES, self.ram_messages // n)),
                      min(RAM_BYTES, self.ram_bytes // n),
                      min(BETA_MESSAGES, self.beta_messages // n))

    def rebalance(self) -> int:
        """Give every queue holding messages its share; returns how many there are."""
        active = [vq for vq in self._queues if vq.q4 or vq.q3_count or vq.delta_count]
        self._divide(len(active))
        for vq in active:
            vq.set_budget(*self.share)
        return len(active)
