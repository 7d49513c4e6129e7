"""In-process cost of the plugin-replacing exchange types, and consistent-hash distribution.

Usage: python -m benchmarks.exchange_features [messages] [--only a,b,...]

Each scenario publishes ``messages`` 200-byte messages through the sans-IO core (no sockets,
no consumer) and prints CPU microseconds per message (process time), so that the cost of
``x-consistent-hash`` and ``x-message-deduplication`` can be read against a plain direct
exchange with the same headers:

* ``direct``: direct exchange -> one queue, every message with an ``x-deduplication-header``
  header (the baseline: header bytes are carried, not decoded);
* ``hash``: ``x-consistent-hash`` over 10 queues of weight 1, a different routing key per
  message;
* ``dedup-x``: ``x-message-deduplication`` exchange (``x-cache-size`` 1,000,000) -> one queue,
  every key new (each message is routed and remembered);
* ``dedup-x-dup``: the same exchange, keys drawn from 1,000 already seen (each message is
  dropped as a duplicate);
* ``dedup-q``: a queue with ``x-message-deduplication: true``, every key new.

Then ``distribution``: 100,000 random routing keys through an ``x-consistent-hash`` exchange
bound to 4 queues with weights 1, 2, 3, 4; prints each queue's share against its weight's
share and the largest relative deviation (the issue's bound is 5%).

For figures free of other load, count instructions instead: ``valgrind --tool=callgrind`` at
two message counts, and take the difference (as for ``benchmarks.core_micro``).
"""

from __future__ import annotations

import gc
import random
import sys
import time
from collections.abc import Callable

from pamqp import commands, frame, header
from pamqp.body import ContentBody

from benchmarks.core_micro import _client
from broker.broker import Broker
from broker.config import BrokerConfig

BODY = b"x" * 200


def _publishes(exchange: str, keys: list[str], dedup_keys: list[str]) -> bytes:
    """Basic.Publish + header + body frames on channel 1, one per key (bytes).

    The frames of one message are marshalled once; the others are that template with the
    routing key and header value patched in (all keys of a call have one length each), so
    that building the input costs little next to what is measured (callgrind counts both).
    """
    if len({len(k) for k in keys}) > 1 or len({len(k) for k in dedup_keys}) > 1:
        raise ValueError("keys of one call must have equal lengths")
    rk0, dk0 = keys[0], dedup_keys[0]
    props = commands.Basic.Properties(headers={"x-deduplication-header": dk0})
    method = frame.marshal(commands.Basic.Publish(exchange=exchange, routing_key=rk0), 1)
    head = frame.marshal(header.ContentHeader(0, len(BODY), props), 1)
    body = frame.marshal(ContentBody(BODY), 1)
    rk_at = method.rindex(rk0.encode())
    dk_at = head.rindex(dk0.encode())
    m0, m1 = method[:rk_at], method[rk_at + len(rk0):]
    h0, h1 = head[:dk_at], head[dk_at + len(dk0):]
    return b"".join(m0 + rk.encode() + m1 + h0 + dk.encode() + h1 + body
                    for rk, dk in zip(keys, dedup_keys, strict=True))


def _setup(methods: list[commands.Frame]) -> tuple[Broker, object]:
    broker = Broker(BrokerConfig())
    conn = _client(broker)
    for m in methods:
        conn.receive_data(frame.marshal(m, 1))
    conn.data_to_send()
    return broker, conn


def _timed(conn: object, data: bytes, n: int) -> float:
    """CPU microseconds per message to feed ``data`` (``n`` messages) in 1,000-message slices."""
    step = len(data) // (n // 1000) if n >= 1000 else len(data)
    gc.collect()
    t = time.process_time()
    for pos in range(0, len(data), step):
        conn.receive_data(data[pos:pos + step])  # type: ignore[attr-defined]
    return (time.process_time() - t) / n * 1e6


