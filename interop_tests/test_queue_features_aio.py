"""Queue features through aio-pika (aiormq, pamqp encoding): RPC over direct reply-to,
dead lettering on reject with x-dead-letter-routing-key, x-overflow reject-publish-dlx under
publisher confirms, consumer priorities and the broker's consumer cancel notification.

Same rules as interop_tests/test_queue_features.py: identical observations on the reference
RabbitMQ 3.10.8 and on amqpq; 3.13-only behaviour asserted only on amqpq. pytest-asyncio is not
used: every test runs its scenario with ``asyncio.run`` bounded by ``asyncio.wait_for``.
"""

from __future__ import annotations

import asyncio
import datetime

import aio_pika
import pytest
from aio_pika.exceptions import ChannelPreconditionFailed, DeliveryError

pytestmark = pytest.mark.timeout(30)

SCENARIO_TIMEOUT = 10.0
WAIT = 3.0
REPLY_TO = "amq.rabbitmq.reply-to"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, SCENARIO_TIMEOUT))


def is_amqpq(connection) -> bool:
    props = connection.transport.connection.server_properties
    product = props.get("product")
    if isinstance(product, bytes):
        product = product.decode()
    return product == "amqpq"


async def ready_count(channel, queue_name: str) -> int:
    underlay = await channel.get_underlay_channel()
    return (await underlay.queue_declare(queue_name, passive=True)).message_count


async def wait_count(channel, queue_name: str, n: int, timeout: float = WAIT) -> int:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        count = await ready_count(channel, queue_name)
        if count == n or loop.time() > deadline:
            return count
        await asyncio.sleep(0.02)


# --- direct reply-to ---------------------------------------------------------------------------


