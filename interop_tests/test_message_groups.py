"""Message groups (``x-group-by``) with real clients against a broker process of our own.

* The issue's property test (pika, threads): K keys, N consumers with random processing times
  and prefetch, random nacks (requeue) and consumer kills (the connection or channel closed
  with messages unacked). For every key the first acknowledgements must come in publish order,
  every message acked once. A few seeds in the default run, many under ``-m slow``.
  Consumers nack only where order can hold: with ``x-group-prefetch: 1`` (one unacked message
  per key), or with a consumer prefetch of 1. With several unacknowledged messages of a key, a
  consumer that requeues one and then acks a later one breaks the order itself (the broker
  cannot take back a delivery); a killed consumer returns all of its messages at once, so kills
  are random everywhere.
* aio-pika: two consumers never hold the same key at once, and the management API shows the
  keys and who holds them.
* kill -9: a durable group queue (classic and quorum) keeps each key's order across a
  broker kill and restart.

These start their own broker (``AMQPQ_TEST_URL`` is ignored: RabbitMQ has no ``x-group-by``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import threading
import time
import urllib.request
from collections import defaultdict
from typing import Any

import pytest

pika = pytest.importorskip("pika")
aio_pika = pytest.importorskip("aio_pika")

from tests.support.broker_process import BrokerProcess, broker_fixture, free_port  # noqa: E402

pytestmark = pytest.mark.own_broker  # never uses the broker under test (conftest.py)

MGMT_PORT = free_port()
broker = broker_fixture(scope="module", management=MGMT_PORT)


def params(port: int) -> pika.ConnectionParameters:
    return pika.ConnectionParameters(
        host="127.0.0.1", port=port, credentials=pika.PlainCredentials("guest", "guest"),
        connection_attempts=1, socket_timeout=5, heartbeat=0)


class Run:
    """What the consumers of one property run share: the acks per key, in the order sent."""

    def __init__(self, total: int) -> None:
        self.lock = threading.Lock()
        self.acked: dict[str, list[int]] = defaultdict(list)
        self.count = 0
        self.total = total
        self.done = threading.Event()
        self.errors: list[str] = []
        self.kills = self.nacks = 0

    def ack(self, ch: Any, tag: int, key: str, seq: int) -> None:
        with self.lock:  # recorded and sent under the lock: the log is the broker's order
            self.acked[key].append(seq)
            ch.basic_ack(tag)
            self.count += 1
            if self.count >= self.total:
                self.done.set()


def consumer(port: int, queue: str, run: Run, rnd: random.Random, may_nack: bool,
             p_nack: float, p_kill: float, max_ms: float) -> None:
    """Consume until the run is done: per message, sleep a random processing time, then ack,
    or nack with requeue, or kill this consumer (close its connection or channel without
    acking what it holds) and start a new one."""
    try:
        while not run.done.is_set():
            conn = pika.BlockingConnection(params(port))
            ch = conn.channel()
            prefetch = rnd.choice([1, 1, 2, 4])
            ch.basic_qos(prefetch_count=prefetch)
            nack_ok = may_nack or prefetch == 1
            killed = False
            for method, props, body in ch.consume(queue, inactivity_timeout=0.05):
                if run.done.is_set():
                    break
                if method is None:
                    continue
                key, seq = props.headers["k"], int(body)
                time.sleep(rnd.uniform(0, max_ms) / 1000)
                roll = rnd.random()
                if roll < p_kill:
                    run.kills += 1
                    killed = True
                    break
                if nack_ok and roll < p_kill + p_nack:
                    run.nacks += 1
                    ch.basic_nack(method.delivery_tag, requeue=True)
                    continue
                run.ack(ch, method.delivery_tag, key, seq)
            with contextlib.suppress(Exception):
                if killed and rnd.random() < 0.5:
                    ch.close()  # the channel goes, the connection stays a moment
                conn.close()
    except Exception as exc:  # a finding: reported by the test
        run.errors.append(f"{type(exc).__name__}: {exc}")
        run.done.set()


def property_run(bp: BrokerProcess, seed: int, keys: int = 8, consumers: int = 3,
                 messages: int = 240, group_prefetch: int = 0, p_nack: float = 0.08,
                 p_kill: float = 0.03, max_ms: float = 2.0, timeout: float = 60.0) -> Run:
    rnd = random.Random(seed)
    queue = f"groups.prop.{seed}.{group_prefetch}"
    args: dict[str, Any] = {"x-group-by": "header:k"}
    if group_prefetch:
        args["x-group-prefetch"] = group_prefetch
    conn = pika.BlockingConnection(params(bp.port))
    ch = conn.channel()
    ch.queue_declare(queue, arguments=args)
    ch.confirm_delivery()
    run = Run(messages)
    sent: dict[str, int] = defaultdict(int)

    def publish(n: int) -> None:
        for _ in range(n):
            key = f"k{rnd.randrange(keys)}"
            ch.basic_publish("", queue, str(sent[key]).encode(),
                             pika.BasicProperties(headers={"k": key}))
            sent[key] += 1

    publish(messages // 2)  # a backlog, then more while the consumers work
    threads = [threading.Thread(
        target=consumer, daemon=True,
        args=(bp.port, queue, run, random.Random(seed * 1000 + i), group_prefetch == 1,
              p_nack, p_kill, max_ms)) for i in range(consumers)]
    for t in threads:
        t.start()
    publish(messages - messages // 2)
    finished = run.done.wait(timeout)
    run.done.set()
    for t in threads:
        t.join(10)
    ch.queue_delete(queue)
    conn.close()
    assert not run.errors, run.errors
    assert finished, f"seed {seed}: {run.count}/{messages} acked in {timeout} s"
    for key, n in sent.items():
        assert run.acked[key] == list(range(n)), f"seed {seed}, key {key}: {run.acked[key]}"
    return run


@pytest.mark.parametrize("seed", [1, 2])
def test_first_acks_follow_publish_order_per_key(broker: BrokerProcess, seed: int) -> None:
    run = property_run(broker, seed)
    assert run.kills + run.nacks > 0  # the run did exercise redeliveries


def test_first_acks_follow_publish_order_with_group_prefetch_1(broker: BrokerProcess) -> None:
    run = property_run(broker, 3, group_prefetch=1, p_nack=0.15)
    assert run.nacks > 0


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(10, 40))
def test_first_acks_follow_publish_order_many_seeds(broker: BrokerProcess, seed: int) -> None:
    property_run(broker, seed, keys=random.Random(seed).choice([3, 20, 100]),
                 consumers=random.Random(seed).choice([2, 4, 6]), messages=1000,
                 group_prefetch=seed % 2)


# ---- aio-pika and the management API ----------------------------------------------------


def api(path: str) -> Any:
    request = urllib.request.Request(f"http://127.0.0.1:{MGMT_PORT}{path}")
    request.add_header("Authorization", "Basic Z3Vlc3Q6Z3Vlc3Q=")  # guest:guest
    with urllib.request.urlopen(request, timeout=5) as answer:
        return json.loads(answer.read())


def test_aio_pika_consumers_never_share_a_key_and_management_shows_holders(
        broker: BrokerProcess) -> None:
    async def main() -> None:
        url = f"amqp://guest:guest@127.0.0.1:{broker.port}/%2F"
        conn = await aio_pika.connect(url)
        async with conn:
            pub = await conn.channel()
            queue = await pub.declare_queue("groups.aio", arguments={"x-group-by": "routing-key"})
            exchange = await pub.declare_exchange("groups.aio.x", aio_pika.ExchangeType.TOPIC)
            await queue.bind(exchange, "#")
            holding: dict[str, tuple[str, int]] = {}  # key -> (consumer, unacked)
            order: dict[str, list[int]] = defaultdict(list)
            violations: list[str] = []
            done = asyncio.Event()
            total = 200

            async def consume(name: str, ready: asyncio.Event) -> None:
                ch = await conn.channel()
                await ch.set_qos(prefetch_count=5)
                q = await ch.get_queue("groups.aio")
                async with q.iterator() as messages:  # one message after the other
                    tags.append(messages._consumer_tag)
                    ready.set()
                    async for message in messages:
                        key = message.routing_key
                        who, n = holding.get(key, (name, 0))
                        if who != name and n > 0:
                            violations.append(f"{key} to {name} while {who} holds {n}")
                        holding[key] = (name, n + 1)
                        await asyncio.sleep(random.uniform(0, 0.003))
                        order[key].append(int(message.body))
                        await message.ack()
                        who, n = holding[key]
                        holding[key] = (who, n - 1)
                        if sum(len(v) for v in order.values()) == total:
                            done.set()
                            return

            async def start(name: str) -> asyncio.Task[None]:
                ready = asyncio.Event()
                task = asyncio.create_task(consume(name, ready))
                await ready.wait()
                return task

            tags: list[str] = []
            # a backlog first, so that the management API sees keys held and waiting
            sent: dict[str, int] = defaultdict(int)
            for i in range(total):
                key = f"key{i % 10}"
                await exchange.publish(aio_pika.Message(str(sent[key]).encode()), routing_key=key)
                sent[key] += 1
            tasks = [await start("A"), await start("B")]
            shown = await asyncio.to_thread(api, "/api/queues/%2F/groups.aio")
            await asyncio.wait_for(done.wait(), 30)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            assert violations == []
            assert {k: order[k] for k in sent} == {k: list(range(n)) for k, n in sent.items()}
            groups = shown["message_groups"]
            assert groups["group_by"] == "routing-key" and 0 < groups["keys"] <= 10
            shown_tags = [c["consumer_tag"] for c in groups["consumers"]]
            assert sorted(t for t in tags if t in shown_tags) == sorted(tags)
            assert sum(c["keys"] for c in groups["consumers"]) == groups["keys_held"] > 0
            assert all(c["channel_details"]["connection_name"] for c in groups["consumers"])
            await queue.delete(if_unused=False, if_empty=False)
            await exchange.delete()

    asyncio.run(main())


# ---- kill -9 ------------------------------------------------------------------------------


#: the kill -9 tests' broker: both kinds in turn (each kills it and starts it again; the
#: second finds it running), a queue of each kind's own
kill_broker = broker_fixture(scope="module", start=False, fresh_port=True)


@pytest.mark.parametrize("kind", ["classic", "quorum"])
def test_key_order_survives_kill_9(kill_broker: BrokerProcess, kind: str) -> None:
    bp = kill_broker
    queue = f"groups.durable.{kind}"
    if not bp.alive():
        bp.start()
    conn = pika.BlockingConnection(params(bp.port))
    ch = conn.channel()
    ch.queue_declare(queue, durable=True, arguments={
        "x-group-by": "header:k", "x-queue-type": kind})
    ch.confirm_delivery()
    sent: dict[str, int] = defaultdict(int)
    for i in range(150):
        key = f"k{i * 7 % 5}"
        ch.basic_publish("", queue, str(sent[key]).encode(),
                         pika.BasicProperties(headers={"k": key}, delivery_mode=2))
        sent[key] += 1
    # a consumer acks some, holds some unacked (they come back, in order)
    ch.basic_qos(prefetch_count=20)
    acked: dict[str, list[int]] = defaultdict(list)
    for n, (method, props, body) in enumerate(ch.consume(queue)):
        if n < 30:
            acked[props.headers["k"]].append(int(body))
            ch.basic_ack(method.delivery_tag)
        if n >= 45:
            break
    ch.queue_declare(queue, durable=True, passive=True)  # acks processed
    bp.kill()
    bp.start()
    conn = pika.BlockingConnection(params(bp.port))
    ch = conn.channel()
    # still a group queue: a Basic.Get holds its key, so the next one is of another key
    first, first_props, _ = ch.basic_get(queue)
    second, second_props, _ = ch.basic_get(queue)
    assert first is not None and second is not None
    assert first_props.headers["k"] != second_props.headers["k"]
    ch.basic_nack(second.delivery_tag, multiple=True, requeue=True)  # both back, in place
    ch.basic_qos(prefetch_count=3)
    left = 150 - sum(len(v) for v in acked.values())
    for method, props, body in ch.consume(queue, inactivity_timeout=5.0):
        assert method is not None, f"{left} messages missing after the restart"
        acked[props.headers["k"]].append(int(body))
        ch.basic_ack(method.delivery_tag)
        left -= 1
        if not left:
            break
    conn.close()
    for key, n in sent.items():
        assert acked[key] == list(range(n)), (key, acked[key])
