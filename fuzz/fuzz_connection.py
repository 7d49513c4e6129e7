"""Coverage-guided fuzzing (atheris/libFuzzer) of the sans-IO connection, for a bounded time.

Each input is a *session input* (tests/fuzz/harness.py): a scenario byte, a chunking byte, a
clock-advance byte and a stream of bytes fed to ``Connection.receive_data``. The oracle is the
one of the default test run (``harness.run_input``): no internal error (541, an escaped
exception, an ERROR log), the right reply codes, nothing left behind in the broker after the
connection is gone, and a second connection that still works. Inputs that hit a bug already
reported (``harness.KNOWN_BUGS``, each with a strict xfail test) are counted, not crashes,
unless ``--strict``.

Usage (``make fuzz`` runs the first)::

    python fuzz/fuzz_connection.py --seconds 300
    python fuzz/fuzz_connection.py --seconds 60 --strict      # stop at known bugs too
    python fuzz/fuzz_connection.py --replay crash-<sha1>      # run one input, print verdict

It stops by itself after ``--seconds`` and prints what it did: inputs tried, executions per
second, the reply codes seen, known-bug hits. A new failure stops the run with the input
saved as ``fuzz/crashes/crash-<sha1>`` (libFuzzer's artifact); to keep it as a regression
test, copy it to ``tests/fuzz/corpus/`` (replayed by tests/test_fuzz_connection.py) and, if
it is a bug, list it in ``tests/fuzz/corpus/known_bugs.json``.

The working corpus (what libFuzzer learned) lives in ``fuzz/.corpus/``; it is seeded from
tests/fuzz/seeds.py and tests/fuzz/corpus/ each run.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import atheris  # noqa: E402

with atheris.instrument_imports(include=["amqp_server", "queue_store", "exchanges", "vhosts"]):
    from tests.fuzz import harness, seeds  # noqa: E402

WORK_CORPUS = ROOT / "fuzz" / ".corpus"
CRASH_DIR = ROOT / "fuzz" / "crashes"
CORPUS = ROOT / "tests" / "fuzz" / "corpus"

stats = {"inputs": 0, "start": 0.0, "deadline": 0.0, "last_report": 0.0}
codes: collections.Counter[int] = collections.Counter()
known: collections.Counter[str] = collections.Counter()
strict = False


def report(final: bool = False) -> None:
    elapsed = max(time.monotonic() - stats["start"], 1e-9)
    top = ", ".join(f"{c}:{n}" for c, n in sorted(codes.items()))
    print(f"[fuzz] {'DONE ' if final else ''}{stats['inputs']} inputs in {elapsed:.0f} s "
          f"({stats['inputs'] / elapsed:.0f}/s); reply codes {top or '-'}; known bugs "
          f"{dict(known) or '-'}", flush=True)


def test_one_input(data: bytes) -> None:
    now = time.monotonic()
    if now >= stats["deadline"]:
        report(final=True)
        os._exit(0)
    if now - stats["last_report"] >= 30:
        stats["last_report"] = now
        report()
    stats["inputs"] += 1
    outcome = harness.run_input(data, allow_known=not strict)
    for code in outcome.codes:
        codes[code] += 1
    for bug in outcome.known:
        known[bug] += 1
    if outcome.problems:
        print("[fuzz] FAILURE for input", data.hex(), file=sys.stderr)
        for problem in outcome.problems:
            print("  -", problem, file=sys.stderr)
        raise AssertionError("; ".join(outcome.problems))


def prepare_corpus() -> None:
    WORK_CORPUS.mkdir(parents=True, exist_ok=True)
    CRASH_DIR.mkdir(parents=True, exist_ok=True)
    items = list(seeds.seed_inputs())
    items += [(p.stem, p.read_bytes()) for p in sorted(CORPUS.glob("*.bin"))]
    for _, data in items:
        name = hashlib.sha1(data).hexdigest()
        path = WORK_CORPUS / name
        if not path.exists():
            path.write_bytes(data)


def replay(path: str) -> int:
    data = Path(path).read_bytes()
    outcome = harness.run_input(data, allow_known=not strict)
    scenario, chunk, drain, advance, stream = harness.decode_input(data)
    print(f"scenario {harness.SCENARIOS[scenario][0]}, chunk {chunk}, drain {drain}, "
          f"advance {advance}s, stream {stream.hex()}")
    print("reply codes:", outcome.codes, "known bugs:", outcome.known)
    for problem in outcome.problems:
        print("PROBLEM:", problem)
    return 1 if outcome.problems else 0


def main() -> None:
    global strict
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=300.0, help="run time (default 300)")
    parser.add_argument("--strict", action="store_true", help="known bugs are failures too")
    parser.add_argument("--replay", help="run one input file and print the verdict")
    parser.add_argument("--max-len", type=int, default=4096, help="libFuzzer -max_len")
    args, extra = parser.parse_known_args()
    strict = args.strict
    if args.replay:
        sys.exit(replay(args.replay))
    prepare_corpus()
    stats["start"] = stats["last_report"] = time.monotonic()
    stats["deadline"] = stats["start"] + args.seconds
    print(f"[fuzz] {args.seconds:.0f} s, corpus {WORK_CORPUS}, crashes in {CRASH_DIR}/",
          flush=True)
    libfuzzer_args = [sys.argv[0], str(WORK_CORPUS), f"-artifact_prefix={CRASH_DIR}/",
                      f"-max_total_time={int(args.seconds) + 5}", f"-max_len={args.max_len}",
                      "-timeout=20", "-rss_limit_mb=4096", "-print_final_stats=1", *extra]
    atheris.Setup(libfuzzer_args, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
