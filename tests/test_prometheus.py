"""The Prometheus listener (``--prometheus-port``): rabbitmq_prometheus's names, types and
labels on /metrics, /metrics/per-object and /metrics/detailed, counters that move by what a
pika client did, the metric names of RabbitMQ's Grafana dashboards, and the options."""

from __future__ import annotations

import asyncio
import gzip
import socket
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from broker.broker import Broker
from broker.config import BrokerConfig, PrometheusOptions
from management.prometheus import options as prom_options
from management.prometheus import stop_prometheus
from tests.support.broker_process import BrokerProcess, free_port
from tests.support.cluster import api as cluster_api

DASHBOARDS = Path(__file__).parent / "data" / "grafana_rabbitmq_dashboard_metrics.txt"
REPO = Path(__file__).resolve().parents[1]


class Scraper:
    """A running broker process with its Prometheus port (and its management API)."""

    def __init__(self, broker: BrokerProcess, port: int) -> None:
        self.broker = broker
        self.port = port

    def raw(self, path: str = "/metrics", headers: dict[str, str] | None = None
            ) -> tuple[str, bytes, dict[str, str]]:
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}",
                                     headers=headers or {})
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.headers.get("Content-Type", ""), r.read(), dict(r.headers)

    def families(self, path: str = "/metrics") -> dict[str, tuple[str, str, list[Sample]]]:
        """name -> (type, help, samples)."""
        text = self.raw(path)[1].decode()
        return {f.name: (f.type, f.documentation, f.samples)
                for f in text_string_to_metric_families(text)}

    def value(self, name: str, path: str = "/metrics", **labels: str) -> float:
        for fam_type, _, samples in self.families(path).values():
            del fam_type
            for s in samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                    return s.value
        raise KeyError(name)

    def connect(self) -> pika.BlockingConnection:
        return pika.BlockingConnection(pika.URLParameters(self.broker.url))


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scraper]:
    port = free_port()
    broker = BrokerProcess(tmp_path_factory.mktemp("prom") / "data", management=free_port(),
                           args=("--prometheus-port", str(port)))
    broker.start()
    try:
        yield Scraper(broker, port)
    finally:
        broker.stop()
        broker.close()


def _dashboard_names() -> list[tuple[str, str, str | None]]:
    """(dashboard, metric name, reason when deliberately absent)."""
    out = []
    for line in DASHBOARDS.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        board, name, *rest = line.split(" ", 2)
        reason = rest[0].removeprefix("ABSENT ").strip() if rest else None
        out.append((board, name, reason))
    return out


def _sample_names(text: str) -> set[str]:
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def test_every_grafana_dashboard_metric_is_served(prom: Scraper) -> None:
    names = _dashboard_names()
    assert len([n for b, n, r in names if b == "overview-3.13.7" and r is None]) == 36
    served = _sample_names(prom.raw()[1].decode())
    missing = [n for _, n, reason in names if reason is None and n not in served]
    assert missing == []
    # the deliberately absent ones are documented and really absent
    assert [n for _, n, reason in names if reason is not None and n in served] == []


def test_types_help_and_identity(prom: Scraper) -> None:
    fams = prom.families()
    # text 0.0.4 names counters with _total; the parser strips it from the family name
    assert fams["rabbitmq_global_messages_received"][:2] == (
        "counter", "Total number of messages received from publishers")
    assert fams["rabbitmq_connections_opened"][:2] == (
        "counter", "Total number of connections opened")
    assert fams["rabbitmq_queue_messages_ready"][:2] == (
        "gauge", "Messages ready to be delivered to consumers")
    assert fams["rabbitmq_alarms_memory_used_watermark"][0] == "unknown"  # untyped
    (ident,) = fams["rabbitmq_identity_info"][2]
    assert set(ident.labels) == {"rabbitmq_node", "rabbitmq_cluster",
                                 "rabbitmq_cluster_permanent_id"}
    assert ident.labels["rabbitmq_node"].startswith("amqpq@")
    assert ident.labels["rabbitmq_cluster_permanent_id"].startswith("rabbitmq-cluster-id-")
    # RabbitMQ's internal_cluster_id global parameter: the same id, also exported
    param = cluster_api(prom.broker, "/api/global-parameters/internal_cluster_id")
    assert param == {"name": "internal_cluster_id",
                     "value": ident.labels["rabbitmq_cluster_permanent_id"]}
    (build,) = fams["rabbitmq_build_info"][2]
    assert build.labels["product_name"] == "amqpq" and build.value == 1
    (received,) = fams["rabbitmq_global_messages_received"][2]
    assert received.labels == {"protocol": "amqp091"}


