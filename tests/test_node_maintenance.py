"""``amqpqctl drain`` / ``revive`` on a broker without a cluster (issue #31 item 5): as
RabbitMQ's ``rabbitmq-upgrade drain`` on a single node, the client listener is closed, the
clients are closed with ``320 CONNECTION_FORCED - Node was put into maintenance mode``,
nothing moves (no other node), the management API stays up, and a restart keeps the node
drained until ``revive``. One broker process of its own (it is restarted) and the real CLI."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
from pika.exceptions import ConnectionClosedByBroker

from tests.support.broker_process import BrokerProcess, free_port
from tests.support.cluster import api, ctl, wait_until


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base: Path = tmp_path_factory.mktemp("node-maintenance")
    with BrokerProcess(base / "data", base / "broker.log", management=free_port()) as broker:
        yield broker


def _refused(node: BrokerProcess) -> bool:
    """Nothing accepts connections on the node's AMQP port."""
    try:
        socket.create_connection(("127.0.0.1", node.port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def test_drain_closes_clients_and_the_listener_until_revive_even_across_a_restart(
        node: BrokerProcess) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(node.url))
    ch = conn.channel()
    ch.queue_declare("maint.qq", durable=True, arguments={"x-queue-type": "quorum"})
    before = api(node, "/api/maintenance")
    assert before["draining"] is False and before["drained"] == []

    drained = ctl(node, "drain")
    assert drained.returncode == 0, drained.stdout + drained.stderr
    assert "into maintenance mode" in drained.stdout + drained.stderr
    with pytest.raises(ConnectionClosedByBroker) as closed:
        for _ in range(100):
            conn.process_data_events(0.1)
    assert (closed.value.reply_code, closed.value.reply_text) == (
        320, "CONNECTION_FORCED - Node was put into maintenance mode")
    assert wait_until(lambda: _refused(node), "the AMQP listener closed")
    status = api(node, "/api/maintenance")  # the management API stays up
    assert status["draining"] is True and status["drained"] == [status["node"]]
    assert api(node, "/api/queues/%2F/maint.qq")["type"] == "quorum"  # nothing moved

    node.stop()
    node.start()  # drained before it stopped: the listener stays closed
    assert wait_until(lambda: _refused(node), "the listener closed after a restart")
    assert api(node, "/api/maintenance")["draining"] is True
    assert "maintenance mode (drained before it stopped)" in node.log()

    revived = ctl(node, "revive")
    assert revived.returncode == 0, revived.stdout + revived.stderr
    assert api(node, "/api/maintenance")["draining"] is False
    conn = wait_until(lambda: pika.BlockingConnection(pika.URLParameters(node.url)),
                      "a client served again")
    try:
        assert conn.channel().queue_declare("maint.qq", passive=True).method.queue == \
            "maint.qq"
    finally:
        conn.close()
    assert ctl(node, "revive").returncode == 0  # revive again: nothing to do, as RabbitMQ
