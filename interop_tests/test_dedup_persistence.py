"""``x-cache-persistence: disk`` across ``kill -9``: a deduplication exchange still drops
duplicates of keys it saw before the broker was killed and restarted (its own broker process;
``AMQPQ_TEST_URL`` is ignored).
"""

from __future__ import annotations

import pytest

pika = pytest.importorskip("pika")

from interop_tests.conftest import process_connection as connect  # noqa: E402
from tests.support.broker_process import BrokerProcess, broker_fixture  # noqa: E402

pytestmark = pytest.mark.own_broker  # never uses the broker under test (conftest.py)

broker_process = broker_fixture(start=False, fresh_port=True, log_level="info")




def props(key: str) -> pika.BasicProperties:
    return pika.BasicProperties(headers={"x-deduplication-header": key})


@pytest.mark.timeout(60)
def test_disk_cache_survives_kill_9(broker_process: BrokerProcess) -> None:
    bp = broker_process
    bp.start()
    conn = connect(bp)
    ch = conn.channel()
    for name, persistence in (("dd.disk", "disk"), ("dd.mem", "memory")):
        ch.exchange_declare(name, "x-message-deduplication", durable=True, arguments={
            "x-cache-size": 1000, "x-cache-persistence": persistence})
        ch.queue_declare(name + ".q", durable=True)
        ch.queue_bind(name + ".q", name)
    ch.confirm_delivery()
    for i in range(50):
        for name in ("dd.disk", "dd.mem"):
            ch.basic_publish(name, "", b"first", props(f"k{i}"))
    bp.kill()

    bp.restart()
    conn = connect(bp)
    ch = conn.channel()
    for i in range(50):
        for name in ("dd.disk", "dd.mem"):
            ch.basic_publish(name, "", b"again", props(f"k{i}"))
    ch.basic_publish("dd.disk", "", b"fresh", props("new"))
    counts = {name: ch.queue_declare(name + ".q", passive=True).method.message_count
              for name in ("dd.disk", "dd.mem")}
    # transient messages: the queues restarted empty; disk: only the new key got in
    assert counts == {"dd.disk": 1, "dd.mem": 50}
    conn.close()
    assert bp.stop() == 0
