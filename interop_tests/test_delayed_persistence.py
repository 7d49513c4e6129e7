"""Delayed messages across ``kill -9``: a durable ``x-delayed-message`` exchange holds every
confirmed persistent message through a SIGKILL and a restart, delivers it once at its due
time, forgets transient ones, and does not deliver again what it had delivered before the
kill. The test starts its own broker process (``AMQPQ_TEST_URL`` is ignored).
"""

from __future__ import annotations

import time

import pytest

pika = pytest.importorskip("pika")

from interop_tests.conftest import process_connection as connect  # noqa: E402
from tests.support.broker_process import BrokerProcess, broker_fixture  # noqa: E402

pytestmark = pytest.mark.own_broker  # never uses the broker under test (conftest.py)

broker_process = broker_fixture(start=False, fresh_port=True, log_level="info")
X, Q = "delayed.x", "delayed.q"




def drain(ch: object, until: int, timeout: float) -> list[bytes]:
    out: list[bytes] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(out) < until:
        method, _props, body = ch.basic_get(Q, auto_ack=True)
        if method is None:
            ch.connection.sleep(0.1)
            continue
        out.append(body)
    return out


@pytest.mark.timeout(90)
def test_kill_9_keeps_confirmed_delayed_messages(broker_process: BrokerProcess) -> None:
    bp = broker_process
    bp.start()
    conn = connect(bp)
    ch = conn.channel()
    ch.exchange_declare(X, "x-delayed-message", durable=True,
                        arguments={"x-delayed-type": "direct"})
    ch.queue_declare(Q, durable=True)
    ch.queue_bind(Q, X, "k")
    ch.confirm_delivery()
    early = [f"early-{i}".encode() for i in range(20)]
    for body in early:  # due before the kill: delivered into the durable queue
        ch.basic_publish(X, "k", body, pika.BasicProperties(delivery_mode=2,
                                                             headers={"x-delay": 200}))
    held = [f"held-{i}".encode() for i in range(500)]
    for i, body in enumerate(held):  # due after the restart; confirms mean "on disk"
        ch.basic_publish(X, "k", body, pika.BasicProperties(
            delivery_mode=2, headers={"x-delay": 4000 + (i % 5) * 100}))
    ch.basic_publish(X, "k", b"transient", pika.BasicProperties(headers={"x-delay": 4000}))
    deadline = time.monotonic() + 10
    while ch.queue_declare(Q, passive=True).method.message_count < len(early):
        assert time.monotonic() < deadline, "early messages not delivered"
        conn.sleep(0.05)
    bp.kill()

    bp.restart()
    conn = connect(bp)
    ch = conn.channel()
    got = drain(ch, len(early) + len(held), timeout=30)
    assert sorted(got[:len(early)]) == sorted(early)  # from the queue, once
    assert sorted(got[len(early):]) == sorted(held)
    conn.sleep(0.5)
    assert ch.basic_get(Q, auto_ack=True)[0] is None  # no transient, no duplicate
    conn.close()
    assert bp.stop() == 0
