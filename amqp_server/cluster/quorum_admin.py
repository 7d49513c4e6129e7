"""Operator commands on a node's quorum queues: membership changes (``rabbitmq-queues
add_member``, ``delete_member``, ``grow``, ``shrink``), leader transfers, rebalancing
(``rabbitmq-queues rebalance``), moving leaders off a node being drained, the quorum-critical
check, and continuous membership reconciliation; each an etcd transaction on the queue's
state that compares the value it replaces (the design: :mod:`amqp_server.cluster.quorum`;
the decisions: :mod:`amqp_server.cluster.placement`).

Source: RabbitMQ's ``rabbitmq-queues`` and ``rabbitmq-upgrade drain`` commands and RabbitMQ
4's ``quorum_queue.continuous_membership_reconciliation``; etcd transactions.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from amqp_server.cluster import placement
from amqp_server.workers.link_codec import queue_key, split_queue_key

if TYPE_CHECKING:
    from amqp_server.cluster.quorum import QuorumManager

log = logging.getLogger("amqpq.quorum")


class QuorumAdmin:
    """A node's operator commands on the cluster's quorum queues (module docstring), over
    its :class:`~amqp_server.cluster.quorum.QuorumManager`'s etcd states.

    Args:
        manager: the node's quorum manager (its states, etcd hub, runtime, transactions).
    """

    def __init__(self, manager: QuorumManager) -> None:
        self.manager = manager
        self.hub = manager.hub
        self.runtime = manager.runtime
        #: grow queues with fewer members up to this many (0: off); RabbitMQ 4's
        #: ``quorum_queue.continuous_membership_reconciliation.target_group_size``
        self.target_group_size = 0
        self.reconcile_every = 10.0  # s between reconciliations (RabbitMQ: trigger_interval)
        self._reconciled_at = 0.0
        self._reconciling = False

    # ---- membership (rabbitmq-queues add_member, delete_member, grow, shrink) ------------

    def node_index(self, node: str) -> int | None:
        """The member index of cluster node ``node`` (by name; a node of several workers:
        its running worker holding the fewest replicas, else its lowest index), None when
        unknown."""
        mine = [i for i, n in self.hub.nodes.items() if n == node]
        if not mine:
            return None
        running = [i for i in mine if i in self.hub.running] or mine
        replicas: dict[int, int] = {}
        for state, _ in self.manager.states.values():
            for m in state["members"]:
                replicas[int(m)] = replicas.get(int(m), 0) + 1
        return min(running, key=lambda i: (replicas.get(i, 0), i))

    def member_on(self, state: dict[str, Any], node: str) -> int | None:
        """The member of queue state ``state`` on node ``node`` (any of its workers), None
        when it has none there."""
        return next((int(m) for m in state["members"]
                     if self.hub.nodes.get(int(m)) == node), None)

    async def change_members(self, vhost: str, name: str, node: str, add: bool) -> str:
        """Add ``node`` to (or remove it from) quorum queue ``name``'s members, by an etcd
        transaction (retried if the state changed meanwhile). Returns "ok" or why not:
        "no queue", "no node", "already a member", "not a member", "last member". A new
        member takes a snapshot and joins the ISR once caught up; a removed leader hands
        over to an in-sync member (epoch + 1)."""
        index = self.node_index(node)
        if index is None:
            return "no node"

        def change(state: dict[str, Any]) -> dict[str, Any] | str:
            members, isr = list(state["members"]), list(state["isr"])
            gone = self.member_on(state, node)  # one member per node, on any worker
            if add:
                if gone is not None:
                    return "already a member"
                return {**state, "members": [*members, index]}
            if gone is None:
                return "not a member"
            if len(members) == 1:
                return "last member"
            rest = [m for m in isr if m != gone] or [m for m in members if m != gone]
            new = {**state, "members": [m for m in members if m != gone],
                   "isr": [m for m in isr if m != gone] or rest[:1]}
            if int(state["leader"]) == gone:
                new.update(leader=rest[0], run=self.manager.run_of(rest[0]),
                           epoch=int(state["epoch"]) + 1)
            return new

        result, _ = await self._change_state(queue_key(vhost, name), change)
        if result == "ok":
            log.info("quorum queue '%s' in vhost '%s': %s %s", name, vhost,
                     "member added:" if add else "member removed:", node)
        return result

    async def _change_state(self, qkey: bytes,
                            change: Callable[[dict[str, Any]], dict[str, Any] | str]
                            ) -> tuple[str, dict[str, Any] | None]:
        """Replace queue ``qkey``'s etcd state by ``change(state)`` in one transaction,
        read again and retried (10 times) while someone else changes it first. Returns
        ("ok", the new state), (``change``'s answer, None) when it returns a reason instead
        of a state, ("no queue", None), or ("busy", None)."""
        for _ in range(10):
            known = self.manager.states.get(qkey)
            if known is None:
                return "no queue", None
            state, raw = known
            new = change(state)
            if isinstance(new, str):
                return new, None
            if await self.manager.replace_state(qkey, raw, new):
                return "ok", new
            await self.hub.barrier()  # someone else changed it: read it again
        return "busy", None

    def quorum_queues(self) -> list[tuple[str, str, list[int]]]:
        """``(vhost, name, member indexes)`` of every quorum queue of the cluster."""
        out = []
        for qkey, (state, _) in self.manager.states.items():
            vhost, name = split_queue_key(qkey)
            out.append((vhost, name, list(state["members"])))
        return out

    async def transfer_leader(self, qkey: bytes, target: int) -> str:
        """Make node ``target`` the leader of quorum queue ``qkey`` (``rabbitmq-queues
        rebalance``, ``drain``): one etcd transaction naming it and its run (its etcd
        lease id: :meth:`QuorumManager.run_of`) with epoch + 1, the old
        leader out of the in-sync replicas until it caught up again (as after an election).
        The old leader steps down when its watch brings the state (uncommitted publishes
        refused with NOT_LEADER: a publisher on another node waits for the new leader, one
        on the old leader's node is nacked; consumers cancelled: the queue's replica code
        reacts to any newer epoch naming another leader), the new one takes over. Returns "ok", "no queue", or "not
        in sync" (``target`` is not a running in-sync member), "busy" (the state kept
        changing)."""
        leaders: list[int] = []  # the leader each try saw (the last one's was replaced)

        def change(state: dict[str, Any]) -> dict[str, Any] | str:
            leader = int(state["leader"])
            if leader == target:
                return "ok"
            if target not in state["isr"] or target not in self.hub.running:
                return "not in sync"
            leaders.append(leader)
            return {**state, "leader": target, "run": self.manager.run_of(target),
                    "epoch": int(state["epoch"]) + 1,
                    "isr": [m for m in state["isr"] if m != leader]}

        result, new = await self._change_state(qkey, change)
        if new is not None:
            vhost, name = split_queue_key(qkey)
            log.info("quorum queue '%s' in vhost '%s': leadership transferred from node "
                     "%d to node %d (epoch %d)", name, vhost, leaders[-1], target,
                     new["epoch"])
        return result

    def _matching(self, vhost_pattern: str, queue_pattern: str
                  ) -> dict[bytes, dict[str, Any]]:
        vre, qre = re.compile(vhost_pattern), re.compile(queue_pattern)
        out = {}
        for qkey, (state, _) in self.manager.states.items():
            vhost, name = split_queue_key(qkey)
            if vre.search(vhost) and qre.search(name):
                out[qkey] = state
        return out

    async def rebalance(self, vhost_pattern: str = ".*", queue_pattern: str = ".*"
                        ) -> list[dict[str, Any]]:
        """``rabbitmq-queues rebalance quorum``: move leaders of the matching quorum queues
        so each running node out of maintenance leads about as many
        (:func:`placement.rebalance_moves`). Returns RabbitMQ's summary: one
        ``{"Node name", "Number of quorum queues"}`` per node leading any, after the moves.

        Raises:
            re.error: a pattern is not a regular expression.
        """
        matching = self._matching(vhost_pattern, queue_pattern)
        for qkey, target in placement.rebalance_moves(matching, self.hub.running,
                                                      self.manager.drained_indexes()):
            result = await self.transfer_leader(qkey, target)
            if result != "ok":
                vhost, name = split_queue_key(qkey)
                log.warning("quorum queue '%s' in vhost '%s': not moved to node %d: %s",
                            name, vhost, target, result)
        await self.hub.barrier()
        counts: dict[str, int] = {}
        for qkey in matching:
            if qkey in self.manager.states:
                leader = self.manager.node_name(int(self.manager.states[qkey][0]["leader"]))
                counts[leader] = counts.get(leader, 0) + 1
        return [{"Node name": name, "Number of quorum queues": n}
                for name, n in sorted(counts.items())]

    async def move_leaders_off(self) -> tuple[int, int]:
        """Hand every quorum queue this node leads to another in-sync member (``drain``);
        returns (moved, kept: no running in-sync member to take it)."""
        states = {k: s for k, (s, _) in self.manager.states.items()}
        moved = kept = 0
        for qkey, target in placement.leaders_to_move(states, self.runtime.index,
                                                      self.hub.running,
                                                      self.manager.drained_indexes()):
            if target is not None and await self.transfer_leader(qkey, target) == "ok":
                moved += 1
            else:
                kept += 1
        return moved, kept

    def critical_queues(self, index: int | None = None) -> list[tuple[str, str]]:
        """``(vhost, name)`` of the quorum queues that would lose their quorum if node
        ``index`` (default: this one) stopped (:func:`placement.quorum_critical`)."""
        states = {k: s for k, (s, _) in self.manager.states.items()}
        node = self.manager.node_name(self.runtime.index if index is None else index)
        workers = {i for i, n in self.hub.nodes.items() if n == node}  # all of the node's
        return [split_queue_key(k) for k in placement.quorum_critical(states, workers,
                                                                       self.hub.running)]

    def target_of(self, qkey: str) -> int:
        """Queue ``qkey``'s target group size (:func:`placement.target_size`: the largest of
        :attr:`target_group_size`, its ``x-quorum-target-group-size`` argument and its
        policy's ``target-group-size``)."""
        vhost_name, name = split_queue_key(qkey)
        vhost = self.runtime.broker.vhosts.get(vhost_name)
        q = vhost.queues.get(name) if vhost is not None else None
        if vhost is None or q is None:
            return self.target_group_size
        policy = vhost.policies.get(q.settings.policy or "")
        value = policy.definition.get("target-group-size") if policy is not None else None
        return placement.target_size(q.arguments, value, self.target_group_size)

    def reconcile(self, now: float) -> None:
        """Grow queues short of their target size (:meth:`target_of`) onto running nodes
        (RabbitMQ 4's continuous membership reconciliation, on while
        :attr:`target_group_size` is set), every :attr:`reconcile_every` seconds, by
        the running node of the lowest index only (one node changes members at a time)."""
        if self.target_group_size <= 0 or self._reconciling \
                or now - self._reconciled_at < self.reconcile_every \
                or min(self.hub.running) != self.runtime.index:
            return
        self._reconciled_at = now
        states = {k: s for k, (s, _) in self.manager.states.items()}
        adds = placement.short_of_target(states, self.hub.running, self.manager.drained_indexes(),
                                         {k: self.target_of(k) for k in states}, self.hub.nodes)
        if not adds:
            return
        self._reconciling = True

        async def grow() -> None:
            try:
                for qkey, node in adds:
                    vhost, name = split_queue_key(qkey)
                    await self.change_members(vhost, name, self.manager.node_name(node), True)
            finally:
                self._reconciling = False

        self.runtime.keep_task(asyncio.ensure_future(grow()))
