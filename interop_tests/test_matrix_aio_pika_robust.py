"""aio-pika's robust connection and channel across a broker restart.

The test starts its own amqpq process (so it ignores ``AMQPQ_TEST_URL``), connects with
``aio_pika.connect_robust``, declares a durable topic exchange, a durable queue, a binding, QoS
and a consumer, and publishes with confirms. Then the broker is stopped (SIGTERM: 320
CONNECTION_FORCED) and started again on the same port and data dir. The robust connection must
reconnect by itself, restore channel, exchange, queue, binding and consumer, so a message
published after the restart reaches the same consumer callback; a persistent message left in a
second durable queue must have survived the restart.
"""

from __future__ import annotations

import asyncio
import importlib.util
import time
from pathlib import Path

import pytest

aio_pika = pytest.importorskip("aio_pika")
from pamqp.commands import Basic  # noqa: E402

from interop_tests.conftest import pika_parameters  # noqa: E402
from tests.support.broker_process import REPO_ROOT, BrokerProcess  # noqa: E402

pytestmark = [pytest.mark.timeout(90), pytest.mark.own_broker]  # own_broker: see conftest.py

WAIT = 10.0


def _broker_importable() -> bool:
    import sys

    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    try:
        return importlib.util.find_spec("amqp_server.server") is not None
    except ImportError:
        return False


@pytest.fixture
def broker(tmp_path: Path):
    if not _broker_importable():
        pytest.skip("amqp_server is not importable")
    process = BrokerProcess(tmp_path / "data", tmp_path / "broker.log", log_level="info")
    process.start()
    yield process
    process.stop()


def consumers_of(url: str, queue: str) -> int:
    import pika

    conn = pika.BlockingConnection(pika_parameters(url))
    try:
        return conn.channel().queue_declare(queue, passive=True).method.consumer_count
    finally:
        conn.close()


def test_robust_connection_survives_broker_restart(broker: BrokerProcess):
    async def wait_for(predicate, what: str) -> None:
        deadline = time.monotonic() + WAIT
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            await asyncio.sleep(0.02)

    async def scenario() -> None:
        conn = await aio_pika.connect_robust(broker.url, timeout=5, reconnect_interval=0.3)
        reconnected = asyncio.Event()
        conn.reconnect_callbacks.add(lambda *_args: reconnected.set())
        async with conn:
            channel = await conn.channel(publisher_confirms=True)
            await channel.set_qos(prefetch_count=5)
            exchange = await channel.declare_exchange("robust.x", aio_pika.ExchangeType.TOPIC,
                                                      durable=True)
            queue = await channel.declare_queue("robust.q", durable=True)
            await queue.bind(exchange, routing_key="orders.#")
            kept = await channel.declare_queue("robust.kept", durable=True)

            got: list[tuple[bytes, bool]] = []

            async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                async with message.process():
                    got.append((message.body, message.redelivered))

            await queue.consume(on_message)
            confirm = await exchange.publish(aio_pika.Message(b"before"), "orders.1")
            assert isinstance(confirm, Basic.Ack)
            confirm = await channel.default_exchange.publish(
                aio_pika.Message(b"kept", delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                routing_key="robust.kept")
            assert isinstance(confirm, Basic.Ack)
            await wait_for(lambda: len(got) == 1, "the first delivery")

            assert await asyncio.to_thread(broker.stop) == 0
            await asyncio.to_thread(broker.start)
            await asyncio.wait_for(reconnected.wait(), WAIT)
            await wait_for(lambda: consumers_of(broker.url, "robust.q") == 1,
                           "the consumer to be restored")

            confirm = await exchange.publish(aio_pika.Message(b"after"), "orders.2")
            assert isinstance(confirm, Basic.Ack)
            await wait_for(lambda: len(got) == 2, "the delivery after the restart")
            assert got == [(b"before", False), (b"after", False)]

            message = await kept.get(no_ack=True, fail=False)
            assert message is not None and message.body == b"kept"
            assert not channel.is_closed
            await queue.delete(if_unused=False)
            await kept.delete()
            await exchange.delete()

    asyncio.run(asyncio.wait_for(scenario(), 60))