def test_counters_move_by_what_the_client_did(prom: Scraper) -> None:
    names = ("received", "received_confirm", "routed", "unroutable_dropped",
             "unroutable_returned", "confirmed", "delivered",
             "delivered_consume_manual_ack", "delivered_consume_auto_ack",
             "delivered_get_manual_ack", "delivered_get_auto_ack", "get_empty",
             "redelivered", "acknowledged")
    churn = ("connections_opened", "connections_closed", "channels_opened", "channels_closed",
             "queues_declared", "queues_created", "queues_deleted")

    def snapshot() -> dict[str, float]:
        out = {n: prom.value(f"rabbitmq_global_messages_{n}_total") for n in names}
        out.update({n: prom.value(f"rabbitmq_{n}_total") for n in churn})
        return out

    before = snapshot()
    q = f"prom-{uuid.uuid4().hex[:6]}"
    conn = prom.connect()
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare(q)
    for _ in range(5):
        ch.basic_publish("", q, b"m")
    ch.basic_publish("amq.direct", "nowhere", b"x")  # dropped
    with pytest.raises(pika.exceptions.UnroutableError):
        ch.basic_publish("amq.direct", "nowhere", b"x", mandatory=True)  # returned
    ack_get = ch.basic_get(q)
    ch.basic_ack(ack_get[0].delivery_tag)
    ch.basic_get(q, auto_ack=True)
    nacked = ch.basic_get(q)
    ch.basic_nack(nacked[0].delivery_tag, requeue=True)
    consumer = conn.channel()
    got = 0
    for method, _, _ in consumer.consume(q, inactivity_timeout=0.5):
        if method is None:
            break
        consumer.basic_ack(method.delivery_tag)
        got += 1
    consumer.cancel()
    assert ch.basic_get(q) == (None, None, None)
    ch.basic_publish("", q, b"auto")
    for method, _, _ in ch.consume(q, auto_ack=True, inactivity_timeout=0.5):
        if method is None:
            break
    ch.cancel()
    ch.queue_delete(q)
    conn.close()
    after = snapshot()
    moved = {k: after[k] - before[k] for k in before}
    assert got == 3
    assert moved == {
        "received": 8, "received_confirm": 8, "routed": 6, "unroutable_dropped": 1,
        "unroutable_returned": 1, "confirmed": 8, "delivered": 7,
        "delivered_consume_manual_ack": 3, "delivered_consume_auto_ack": 1,
        "delivered_get_manual_ack": 2, "delivered_get_auto_ack": 1, "get_empty": 1,
        "redelivered": 1, "acknowledged": 4,
        "connections_opened": 1, "connections_closed": 1, "channels_opened": 2,
        "channels_closed": 2, "queues_declared": 1, "queues_created": 1, "queues_deleted": 1,
    }