def test_rpc_over_direct_reply_to(broker_url, unique_name, cleanup):
    rpc_queue = cleanup.queue(unique_name("rpc"))

    async def scenario():
        server = await aio_pika.connect(broker_url, timeout=10)
        client = await aio_pika.connect(broker_url, timeout=10)
        async with server, client:
            server_channel = await server.channel()
            requests = await server_channel.declare_queue(rpc_queue)
            seen_reply_to: list[str] = []

            async def on_request(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                async with message.process():
                    seen_reply_to.append(message.reply_to)
                    await server_channel.default_exchange.publish(
                        aio_pika.Message(b"re:" + message.body,
                                         correlation_id=message.correlation_id),
                        routing_key=message.reply_to,
                    )

            await requests.consume(on_request)

            channel = await client.channel()
            loop = asyncio.get_running_loop()
            pending = {str(i): loop.create_future() for i in range(3)}

            async def on_reply(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                pending[message.correlation_id].set_result(message)

            # the reply consumer (no-ack) must exist before the first request
            replies = await channel.get_queue(REPLY_TO, ensure=False)
            await replies.consume(on_reply, no_ack=True)
            for key in pending:
                await channel.default_exchange.publish(
                    aio_pika.Message(f"q{key}".encode(), correlation_id=key,
                                     reply_to=REPLY_TO),
                    routing_key=rpc_queue,
                )
            answers = await asyncio.wait_for(asyncio.gather(*pending.values()), WAIT)
            assert [(m.correlation_id, m.body) for m in answers] == [
                ("0", b"re:q0"), ("1", b"re:q1"), ("2", b"re:q2")]
            # the server saw a per-channel address, not the pseudo-queue itself
            assert len(seen_reply_to) == 3
            assert len(set(seen_reply_to)) == 1
            assert seen_reply_to[0].startswith(REPLY_TO + ".")
            assert all(m.routing_key == seen_reply_to[0] for m in answers)

    run(scenario())


def test_direct_reply_to_needs_the_reply_consumer(broker_url, unique_name, cleanup):
    rpc_queue = cleanup.queue(unique_name("rpc"))

    async def scenario():
        connection = await aio_pika.connect(broker_url, timeout=10)
        async with connection:
            channel = await connection.channel()
            await channel.declare_queue(rpc_queue)
            with pytest.raises(ChannelPreconditionFailed) as info:
                await channel.default_exchange.publish(
                    aio_pika.Message(b"q", reply_to=REPLY_TO), routing_key=rpc_queue)
            assert "PRECONDITION_FAILED - fast reply consumer does not exist" in str(
                info.value)
            check = await connection.channel()
            assert await ready_count(check, rpc_queue) == 0

    run(scenario())


# --- dead lettering ----------------------------------------------------------------------------


def test_reject_dead_letters_with_routing_key_and_x_death(broker_url, unique_name, cleanup):
    exchange_name = cleanup.exchange(unique_name("work"))
    dlx_name = cleanup.exchange(unique_name("dlx"))
    source_name = cleanup.queue(unique_name("src"))
    dead_name = cleanup.queue(unique_name("dead"))
    other_name = cleanup.queue(unique_name("other"))

    async def scenario():
        connection = await aio_pika.connect(broker_url, timeout=10)
        async with connection:
            channel = await connection.channel(publisher_confirms=True)
            work = await channel.declare_exchange(exchange_name, aio_pika.ExchangeType.TOPIC)
            dlx = await channel.declare_exchange(dlx_name, aio_pika.ExchangeType.DIRECT)
            dead = await channel.declare_queue(dead_name)
            other = await channel.declare_queue(other_name)
            await dead.bind(dlx, routing_key="dead-key")
            await other.bind(dlx, routing_key="orders.new")  # the original key: not used
            source = await channel.declare_queue(source_name, arguments={
                "x-dead-letter-exchange": dlx_name,
                "x-dead-letter-routing-key": "dead-key"})
            await source.bind(work, routing_key="orders.#")
            await work.publish(aio_pika.Message(b"order", headers={"n": 7},
                                                expiration=60),
                               routing_key="orders.new")

            message = await source.get(timeout=WAIT)
            assert message.body == b"order"
            await message.reject(requeue=False)

            assert await wait_count(channel, dead_name, 1) == 1
            died = await dead.get(timeout=WAIT, no_ack=True)
            assert await ready_count(channel, other_name) == 0
            assert died.body == b"order"
            assert (died.exchange, died.routing_key) == (dlx_name, "dead-key")
            assert died.expiration is None
            headers = died.headers
            assert headers["n"] == 7
            [death] = headers["x-death"]
            assert {k: v for k, v in death.items() if k != "time"} == {
                "count": 1, "reason": "rejected", "queue": source_name,
                "exchange": exchange_name, "routing-keys": ["orders.new"],
                "original-expiration": "60000"}
            assert isinstance(death["time"], datetime.datetime)
            assert (headers["x-first-death-reason"], headers["x-first-death-queue"],
                    headers["x-first-death-exchange"]) == ("rejected", source_name,
                                                           exchange_name)
            if is_amqpq(connection):
                # 3.13 only (the 3.10 reference has no x-last-death-*)
                assert (headers["x-last-death-reason"], headers["x-last-death-queue"],
                        headers["x-last-death-exchange"]) == ("rejected", source_name,
                                                              exchange_name)

    run(scenario())


def test_reject_publish_dlx_raises_delivery_error(broker_url, unique_name, cleanup):
    dead_name = cleanup.queue(unique_name("dead"))
    queue_name = cleanup.queue(unique_name("q"))

    async def scenario():
        connection = await aio_pika.connect(broker_url, timeout=10)
        async with connection:
            channel = await connection.channel(publisher_confirms=True)
            await channel.declare_queue(dead_name)
            await channel.declare_queue(queue_name, arguments={
                "x-max-length-bytes": 10, "x-overflow": "reject-publish-dlx",
                "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead_name})
            exchange = channel.default_exchange
            await exchange.publish(aio_pika.Message(b"12345678"), routing_key=queue_name)
            with pytest.raises(DeliveryError):
                await exchange.publish(aio_pika.Message(b"abc"), routing_key=queue_name)
            await exchange.publish(aio_pika.Message(b"ab"), routing_key=queue_name)  # fits
            assert await ready_count(channel, queue_name) == 2
            assert await wait_count(channel, dead_name, 1) == 1
            dead = await channel.get_queue(dead_name, ensure=False)
            died = await dead.get(timeout=WAIT, no_ack=True)
            assert died.body == b"abc"
            [death] = died.headers["x-death"]
            assert (death["reason"], death["queue"], death["count"]) == ("maxlen", queue_name, 1)

    run(scenario())


# --- consumers ---------------------------------------------------------------------------------


def test_consumer_priorities(broker_url, unique_name, cleanup):
    queue_name = cleanup.queue(unique_name("q"))

    async def scenario():
        connection = await aio_pika.connect(broker_url, timeout=10)
        async with connection:
            publisher = await connection.channel(publisher_confirms=True)
            await publisher.declare_queue(queue_name)
            got: dict[str, list[bytes]] = {"high": [], "low": []}
            held: list[aio_pika.abc.AbstractIncomingMessage] = []

            high_channel = await connection.channel()
            await high_channel.set_qos(prefetch_count=1)
            high_queue = await high_channel.get_queue(queue_name, ensure=False)

            async def on_high(message):
                got["high"].append(message.body)
                held.append(message)  # not acked: the prefetch window stays full

            await high_queue.consume(on_high, arguments={"x-priority": 10})

            low_channel = await connection.channel()
            low_queue = await low_channel.get_queue(queue_name, ensure=False)

            async def on_low(message):
                got["low"].append(message.body)

            await low_queue.consume(on_low, no_ack=True)

            for i in range(4):
                await publisher.default_exchange.publish(aio_pika.Message(f"m{i}".encode()),
                                                         routing_key=queue_name)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + WAIT
            while len(got["high"]) + len(got["low"]) < 4 and loop.time() < deadline:
                await asyncio.sleep(0.02)
            # the high-priority consumer is served while it can take a message, then the
            # lower one gets the rest
            assert got == {"high": [b"m0"], "low": [b"m1", b"m2", b"m3"]}
            await held[0].ack()
            await publisher.default_exchange.publish(aio_pika.Message(b"m4"),
                                                     routing_key=queue_name)
            deadline = loop.time() + WAIT
            while len(got["high"]) < 2 and loop.time() < deadline:
                await asyncio.sleep(0.02)
            assert got["high"] == [b"m0", b"m4"]
            await held[1].ack()

    run(scenario())


def test_consumer_cancel_notification_on_queue_delete(broker_url, unique_name, cleanup):
    queue_name = cleanup.queue(unique_name("q"))

    async def scenario():
        connection = await aio_pika.connect(broker_url, timeout=10)
        async with connection:
            channel = await connection.channel()
            queue = await channel.declare_queue(queue_name)

            async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                pass

            tag = await queue.consume(on_message, no_ack=True)
            cancelled: asyncio.Future = asyncio.get_running_loop().create_future()

            async def on_cancel(frame) -> None:
                if not cancelled.done():
                    cancelled.set_result(frame.consumer_tag)

            underlay = await channel.get_underlay_channel()
            underlay.on_consumer_cancel_callbacks.add(on_cancel)

            other = await connection.channel()
            await other.queue_delete(queue_name)
            assert await asyncio.wait_for(cancelled, WAIT) == tag
            assert not channel.is_closed  # the consumer is cancelled, the channel stays open
            declared = await channel.declare_queue("", exclusive=True)
            assert declared.name.startswith("amq.gen-")

    run(scenario())


# --- argument type names -------------------------------------------------------------------------


def test_argument_errors_name_the_type_pamqp_sent(broker_url, unique_name, cleanup):
    """pamqp sends small ints as the smallest AMQP integer type; RabbitMQ's 406 texts name
    that wire type ('byte', 'short'), not 'signedint'."""
    name = cleanup.queue(unique_name("types"))

    async def scenario():
        connection = await aio_pika.connect(broker_url, timeout=10)
        async with connection:
            channel = await connection.channel()
            await channel.declare_queue(name, arguments={"x-max-length": 5})
            texts = []
            for args in ({}, {"x-max-length": 5, "x-message-ttl": 1000}):
                channel = await connection.channel()
                with pytest.raises(ChannelPreconditionFailed) as info:
                    await channel.declare_queue(name, arguments=args)
                texts.append(str(info.value))
            channel = await connection.channel()
            with pytest.raises(ChannelPreconditionFailed) as info:
                await channel.declare_queue(unique_name("bad"), arguments={"x-overflow": 1})
            texts.append(str(info.value))
            return texts

    missing, extra, bad = run(scenario())
    assert ("received none but current is the value '5' of type 'byte'") in missing
    assert ("received the value '1000' of type 'short' but current is none") in extra
    assert "{unacceptable_type,byte}" in bad
