"""The management API's view over every node of a cluster and every worker of a
``--workers N`` broker: whose node an object is on, the other workers' and nodes' message
counters (for the overview's and vhosts' ``message_stats``), and the queues as their home
shows them.

RabbitMQ's management aggregates every node's statistics in each node's answer: a queue's
``node`` is the node it lives on (a quorum queue's: its leader's), and the overview's
``message_stats`` and their rates are summed over the cluster. Here each worker (or node)
sends the others its counters once a second (:class:`~amqp_server.workers.worker_stats.
PeerStats` summaries), and a queue that lives elsewhere is described by its home, asked when
the list is read (2 s at most; a home that does not answer leaves this process's copy).

Source: https://www.rabbitmq.com/docs/management#http-api (GET /api/overview, /api/queues),
https://www.rabbitmq.com/docs/quorum-queues (``leader``, ``members``, ``online``).
"""

from __future__ import annotations

import asyncio
import weakref
from collections import Counter
from collections.abc import Callable, Collection, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from broker.broker import Broker
    from management.state import ManagementState
    from queue_store.queue import Queue

__all__ = ["client_totals", "cluster_name", "lives_here", "node_names", "own_workers",
           "peer_message_counts", "peer_vhost_octets", "queues_from_homes"]


def cluster_name(st: ManagementState) -> str:
    """The cluster's name, the same on every node (``/api/overview``'s ``cluster_name``,
    Prometheus's ``rabbitmq_cluster`` label): without a cluster the node's name; in one,
    the first member's name in sorted order (running or not; it changes only when that node
    is forgotten). RabbitMQ's default cluster name is a node's name too."""
    cluster = st.broker.cluster
    if cluster is None:
        return st.node
    names = [str(n["name"]) for n in cluster.nodes()]
    return min(names) if names else st.node


def lives_here(st: ManagementState, q: Queue, own: Collection[int] = ()) -> bool:
    """Whether queue ``q`` lives on this node (any of its workers): always without a
    cluster; in one, a classic queue declared here (``own``: the indexes of this node's
    other workers, :func:`own_workers`), a quorum queue led from here. A node's Prometheus
    endpoint reports these only, as each RabbitMQ node reports its own."""
    workers = st.broker.workers
    if st.broker.cluster is None or workers is None:
        return True
    if (q.quorum or q.kind == "stream") and workers.quorum is not None:
        leader = workers.quorum.fields(q).get("leader")
        if leader is not None or q.quorum:  # a replicated stream: its leader's
            return leader == st.node
    home = workers.home_of(q)
    return home == workers.index or home in own


def own_workers(broker: Broker) -> set[int]:
    """A cluster node of several workers (``--workers N``, each worker a cluster member):
    the member indexes of this node's other workers, which its one Prometheus endpoint
    reports with its own; empty without a cluster or with one worker."""
    cluster, workers = broker.cluster, broker.workers
    if cluster is None or workers is None:
        return set()
    name = broker.config.node_name
    for node in cluster.nodes():
        if node.get("name") == name:
            return {int(w["index"]) for w in node.get("workers") or ()
                    if w.get("index") is not None} - {workers.index}
    return set()


#: index -> name of every node each broker has seen running (a stopped node's registration
#: is gone from etcd, but its queues still name it)
_SEEN: weakref.WeakKeyDictionary[Broker, dict[int, str]] = weakref.WeakKeyDictionary()


def node_names(st: ManagementState) -> dict[int, str]:
    """Worker (node) index -> node name: every cluster node's seen running since this
    process started; without a cluster, ``{}`` (every worker of a ``--workers N`` broker
    is the one node ``st.node``)."""
    broker = st.broker
    cluster = broker.cluster
    if cluster is None:
        return {}
    seen = _SEEN.setdefault(broker, {})
    for n in cluster.nodes():
        if n.get("index") is not None:
            seen[int(n["index"])] = str(n["name"])
        for w in n.get("workers") or ():  # a node of several workers: each is the node
            if w.get("index") is not None:
                seen[int(w["index"])] = str(n["name"])
    if broker.workers is not None:
        seen[broker.workers.index] = st.node
    return seen