def test_gauges_aggregated_and_per_object(prom: Scraper) -> None:
    q = f"prom-g-{uuid.uuid4().hex[:6]}"
    conn = prom.connect()
    ch = conn.channel()
    ch.queue_declare(q)
    for _ in range(4):
        ch.basic_publish("", q, b"12345")
    consumer = conn.channel()
    consumer.basic_qos(prefetch_count=1)
    consumer.basic_consume(q, lambda *a: None)
    conn.process_data_events(0.3)
    try:
        assert prom.value("rabbitmq_connections") == 1
        assert prom.value("rabbitmq_channels") == 2
        assert prom.value("rabbitmq_consumers") == 1
        assert prom.value("rabbitmq_global_consumers") == 1
        assert prom.value("rabbitmq_global_publishers") == 1
        assert prom.value("rabbitmq_queue_messages_ready") == 3  # aggregated: no labels
        assert prom.value("rabbitmq_queue_messages_unacked") == 1
        per = "/metrics/per-object"
        assert prom.value("rabbitmq_queue_messages_ready", per, vhost="/", queue=q) == 3
        assert prom.value("rabbitmq_queue_messages_unacked", per, vhost="/", queue=q) == 1
        assert prom.value("rabbitmq_queue_messages_bytes", per, vhost="/", queue=q) == 20
        assert prom.value("rabbitmq_queue_consumers", per, vhost="/", queue=q) == 1
        channels = [s for s in prom.families(per)["rabbitmq_channel_consumers"][2]]
        assert sorted(s.value for s in channels) == [0, 1]
        assert all(s.labels["channel"].endswith(")") for s in channels)
        assert prom.value("rabbitmq_connection_channels", per) == 2
    finally:
        ch.queue_delete(q)
        conn.close()


def test_stream_gauges(prom: Scraper) -> None:
    """A stream's log: messages (not removed by consuming), segments, offsets, bytes."""
    q = f"prom-s-{uuid.uuid4().hex[:6]}"
    conn = prom.connect()
    ch = conn.channel()
    ch.queue_declare(q, durable=True, arguments={"x-queue-type": "stream"})
    ch.confirm_delivery()
    for _ in range(5):
        ch.basic_publish("", q, b"12345")
    try:
        per = "/metrics/per-object"
        labels = {"vhost": "/", "queue": q}
        assert prom.value("rabbitmq_queue_messages", per, **labels) == 5
        assert prom.value("rabbitmq_stream_segments", per, **labels) == 1
        assert prom.value("rabbitmq_stream_first_offset", per, **labels) == 0
        assert prom.value("rabbitmq_stream_next_offset", per, **labels) == 5
        assert prom.value("rabbitmq_stream_bytes", per, **labels) > 5 * 5
    finally:
        ch.queue_delete(q)
        conn.close()


def test_detailed_families_and_vhost_filter(prom: Scraper) -> None:
    q = f"prom-d-{uuid.uuid4().hex[:6]}"
    conn = prom.connect()
    ch = conn.channel()
    ch.queue_declare(q)
    ch.basic_publish("", q, b"x")
    try:
        path = "/metrics/detailed?family=queue_coarse_metrics&family=no_such_family&vhost=/"
        fams = prom.families(path)
        assert set(fams) == {"rabbitmq_detailed_queue_messages_ready",
                             "rabbitmq_detailed_queue_messages_unacked",
                             "rabbitmq_detailed_queue_messages",
                             "rabbitmq_build_info", "rabbitmq_identity_info"}
        assert prom.value("rabbitmq_detailed_queue_messages_ready", path, queue=q) == 1
        other = "/metrics/detailed?family=queue_coarse_metrics&vhost=elsewhere"
        assert prom.families(other)["rabbitmq_detailed_queue_messages"][2] == []
        assert set(prom.families("/metrics/detailed")) == {"rabbitmq_build_info",
                                                           "rabbitmq_identity_info"}
        names = prom.families("/metrics/detailed?family=exchange_names")
        exchanges = {s.labels["exchange"] for s in names["rabbitmq_cluster_exchange_name"][2]}
        assert {"", "amq.direct", "amq.topic"} <= exchanges
    finally:
        ch.queue_delete(q)
        conn.close()


def test_openmetrics_and_gzip(prom: Scraper) -> None:
    content_type, body, _ = prom.raw(headers={"Accept": "application/openmetrics-text; "
                                              "version=1.0.0; charset=utf-8"})
    assert content_type.startswith("application/openmetrics-text")
    assert body.rstrip().endswith(b"# EOF")
    content_type, body, headers = prom.raw(headers={"Accept-Encoding": "gzip"})
    assert content_type.startswith("text/plain; version=0.0.4")
    assert headers.get("Content-Encoding") == "gzip"
    assert b"rabbitmq_identity_info" in gzip.decompress(body)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_no_prometheus(tmp_path: Path) -> None:
    port = free_port()
    with BrokerProcess(tmp_path / "data",
                       args=("--prometheus-port", str(port), "--no-prometheus")):
        assert not _listening(port)


