"""In-process cost of persistent messages on a durable queue (sans-IO, no sockets): publish
N persistent 200-byte messages (group commit every 100, as a confirm window would), then
drain them with Basic.Get and an ack each.

Usage: python -m benchmarks.persistent_micro [messages] [--embed-below BYTES]
Prints CPU microseconds per message for each phase and the process's peak RSS. For a figure
free of other load, count instructions with ``valgrind --tool=callgrind`` at two message
counts and take the difference.
"""

from __future__ import annotations

import resource
import sys
import tempfile
import time
from pathlib import Path

from pamqp import commands
from pamqp.header import ContentHeader

from broker.broker import Broker
from broker.config import BrokerConfig
from broker.environment import BrokerEnvironment
from queue_store.message import Message
from queue_store.outcomes import Settlement

PERSISTENT = ContentHeader(0, 0, commands.Basic.Properties(delivery_mode=2)).marshal()[12:]


def run(n: int, embed_below: int = 4096) -> dict[str, float]:
    """CPU microseconds per message of publish and of get+ack; peak RSS (MB)."""
    with tempfile.TemporaryDirectory() as tmp:
        broker = Broker(BrokerConfig(data_dir=Path(tmp), queue_index_embed_msgs_below=embed_below),
                        BrokerEnvironment(storage=True))
        q = broker.vhosts["/"].declare_queue("q", durable=True)
        body = b"x" * 200
        t0 = time.process_time()
        for i in range(n):
            q.publish(Message.create("", "q", PERSISTENT, body))
            if i % 100 == 99:
                broker.after_batch()
        broker.after_batch()
        t1 = time.process_time()
        for i in range(n):
            qm = q.get()
            q.settle([(qm, q, None)], Settlement.ACK)  # type: ignore[list-item]
            if i % 100 == 99:
                broker.after_batch()
        broker.after_batch()
        t2 = time.process_time()
        for vhost in broker.vhosts.values():
            if vhost.storage is not None:
                vhost.storage.close()
    return {"publish_us": (t1 - t0) * 1e6 / n, "get_ack_us": (t2 - t1) * 1e6 / n,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main(argv: list[str]) -> None:
    n = int(argv[0]) if argv and argv[0].isdigit() else 20_000
    embed = int(argv[argv.index("--embed-below") + 1]) if "--embed-below" in argv else 4096
    for name, value in run(n, embed).items():
        print(f"{name}: {value:.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
