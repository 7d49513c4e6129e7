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
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from broker.broker import Broker
    from management.state import ManagementState
    from queue_store.queue import Queue

__all__ = ["cluster_name", "lives_here", "node_names", "peer_message_counts",
           "queues_from_homes"]


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


def lives_here(st: ManagementState, q: Queue) -> bool:
    """Whether queue ``q`` lives on this node (any of its workers): always without a
    cluster; in one, a classic queue declared here, a quorum queue led from here. A node's
    Prometheus endpoint reports these only, as each RabbitMQ node reports its own."""
    workers = st.broker.workers
    if st.broker.cluster is None or workers is None:
        return True
    if q.quorum and workers.quorum is not None:
        return workers.quorum.fields(q).get("leader") == st.node
    return workers.home_of(q) == workers.index


def node_names(st: ManagementState) -> dict[int, str]:
    """Worker (node) index -> node name: every cluster node's; without a cluster, ``{}``
    (every worker of a ``--workers N`` broker is the one node ``st.node``)."""
    cluster = st.broker.cluster
    if cluster is None:
        return {}
    out = {}
    for n in cluster.nodes():
        if n.get("index") is not None:
            out[int(n["index"])] = str(n["name"])
    return out


#: seconds after which a peer's last summary no longer counts (it sends one a second)
FRESH = 5.0


def _up_summaries(broker: Broker) -> Iterable[dict[str, Any]]:
    """The last summary of every other worker or node heard from in the last
    :data:`FRESH` seconds (they send one a second)."""
    workers = broker.workers
    if workers is None:
        return []
    now = asyncio.get_running_loop().time()
    return [summary for index, (summary, at) in list(workers.peer_summaries.items())
            if index != workers.index and now - at < FRESH]


def peer_message_counts(broker: Broker, vhosts: Iterable[str] | None = None) -> Counter[str]:
    """The other workers' and nodes' message counters (``publish``, ``deliver``... as
    :data:`management.serializers.MESSAGE_STATS_KEYS`): their node totals with ``vhosts``
    None, else summed over those vhosts; empty with one worker and no cluster."""
    total: Counter[str] = Counter()
    names = None if vhosts is None else set(vhosts)
    for summary in _up_summaries(broker):
        if names is None:
            total.update(summary.get("message_counts") or {})
        else:
            for vhost, counts in (summary.get("vhost_message_counts") or {}).items():
                if vhost in names:
                    total.update(counts)
    return total


def queues_from_homes(st: ManagementState, local: list[dict[str, Any]],
                      homes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``local`` (this process's queue JSON, in order) with each queue that lives on another
    worker or node replaced by its home's JSON from ``homes`` (the ``queues`` answers, each
    with ``worker``), so that its counts and rates are the home's. A queue whose home did not
    answer keeps this process's JSON. Every queue's ``node`` is then the name of the node it
    lives on (a quorum queue's: its leader's, as RabbitMQ shows it)."""
    by_home = {(q["vhost"], q["name"], q.get("worker")): q for q in homes}
    here = st.broker.workers.index if st.broker.workers is not None else 0
    names = node_names(st)
    out = []
    for item in local:
        worker = item.get("worker", here)
        if worker != here:
            home = by_home.get((item["vhost"], item["name"], worker))
            if home is not None:  # the home's figures (and node name) over this copy's
                item = {**item, **home}
                out.append({**item, "node": item.get("leader") or home["node"]})
                continue
        node = item.get("leader") or names.get(int(worker), st.node)
        out.append({**item, "node": node})
    return out
