"""Where quorum queue replicas and leaders go, as pure functions (sans-IO).

The decisions of :class:`~amqp_server.cluster.quorum.QuorumManager` about placement,
rebalancing and maintenance, taken over plain data (node indexes, each queue's etcd state
``{leader, epoch, members, isr}``) so they are tested directly (``tests/test_placement.py``):

* **Members of a new queue** (:func:`choose_members`): the leader, then the running nodes
  holding the fewest replicas (ties: the lower index), ``size`` in all (RabbitMQ 3.13's
  ``rabbit_queue_location:select_members``: local node first, running nodes, fewest
  replicas). A node in maintenance is taken last.
* **The leader of a new queue** (:func:`choose_leader`): RabbitMQ 3.13's
  ``queue-leader-locator``: ``client-local`` (the default: the node the declaring client is
  connected to) or ``balanced`` (the running node leading the fewest quorum queues; RabbitMQ
  picks at random above 1,000 queues, amqpq always counts). RabbitMQ's deprecated values
  ``random``, ``least-leaders`` and ``min-masters`` mean ``balanced`` in a policy or the
  configuration, as in 3.13; a drained node (maintenance) is never chosen.
* **Rebalancing** (:func:`rebalance_moves`): RabbitMQ's ``rabbit_amqqueue:rebalance``: each
  running, non-drained node should lead at most ``ceil(queues / nodes)`` of the queues; a
  node above that hands queues, one at a time, to the in-sync member that leads the fewest.
* **Maintenance** (:func:`quorum_critical`, :func:`leaders_to_move`): RabbitMQ's
  ``rabbit_quorum_queue:filter_quorum_critical``: a queue is critical for a node when the
  node is a member and no more than a bare majority of its members are up (here: running
  and in the in-sync replicas, the members that can take over).

**Nodes of several workers** (``--workers N`` on a cluster node): the indexes here are
cluster *members*, one per worker process (:mod:`amqp_server.cluster.membership`), and
``node_of`` maps each to its node. A node's workers are not independent replicas: the members
of a queue are on distinct nodes (a member is never added on a node already holding one),
replicas are counted per node when choosing, and a node's quorum-critical queues are those of
any of its workers. Leaders are counted per member (each worker leads about as many).

Source: RabbitMQ 3.13 ``rabbit_queue_location``, ``rabbit_amqqueue:rebalance/3``,
``rabbit_quorum_queue:list_with_minimum_quorum/0``, ``rabbit_maintenance``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from typing import Any

__all__ = ["LOCATORS", "choose_leader", "choose_members", "leader_locator",
           "leaders_to_move", "quorum_critical", "rebalance_moves", "short_of_target",
           "target_size"]

#: the values of ``x-queue-leader-locator`` (argument: exactly these, RabbitMQ 3.13)
LOCATORS = ("client-local", "balanced")
#: RabbitMQ 3.13 reads these older values (policy, configuration) as ``balanced``
_DEPRECATED_BALANCED = ("random", "least-leaders", "min-masters")

State = Mapping[str, Any]  # a queue's etcd state: leader, epoch, members, isr
NodeOf = Mapping[int, str]  # member index -> its node's name (module docstring)


def _node(member: int, node_of: NodeOf | None) -> str:
    """Member ``member``'s node (itself, by number, without a map or when unknown)."""
    if node_of is None:
        return f"#{member}"
    return node_of.get(member, f"#{member}")


def _per_node(counts: Counter[int], node_of: NodeOf | None) -> Counter[str]:
    out: Counter[str] = Counter()
    for member, n in counts.items():
        out[_node(member, node_of)] += n
    return out


def leader_locator(argument: Any, policy: Any, configured: str | None) -> str:
    """The queue's leader locator: the policy's ``queue-leader-locator`` (RabbitMQ 3.13: a
    policy wins over the argument), else the argument, else the configuration
    (``queue_leader_locator``), else ``client-local``; an unknown value is ``client-local``.
    """
    for value in (policy, argument, configured):
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        if not value:
            continue
        if value in _DEPRECATED_BALANCED:
            return "balanced"
        return value if value in LOCATORS else "client-local"
    return "client-local"


def _count(states: Iterable[State], field: str) -> Counter[int]:
    counts: Counter[int] = Counter()
    for s in states:
        if field == "leader":
            counts[int(s["leader"])] += 1
        else:
            counts.update(int(m) for m in s["members"])
    return counts


def choose_leader(local: int, running: Collection[int], drained: Collection[int],
                  states: Iterable[State], locator: str) -> int:
    """The node that should lead a new quorum queue declared through node ``local``.

    Args:
        local: the node the declaring client is connected to (its index).
        running: indexes of the running nodes (``local`` among them).
        drained: nodes in maintenance (never chosen while another is running).
        states: every quorum queue's state (their leaders are counted).
        locator: ``client-local`` or ``balanced`` (:func:`leader_locator`).
    """
    able = sorted(n for n in running if n not in drained)
    if not able:
        return local
    if locator != "balanced" and local in able:
        return local
    leaders = _count(states, "leader")
    return min(able, key=lambda n: (leaders[n], n != local, n))


def choose_members(leader: int, running: Collection[int], drained: Collection[int],
                   states: Iterable[State], size: int,
                   node_of: NodeOf | None = None) -> list[int]:
    """The members of a new queue led by ``leader``: the leader first, then the running
    members with the fewest replicas on their node, then on themselves (drained ones last;
    ties: the lower index), one per node (``node_of``: member -> node; None: every member its
    own node), ``size`` in all, at most the running nodes."""
    replicas = _count(states, "members")
    on_node = _per_node(replicas, node_of)
    others = sorted((n for n in running if n != leader),
                    key=lambda n: (n in drained, on_node[_node(n, node_of)], replicas[n], n))
    chosen, used = [leader], {_node(leader, node_of)}
    for n in others:
        if len(chosen) >= size:
            break
        if _node(n, node_of) not in used:
            used.add(_node(n, node_of))
            chosen.append(n)
    return chosen


