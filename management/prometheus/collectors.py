"""The broker's metrics under ``rabbitmq_prometheus``'s names, read from live state at scrape
time (nothing is recorded per message for them).

:class:`BrokerCollector` is a ``prometheus_client`` collector. Its :class:`Scope` says what a
scrape wants, as the plugin's three endpoints do:

- aggregated (``/metrics``): every family summed over its objects, without object labels;
- per object (``/metrics/per-object``): one sample per queue (``vhost``, ``queue``), channel
  (``channel``) or connection (``connection``);
- detailed (``/metrics/detailed?family=...&vhost=...``): only the families asked for, per
  object, named ``rabbitmq_detailed_*``, optionally only the queues of some vhosts.

Families (RabbitMQ's ETS table names, which ``family=`` takes) and their metric names, types
and help texts are those of ``prometheus_rabbitmq_core_metrics_collector.erl``,
``prometheus_rabbitmq_global_metrics_collector.erl`` and
``prometheus_rabbitmq_alarm_metrics_collector.erl`` of RabbitMQ 3.13.7.

Source: https://www.rabbitmq.com/docs/prometheus,
https://github.com/rabbitmq/rabbitmq-server/tree/v3.13.7/deps/rabbitmq_prometheus.
"""

from __future__ import annotations

import os
import resource
import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    UnknownMetricFamily,
)
from prometheus_client.registry import Collector

from broker.alarms import process_rss
from broker.message_stats import deliver_get
from management.cluster_view import client_totals, cluster_name, lives_here, own_workers
from management.prometheus.elsewhere import (
    CHANNEL_JSON,
    CONNECTION_JSON,
    Elsewhere,
    json_counts,
)
from management.serializers import UnackedTotals, channel_name, connection_name, open_channels
from management.state import RABBITMQ_VERSION
from queue_store.backing_status import memory_fields
from vhosts.extras import INTERNAL_CLUSTER_ID

if TYPE_CHECKING:
    from amqp_server.channel import Channel
    from management.state import ManagementState
    from queue_store.queue import Queue

PROMETHEUS_PLUGIN_VERSION = "3.13.7"  # the plugin whose names and help texts these are

# family -> [(metric name without prefix, type, help, value of one object)]
Row = tuple[str, str, str, Callable[[Any], float]]


def _queue_bytes(q: Queue) -> int:
    return int(getattr(q.ready, "bytes", 0))


def _mem(a: tuple[Queue, int]) -> dict[str, Any]:
    """The queue's RAM/paged-out figures (queue_store.backing_status), ``a`` = (queue,
    unacked bytes)."""
    return memory_fields(a[0], a[0].unacked_count, a[1])


def _ready(q: Queue) -> int:
    """Ready messages; a stream's: the messages in its log (deliveries do not remove them)."""
    log_count = getattr(q, "log_count", None)
    return q.message_count if log_count is None else int(log_count)


def _depth(q: Queue) -> int:
    log_count = getattr(q, "log_count", None)
    return q.message_count + q.unacked_count if log_count is None else int(log_count)


QUEUE_COARSE: list[Row] = [
    ("queue_messages_ready", "gauge", "Messages ready to be delivered to consumers", _ready),
    ("queue_messages_unacked", "gauge",
     "Messages delivered to consumers but not yet acknowledged", lambda q: q.unacked_count),
    ("queue_messages", "gauge", "Sum of ready and unacknowledged messages - total queue depth",
     _depth),
]
# stream queues only (amqpq's; RabbitMQ exports no per-stream log figures over Prometheus)
STREAM_METRICS: list[Row] = [
    ("stream_segments", "gauge", "Segment files of a stream", lambda q: len(q.log.segments)),
    ("stream_first_offset", "gauge", "Oldest offset still in a stream",
     lambda q: q.log.first_offset),
    ("stream_next_offset", "gauge", "Offset the next message appended to a stream gets",
     lambda q: q.log.next_offset),
    ("stream_bytes", "gauge", "Bytes of a stream's segments", lambda q: q.log.bytes),
]
QUEUE_CONSUMERS: Row = ("queue_consumers", "gauge", "Consumers on a queue",
                        lambda q: q.consumer_count)
