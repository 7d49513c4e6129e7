"""A short soak in the default run: 200 connections against a broker process for 15 s with
mixed publish/consume/ack and connection churn (``fuzz/soak.py``; ``make soak`` runs the
5-minute, 1,000-connection version, which also judges memory flatness and p99 latency). Here
only what the test's name says is judged: the latency limit is set out of reach (a p99 of
1.36 s on a loaded 2-core machine failed it with nothing lost)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(150)
def test_short_soak_loses_nothing_and_gives_back_every_descriptor() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "fuzz" / "soak.py"), "--seconds", "15",
         "--connections", "200", "--rate", "500",
         "--p99-limit", "60"],  # no latency verdict here: a loaded machine is not a benchmark
        capture_output=True, text=True, timeout=140, cwd=ROOT, check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    summary = re.search(r"published (\d+), delivered (\d+) .*lost (\d+);.*fds baseline (\d+), "
                        r"after close (\d+)", out)
    assert summary is not None, out
    published, delivered, lost, fds_before, fds_after = map(int, summary.groups())
    assert published > 5_000 and delivered >= published and lost == 0
    assert fds_after <= fds_before + 2
    assert "[soak] PASS" in out
