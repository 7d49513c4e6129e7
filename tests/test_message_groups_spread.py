"""Message groups spread over idle consumers (issue #34), with pika against a broker process.

Two or three idle consumers, each on a connection of its own with a prefetch of 1, 10, 100 or
unlimited (0), on an ``x-group-by: header:gid`` queue; then 4 or 8 keys are published in
blocks of 10 (every message of the first key, then of the second, ...). Free keys are handed
to consumers in turn, so:

* while nothing is acknowledged, every consumer holds at least one key (when there are at
  least as many keys as consumers), no key is with two consumers, and with room for
  everything the keys are split evenly (round-robin);
* then every consumer acks what it has and what it gets: no consumer ever receives a message
  of a key another consumer still has unacknowledged messages of, each key's messages arrive
  in publish order, each once.

One thread drives every connection (``process_data_events`` in turn), so the client-side
record of who holds what is exact: an ack is recorded before it is sent, and the broker can
hand the key to another consumer only after it has read that ack.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import pytest

pika = pytest.importorskip("pika")

from tests.support.broker_process import BrokerProcess, broker_fixture  # noqa: E402

broker = broker_fixture(scope="module")

BLOCK = 10  # messages per key, published one key after the other


def params(port: int) -> Any:
    return pika.ConnectionParameters(
        host="127.0.0.1", port=port, credentials=pika.PlainCredentials("guest", "guest"),
        connection_attempts=1, socket_timeout=5, heartbeat=0)


class Consumers:
    """N consumers of one queue, driven by the test's thread; records deliveries and checks
    the single-holder rule at every delivery."""

    def __init__(self, port: int, queue: str, n: int, prefetch: int) -> None:
        self.conns = [pika.BlockingConnection(params(port)) for _ in range(n)]
        self.channels = []
        self.auto_ack = False
        self.got: list[list[tuple[str, int]]] = [[] for _ in range(n)]  # (key, seq) received
        self.out: list[dict[str, int]] = [defaultdict(int) for _ in range(n)]  # unacked/key
        self.tags: list[list[tuple[int, str]]] = [[] for _ in range(n)]  # unacked, in order
        self.order: dict[str, list[int]] = defaultdict(list)  # seqs per key, as received
        self.errors: list[str] = []
        for i, conn in enumerate(self.conns):
            ch = conn.channel()
            ch.basic_qos(prefetch_count=prefetch)
            ch.basic_consume(queue, self._on_message(i, ch))
            self.channels.append(ch)

    def _on_message(self, i: int, ch: Any) -> Any:
        def on_message(_ch: Any, method: Any, props: Any, body: bytes) -> None:
            key = props.headers["gid"]
            key = key.decode() if isinstance(key, bytes) else key
            others = [j for j, out in enumerate(self.out) if j != i and out[key]]
            if others:
                self.errors.append(f"consumer {i} got {key}/{body!r} while consumer(s) "
                                   f"{others} hold it")
            self.got[i].append((key, int(body)))
            self.order[key].append(int(body))
            self.out[i][key] += 1
            self.tags[i].append((method.delivery_tag, key))
            if self.auto_ack:
                self.ack_all(i)
        return on_message

    def ack_all(self, i: int) -> None:
        """Consumer ``i`` acks everything it has (recorded first, then sent)."""
        tags, self.tags[i] = self.tags[i], []
        for tag, key in tags:
            self.out[i][key] -= 1
            self.channels[i].basic_ack(tag)

    def received(self) -> int:
        return sum(len(g) for g in self.got)

    def poll(self, until: Any, quiet: float, timeout: float = 15.0) -> None:
        """Drive every connection until ``until()`` is true and nothing has arrived for
        ``quiet`` seconds (or ``timeout``)."""
        deadline = time.monotonic() + timeout
        last, since = -1, time.monotonic()
        while time.monotonic() < deadline:
            for conn in self.conns:
                conn.process_data_events(time_limit=0.01)
            n = self.received()
            if n != last:
                last, since = n, time.monotonic()
            elif until() and time.monotonic() - since >= quiet:
                return

    def close(self) -> None:
        for conn in self.conns:
            if conn.is_open:
                conn.close()


@pytest.mark.parametrize("prefetch", [1, 10, 100, 0])
@pytest.mark.parametrize(("consumers", "keys"), [(2, 4), (2, 8), (3, 4), (3, 8)])
def test_free_keys_spread_over_idle_consumers(broker: BrokerProcess, consumers: int, keys: int,
                                              prefetch: int) -> None:
    queue = f"groups.spread.{consumers}.{keys}.{prefetch}"
    admin = pika.BlockingConnection(params(broker.port))
    ach = admin.channel()
    ach.queue_declare(queue, arguments={"x-group-by": "header:gid"})
    ach.confirm_delivery()
    group = Consumers(broker.port, queue, consumers, prefetch)
    try:
        names = [f"key-{k}" for k in range(keys)]
        for name in names:  # in blocks of 10, every message confirmed
            for seq in range(BLOCK):
                ach.basic_publish("", queue, str(seq).encode(),
                                  pika.BasicProperties(headers={"gid": name}))
        total = keys * BLOCK
        capacity = total if prefetch == 0 else min(total, consumers * prefetch)
        group.poll(lambda: group.received() >= min(capacity, consumers), quiet=0.3)

        # nothing acked yet: who holds which key
        held = [{key for key, _ in got} for got in group.got]
        assert all(held), f"prefetch {prefetch}: keys per consumer {held}"
        for i, mine in enumerate(held):
            for j in range(i + 1, consumers):
                assert not mine & held[j], f"consumers {i} and {j} share {mine & held[j]}"
        if capacity == total:  # room for everything: round-robin, so an even split
            counts = [len(mine) for mine in held]
            assert max(counts) - min(counts) <= 1, held
            assert group.received() == total
        assert not group.errors, group.errors

        # now every consumer acks what it has and what it gets, to the end
        group.auto_ack = True
        for i in range(consumers):
            group.ack_all(i)
        group.poll(lambda: group.received() >= total, quiet=0.1)
        assert not group.errors, group.errors
        assert group.received() == total, f"{group.received()}/{total} delivered"
        for name in names:
            assert group.order[name] == list(range(BLOCK)), (name, group.order[name])
        assert ach.queue_declare(queue, passive=True).method.message_count == 0
    finally:
        group.close()
        ach.queue_delete(queue)
        admin.close()