def node_of(st: ManagementState, index: int) -> str:
    """The name of node (or worker) ``index``: ``st.node`` without a cluster, else the name
    it ran under (``node-<index>`` for one not seen since this process started)."""
    if st.broker.cluster is None:
        return st.node
    return node_names(st).get(index, f"node-{index}")


#: seconds after which a peer's last summary no longer counts (it sends one a second)
FRESH = 5.0


def _up_summaries(broker: Broker, only: Collection[int] | None = None
                  ) -> Iterable[dict[str, Any]]:
    """The last summary of every other worker or node heard from in the last
    :data:`FRESH` seconds (they send one a second); ``only``: of these indexes only."""
    workers = broker.workers
    if workers is None:
        return []
    now = asyncio.get_running_loop().time()
    return [summary for index, (summary, at) in list(workers.peer_summaries.items())
            if index != workers.index and now - at < FRESH
            and (only is None or index in only)]


def peer_message_counts(broker: Broker, vhosts: Iterable[str] | None = None,
                        only: Collection[int] | None = None) -> Counter[str]:
    """The other workers' and nodes' message counters (``publish``, ``deliver``... as
    :data:`management.serializers.MESSAGE_STATS_KEYS`): their node totals with ``vhosts``
    None, else summed over those vhosts; ``only``: of these worker (member) indexes only;
    empty with one worker and no cluster."""
    total: Counter[str] = Counter()
    names = None if vhosts is None else set(vhosts)
    for summary in _up_summaries(broker, only):
        if names is None:
            total.update(summary.get("message_counts") or {})
        else:
            for vhost, counts in (summary.get("vhost_message_counts") or {}).items():
                if vhost in names:
                    total.update(counts)
    return total


def peer_vhost_octets(broker: Broker, vhost: str) -> tuple[int, int]:
    """``(recv_oct, send_oct)`` of vhost ``vhost``'s connections on the other workers and
    nodes, as they last reported them (once a second); ``(0, 0)`` with one worker and no
    cluster."""
    recv = send = 0
    for summary in _up_summaries(broker):
        got = (summary.get("vhost_octets") or {}).get(vhost) or (0, 0)
        recv += int(got[0])
        send += int(got[1])
    return recv, send


def client_totals(broker: Broker, only: Collection[int] | None = None) -> dict[str, int]:
    """Connections, channels and consumers of this process plus those every other worker
    and node last reported (once a second): the overview's ``object_totals``, cluster-wide
    as RabbitMQ's; ``only``: of these other worker (member) indexes only."""
    channels = [ch for conn in list(broker.connections) for ch in conn.channels.values()]
    totals = {"connections": len(broker.connections), "channels": len(channels),
              "consumers": sum(len(ch.consumers) for ch in channels)}
    for summary in _up_summaries(broker, only):
        for key in totals:
            totals[key] += int(summary.get(key, 0))
    return totals


def queues_from_homes(st: ManagementState, queues: list[Queue],
                      homes: list[dict[str, Any]],
                      describe: Callable[[Queue], dict[str, Any]],
                      full: bool = False) -> list[dict[str, Any]]:
    """``queues`` as the API shows them, in order: one living on another worker or node as
    its home described it in ``homes`` (the ``queues`` answers, each with ``worker``), so
    that its counts and rates are the home's; the others, and one whose home did not
    answer, by ``describe`` (this process's JSON; with ``full``, a home's answer is laid
    over it, for the fields only a queue's page has). Every queue's ``node`` is the name of
    the node it lives on (a quorum queue's: its leader's, as RabbitMQ shows it)."""
    by_home = {(q["vhost"], q["name"], q.get("worker")): q for q in homes}
    node_names(st)  # note the running nodes' names, for when one has stopped
    workers = st.broker.workers
    here = workers.index if workers is not None else 0
    out = []
    for q in queues:
        worker = workers.home_of(q) if workers is not None else here
        home = by_home.get((q.vhost_name, q.name, worker)) if worker != here else None
        if home is not None:  # the home's figures (and node name)
            item = {**describe(q), **home} if full else dict(home)
            item["node"] = item.get("leader") or home["node"]
        else:
            item = describe(q)
            item["node"] = item.get("leader") or node_of(st, int(worker))
        out.append(item)
    return out
