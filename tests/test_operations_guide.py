"""docs/operations.md, run as written: its ``sh`` blocks, in order, pasted into one ``bash``
at the top of this checkout, as a reader would paste them into one terminal (``make
runbook``; ``-m slow``: a few minutes of an etcd and four broker processes starting,
draining, restarting, dying and coming back). Skipped without etcd (``make etcd-deps``) or
curl.

The guide's Settings take the ports and the directory from environment variables, with the
guide's defaults; this test sets them to free ports and a temporary directory, so the run
does not clash with a broker (or a reference RabbitMQ) on the default ports; ``WORKERS``
(``make runbook WORKERS=2``) passes through to the guide's ``--workers $WORKERS``. Each block is
claimed by the HTML comment right before it: ``<!-- test: run -->`` (the shell runs it
under ``set -e``: a command that fails ends the session and the test), with optional
``expect="TEXT"`` (or ``'TEXT'``) words that the block's output must contain and ``absent="TEXT"`` words it
must not (``\\t`` is a tab, ``\\n`` a line break), or
``<!-- test: skip ... -->`` (``make runbook`` depends on ``make install`` and ``make
etcd-deps``, the guide's one skipped block). Every ``sh`` block must be claimed, so no
command goes untested.

Printed with ``-s``: each block's output and how long it took (the guide's ``time`` of
``await_startup`` is how long a joining node took to be ready).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.broker_process import REPO_ROOT, free_port
from tests.support.etcd import ETCD

GUIDE = REPO_ROOT / "docs" / "operations.md"
STEP_TIMEOUT = 300.0  # s one block may take (await_* wait 300 s at most themselves)
_MARK = re.compile(r"<!-- test: (.+?) -->")
_FENCE = re.compile(r"^```sh\n(.*?)^```", re.S | re.M)
_CHECK = re.compile(r"""(expect|absent)=(?:"([^"]*)"|'([^']*)')""")
DONE = "@@runbook-block-done"


@dataclass
class Block:
    """One marker and the ``sh`` block it claims."""

    verb: str  # run or skip
    code: str
    expect: list[str] = field(default_factory=list)
    absent: list[str] = field(default_factory=list)
    line: int = 0  # of the block in the guide


def parse(text: str) -> list[Block]:
    """The guide's blocks in order; asserts that a ``run`` or ``skip`` marker comes right
    before every ``sh`` block (only blank space between) and that no marker is left without
    one."""
    events = sorted([(m.start(), "mark", m) for m in _MARK.finditer(text)]
                    + [(m.start(), "code", m) for m in _FENCE.finditer(text)],
                    key=lambda e: e[0])
    blocks: list[Block] = []
    pending: tuple[int, re.Match[str]] | None = None
    for start, kind, match in events:
        if kind == "mark":
            assert pending is None, f"marker without a block: {pending[1].group(0)}"
            pending = (match.end(), match)
            continue
        code = match.group(1)
        line = text.count("\n", 0, start) + 1
        assert pending is not None and text[pending[0]:start].strip() == "", \
            f"an sh block (line {line}) no test marker claims:\n{code}"
        words = pending[1].group(1)
        verb = words.split()[0]
        assert verb in ("run", "skip"), f"unknown marker {pending[1].group(0)}"
        checks = [(kind, (dq or sq).replace("\\t", "\t").replace("\\n", "\n"))
                  for kind, dq, sq in _CHECK.findall(words)]
        blocks.append(Block(verb, code, [t for k, t in checks if k == "expect"],
                            [t for k, t in checks if k == "absent"], line))
        pending = None
    assert pending is None, f"marker without a block: {pending[1].group(0)}"
    return blocks


def test_every_block_of_the_runbook_is_claimed() -> None:
    """Cheap (no process): the guide parses, and what it skips is only the installation."""
    blocks = parse(GUIDE.read_text())
    assert [b.verb for b in blocks].count("run") >= 10
    skipped = [b.code for b in blocks if b.verb == "skip"]
    assert all(line.split("#")[0].strip() in ("", "make install", "make etcd-deps")
               for code in skipped for line in code.splitlines()), skipped


