"""aio-pika (on aiormq) against the broker: robust connection, confirms, topic routing, iterator
consumption with ``message.process()``, and ``queue.get``.

pytest-asyncio is not used: each test runs its own event loop with ``asyncio.run`` and bounds
the whole scenario with ``asyncio.wait_for``.
"""

from __future__ import annotations

import asyncio

import aio_pika
import pytest
from aio_pika.exceptions import QueueEmpty
from pamqp.commands import Basic

pytestmark = pytest.mark.timeout(30)

SCENARIO_TIMEOUT = 20.0
N = 500


async def ready_count(channel, queue_name: str) -> int:
    """Messages ready in the queue, by a real passive Queue.Declare (a robust channel answers
    ``declare_queue(passive=True)`` from its cache, with the stale first declare-ok)."""
    underlay = await channel.get_underlay_channel()
    return (await underlay.queue_declare(queue_name, passive=True)).message_count


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, SCENARIO_TIMEOUT))


async def _connect(url: str):
    return await aio_pika.connect_robust(url, timeout=10)


def test_topic_publish_500_and_consume_with_iterator(broker_url, unique_name, cleanup):
    exchange_name = cleanup.exchange(unique_name("topic"))
    queue_name = cleanup.queue(unique_name("q"))

    async def scenario():
        connection = await _connect(broker_url)
        async with connection:
            channel = await connection.channel(publisher_confirms=True)
            await channel.set_qos(prefetch_count=50)
            exchange = await channel.declare_exchange(exchange_name, aio_pika.ExchangeType.TOPIC)
            queue = await channel.declare_queue(queue_name)
            await queue.bind(exchange, routing_key="orders.*.created")

            expected = []
            for i in range(N):
                region = ("eu", "us", "apac")[i % 3]
                body = f"order-{i}".encode()
                confirmation = await exchange.publish(
                    aio_pika.Message(body, message_id=str(i), headers={"n": i}),
                    routing_key=f"orders.{region}.created",
                )
                assert isinstance(confirmation, Basic.Ack)
                expected.append(body)
                # not matching the binding: routed nowhere, still confirmed (aio-pika publishes
                # mandatory by default, which would get it returned instead)
                confirmation = await exchange.publish(
                    aio_pika.Message(b"noise"),
                    routing_key=f"orders.{region}.shipped",
                    mandatory=False,
                )
                assert isinstance(confirmation, Basic.Ack)

            assert await ready_count(channel, queue_name) == N

            received = []
            async with queue.iterator() as messages:
                async for message in messages:
                    async with message.process():
                        received.append(message)
                    if len(received) == N:
                        break

            assert [m.body for m in received] == expected
            assert [m.message_id for m in received] == [str(i) for i in range(N)]
            assert [m.headers["n"] for m in received] == list(range(N))
            assert {m.routing_key for m in received} == {
                "orders.eu.created",
                "orders.us.created",
                "orders.apac.created",
            }
            assert not any(m.redelivered for m in received)
            assert all(m.exchange == exchange_name for m in received)

            # everything was acked by message.process()
            assert await ready_count(channel, queue_name) == 0

            await queue.delete()  # aio-pika's default: if_unused=True, if_empty=True
            await exchange.delete()

    run(scenario())


def test_queue_get(broker_url, unique_name, cleanup):
    queue_name = cleanup.queue(unique_name("q"))

    async def scenario():
        connection = await _connect(broker_url)
        async with connection:
            channel = await connection.channel(publisher_confirms=True)
            queue = await channel.declare_queue(queue_name)
            for body in (b"g1", b"g2"):
                await channel.default_exchange.publish(
                    aio_pika.Message(body, content_type="text/plain"), routing_key=queue_name
                )

            first = await queue.get(timeout=5)
            assert first.body == b"g1"
            assert first.content_type == "text/plain"
            assert first.redelivered is False
            assert first.message_count == 1  # left in the queue
            assert first.routing_key == queue_name
            await first.reject(requeue=True)

            again = await queue.get(timeout=5)
            assert (again.body, again.redelivered) == (b"g1", True)
            await again.ack()

            second = await queue.get(no_ack=True, timeout=5)
            assert (second.body, second.message_count) == (b"g2", 0)

            assert await queue.get(fail=False, timeout=5) is None
            with pytest.raises(QueueEmpty):
                await queue.get(timeout=5)
            assert await ready_count(channel, queue_name) == 0
            await queue.delete()

    run(scenario())


def test_mandatory_return(broker_url, unique_name, cleanup):
    exchange_name = cleanup.exchange(unique_name("direct"))

    async def scenario():
        connection = await _connect(broker_url)
        async with connection:
            channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
            exchange = await channel.declare_exchange(exchange_name, aio_pika.ExchangeType.DIRECT)
            with pytest.raises(aio_pika.exceptions.DeliveryError) as info:
                await exchange.publish(aio_pika.Message(b"bounce"), "unbound", mandatory=True)
            returned = info.value.message
            assert returned.body == b"bounce"
            frame = info.value.frame
            assert isinstance(frame, Basic.Return)
            assert (frame.reply_code, frame.reply_text) == (312, "NO_ROUTE")
            assert (frame.exchange, frame.routing_key) == (exchange_name, "unbound")
            await exchange.delete()

    run(scenario())


def test_server_named_queue_non_robust(broker_url):
    async def scenario():
        connection = await aio_pika.connect(broker_url, timeout=10)
        async with connection:
            channel = await connection.channel()
            queue = await channel.declare_queue(exclusive=True)  # sends queue=""
            assert queue.name.startswith("amq.gen-")

    run(scenario())


def test_channel_error_then_new_channel(broker_url, unique_name, amqp_params):
    missing = unique_name("missing")

    async def scenario():
        connection = await _connect(broker_url)
        async with connection:
            channel = await connection.channel()
            with pytest.raises(aio_pika.exceptions.ChannelNotFoundEntity) as info:
                await channel.declare_queue(missing, passive=True)
            assert info.value.args[0] == (
                f"NOT_FOUND - no queue '{missing}' in vhost '{amqp_params.vhost}'"
            )
            # the connection survives a channel error
            other = await connection.channel()
            queue = await other.declare_queue(exclusive=True)  # robust: named client-side
            assert queue.declaration_result.message_count == 0

    run(scenario())