def rebalance_moves(states: Mapping[Any, State], running: Collection[int],
                    drained: Collection[int]) -> list[tuple[Any, int]]:
    """``(queue, new leader)`` transfers that even out leaders (RabbitMQ's rebalance).

    Args:
        states: queue key -> its state (the queues to rebalance).
        running: running nodes; ``drained``: those in maintenance (they lead nothing new).

    A node leading more than ``ceil(len(states) / nodes)`` hands its queues, smallest
    key first, to the in-sync running member leading the fewest (ties: the lower index)
    when that member leads fewer than that; a queue with no such member stays. Each queue
    moves at most once.
    """
    able = sorted(n for n in running if n not in drained)
    if not able or not states:
        return []
    most = -(-len(states) // len(able))  # ceil
    led: dict[int, list[Any]] = {}
    for key in sorted(states, key=repr):
        led.setdefault(int(states[key]["leader"]), []).append(key)
    moves: list[tuple[Any, int]] = []
    moved: set[Any] = set()
    progress = True
    while progress:
        progress = False
        for node in sorted(led):
            queues = [k for k in led[node] if k not in moved]
            if len(led[node]) <= most or not queues:
                continue
            key = queues[0]
            candidates = [m for m in states[key]["isr"] if int(m) != node and int(m) in able]
            moved.add(key)
            progress = True
            if not candidates:
                continue
            target = min((int(m) for m in candidates),
                         key=lambda m: (len(led.get(m, [])), m))
            if len(led.get(target, [])) >= most:
                continue  # it would only move the excess to another node
            led[node].remove(key)
            led.setdefault(target, []).append(key)
            moves.append((key, target))
    return moves


def leaders_to_move(states: Mapping[Any, State], node: int, running: Collection[int],
                    drained: Collection[int]) -> list[tuple[Any, int | None]]:
    """The queues ``node`` leads and where each should go before maintenance: the in-sync,
    running, non-drained member leading the fewest queues (None: no such member: the queue
    stays led by ``node``)."""
    leaders = _count(states.values(), "leader")
    out: list[tuple[Any, int | None]] = []
    for key in sorted(states, key=repr):
        state = states[key]
        if int(state["leader"]) != node:
            continue
        able = [int(m) for m in state["isr"]
                if int(m) != node and int(m) in running and int(m) not in drained]
        target = min(able, key=lambda m: (leaders[m], m)) if able else None
        if target is not None:
            leaders[target] += 1
            leaders[node] -= 1
        out.append((key, target))
    return out


def quorum_critical(states: Mapping[Any, State], node: int | Collection[int],
                    running: Collection[int]) -> list[Any]:
    """The queues that would lose their quorum if ``node`` stopped (a member index, or every
    member index of a node of several workers): ``node`` is a member and at most a bare
    majority of the members are running and in sync (RabbitMQ's
    ``filter_quorum_critical``: ``length(Up) =< length(Members) div 2 + 1``; a queue with
    one member on ``node`` is critical)."""
    mine = {node} if isinstance(node, int) else set(node)
    out = []
    for key in sorted(states, key=repr):
        state = states[key]
        members = [int(m) for m in state["members"]]
        if not mine.intersection(members):
            continue
        up = [m for m in members if m in running and m in {int(i) for i in state["isr"]}]
        if len(up) <= len(members) // 2 + 1:
            out.append(key)
    return out


def target_size(arguments: Mapping[str, Any], policy: Any, configured: int) -> int:
    """A quorum queue's target group size for the membership reconciliation (RabbitMQ
    3.13's ``get_target_size``): the largest of ``configured`` (``--quorum-target-group-size``,
    which turns the reconciliation on), its ``x-quorum-target-group-size`` argument and its
    policy's ``target-group-size`` (``policy``: that key's value or None). An argument
    that is not a positive integer counts as none (RabbitMQ takes any value and does not
    check it)."""
    def size(value: Any) -> int:
        ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
        return value if ok else 0
    return max(configured, size(arguments.get("x-quorum-target-group-size")), size(policy))


def short_of_target(states: Mapping[Any, State], running: Collection[int],
                    drained: Collection[int], target: int | Mapping[Any, int],
                    node_of: NodeOf | None = None) -> list[tuple[Any, int]]:
    """``(queue, member)`` additions that bring queues with fewer than ``target`` members up
    to it with running members (RabbitMQ 4's continuous membership reconciliation;
    ``target``: one size for all, or each queue's, :func:`target_size`): each queue gets
    the running, non-drained members of nodes it has no member on, the fewest replicas on
    their node first (counted as the additions go; ties: the lower index)."""
    replicas = _count(states.values(), "members")
    on_node = _per_node(replicas, node_of)
    out: list[tuple[Any, int]] = []
    for key in sorted(states, key=repr):
        members = {int(m) for m in states[key]["members"]}
        want = target if isinstance(target, int) else target.get(key, 0)
        while len(members) < want:
            used = {_node(m, node_of) for m in members}
            able = [n for n in running
                    if _node(n, node_of) not in used and n not in drained]
            if not able:
                break
            node = min(able, key=lambda n: (on_node[_node(n, node_of)], replicas[n], n))
            replicas[node] += 1
            on_node[_node(node, node_of)] += 1
            members.add(node)
            out.append((key, node))
    return out
