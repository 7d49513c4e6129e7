"""Instructions per message of ``benchmarks.core_micro``'s scenarios, counted by callgrind.

Usage: python -m benchmarks.instructions [--only 1,2,3] [--counts 20000,40000]

Each scenario runs under ``valgrind --tool=callgrind`` at two message counts; the difference
of the two totals over the difference of the counts is the cost of one message, with what
does not depend on the count (start-up, imports, set-up) cancelled out. Instruction counts
do not depend on other load on the machine (``PYTHONHASHSEED=0`` keeps them repeatable).
Needs valgrind; takes about 1-2 minutes per scenario. On demand only (not collected by
pytest).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

_TOTAL = re.compile(rb"^(?:summary|totals):\s*(\d+)", re.MULTILINE)


def count(scenario: int, messages: int) -> int:
    """Instructions (Ir) of one ``core_micro`` run of ``messages`` for ``scenario``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
             "-m", "benchmarks.core_micro", str(messages), "--only", str(scenario)],
            check=True, capture_output=True, env={**os.environ, "PYTHONHASHSEED": "0"})
        found = _TOTAL.search(out.read_bytes())
        if found is None:
            raise RuntimeError(f"no total in {out}")
        return int(found.group(1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="1,2,3", help="scenarios of core_micro (1-3)")
    p.add_argument("--counts", default="20000,40000", help="the two message counts")
    args = p.parse_args()
    low, high = (int(c) for c in args.counts.split(","))
    for scenario in (int(s) for s in args.only.split(",")):
        per = (count(scenario, high) - count(scenario, low)) / (high - low)
        print(f"scenario {scenario}: {per:,.0f} instructions per message")


if __name__ == "__main__":
    main()
