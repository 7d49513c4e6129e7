"""In-process cost of the publish -> deliver path, no sockets (sans-IO core only).

Usage: python -m benchmarks.core_micro [messages] [--only 1,2,3] [--profile]
Prints CPU microseconds (process time, so other load on the machine matters less) per
message for: 1. publish to a queue with no consumer, 2. publish with a no-ack consumer
(deliver), 3. publish + a consumer with prefetch 100 acking each delivery, 4. persistent
publish with confirms to a durable queue (storage in a temporary directory; the fsync
rounds run once per 1,000 messages, as a worker thread's would finish while the next read
is handled), no consumer. For a figure
free of other load, count instructions: ``valgrind --tool=callgrind`` at two message
counts, and take the difference.
"""

from __future__ import annotations

import cProfile
import gc
import pstats
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pamqp import commands, frame, header
from pamqp.body import ContentBody

from amqp_server.connection import Connection
from broker.broker import Broker
from broker.config import BrokerConfig
from broker.environment import BrokerEnvironment


def _client(broker: Broker) -> Connection:
    conn = Connection(broker, ("127.0.0.1", 1))
    conn.receive_data(b"AMQP\x00\x00\x09\x01")
    conn.receive_data(frame.marshal(commands.Connection.StartOk(
        client_properties={}, mechanism="PLAIN", response="\0guest\0guest"), 0))
    conn.receive_data(frame.marshal(commands.Connection.TuneOk(2047, 131072, 0), 0)
                      + frame.marshal(commands.Connection.Open("/"), 0)
                      + frame.marshal(commands.Channel.Open(), 1))
    conn.data_to_send()
    return conn


def _publish_bytes(n: int) -> bytes:
    body = b"x" * 200
    one = (frame.marshal(commands.Basic.Publish(exchange="", routing_key="q"), 1)
           + frame.marshal(header.ContentHeader(0, len(body), commands.Basic.Properties()), 1)
           + frame.marshal(ContentBody(body), 1))
    return one * n


_DELIVER = b"\x00\x3c\x00\x3c"  # Basic.Deliver's class and method ids in a method frame
# a Basic.Ack frame on channel 1 (type, channel, size 13, class 60, method 80, tag, bits,
# frame end): what pamqp's frame.marshal gives, packed directly so that the client's own
# encoding (about a fifth of scenario 3's instructions with pamqp) is not counted as the
# broker's
_ACK_FRAME = struct.Struct(">BHIHHQBB")


def run(n: int, only: set[int] | None = None) -> dict[str, float]:
    """CPU microseconds per message of each scenario (``only``: their numbers, 1-4)."""
    out: dict[str, float] = {}
    # objects from imports stay out of the collector's way, so that what is measured does
    # not depend on which modules happen to be loaded (a full collection walks them all)
    gc.collect()
    gc.freeze()
    data = _publish_bytes(1000)
    # 1. publish only
    if only is None or 1 in only:
        _publish_only(n, data, out)
    if only is None or 2 in only:
        _no_ack_consumer(n, data, out)
    if only is None or 3 in only:
        _acking_consumer(n, data, out)
    if only is None or 4 in only:
        _persistent_confirms(n, out)
    return out


def _publish_only(n: int, data: bytes, out: dict[str, float]) -> None:
    broker = Broker(BrokerConfig())
    pub = _client(broker)
    pub.receive_data(frame.marshal(commands.Queue.Declare(queue="q"), 1))
    t = time.process_time()
    for _ in range(n // 1000):
        pub.receive_data(data)
    out["publish (us/msg)"] = (time.process_time() - t) / n * 1e6


def _no_ack_consumer(n: int, data: bytes, out: dict[str, float]) -> None:
    broker = Broker(BrokerConfig())
    pub, con = _client(broker), _client(broker)
    pub.receive_data(frame.marshal(commands.Queue.Declare(queue="q"), 1))
    con.receive_data(frame.marshal(commands.Basic.Consume(queue="q", no_ack=True), 1))
    con.data_to_send()
    t = time.process_time()
    for _ in range(n // 1000):
        pub.receive_data(data)
        con.data_to_send()
    out["publish+deliver no-ack (us/msg)"] = (time.process_time() - t) / n * 1e6


def _acking_consumer(n: int, data: bytes, out: dict[str, float]) -> None:
    """Publish + a consumer with prefetch 100 acking every delivery (one Basic.Ack each)."""
    broker = Broker(BrokerConfig())
    pub, con = _client(broker), _client(broker)
    pub.receive_data(frame.marshal(commands.Queue.Declare(queue="q"), 1))
    con.receive_data(frame.marshal(commands.Basic.Qos(prefetch_count=100), 1))
    con.receive_data(frame.marshal(commands.Basic.Consume(queue="q"), 1))
    con.data_to_send()
    pack = _ACK_FRAME.pack
    acks = [pack(1, 1, 13, 60, 80, tag, 0, 0xCE) for tag in range(1, n + 1)]
    acked = 0
    t = time.process_time()
    for _ in range(n // 1000):
        pub.receive_data(data)
        target = acked + 1000
        while acked < target:
            got = con.data_to_send().count(_DELIVER)
            con.receive_data(b"".join(acks[acked:acked + got]))
            acked += got
    out["publish+deliver+ack prefetch 100 (us/msg)"] = (time.process_time() - t) / n * 1e6


def _persistent_confirms(n: int, out: dict[str, float]) -> None:
    """Persistent publishes with confirms to a durable queue, no consumer; the fsync rounds
    asked for while 1,000 publishes are read run after them (then the confirms go out)."""
    body = b"x" * 200
    one = (frame.marshal(commands.Basic.Publish(exchange="", routing_key="d"), 1)
           + frame.marshal(header.ContentHeader(
               0, len(body), commands.Basic.Properties(delivery_mode=2)), 1)
           + frame.marshal(ContentBody(body), 1))
    data = one * 1000
    rounds: list[tuple[Callable[[], None], Callable[[OSError | None], None]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        broker = Broker(BrokerConfig(data_dir=Path(tmp)),
                        BrokerEnvironment(storage=True,
                                          run_blocking=lambda work, done: rounds.append(
                                              (work, done))))
        pub = _client(broker)
        pub.receive_data(frame.marshal(commands.Queue.Declare(queue="d", durable=True), 1)
                         + frame.marshal(commands.Confirm.Select(), 1))
        pub.data_to_send()
        t = time.process_time()
        for _ in range(n // 1000):
            pub.receive_data(data)
            while rounds:
                work, done = rounds.pop(0)
                work()
                done(None)
            pub.data_to_send()
        out["persistent publish + confirms (us/msg)"] = (time.process_time() - t) / n * 1e6


def main(run_scenarios: Callable[[int, set[int] | None], dict[str, float]], top: int) -> None:
    """The command line shared by the micro-benchmarks: ``[COUNT] [--only 1,2] [--profile]``
    (COUNT messages, 200,000 by default); prints ``name: value`` per result, and with
    ``--profile`` the ``top`` functions by own time first (cProfile)."""
    count = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 200_000
    chosen = {int(a) for a in sys.argv[sys.argv.index("--only") + 1].split(",")} \
        if "--only" in sys.argv else None
    if "--profile" in sys.argv:
        prof = cProfile.Profile()
        prof.enable()
        res = run_scenarios(count, chosen)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(top)
    else:
        res = run_scenarios(count, chosen)
    for k, v in res.items():
        print(f"{k}: {v:.2f}")


if __name__ == "__main__":
    main(run, 18)