# queue_metrics rows read (queue, unacked bytes)
QUEUE_METRICS: list[Row] = [
    ("queue_consumers", "gauge", "Consumers on a queue", lambda a: a[0].consumer_count),
    ("queue_consumer_capacity", "gauge", "Consumer capacity",
     lambda a: 1.0 if a[0].consumer_count else 0.0),
    ("queue_consumer_utilisation", "gauge", "Same as consumer capacity",
     lambda a: 1.0 if a[0].consumer_count else 0.0),
    ("queue_messages_ram", "gauge", "Ready and unacknowledged messages stored in memory",
     lambda a: _mem(a)["messages_ram"]),
    ("queue_messages_ram_bytes", "gauge",
     "Size of ready and unacknowledged messages stored in memory",
     lambda a: _mem(a)["message_bytes_ram"]),
    ("queue_messages_ready_ram", "gauge", "Ready messages stored in memory",
     lambda a: _mem(a)["messages_ready_ram"]),
    ("queue_messages_unacked_ram", "gauge", "Unacknowledged messages stored in memory",
     lambda a: a[0].unacked_count),
    ("queue_messages_bytes", "gauge", "Size in bytes of ready and unacknowledged messages",
     lambda a: _queue_bytes(a[0]) + a[1]),
    ("queue_messages_ready_bytes", "gauge", "Size in bytes of ready messages",
     lambda a: _queue_bytes(a[0])),
    ("queue_messages_unacked_bytes", "gauge", "Size in bytes of all unacknowledged messages",
     lambda a: a[1]),
    ("queue_messages_paged_out", "gauge", "Messages paged out to disk",
     lambda a: _mem(a)["messages_paged_out"]),
    ("queue_messages_paged_out_bytes", "gauge", "Size in bytes of messages paged out to disk",
     lambda a: _mem(a)["message_bytes_paged_out"]),
]
CHANNEL_METRICS: list[Row] = [
    ("channel_consumers", "gauge", "Consumers on a channel", lambda ch: len(ch.consumers)),
    ("channel_messages_unacked", "gauge", "Delivered but not yet acknowledged messages",
     lambda ch: len(ch.unacked)),
    ("channel_messages_unconfirmed", "gauge", "Published but not yet confirmed messages",
     lambda ch: 0 if ch.confirms is None else ch.confirms.unconfirmed_count),
    ("channel_messages_uncommitted", "gauge",
     "Messages received in a transaction but not yet committed",
     lambda ch: sum(1 for kind, _ in ch.tx or () if kind == "publish")),
    ("channel_acks_uncommitted", "gauge",
     "Message acknowledgements in a transaction not yet committed",
     lambda ch: sum(len(arg[0]) for kind, arg in ch.tx or () if kind != "publish")),
    ("consumer_prefetch", "gauge", "Limit of unacknowledged messages for each consumer",
     lambda ch: ch.prefetch_count),
    ("channel_prefetch", "gauge",
     "Total limit of unacknowledged messages for all consumers on a channel",
     lambda ch: ch.global_prefetch),
]
# channel counters read message_counts() (broker.message_stats names)
CHANNEL_EXCHANGE: list[Row] = [
    ("channel_messages_published_total", "counter",
     "Total number of messages published into an exchange on a channel",
     lambda c: c["publish"]),
    ("channel_messages_confirmed_total", "counter",
     "Total number of messages published into an exchange and confirmed on the channel",
     lambda c: c["confirm"]),
    ("channel_messages_unroutable_returned_total", "counter",
     "Total number of messages published as mandatory into an exchange and returned to the "
     "publisher as unroutable", lambda c: c["return_unroutable"]),
    ("channel_messages_unroutable_dropped_total", "counter",
     "Total number of messages published as non-mandatory into an exchange and dropped as "
     "unroutable", lambda c: c["drop_unroutable"]),
]
CHANNEL_QUEUE: list[Row] = [
    ("channel_get_ack_total", "counter",
     "Total number of messages fetched with basic.get in manual acknowledgement mode",
     lambda c: c["get"]),
    ("channel_get_total", "counter",
     "Total number of messages fetched with basic.get in automatic acknowledgement mode",
     lambda c: c["get_no_ack"]),
    ("channel_messages_delivered_ack_total", "counter",
     "Total number of messages delivered to consumers in manual acknowledgement mode",
     lambda c: c["deliver"]),
    ("channel_messages_delivered_total", "counter",
     "Total number of messages delivered to consumers in automatic acknowledgement mode",
     lambda c: c["deliver_no_ack"]),
    ("channel_messages_redelivered_total", "counter",
     "Total number of messages redelivered to consumers", lambda c: c["redeliver"]),
    ("channel_messages_acked_total", "counter",
     "Total number of messages acknowledged by consumers", lambda c: c["ack"]),
    ("channel_get_empty_total", "counter",
     "Total number of times basic.get operations fetched no message",
     lambda c: c["get_empty"]),
]
CONNECTION_METRICS: list[Row] = [
    ("connection_incoming_packets_total", "counter",
     "Total number of packets received on a connection", lambda conn: conn.recv_cnt),
    ("connection_outgoing_packets_total", "counter",
     "Total number of packets sent on a connection", lambda conn: conn.send_cnt),
    ("connection_pending_packets", "gauge",
     "Number of packets waiting to be sent on a connection", lambda conn: len(conn.output)),
    ("connection_channels", "gauge", "Channels on a connection",
     lambda conn: len(conn.channels)),
]
CONNECTION_COARSE: list[Row] = [
    ("connection_incoming_bytes_total", "counter",
     "Total number of bytes received on a connection", lambda conn: conn.recv_oct),
    ("connection_outgoing_bytes_total", "counter",
     "Total number of bytes sent on a connection", lambda conn: conn.send_oct),
]
# rabbitmq_global_* (protocol="amqp091"), from the node's totals
GLOBAL_PROTOCOL: list[tuple[str, str, Callable[[Mapping[str, int]], int]]] = [
    ("messages_received_total", "Total number of messages received from publishers",
     lambda c: c["publish"]),
    ("messages_received_confirm_total",
     "Total number of messages received from publishers expecting confirmations",
     lambda c: c["received_confirm"]),
    ("messages_routed_total", "Total number of messages routed to queues or streams",
     lambda c: c["publish"] - c["return_unroutable"] - c["drop_unroutable"]),
    ("messages_unroutable_dropped_total",
     "Total number of messages published as non-mandatory into an exchange and dropped as "
     "unroutable", lambda c: c["drop_unroutable"]),
    ("messages_unroutable_returned_total",
     "Total number of messages published as mandatory into an exchange and returned to the "
     "publisher as unroutable", lambda c: c["return_unroutable"]),
    ("messages_confirmed_total", "Total number of messages confirmed to publishers",
     lambda c: c["confirm"]),
    ("messages_delivered_total", "Total number of messages delivered to consumers",
     deliver_get),
    ("messages_delivered_consume_manual_ack_total",
     "Total number of messages delivered to consumers using basic.consume with manual "
     "acknowledgment", lambda c: c["deliver"]),
    ("messages_delivered_consume_auto_ack_total",
     "Total number of messages delivered to consumers using basic.consume with automatic "
     "acknowledgment", lambda c: c["deliver_no_ack"]),
    ("messages_delivered_get_manual_ack_total",
     "Total number of messages delivered to consumers using basic.get with manual "
     "acknowledgment", lambda c: c["get"]),
    ("messages_delivered_get_auto_ack_total",
     "Total number of messages delivered to consumers using basic.get with automatic "
     "acknowledgment", lambda c: c["get_no_ack"]),
    ("messages_get_empty_total",
     "Total number of times basic.get operations fetched no message",
     lambda c: c["get_empty"]),
    ("messages_redelivered_total", "Total number of messages redelivered to consumers",
     lambda c: c["redeliver"]),
    ("messages_acknowledged_total", "Total number of messages acknowledged by consumers",
     lambda c: c["ack"]),
]