def _direct(n: int) -> float:
    _, conn = _setup([commands.Exchange.Declare(exchange="ex", exchange_type="direct"),
                      commands.Queue.Declare(queue="q"),
                      commands.Queue.Bind(queue="q", exchange="ex", routing_key="k")])
    return _timed(conn, _publishes("ex", ["k"] * n, [f"id-{i:08d}" for i in range(n)]), n)


def _hash(n: int) -> float:
    methods: list[commands.Frame] = [commands.Exchange.Declare(
        exchange="ex", exchange_type="x-consistent-hash")]
    for i in range(10):
        methods += [commands.Queue.Declare(queue=f"q{i}"),
                    commands.Queue.Bind(queue=f"q{i}", exchange="ex", routing_key="1")]
    _, conn = _setup(methods)
    return _timed(conn, _publishes("ex", [f"key-{i:08d}" for i in range(n)], ["a"] * n), n)


def _dedup_exchange(n: int, duplicates: bool) -> float:
    _, conn = _setup([
        commands.Exchange.Declare(exchange="ex", exchange_type="x-message-deduplication",
                                  arguments={"x-cache-size": 1_000_000}),
        commands.Queue.Declare(queue="q"),
        commands.Queue.Bind(queue="q", exchange="ex", routing_key="")])
    if duplicates:
        conn.receive_data(_publishes("ex", [""] * 1000,  # type: ignore[attr-defined]
                                     [f"id-{i:08d}" for i in range(1000)]))
        keys = [f"id-{i % 1000:08d}" for i in range(n)]
    else:
        keys = [f"id-{i:08d}" for i in range(n)]
    return _timed(conn, _publishes("ex", [""] * n, keys), n)


def _dedup_queue(n: int) -> float:
    _, conn = _setup([commands.Queue.Declare(queue="q",
                                             arguments={"x-message-deduplication": True})])
    return _timed(conn, _publishes("", ["q"] * n, [f"id-{i:08d}" for i in range(n)]), n)


SCENARIOS: dict[str, Callable[[int], float]] = {
    "direct": _direct,
    "hash": _hash,
    "dedup-x": lambda n: _dedup_exchange(n, duplicates=False),
    "dedup-x-dup": lambda n: _dedup_exchange(n, duplicates=True),
    "dedup-q": _dedup_queue,
}


def distribution(keys: int = 100_000, seed: int = 1) -> tuple[dict[str, float], float]:
    """Shares of ``keys`` random routing keys over 4 queues weighted 1..4, and the largest
    relative deviation of a share from its weight's share (0.01 = 1%)."""
    methods: list[commands.Frame] = [commands.Exchange.Declare(
        exchange="ex", exchange_type="x-consistent-hash")]
    for w in range(1, 5):
        methods += [commands.Queue.Declare(queue=f"w{w}"),
                    commands.Queue.Bind(queue=f"w{w}", exchange="ex", routing_key=str(w))]
    broker, conn = _setup(methods)
    rng = random.Random(seed)
    rks = [f"{rng.getrandbits(64):016x}" for _ in range(keys)]
    conn.receive_data(_publishes("ex", rks, ["a"] * keys))  # type: ignore[attr-defined]
    vhost = broker.vhosts["/"]
    counts = {f"w{w}": vhost.queues[f"w{w}"].message_count for w in range(1, 5)}
    shares = {name: c / keys for name, c in counts.items()}
    worst = max(abs(shares[f"w{w}"] / (w / 10) - 1) for w in range(1, 5))
    return shares, worst


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 100_000
    chosen = sys.argv[sys.argv.index("--only") + 1].split(",") if "--only" in sys.argv \
        else [*SCENARIOS, "distribution"]
    for name in chosen:
        if name == "distribution":
            shares, worst = distribution()
            text = ", ".join(f"{q} {s:.4f} (weight share {int(q[1:]) / 10:.1f})"
                             for q, s in shares.items())
            print(f"distribution over 100,000 keys: {text}; largest deviation {worst:.2%}")
        else:
            print(f"{name} (us/msg): {SCENARIOS[name](count):.2f}")
