"""The other workers' part of a ``--workers N`` node's metrics: one node, one endpoint, as
rabbitmq_prometheus serves each node's objects on that node's endpoint.

Worker 0 serves the endpoint. Per scrape it asks the other workers for their channels and
connections (as the management API shows them; 2 s at most, a worker that does not answer
is left out) and adds them to the channel and connection families, per object or summed;
the node-wide message counters (``rabbitmq_global_messages_*``, the channel counters of
``/metrics``) add the other workers' counters from their once-a-second summaries. The
queues need nothing here: every worker holds every queue (a stand-in for one on another
worker, with its counts), so they are already all on worker 0. A cluster node's peers are
other nodes, which serve their own endpoints: nothing is added for them, except on a node
of several workers (each a cluster member): its endpoint (worker 0's) asks every member
and keeps its own workers' channels and connections, and adds their counters.

Source: https://www.rabbitmq.com/docs/prometheus (one endpoint per node).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from management.cluster_view import own_workers, peer_message_counts

if TYPE_CHECKING:
    from broker.broker import Broker

__all__ = ["CHANNEL_JSON", "CONNECTION_JSON", "Elsewhere", "gather", "json_counts"]

#: channel family metric name -> its value from the API's channel JSON
CHANNEL_JSON: dict[str, Callable[[Mapping[str, Any]], float]] = {
    "channel_consumers": lambda c: c.get("consumer_count", 0),
    "channel_messages_unacked": lambda c: c.get("messages_unacknowledged", 0),
    "channel_messages_unconfirmed": lambda c: c.get("messages_unconfirmed", 0),
    "channel_messages_uncommitted": lambda c: c.get("messages_uncommitted", 0),
    "channel_acks_uncommitted": lambda c: c.get("acks_uncommitted", 0),
    "consumer_prefetch": lambda c: c.get("prefetch_count", 0),
    "channel_prefetch": lambda c: c.get("global_prefetch_count", 0),
}
#: connection family metric name -> its value from the API's connection JSON
CONNECTION_JSON: dict[str, Callable[[Mapping[str, Any]], float]] = {
    "connection_channels": lambda c: c.get("channels", 0),
    "connection_incoming_packets_total": lambda c: c.get("recv_cnt", 0),
    "connection_outgoing_packets_total": lambda c: c.get("send_cnt", 0),
    "connection_pending_packets": lambda c: c.get("send_pend", 0),
    "connection_incoming_bytes_total": lambda c: c.get("recv_oct", 0),
    "connection_outgoing_bytes_total": lambda c: c.get("send_oct", 0),
}


def json_counts(channel: Mapping[str, Any]) -> Counter[str]:
    """A channel JSON's message counters (``message_stats`` without the rates)."""
    stats = channel.get("message_stats") or {}
    return Counter({k: v for k, v in stats.items() if isinstance(v, int)})


@dataclass
class Elsewhere:
    """The other workers' channels and connections (API JSON) and message counters."""

    channels: list[dict[str, Any]] = field(default_factory=list)
    connections: list[dict[str, Any]] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)


async def gather(broker: Broker) -> Elsewhere:
    """What the other workers of this node hold; empty with one worker. A cluster node's
    peers are other nodes (their own endpoints), except the other workers of a node of
    several (:func:`~management.cluster_view.own_workers`): their channels, connections and
    counters are this node's."""
    workers = broker.workers
    if workers is None:
        return Elsewhere()
    if broker.cluster is None:
        return Elsewhere(channels=await workers.gather_json("channels"),
                         connections=await workers.gather_json("connections"),
                         counts=peer_message_counts(broker))
    mine = own_workers(broker)
    if not mine:
        return Elsewhere()
    return Elsewhere(
        channels=[c for c in await workers.gather_json("channels") if c.get("worker") in mine],
        connections=[c for c in await workers.gather_json("connections")
                     if c.get("worker") in mine],
        counts=peer_message_counts(broker, only=mine))
