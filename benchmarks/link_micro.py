"""In-process cost of each hop of a message between workers (``--workers N``), no sockets.

Usage: python -m benchmarks.link_micro [messages]

Prints CPU microseconds per 200-byte message for each hop a message to a queue on another
worker takes that it does not take with one worker: encoding the PUBLISH record on the
publisher's worker, decoding it (and making the message) on the home, encoding the DELIVER
record on the home, decoding it on the consumer's worker, and settling by number (ack
record, encode + decode). For a figure free of other load, count instructions:
``valgrind --tool=callgrind`` at two message counts and take the difference.
"""

from __future__ import annotations

import sys
import time

from amqp_common import framing
from amqp_server.workers.link_codec import (
    Outbox,
    RecordReader,
    message_from,
    queue_key,
    read_deliver,
    read_publish,
    read_settle,
)

BODY = b"x" * 200
PROPS = b"\x10\x00\x02"  # delivery-mode 2 only
EXRK = framing.encode_shortstr("") + framing.encode_shortstr("bench-queue")
BATCH = 500  # records per loop turn (a busy link)


def hop_publish_encode(n: int) -> float:
    box, qkey = Outbox(), queue_key("/", "bench-queue")
    t0 = time.process_time()
    for i in range(0, n, BATCH):
        for j in range(BATCH):
            box.publish(i + j, False, qkey, EXRK, PROPS, BODY)
        box.take()
    return time.process_time() - t0


def _stream(records: int, add: object) -> bytes:
    box = Outbox()
    for i in range(records):
        add(box, i)  # type: ignore[operator]
    return box.take()


def _decode(n: int, data: bytes, read: object) -> float:
    """Seconds to read ``n`` messages' records (``data``: one batch) and make messages."""
    t0 = time.process_time()
    for _ in range(0, n, BATCH):
        for _kind, body in RecordReader().feed(data):
            *_, exrk, props, payload = read(body)  # type: ignore[operator]
            message_from(exrk, props, payload)
    return time.process_time() - t0


def hop_publish_decode(n: int) -> float:
    qkey = queue_key("/", "bench-queue")
    data = _stream(BATCH, lambda b, i: b.publish(i, False, qkey, EXRK, PROPS, BODY))
    return _decode(n, data, read_publish)


def hop_deliver_encode(n: int) -> float:
    box = Outbox()
    t0 = time.process_time()
    for i in range(0, n, BATCH):
        for j in range(BATCH):
            box.deliver(7, i + j + 1, False, EXRK, PROPS, BODY)
        box.take()
    return time.process_time() - t0


def hop_deliver_decode(n: int) -> float:
    data = _stream(BATCH, lambda b, i: b.deliver(7, i + 1, False, EXRK, PROPS, BODY))
    return _decode(n, data, read_deliver)


def hop_settle(n: int) -> float:
    t0 = time.process_time()
    box = Outbox()
    for i in range(0, n, BATCH):
        box.settle(0, list(range(i + 1, i + BATCH + 1)))
        for _kind, body in RecordReader().feed(box.take()):
            read_settle(body)
    return time.process_time() - t0


HOPS = [("publish: encode (publisher's worker)", hop_publish_encode),
        ("publish: decode + message (home)", hop_publish_decode),
        ("deliver: encode (home)", hop_deliver_encode),
        ("deliver: decode + message (consumer's worker)", hop_deliver_decode),
        ("ack by number: encode + decode (batched)", hop_settle)]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    n = int(args[0]) if args else 200_000
    n -= n % BATCH
    for name, fn in HOPS:
        fn(BATCH)  # warm up
        print(f"{name:<48} {fn(n) / n * 1e6:6.2f} µs/msg")
    return 0


if __name__ == "__main__":
    sys.exit(main())
