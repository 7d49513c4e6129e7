"""Kill loop, bounded and with figures: the broker is SIGKILLed ``--kills`` times while a pika
publisher streams persistent messages with confirms (and a consumer acks some between kills),
restarted on the same data dir each time; at the end every confirmed, unacked message must be
there exactly once and in order, and nothing acked may come back.

It runs the loop of interop_tests/test_persistence.py (``run_kill_loop`` and
``final_check``, whose slow test does 20 kills) as a script that prints what it checked:

    python fuzz/kill_loop.py --kills 20 --seconds 600       # part of ``make soak``

Exit status 0 on success, 1 on a failed check, 2 when it ran out of time.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from interop_tests.test_persistence import (  # noqa: E402
    QUEUE,
    Ledger,
    connection,
    final_check,
    run_kill_loop,
)
from tests.fuzz.broker_process import rss_bytes  # noqa: E402
from tests.support.broker_process import BrokerProcess  # noqa: E402
from tests.support.wire import Client, body_frame, publish_head  # noqa: E402

ID_WIDTH = 10  # digits of a backlog message's body (its id, zero-padded)


def prefill(n: int) -> Callable[[BrokerProcess, Ledger], int]:
    """A backlog of ``n`` persistent messages (ids 1..n) published over one raw connection,
    pipelined, and counted in the queue before the kills start (a kill -9 loses nothing
    written, so they count as confirmed)."""

    def fill(bp: BrokerProcess, ledger: Ledger) -> int:
        t0 = time.monotonic()
        client = Client(bp.port, timeout=120)
        client.channel(1)
        head = publish_head("", QUEUE, ID_WIDTH, persistent=True)
        for first in range(1, n + 1, 1000):
            client.sock.sendall(b"".join(
                head + body_frame(b"%0*d" % (ID_WIDTH, i))
                for i in range(first, min(first + 1000, n + 1))))
        while client.queue_count(QUEUE) < n:
            time.sleep(0.5)
        client.close()
        with ledger.lock:
            ledger.attempted.update(range(1, n + 1))
            ledger.confirmed.update(range(1, n + 1))
        print(f"[kill-loop] backlog of {n:,} in {time.monotonic() - t0:.0f} s", flush=True)
        return n

    return fill


def drain_by_consumer(bp: BrokerProcess, ledger: Ledger) -> list[int]:
    """Every message left, through a consumer (prefetch 1,000, acked in batches): a deep
    backlog drains in minutes, where Basic.Get would take hours."""
    final: list[int] = []
    with connection(bp) as conn:
        ch = conn.channel()
        left = ch.queue_declare(QUEUE, passive=True).method.message_count
        ch.basic_qos(prefetch_count=1000)
        for method, _props, body in ch.consume(QUEUE, inactivity_timeout=30):
            if method is None:
                break
            msg_id = int(body)
            ledger.check_delivery(msg_id, method.redelivered, "final drain")
            final.append(msg_id)
            if len(final) % 500 == 0 or len(final) == left:
                ch.basic_ack(method.delivery_tag, multiple=True)
            if len(final) == left:
                break
        ch.cancel()
    return final


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=600.0, help="hard time limit")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--backlog", type=int, default=0,
                        help="messages published before the first kill (a deep backlog)")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    start = time.monotonic()
    peak = [0]
    done = threading.Event()
    with tempfile.TemporaryDirectory() as tmp:
        bp = BrokerProcess(Path(tmp) / "data", Path(tmp) / "broker.log", fresh_port=True,
                           log_level="info", management=True)

        def watch() -> None:
            while not done.wait(0.2):
                proc = bp.proc
                if proc is not None and proc.poll() is None:
                    try:
                        peak[0] = max(peak[0], rss_bytes(proc.pid))
                    except (OSError, RuntimeError):
                        pass
                if time.monotonic() - start > args.seconds:
                    print(f"[kill-loop] FAIL: not done in {args.seconds:.0f} s (seed {seed})",
                          flush=True)
                    bp.kill()
                    os._exit(2)

        threading.Thread(target=watch, daemon=True).start()
        print(f"[kill-loop] {args.kills} kills, seed {seed}", flush=True)
        try:
            ledger = run_kill_loop(bp, kills=args.kills, seed=seed,
                                   prefill=prefill(args.backlog) if args.backlog else None)
            final_check(bp, ledger, seed, drain_by_consumer)
            status = bp.stop()
            ok = status == 0
        except BaseException as exc:  # AssertionError, pytest's Failed
            print(f"[kill-loop] FAIL: {type(exc).__name__}: {str(exc)[:2000]}", flush=True)
            bp.kill()
            ok = False
            ledger = None
        finally:
            done.set()
    elapsed = time.monotonic() - start
    if ledger is not None:
        survivors = len(ledger.confirmed - ledger.acked)
        print(f"[kill-loop] {args.kills} kills / {bp.starts} starts in {elapsed:.0f} s: "
              f"{len(ledger.attempted)} messages published, {len(ledger.confirmed)} confirmed, "
              f"{len(ledger.acked)} acked, {survivors} checked present exactly once in order; "
              f"peak broker RSS {peak[0] / 2**20:.1f} MiB", flush=True)
    print(f"[kill-loop] {'PASS' if ok else 'FAIL'} (seed {seed})", flush=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
