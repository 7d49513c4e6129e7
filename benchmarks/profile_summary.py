"""Summarise a ``py-spy record -f raw`` profile: top functions by self and by total samples.

Usage: python -m benchmarks.profile_summary FILE [FILE ...] [--top 15] [--lines]

Self time is the leaf frame of each sample, total time every function on the stack (counted
once per sample). Functions are grouped by name and file (``--lines`` keeps line numbers).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

_LINE = re.compile(r":\d+\)$")


def load(path: Path, keep_lines: bool = False) -> tuple[Counter[str], Counter[str], int]:
    self_c: Counter[str] = Counter()
    total_c: Counter[str] = Counter()
    n = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        c = int(count)
        frames = stack.split(";")
        if not keep_lines:
            frames = [_LINE.sub(")", f) for f in frames]
        n += c
        self_c[frames[-1]] += c
        for f in set(frames):
            total_c[f] += c
    return self_c, total_c, n


def summary(path: Path, top: int = 15, keep_lines: bool = False) -> str:
    self_c, total_c, n = load(path, keep_lines)
    if not n:
        return f"{path}: no samples"
    out = [f"{path}: {n} samples", f"  top {top} by self time:"]
    for f, c in self_c.most_common(top):
        out.append(f"    {100 * c / n:5.1f}%  {f}")
    out.append(f"  top {top} by total time (function on the stack):")
    skip = ("_run_module_as_main", "_run_code", "<module>", "main (", "run (", "Runner.run")
    shown = 0
    for f, c in total_c.most_common():
        if f.startswith(skip):
            continue
        out.append(f"    {100 * c / n:5.1f}%  {f}")
        shown += 1
        if shown >= top:
            break
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+", type=Path)
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--lines", action="store_true", help="keep line numbers")
    a = p.parse_args(argv)
    for f in a.files:
        print(summary(f, a.top, a.lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
