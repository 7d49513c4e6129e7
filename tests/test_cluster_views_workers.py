"""Broker-wide views of a ``--workers 2`` broker (issue #31 item 6), against a real broker
process and pika: a publisher on worker 1 is seen through the management API (served by
worker 0) with its channel's rates, its queue's counts as the queue's home has them and the
overview's summed message_stats, and on the node's one Prometheus endpoint with its
channel's and connection's per-object samples and the global counters."""

from __future__ import annotations

import socket
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
from pika.exceptions import AMQPConnectionError, ConnectionClosedByBroker
from prometheus_client.parser import text_string_to_metric_families

from tests.support.broker_process import BrokerProcess, free_port
from tests.support.cluster import api as call
from tests.support.workers import PIN, api, connect_on, running_workers

WAIT = 10.0
PROMETHEUS = free_port()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base: Path = tmp_path_factory.mktemp("views-workers")
    with running_workers(base, "--prometheus-port", str(PROMETHEUS)) as proc:
        yield proc


def wait_until(check: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + WAIT
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {WAIT} s (last: {last!r})")


def metrics(path: str) -> dict[str, list]:
    with urllib.request.urlopen(f"http://127.0.0.1:{PROMETHEUS}{path}", timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


def test_a_publisher_on_worker_1_is_seen_with_rates_counts_and_metrics(
        broker: BrokerProcess) -> None:
    conn = connect_on(broker, 1)
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("views.w1", arguments=PIN)  # lives on worker 1, the connection's
        for _ in range(25):
            ch.basic_publish("", "views.w1", b"x")

        def channel() -> dict | None:
            found = [c for c in api(broker, "/api/channels")  # type: ignore[union-attr]
                     if c.get("worker") == 1 and c.get("message_stats", {}).get("publish")]
            return found[0] if found else None

        first = wait_until(channel, "worker 1's channel with its publishes")
        assert first["message_stats"]["publish"] == 25
        for _ in range(100):
            ch.basic_publish("", "views.w1", b"x")
        again = wait_until(
            lambda: (c := channel()) and c["message_stats"]["publish_details"]["rate"] > 0
            and c, "a publish rate on worker 1's channel")
        assert again["message_stats"]["publish"] == 125

        q = api(broker, "/api/queues/%2F/views.w1")
        assert q["worker"] == 1 and q["node"] == api(broker, "/api/overview")["node"]
        assert q["messages"] == 125
        assert q["message_stats"]["publish"] == 125  # the home's counter (was 0 on worker 0)
        wait_until(lambda: api(broker, "/api/overview")["message_stats"]["publish"] >= 125,
                   "worker 1's publishes in the overview")

        per_object = metrics("/metrics/per-object")
        published = {labels["channel"]: v for labels, v
                     in per_object["rabbitmq_channel_messages_published_total"]}
        assert published[again["name"]] == 125
        channels = {labels["connection"]: v for labels, v
                    in per_object["rabbitmq_connection_channels"]}
        # connect_on's channel (to learn the worker) and the publisher's
        assert channels[again["connection_details"]["name"]] == 2
        [(_, received)] = metrics("/metrics")["rabbitmq_global_messages_received_total"]
        assert received >= 125
    finally:
        conn.close()


def test_every_queue_is_on_the_one_node_whatever_its_worker(broker: BrokerProcess) -> None:
    for worker in (0, 1):
        conn = connect_on(broker, worker)
        try:
            conn.channel().queue_declare(f"views.w{worker}.node", arguments=PIN)
        finally:
            conn.close()
    node = api(broker, "/api/overview")["node"]
    queues = api(broker, "/api/queues")
    assert {q["worker"] for q in queues} == {0, 1}  # type: ignore[union-attr]
    assert {q["node"] for q in queues} == {node}  # type: ignore[union-attr]


def test_an_exchanges_publishes_on_both_workers_are_summed(broker: BrokerProcess) -> None:
    """publish_in/publish_out of an exchange published to on worker 0 and on worker 1 (each
    routes its own clients' publishes), read through worker 0's API; and worker 1's
    connection with its byte counters in the API and on the node's Prometheus endpoint."""
    for worker, count in ((0, 10), (1, 15)):
        conn = connect_on(broker, worker)
        try:
            ch = conn.channel()
            ch.confirm_delivery()
            ch.exchange_declare("views.wx", "fanout")
            for _ in range(count):
                ch.basic_publish("views.wx", "", b"x")  # no queue bound: unroutable
        finally:
            conn.close()

    def stats() -> dict | None:
        found = api(broker, "/api/exchanges/%2F/views.wx").get(  # type: ignore[union-attr]
            "message_stats")
        return found if found and found["publish_in"] == 25 else None

    assert wait_until(stats, "both workers' publishes to views.wx")["publish_out"] == 0
    conn = connect_on(broker, 1)
    try:
        conn.channel().basic_publish("views.wx", "", b"x" * 10_000)
        conn.process_data_events(0)

        def on_worker_1() -> dict | None:
            found = [c for c in api(broker, "/api/connections")  # type: ignore[union-attr]
                     if c.get("worker") == 1 and c["recv_oct"] > 10_000]
            return found[0] if found else None

        seen = wait_until(on_worker_1, "worker 1's connection with its bytes")
        assert seen["send_oct"] > 0 and "recv_oct_details" in seen
        received = {labels["connection"]: v for labels, v in metrics("/metrics/per-object")
                    ["rabbitmq_connection_incoming_bytes_total"]}
        assert received[seen["name"]] >= seen["recv_oct"]
    finally:
        conn.close()


def test_drain_closes_every_workers_clients_and_the_listener_until_revive(
        broker: BrokerProcess) -> None:
    """Last in the module (it revives the broker after): ``POST /api/maintenance/drain`` on
    a ``--workers 2`` broker (worker 0 answers) closes the clients of both workers with
    320 and the supervisor's listener, as RabbitMQ's drain on a single node; revive."""
    conns = [connect_on(broker, 0), connect_on(broker, 1)]
    drained = call(broker, "/api/maintenance/drain", "POST", {})
    assert drained["moved"] == 0 and drained["closed"] >= 2
    for conn in conns:
        with pytest.raises(ConnectionClosedByBroker) as closed:
            for _ in range(100):
                conn.process_data_events(0.1)
        assert (closed.value.reply_code, closed.value.reply_text) == (
            320, "CONNECTION_FORCED - Node was put into maintenance mode")

    def refused() -> bool:
        try:
            socket.create_connection(("127.0.0.1", broker.port), timeout=2).close()
        except ConnectionRefusedError:
            return True
        return False

    assert wait_until(refused, "the supervisor's listener closed")
    assert call(broker, "/api/maintenance")["draining"] is True
    call(broker, "/api/maintenance/revive", "POST", {})
    assert call(broker, "/api/maintenance")["draining"] is False

    def served() -> bool:
        try:
            pika.BlockingConnection(pika.URLParameters(broker.url)).close()
        except AMQPConnectionError:
            return False
        return True

    assert wait_until(served, "a client served again")
