"""Where one queue's work runs with ``--workers N``: scenario 1 (one publisher -> one
transient queue -> one no-ack consumer, 200-byte bodies) against a fresh amqpq per setting,
printing the delivered and published rates and each broker process's CPU microseconds per
delivered message (supervisor first, then the workers).

On a busy machine rates vary with the other load; the CPU per message of each process does
much less, and the busiest worker's is what bounds the rate when the cores are free::

    python -m benchmarks.worker_split --reps 3 --workers 1,2 [--messages 300000]

Source: ``benchmarks.scenarios.s1_transient`` (the suite's scenario 1), CPU from
``/proc/PID/stat`` (utime + stime) before and after the run.
"""

from __future__ import annotations

import argparse

from benchmarks.brokers import Amqpq, cpu_seconds
from benchmarks.scenarios import Params, RunCtx, mp_context, s1_transient


def run_once(workers: int, rep: int, messages: int, mp: object) -> str:
    """One scenario 1 run against a fresh ``--workers workers`` broker: its result line."""
    broker = Amqpq(workers=workers)
    broker.start()
    try:
        pids = broker.pids
        before = {p: cpu_seconds([p]) for p in pids}
        ctx = RunCtx(broker, Params(s1=messages), 1, rep, mp)
        result = s1_transient(ctx)
        after = {p: cpu_seconds([p]) for p in pids}
        ctx.cleanup()
    finally:
        broker.stop()
    n = result.get("messages") or 1
    per = " ".join(f"{(after[p] - before[p]) / n * 1e6:.1f}" for p in pids)
    rate, published = result.get("rate") or 0.0, result.get("publish_rate") or 0.0
    return (f"workers={workers} rep={rep} delivered {rate:,.0f} msg/s, published "
            f"{published:,.0f} msg/s, CPU us/msg by process: {per}"
            + (f"  !! {result['error']}" if result.get("error") else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--workers", default="1,2", help="settings, alternated per rep")
    parser.add_argument("--messages", type=int, default=300_000)
    args = parser.parse_args()
    mp = mp_context()
    for rep in range(args.reps):
        for workers in (int(w) for w in args.workers.split(",")):
            print(run_once(workers, rep, args.messages, mp), flush=True)


if __name__ == "__main__":
    main()
