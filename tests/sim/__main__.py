"""Run the replication simulation over many seeds: ``python -m tests.sim --seeds 100000``
(``make sim SEEDS=100000``), or replay one: ``python -m tests.sim --seed 9 --trace``.

Prints the seeds run, the failures (each names its seed), the faults injected by kind and
what happened (elections, lease expiries, compactions, messages confirmed...); exits 1
when a seed failed. ``--old-rule`` plugs in the ISR rejoin rule from before #30
(a follower back in once it had what the leader had on disk a tick ago), which fails seeds.
``--no-wipe-wait`` starts a node that lost its disk again as soon as its registration is gone,
still listed in the ISR (``Config(wipe_waits=False)``: what replica log ids handle);
``--broken NAME`` plugs in a rule of ``tests/sim/broken.py`` (e.g. ``"log ids ignored"``).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor

from tests.sim.world import INJECTED, Config, SimFailure, old_rejoin_rules, quick, run_seed


def _config(old_rule: bool, short: bool = False, wipe_waits: bool = True,
            broken: str | None = None) -> Config:
    from tests.sim.broken import BROKEN, BROKEN_WITHOUT_WIPE_WAIT

    changes: dict[str, object] = {"wipe_waits": wipe_waits}
    if old_rule:
        changes["rules"] = old_rejoin_rules()
    if broken is not None:
        changes["rules"] = {**BROKEN, **BROKEN_WITHOUT_WIPE_WAIT}[broken]
    return quick(**changes) if short else Config(**changes)  # type: ignore[arg-type]


def run_range(start: int, stop: int, old_rule: bool = False, short: bool = False,
              wipe_waits: bool = True, broken: str | None = None
              ) -> tuple[Counter[str], list[str]]:
    """Seeds ``[start, stop)``: faults injected by kind, and the failures."""
    faults: Counter[str] = Counter()
    failures: list[str] = []
    cfg = _config(old_rule, short, wipe_waits, broken)
    for seed in range(start, stop):
        try:
            faults += run_seed(seed, cfg)
        except SimFailure as exc:
            failures.append(str(exc))
    return faults, failures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.sim", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=1000, help="how many seeds (default 1000)")
    p.add_argument("--start", type=int, default=0, help="first seed (default 0)")
    p.add_argument("--seed", type=int, help="replay this one seed")
    p.add_argument("--trace", action="store_true", help="with --seed: print every event")
    p.add_argument("--jobs", type=int, default=2, help="processes (default 2)")
    p.add_argument("--old-rule", action="store_true", help="the rejoin rule before #30")
    p.add_argument("--quick", action="store_true", help="the short runs of make test")
    p.add_argument("--no-wipe-wait", dest="wipe_waits", action="store_false",
                   help="a node that lost its disk starts again while still in the ISR")
    p.add_argument("--broken", help="a rule of tests/sim/broken.py, by name")
    a = p.parse_args(argv)
    if a.seed is not None:
        try:
            faults = run_seed(a.seed, _config(a.old_rule, a.quick, a.wipe_waits, a.broken),
                              trace=a.trace)
        except SimFailure as exc:
            print(f"FAILED: {exc}")
            return 1
        print(f"seed {a.seed} passed; {dict(sorted(faults.items()))}")
        return 0
    began = time.monotonic()
    faults: Counter[str] = Counter()
    failures: list[str] = []
    step = 500
    starts = list(range(a.start, a.start + a.seeds, step))
    stops = [min(s + step, a.start + a.seeds) for s in starts]
    n = len(starts)
    with ProcessPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        results = pool.map(run_range, starts, stops, [a.old_rule] * n, [a.quick] * n,
                           [a.wipe_waits] * n, [a.broken] * n)
        for (f, fails), s, e in zip(results, starts, stops, strict=True):
            faults += f
            failures += fails
            print(f"seeds {s}..{e - 1}: {len(fails)} failed", file=sys.stderr, flush=True)
    took = time.monotonic() - began
    kind = ("quick" if a.quick else "full") + ("" if a.wipe_waits else ", wipe_waits=False")
    kind += f", broken rule {a.broken!r}" if a.broken else ""
    print(f"seeds run: {a.seeds} ({kind} runs, from {a.start}) in {took:.0f} s; "
          f"failed: {len(failures)}")
    print("faults injected by kind: " + ", ".join(
        f"{k} {v}" for k, v in sorted(faults.items()) if k in INJECTED))
    print("events: " + ", ".join(
        f"{k} {v}" for k, v in sorted(faults.items()) if k not in INJECTED))
    for line in failures[:20]:
        print(f"FAILED: {line}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
