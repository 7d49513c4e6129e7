"""A durable queue driven through alpha, beta, gamma and delta with TTL, priorities, requeues
and x-max-length (drop-head) in play: random operations against a plain list model of
RabbitMQ's queue semantics; order, counts and the per-state counts agree after every step."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from pamqp import commands
from pamqp.header import ContentHeader

import queue_store.variable_queue as vqm
from broker.broker import Broker
from broker.config import BrokerConfig
from broker.environment import BrokerEnvironment
from queue_store.backing import STATES
from queue_store.message import Message
from queue_store.queue import Settlement


def props(priority: int, expiration: int | None, persistent: bool) -> bytes:
    p = commands.Basic.Properties(delivery_mode=2 if persistent else 1, priority=priority,
                                  expiration=str(expiration) if expiration is not None else None)
    return ContentHeader(0, 0, p).marshal()[12:]


@pytest.mark.parametrize("seed", range(6))
def test_random_operations_against_a_list_model(tmp_path: Path, seed: int,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vqm, "PRESSURE_RAM_MESSAGES", 2)
    rnd = random.Random(seed)
    now = [1000.0]
    broker = Broker(BrokerConfig(data_dir=tmp_path, queue_index_embed_msgs_below=16),
                    BrokerEnvironment(storage=True, clock=lambda: now[0]))
    vhost = broker.vhosts["/"]
    q = vhost.declare_queue("q", durable=True, arguments={"x-max-priority": 2,
                                                          "x-max-length": 40})
    for level in q.ready._levels:  # type: ignore[attr-defined]
        level.ram_messages, level.beta_messages, level.read_batch = 4, 6, 3
    # model: ready messages as (priority, seq, body, expires_at); delivery order is
    # highest priority first, then publish order; expiry and drop-head act on that head
    model: list[tuple[int, int, bytes, float | None]] = []
    out: dict[int, tuple] = {}  # seq -> model entry, delivered and not settled
    deliveries: dict[int, object] = {}
    seen: set[str] = set()
    seq = 0

    def order() -> None:
        model.sort(key=lambda e: (-e[0], e[1]))

    def expire_head() -> None:
        while model and model[0][3] is not None and model[0][3] <= now[0]:
            model.pop(0)

    for _ in range(700):
        op = rnd.random()
        if op < 0.45:
            seq += 1
            prio = rnd.randrange(3)
            ttl = rnd.choice([None, None, 50, 500])  # ms
            body = f"m{seq}-".encode() * rnd.randrange(1, 6)  # some embedded, some stored
            q.publish(Message.create("", "q", props(prio, ttl, rnd.random() < 0.7), body))
            model.append((prio, seq, body, now[0] + ttl / 1000 if ttl is not None else None))
            order()
            expire_head()
            while len(model) > 40:  # drop-head
                model.pop(0)
        elif op < 0.7:
            got = q.get()
            expire_head()
            if not model:
                assert got is None
                continue
            want = model.pop(0)
            expire_head()
            assert got is not None and (got.seq, got.message.body) == (want[1], want[2])
            out[got.seq], deliveries[got.seq] = want, got
        elif op < 0.8 and out:
            chosen = rnd.sample(sorted(out), rnd.randrange(1, len(out) + 1))
            requeue = rnd.random() < 0.5
            q.settle([(deliveries.pop(s), q, None) for s in chosen],  # type: ignore[misc]
                     Settlement.REQUEUE if requeue else Settlement.ACK)
            for s in chosen:
                entry = out.pop(s)
                if requeue:
                    model.append(entry)
            order()
            expire_head()
        elif op < 0.86:
            broker.set_memory_pressure(rnd.random() < 0.5)
        elif op < 0.93:
            now[0] += rnd.choice([0.01, 0.1, 1.0])
            broker.timers.run_due()
            expire_head()
        else:
            budget = rnd.choice([0, 2, 4, 50])
            for level in q.ready._levels:  # type: ignore[attr-defined]
                level.ram_messages = level._base_ram_messages = budget
                level.beta_messages = rnd.choice([0, 3, 6])
        counts = q.ready.state_counts()
        seen.update(s for s in STATES if counts[s])
        assert q.message_count == len(model) == sum(counts[s] for s in STATES)
        assert q.ready.bytes == sum(len(e[2]) for e in model)
    assert seen == set(STATES), seen
    drained = []
    while (got := q.get(no_ack=True)) is not None:
        drained.append(got.seq)
    expected = []
    while True:
        expire_head()
        if not model:
            break
        expected.append(model.pop(0)[1])
    assert drained == expected