@dataclass(frozen=True)
class _DefaultExchange:
    name: str = ""
    type_name: str = "direct"
    bindings: tuple[()] = ()


_DEFAULT_EXCHANGE = _DefaultExchange()

#: families ``/metrics/detailed?family=`` accepts (RabbitMQ's names; others are ignored).
DETAILED_FAMILIES: tuple[str, ...] = (
    "connection_churn_metrics", "node_coarse_metrics", "node_metrics",
    "queue_coarse_metrics", "queue_consumer_count", "queue_metrics", "channel_metrics",
    "channel_exchange_metrics", "channel_queue_metrics", "connection_coarse_metrics",
    "connection_metrics", "vhost_status", "exchange_names", "exchange_bindings",
)


@dataclass
class Scope:
    """What one scrape asks for.

    Attributes:
        per_object: a sample per queue/channel/connection instead of sums.
        families: detailed mode: only these families (None: the aggregated or per-object
            endpoint, with the totals, global, alarm and identity families too).
        vhosts: detailed mode: only the queues of these vhosts (None: all).
    """

    per_object: bool = False
    families: frozenset[str] | None = None
    vhosts: frozenset[str] | None = None

    @property
    def prefix(self) -> str:
        return "rabbitmq_detailed_" if self.families is not None else "rabbitmq_"

    def wants(self, family: str) -> bool:
        return self.families is None or family in self.families


