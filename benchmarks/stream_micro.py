"""In-process cost of a stream's publish with confirms and catch-up read (sans-IO core).

Usage: python -m benchmarks.stream_micro [messages] [--only 1,2] [--profile]

Prints CPU microseconds (process time) per message for issue #32's stream case without
sockets: 1. persistent 200-byte publishes with confirms to a stream, 250 per read of the
socket (what a sliding window of 1,000 sends per read), 2. a consumer from ``first`` with
prefetch 1,000 acking (multiple) after every batch of output. Storage in a temporary
directory; the worker-thread jobs (fsync rounds, chunk reads) run between reads.
"""

from __future__ import annotations

import gc
import struct
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pamqp import commands, frame, header
from pamqp.body import ContentBody

from benchmarks.core_micro import _client, main
from broker.broker import Broker
from broker.config import BrokerConfig
from broker.environment import BrokerEnvironment

_DELIVER = b"\x00\x3c\x00\x3c"
_ACK_FRAME = struct.Struct(">BHIHHQBB")
PER_READ = 250


def run(n: int, only: set[int] | None = None) -> dict[str, float]:
    out: dict[str, float] = {}
    gc.collect()
    gc.freeze()
    body = b"x" * 200
    one = (frame.marshal(commands.Basic.Publish(exchange="", routing_key="s"), 1)
           + frame.marshal(header.ContentHeader(
               0, len(body), commands.Basic.Properties(delivery_mode=2)), 1)
           + frame.marshal(ContentBody(body), 1))
    data = one * PER_READ
    jobs: list[tuple[Callable[[], None], Callable[[OSError | None], None]]] = []
    now = [0.0]

    def run_jobs() -> None:
        while jobs:
            work, done = jobs.pop(0)
            work()
            done(None)

    with tempfile.TemporaryDirectory() as tmp:
        broker = Broker(BrokerConfig(data_dir=Path(tmp)),
                        BrokerEnvironment(storage=True, clock=lambda: now[0],
                                          run_blocking=lambda work, done: jobs.append(
                                              (work, done))))
        pub = _client(broker)
        pub.receive_data(frame.marshal(commands.Queue.Declare(
            queue="s", durable=True, arguments={"x-queue-type": "stream"}), 1)
            + frame.marshal(commands.Confirm.Select(), 1))
        pub.data_to_send()
        t = time.process_time()
        for _ in range(n // PER_READ):
            pub.receive_data(data)
            run_jobs()
            pub.data_to_send()
        out["stream publish + confirms (us/msg)"] = (time.process_time() - t) / n * 1e6
        if only is not None and 2 not in only:
            return out
        con = _client(broker)
        con.receive_data(frame.marshal(commands.Basic.Qos(prefetch_count=1000), 1))
        con.data_to_send()
        pack = _ACK_FRAME.pack
        got = 0
        t = time.process_time()
        con.receive_data(frame.marshal(commands.Basic.Consume(
            queue="s", consumer_tag="gen", arguments={"x-stream-offset": "first"}), 1))
        idle = 0
        while got < n and idle < 100:
            run_jobs()
            now[0] += 0.001
            broker.timers.run_due()
            sent = con.data_to_send()
            k = sent.count(_DELIVER)
            if not k:
                idle += 1
                continue
            idle = 0
            got += k
            con.receive_data(pack(1, 1, 13, 60, 80, got, 1, 0xCE))
        out["stream catch-up read, multiple acks (us/msg)"] = (
            (time.process_time() - t) / n * 1e6)
        out["delivered"] = got
    return out


if __name__ == "__main__":
    main(run, 30)