def test_bad_port_is_a_one_line_usage_error(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "amqp_server", "--port", "0", "--data-dir",
                        str(tmp_path), "--prometheus-port", "70000"],
                       capture_output=True, text=True, cwd=REPO, timeout=30)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1] == \
        "amqpq-server: error: --prometheus-port must be 0..65535, got 70000"


def test_taken_port_explicit_stops_default_logs(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]

        async def start(opts: PrometheusOptions) -> object:
            config = BrokerConfig(hosts=("127.0.0.1",), port=5999, data_dir=tmp_path,
                                  prometheus=opts)
            return await prom_options.start_for_server(Broker(config), config, 5999)

        with pytest.raises(OSError):
            asyncio.run(start(PrometheusOptions(True, taken)))
        monkeypatch.setattr(prom_options, "DEFAULT_PORT", taken)  # the default, taken
        assert asyncio.run(start(PrometheusOptions(True, None))) is None
        assert "Prometheus metrics not started" in caplog.text
        assert asyncio.run(start(PrometheusOptions(False, None))) is None


def test_cluster_id_survives_restart(tmp_path: Path) -> None:
    first = prom_options.cluster_permanent_id(tmp_path)
    assert prom_options.cluster_permanent_id(tmp_path) == first


def test_management_port_no_longer_serves_metrics(prom: Scraper) -> None:
    mgmt = prom.broker.management_port  # the module's broker serves both
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"http://127.0.0.1:{mgmt}/metrics", timeout=5)
    assert err.value.code == 404


def test_in_process_runner_stops(tmp_path: Path) -> None:
    async def run() -> bool:
        config = BrokerConfig(hosts=("127.0.0.1",), port=0, data_dir=tmp_path,
                              prometheus=PrometheusOptions(True, None))
        runner = await prom_options.start_for_server(Broker(config), config, 5999)
        assert runner is not None
        port = int(runner.addresses[0][1])
        up = _listening(port)
        await stop_prometheus(runner)
        return up and not _listening(port)

    assert asyncio.run(run())


def test_deleting_a_vhost_keeps_the_node_totals() -> None:
    broker = Broker(BrokerConfig())
    broker.add_vhost("gone")
    vhost = broker.vhosts["gone"]
    vhost.declare_queue("a")
    vhost.delete_queue("a")
    vhost.declare_queue("b")
    totals = broker.message_totals
    totals.channel_closed("gone", {"publish": 3, "ack": 2})
    assert totals.vhost_totals("gone", [{"publish": 1}]) == {"publish": 4, "ack": 2}
    broker.delete_vhost("gone")
    assert totals.node_totals([]) == {"publish": 3, "ack": 2}
    assert (totals.deleted_vhosts["queues_declared"], totals.deleted_vhosts["queues_created"],
            totals.deleted_vhosts["queues_deleted"]) == (2, 2, 2)
    broker.add_vhost("gone")  # made again: starts from zero, as in RabbitMQ
    assert totals.vhost_totals("gone", []) == {}


def test_acks_in_a_transaction_count_once_committed(prom: Scraper) -> None:
    q = f"prom-tx-{uuid.uuid4().hex[:6]}"
    conn = prom.connect()
    ch = conn.channel()
    ch.queue_declare(q)
    for _ in range(3):
        ch.basic_publish("", q, b"t")
    acked = "rabbitmq_global_messages_acknowledged_total"
    before = prom.value(acked)
    ch.tx_select()
    tags = [ch.basic_get(q)[0].delivery_tag for _ in range(3)]
    ch.basic_ack(tags[0])
    ch.basic_reject(tags[1], requeue=False)
    assert prom.value(acked) == before  # settled inside the transaction: not yet
    ch.tx_commit()
    assert prom.value(acked) == before + 1  # the reject is no ack; tags[2] is outstanding
    ch.tx_rollback()
    ch.queue_delete(q)
    conn.close()
    assert prom.value(acked) == before + 1  # closing requeued tags[2]: still no ack