def _family(name: str, kind: str, help_text: str, labels: Iterable[str] = ()) -> Metric:
    labels = list(labels)
    if kind == "counter":
        return CounterMetricFamily(name, help_text, labels=labels)
    if kind == "gauge":
        return GaugeMetricFamily(name, help_text, labels=labels)
    return UnknownMetricFamily(name, help_text, labels=labels)


def _single(name: str, kind: str, help_text: str, value: float) -> Metric:
    fam = _family(name, kind, help_text)
    fam.add_metric([], value)
    return fam


def _either(rows: list[Row], from_json: Mapping[str, Callable[[Mapping[str, Any]], float]]
            ) -> list[Row]:
    """``rows`` whose value also reads another worker's object (its API JSON, a dict)."""
    def value(fn: Callable[[Any], float], json_fn: Callable[[Mapping[str, Any]], float]
              ) -> Callable[[Any], float]:
        return lambda obj: json_fn(obj) if isinstance(obj, dict) else fn(obj)
    return [(name, kind, help_text, value(fn, from_json[name]))
            for name, kind, help_text, fn in rows]


def _rows(prefix: str, rows: list[Row], label_names: list[str],
          objects: list[tuple[list[str], Any]], per_object: bool) -> Iterator[Metric]:
    """One family per row: a sample per object (``per_object``) or their sum."""
    for name, kind, help_text, value in rows:
        if per_object:
            fam = _family(prefix + name, kind, help_text, label_names)
            for labels, obj in objects:
                fam.add_metric(labels, value(obj))
        else:
            fam = _family(prefix + name, kind, help_text)
            fam.add_metric([], sum(value(obj) for _, obj in objects))
        yield fam


def _open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def _max_fds() -> int:
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


@dataclass
class NodeIdentity:
    """The labels of ``rabbitmq_identity_info`` and ``rabbitmq_build_info``.

    Attributes:
        node: ``rabbitmq_node`` (the management API's node name: ``--node-name``, else
            ``amqpq@host``).
        cluster: ``rabbitmq_cluster`` without a cluster (the node name, as
            ``/api/overview``'s ``cluster_name``); in a cluster the label is
            :func:`management.cluster_view.cluster_name`, the same on every node.
        cluster_id: ``rabbitmq_cluster_permanent_id`` before the broker has its
            ``internal_cluster_id`` global parameter (then that, :mod:`broker.cluster_identity`).
        version: the broker's version (``product_version``).
    """

    node: str
    cluster: str
    cluster_id: str
    version: str
    started: float = field(default_factory=time.monotonic)


