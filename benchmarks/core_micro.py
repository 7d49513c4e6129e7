"""In-process cost of the publish -> deliver path, no sockets (sans-IO core only).

Usage: python -m benchmarks.core_micro [messages] [--profile]
Prints CPU microseconds (process time, so other load on the machine matters less) per message for: publish to a queue with no consumer, publish with a
no-ack consumer (deliver), and publish + manual ack with prefetch 100.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import time

from pamqp import commands, frame, header
from pamqp.body import ContentBody

from amqp_server.broker import Broker
from amqp_server.config import BrokerConfig
from amqp_server.connection import Connection


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


def run(n: int) -> dict[str, float]:
    out = {}
    data = _publish_bytes(1000)
    # 1. publish only
    broker = Broker(BrokerConfig())
    pub = _client(broker)
    pub.receive_data(frame.marshal(commands.Queue.Declare(queue="q"), 1))
    t = time.process_time()
    for _ in range(n // 1000):
        pub.receive_data(data)
    out["publish (us/msg)"] = (time.process_time() - t) / n * 1e6
    # 2. publish + no-ack consumer
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
    return out


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 200_000
    if "--profile" in sys.argv:
        prof = cProfile.Profile()
        prof.enable()
        res = run(count)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(18)
    else:
        res = run(count)
    for k, v in res.items():
        print(f"{k}: {v:.2f}")