def settings(tmp_path: Path) -> dict[str, str]:
    """The guide's Settings variables: free ports, directories under ``tmp_path``."""
    ports: set[int] = set()
    while len(ports) < 18:
        ports.add(free_port())
    it = iter(sorted(ports))
    env = {"ETCD": f"http://127.0.0.1:{next(it)}", "ETCD_PEER": f"http://127.0.0.1:{next(it)}",
           "VAR": str(tmp_path / "var")}
    for n in range(1, 5):
        for kind in ("AMQP", "HTTP", "PROM", "LINK"):
            env[f"{kind}{n}"] = str(next(it))
    return env


class Session:
    """One ``bash`` reading the blocks from its stdin, in its own process group (every
    process the guide starts in the background is in it too), output collected."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc"], cwd=REPO_ROOT, env=env, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True)
        self.lines: list[str] = []
        self._cond = threading.Condition()
        threading.Thread(target=self._pump, daemon=True).start()
        self.send("set -eo pipefail")

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()
        with self._cond:
            self.lines.append("")  # EOF
            self._cond.notify_all()

    def send(self, code: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(code.rstrip("\n") + "\n")
        self.proc.stdin.flush()

    def run(self, code: str, timeout: float) -> str:
        """Run ``code``; its output once the shell is past it. Fails with the output so far
        when the shell exits (a command failed) or ``timeout`` s pass."""
        start = len(self.lines)
        self.send(f"{code}\necho {DONE}")
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                out = "".join(self.lines[start:])
                if f"{DONE}\n" in out:
                    return out.split(f"{DONE}\n")[0]
                if self.lines[start:] and self.lines[-1] == "":
                    self.proc.wait(10)
                    raise AssertionError(f"the shell exited {self.proc.returncode} in:\n{code}"
                                         f"\n--- output:\n{out}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"not done within {timeout} s:\n{code}\n"
                                         f"--- output so far:\n{out}")
                self._cond.wait(min(left, 1.0))

    def close(self) -> None:
        """End of input (the shell exits), then SIGTERM to what is left of the group (what
        the guide left running), SIGKILL after 30 s."""
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                try:
                    os.killpg(self.proc.pid, 0)
                except ProcessLookupError:
                    return
                time.sleep(0.2)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(1)  # reaped: a zombie shell still counts in its group


@pytest.fixture
def session(tmp_path: Path) -> Iterator[tuple[Session, dict[str, str]]]:
    if ETCD is None:
        pytest.skip("etcd not installed (make etcd-deps)")
    if shutil.which("curl") is None:
        pytest.skip("the runbook needs curl")
    pytest.importorskip("aetcd")
    values = settings(tmp_path)
    s = Session({**os.environ, **values})
    try:
        yield s, values
    finally:
        s.close()
        var = Path(values["VAR"])
        for log in sorted(var.glob("*.log")) if var.exists() else []:
            print(f"--- {log.name} (tail)\n" + "".join(log.read_text().splitlines(True)[-15:]))


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_runbook_runs_as_written(session: tuple[Session, dict[str, str]]) -> None:
    shell, values = session
    print("settings: " + " ".join(f"{k}={v}" for k, v in values.items()))
    began = time.monotonic()
    for block in parse(GUIDE.read_text()):
        if block.verb == "skip":
            continue
        t0 = time.monotonic()
        out = shell.run(block.code, STEP_TIMEOUT)
        took = time.monotonic() - t0
        print(f"\n=== docs/operations.md line {block.line} ({took:.1f} s)\n{block.code}"
              f"--- output\n{out}", flush=True)
        for text in block.expect:
            assert text in out, f"{text!r} not in the output of:\n{block.code}\n{out}"
        for text in block.absent:
            assert text not in out, f"{text!r} in the output of:\n{block.code}\n{out}"
    print(f"\nthe whole runbook: {time.monotonic() - began:.1f} s")