class BrokerCollector(Collector):
    """Every family of the scope in effect, from the broker in ``st`` (call :meth:`scoped`
    per scrape; the registry holds the aggregated scope)."""

    def __init__(self, st: ManagementState, identity: NodeIdentity,
                 scope: Scope | None = None, elsewhere: Elsewhere | None = None) -> None:
        self.st = st
        self.identity = identity
        self.scope = scope or Scope()
        self.elsewhere = elsewhere or Elsewhere()

    def scoped(self, scope: Scope, elsewhere: Elsewhere | None = None) -> BrokerCollector:
        """The same collector for another scope (and, ``--workers N``, what the other
        workers hold: :func:`management.prometheus.elsewhere.gather`)."""
        return BrokerCollector(self.st, self.identity, scope, elsewhere)

    def collect(self) -> Iterator[Metric]:
        scope, broker = self.scope, self.st.broker
        prefix, per_object = scope.prefix, scope.per_object
        channels = list(open_channels(broker))
        if scope.wants("connection_churn_metrics"):
            yield from self._churn(prefix)
        if scope.wants("node_coarse_metrics"):
            yield from self._node_coarse(prefix)
        if scope.wants("node_metrics"):
            yield from self._node(prefix)
        # a cluster node reports the queues that live on it (a quorum queue: on its leader),
        # as each RabbitMQ node does; the other nodes report theirs on their own endpoints
        own = own_workers(broker)  # a node of several workers: its other workers' queues
        queues = [q for name, v in sorted(broker.vhosts.items())
                  if scope.vhosts is None or name in scope.vhosts
                  for _, q in sorted(v.queues.items()) if lives_here(self.st, q, own)]
        q_objects = [([q.vhost_name, q.name], q) for q in queues]
        q_labels = ["vhost", "queue"]
        if scope.wants("queue_coarse_metrics"):
            yield from _rows(prefix, QUEUE_COARSE, q_labels, q_objects, per_object)
        if scope.wants("queue_metrics"):
            unacked = UnackedTotals.collect(broker)
            yield from _rows(prefix, QUEUE_METRICS, q_labels,
                             [(labels, (q, unacked.bytes_of(q))) for labels, q in q_objects],
                             per_object)
            streams = [(labels, q) for labels, q in q_objects if q.kind == "stream"]
            if streams:
                yield from _rows(prefix, STREAM_METRICS, q_labels, streams, per_object)
        elif scope.wants("queue_consumer_count"):
            yield from _rows(prefix, [QUEUE_CONSUMERS], q_labels, q_objects, per_object)
        there = self.elsewhere  # --workers N: the other workers' channels and connections
        ch_objects = [([channel_name(ch, self.st)], ch) for ch in channels]
        if scope.wants("channel_metrics"):
            yield from _rows(prefix, _either(CHANNEL_METRICS, CHANNEL_JSON), ["channel"],
                             ch_objects + [([c["name"]], c) for c in there.channels],
                             per_object)
        if scope.wants("channel_exchange_metrics") or scope.wants("channel_queue_metrics"):
            counts = [(labels, ch.message_counts()) for labels, ch in ch_objects]
            node = broker.message_totals.node_totals(
                c for (_, c), (_, ch) in zip(counts, ch_objects, strict=True)
                if not ch.counters.folded) + there.counts
            counts += [([c["name"]], json_counts(c)) for c in there.channels]
            for family, rows in (("channel_exchange_metrics", CHANNEL_EXCHANGE),
                                 ("channel_queue_metrics", CHANNEL_QUEUE)):
                if not scope.wants(family):
                    continue
                if per_object:
                    yield from _rows(prefix, rows, ["channel"], counts, True)
                else:  # the node's totals: closed channels count too, so it never goes down
                    yield from _rows(prefix, rows, [], [([], node)], False)
        conns = [([connection_name(c, self.st)], c) for c in list(broker.connections)]
        conns += [([c["name"]], c) for c in there.connections]
        for family, rows in (("connection_coarse_metrics", CONNECTION_COARSE),
                             ("connection_metrics", CONNECTION_METRICS)):
            if scope.wants(family):
                yield from _rows(prefix, _either(rows, CONNECTION_JSON), ["connection"],
                                 conns, per_object)
        if scope.families is not None:
            yield from self._cluster(scope)
        else:
            yield from self._totals(channels, len(queues))
            yield from self._global(channels)
            yield from self._alarms()
        yield from self._identity()

    # ---- node-wide families --------------------------------------------------------------

    def _churn(self, prefix: str) -> Iterator[Metric]:
        broker = self.st.broker
        t = broker.message_totals
        vhosts = list(broker.vhosts.values())
        gone = t.deleted_vhosts
        for name, help_text, value in (
            ("connections_opened_total", "Total number of connections opened",
             t.connections_opened),
            ("connections_closed_total", "Total number of connections closed or terminated",
             t.connections_closed),
            ("channels_opened_total", "Total number of channels opened", t.channels_opened),
            ("channels_closed_total", "Total number of channels closed", t.channels_closed),
            ("queues_declared_total", "Total number of queues declared",
             gone["queues_declared"] + sum(v.queues_declared for v in vhosts)),
            ("queues_created_total", "Total number of queues created",
             gone["queues_created"] + sum(v.queues_created for v in vhosts)),
            ("queues_deleted_total", "Total number of queues deleted",
             gone["queues_deleted"] + sum(v.queues_deleted for v in vhosts)),
        ):
            yield _single(prefix + name, "counter", help_text, value)

    def _node_coarse(self, prefix: str) -> Iterator[Metric]:
        broker = self.st.broker
        probes = broker.env.resources
        rss = probes.rss() if probes is not None else process_rss()
        for name, help_text, value in (
            ("process_open_fds", "Open file descriptors", _open_fds()),
            ("process_open_tcp_sockets", "Open TCP sockets", len(broker.connections)),
            ("process_resident_memory_bytes", "Memory used in bytes", rss),
            ("disk_space_available_bytes", "Disk space available in bytes",
             _disk_free(str(broker.config.data_dir))),
        ):
            yield _single(prefix + name, "gauge", help_text, value)

    def _node(self, prefix: str) -> Iterator[Metric]:
        broker = self.st.broker
        alarms = broker.alarms
        max_fds = _max_fds()
        mem_limit = alarms.limit if alarms is not None else 0
        for name, help_text, value in (
            ("process_max_fds", "Open file descriptors limit", max_fds),
            # RabbitMQ reserves a tenth of the descriptors for files (rabbit_fhc)
            ("process_max_tcp_sockets", "Open TCP sockets limit", int(max_fds * 0.9)),
            ("resident_memory_limit_bytes", "Memory high watermark in bytes", mem_limit),
            ("disk_space_available_limit_bytes", "Free disk space low watermark in bytes",
             broker.config.disk_free_limit),
            ("erlang_uptime_seconds", "Node uptime",
             round(time.monotonic() - self.identity.started, 3)),
        ):
            yield _single(prefix + name, "gauge", help_text, value)

    def _totals(self, channels: list[Channel], queues: int) -> Iterator[Metric]:
        broker = self.st.broker
        totals = {"connections": len(broker.connections), "channels": len(channels),
                  "consumers": sum(len(ch.consumers) for ch in channels)}
        if broker.workers is not None and broker.cluster is None:
            totals = client_totals(broker)  # --workers N: the node's, every worker's
        elif broker.workers is not None:  # a cluster node: its own workers' clients (each
            totals = client_totals(broker, own_workers(broker))  # node has its endpoint)
        yield _single("rabbitmq_connections", "gauge", "Connections currently open",
                      totals["connections"])
        yield _single("rabbitmq_channels", "gauge", "Channels currently open",
                      totals["channels"])
        yield _single("rabbitmq_consumers", "gauge", "Consumers currently connected",
                      totals["consumers"])
        yield _single("rabbitmq_queues", "gauge", "Queues available", queues)

    def _global(self, channels: list[Channel]) -> Iterator[Metric]:
        node: Counter[str] = self.st.broker.message_totals.node_totals(
            ch.message_counts() for ch in channels if not ch.counters.folded)
        node += self.elsewhere.counts  # --workers N: the other workers' counters
        for name, help_text, value in GLOBAL_PROTOCOL:
            fam = CounterMetricFamily("rabbitmq_global_" + name, help_text,
                                      labels=["protocol"])
            fam.add_metric(["amqp091"], value(node))
            yield fam
        for name, help_text, gauge in (
            ("publishers", "Current number of publishers",
             sum(1 for ch in channels if ch.counters.publish)),
            ("consumers", "Current number of consumers",
             sum(len(ch.consumers) for ch in channels)),
        ):
            fam = GaugeMetricFamily("rabbitmq_global_" + name, help_text, labels=["protocol"])
            fam.add_metric(["amqp091"], gauge)
            yield fam

    def _alarms(self) -> Iterator[Metric]:
        alarms = self.st.broker.alarms
        for name, help_text, on in (
            ("file_descriptor_limit", "is 1 if file descriptor limit alarm is in effect",
             False),
            ("free_disk_space_watermark", "is 1 if free disk space watermark alarm is in effect",
             alarms is not None and alarms.disk),
            ("memory_used_watermark", "is 1 if VM memory watermark alarm is in effect",
             alarms is not None and alarms.memory),
        ):
            yield _single("rabbitmq_alarms_" + name, "untyped", help_text, int(on))

    def _cluster(self, scope: Scope) -> Iterator[Metric]:
        """``rabbitmq_cluster_*``: the detailed endpoint's cluster-wide families."""
        broker = self.st.broker
        vhosts = [(n, v) for n, v in sorted(broker.vhosts.items())
                  if scope.vhosts is None or n in scope.vhosts]
        if scope.wants("vhost_status"):
            fam = _family("rabbitmq_cluster_vhost_status", "gauge",
                          "Whether a given vhost is running", ["vhost"])
            for name, _ in vhosts:
                fam.add_metric([name], 1)
            yield fam
        # the default exchange ("") is not stored; RabbitMQ lists it (a direct exchange)
        exchanges = [(n, x.name, x.type_name, len(x.bindings)) for n, v in vhosts
                     for x in [_DEFAULT_EXCHANGE, *(v.exchanges[k] for k in sorted(v.exchanges))]]
        if scope.wants("exchange_names"):
            fam = _family("rabbitmq_cluster_exchange_name", "gauge",
                          "Enumerates exchanges without any additional info. This value is "
                          "cluster-wide. A cheaper alternative to `exchange_bindings`",
                          ["vhost", "exchange", "type"])
            for n, xname, xtype, _ in exchanges:
                fam.add_metric([n, xname, xtype], 1)
            yield fam
        if scope.wants("exchange_bindings"):
            fam = _family("rabbitmq_cluster_exchange_bindings", "gauge",
                          "Number of bindings for an exchange. This value is cluster-wide.",
                          ["vhost", "exchange", "type"])
            for n, xname, xtype, bindings in exchanges:
                fam.add_metric([n, xname, xtype], bindings)
            yield fam

    def _identity(self) -> Iterator[Metric]:
        ident = self.identity
        build = UnknownMetricFamily(
            "rabbitmq_build_info", "RabbitMQ & Erlang/OTP version info",
            labels=["rabbitmq_version", "prometheus_plugin_version",
                    "prometheus_client_version", "erlang_version", "product_version",
                    "product_name"])
        build.add_metric([RABBITMQ_VERSION, PROMETHEUS_PLUGIN_VERSION, _client_version(),
                          f"python-{sys.version_info.major}.{sys.version_info.minor}",
                          ident.version, "amqpq"], 1)
        yield build
        info = UnknownMetricFamily(
            "rabbitmq_identity_info", "RabbitMQ node & cluster identity info",
            labels=["rabbitmq_node", "rabbitmq_cluster", "rabbitmq_cluster_permanent_id"])
        # in a cluster every node names the same cluster (a dashboard groups its nodes)
        cluster = cluster_name(self.st) if self.st.broker.cluster is not None else ident.cluster
        # the cluster's internal_cluster_id as it is now (the same on every node; an
        # import replaces it, as on RabbitMQ); the data dir's before the broker has one
        cluster_id = self.st.broker.extras.global_value(INTERNAL_CLUSTER_ID)
        info.add_metric([ident.node, cluster, str(cluster_id or ident.cluster_id)], 1)
        yield info


def _client_version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("prometheus-client")
    except PackageNotFoundError:
        return "unknown"


def _disk_free(path: str) -> int:
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return 0
