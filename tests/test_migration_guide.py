"""docs/migrating-from-rabbitmq.md, run as written against the reference RabbitMQ 3.10.8
(``make reference-rabbitmq``; skipped when it is not reachable, or without ``curl``/``jq``),
once with its step 3a (shovels) and once with 3b (federated queues).

The guide's code blocks run in order under bash, as a reader would paste them: the first
block (Settings) is kept as written except for the values this test must change (amqpq's
ports: free ones; the vhost and application user: unique names, removed from RabbitMQ
afterwards), and each later block is run according to the HTML comment before it:
``<!-- test: run -->`` (must exit 0), ``background NAME until "TEXT"`` (started in its own
process group, waited for until it prints TEXT), ``stop NAME...`` (Ctrl-C: SIGINT to the
group; must exit 0), ``pause N`` (N seconds of traffic between two steps), ``skip``; a
marker with ``only=shovels`` or ``only=federation`` runs in that variant only. Every ``sh``
block of the guide must be claimed by one of them, so no command goes untested.

What the run must show: the practice application's check finds every confirmed message in
both consumers' logs (``missing 0``), and the consumers on amqpq received more than the
publisher sent to amqpq, i.e. messages published to RabbitMQ came through the shovels.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.broker_process import REPO_ROOT, free_port
from tests.support.http import http

pytestmark = pytest.mark.reference

GUIDE = REPO_ROOT / "docs" / "migrating-from-rabbitmq.md"
REFERENCE_HTTP = "http://127.0.0.1:15672"
STEP_TIMEOUT = 120.0  # s a run block or a background start may take
_MARK = re.compile(r"<!-- test: (.+?) -->")
_FENCE = re.compile(r"^```sh\n(.*?)^```", re.S | re.M)


@dataclass
class Step:
    """One marker and the code block it claims (None for stop/pause)."""

    command: str
    code: str | None = None


def parse(text: str) -> tuple[str, list[Step]]:
    """(the Settings block, the marked steps in order); asserts that every ``sh`` block is
    the Settings block or claimed by the marker right before it."""
    settings = None
    steps: list[Step] = []
    pos = 0
    events = sorted([(m.start(), "mark", m) for m in _MARK.finditer(text)]
                    + [(m.start(), "code", m) for m in _FENCE.finditer(text)],
                    key=lambda e: e[0])
    for start, kind, match in events:
        if kind == "mark":
            steps.append(Step(match.group(1).strip()))
            pos = match.end()
            continue
        code = match.group(1)
        claimed = (steps and steps[-1].code is None and text[pos:start].strip() == ""
                   and steps[-1].command.split()[0] in ("run", "background", "skip"))
        if claimed:
            steps[-1].code = code
        elif settings is None and "RABBIT_API=" in code:
            settings = code
        else:
            raise AssertionError(f"an sh block no test marker claims:\n{code}")
    assert settings is not None, "no Settings block"
    return settings, steps


def test_every_block_of_the_guide_is_claimed() -> None:
    """Cheap and reference-free (it runs whenever this module does): the guide parses."""
    settings, steps = parse(GUIDE.read_text())
    assert "AMQPQ_PORT=" in settings
    assert all(s.code for s in steps if s.command.split()[0] in ("run", "background", "skip"))
    variants = {w for s in steps for w in s.command.split() if w.startswith("only=")}
    assert variants == {"only=shovels", "only=federation"}


def _set(settings: str, **values: str) -> str:
    for name, value in values.items():
        settings, n = re.subn(rf"(^|\s){name}=\S+", rf"\g<1>{name}={value}", settings,
                              flags=re.M)
        assert n == 1, f"{name}= not once in the Settings block"
    return settings


@dataclass
class Background:
    name: str
    proc: subprocess.Popen[str]
    output: list[str] = field(default_factory=list)

    def text(self) -> str:
        return "".join(self.output)


@pytest.fixture
def reference() -> Iterator[None]:
    try:
        status, _ = http(REFERENCE_HTTP, "GET", "/api/overview")
    except OSError:
        status = 0
    if status != 200:
        pytest.skip(f"reference RabbitMQ not reachable at {REFERENCE_HTTP} "
                    "(make reference-rabbitmq)")
    missing = [tool for tool in ("curl", "jq") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"the guide needs {', '.join(missing)}")
    yield


@pytest.mark.timeout(300)  # about 55 s each on the loaded 2-core machine; 15 s is the drain
@pytest.mark.parametrize("variant", ["shovels", "federation"])
def test_guide_runs_as_written_without_losing_a_message(reference: None, tmp_path: Path,
                                                        variant: str) -> None:
    settings, steps = parse(GUIDE.read_text())
    tag = uuid.uuid4().hex[:8]
    vhost, user = f"migration-{tag}", f"migration-{tag}"
    settings = _set(settings, AMQPQ_PORT=str(free_port()), AMQPQ_HTTP_PORT=str(free_port()),
                    AMQPQ_METRICS_PORT=str(free_port()), VHOST=vhost, APP_USER=user)
    (tmp_path / "tools").symlink_to(REPO_ROOT / "tools")  # `python tools/migration_demo.py`
    env = dict(os.environ, PATH=f"{REPO_ROOT / '.venv' / 'bin'}:{os.environ['PATH']}")
    running: dict[str, Background] = {}
    outputs: dict[str, str] = {}

    def bash(code: str) -> list[str]:
        return ["bash", "-euo", "pipefail", "-c", settings + "\n" + code]

    def stop(name: str) -> None:
        bg = running.pop(name)
        os.killpg(bg.proc.pid, signal.SIGINT)
        rc = bg.proc.wait(timeout=STEP_TIMEOUT)
        outputs[name] = bg.text()
        assert rc == 0, f"{name} exited {rc}:\n{bg.text()}"

    try:
        for step in steps:
            words = step.command.split()
            only = [w.removeprefix("only=") for w in words if w.startswith("only=")]
            if only and only != [variant]:
                continue
            verb, *rest = [w for w in words if not w.startswith("only=")]
            arg = " ".join(rest)
            if verb == "run":
                assert step.code is not None
                done = subprocess.run(bash(step.code), cwd=tmp_path, env=env, text=True,
                                      capture_output=True, timeout=STEP_TIMEOUT)
                assert done.returncode == 0, (f"step failed ({done.returncode}):\n{step.code}\n"
                                              f"{done.stdout}\n{done.stderr}")
                outputs[f"run:{len(outputs)}"] = done.stdout
            elif verb == "background":
                assert step.code is not None
                name, until = re.fullmatch(r'(\S+) until "(.+)"', arg).groups()  # type: ignore[union-attr]
                proc = subprocess.Popen(bash(step.code), cwd=tmp_path, env=env, text=True,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        start_new_session=True)
                bg = running[name] = Background(name, proc)
                assert proc.stdout is not None
                threading.Thread(target=lambda b=bg, out=proc.stdout: b.output.extend(out),
                                 daemon=True).start()
                deadline = time.monotonic() + STEP_TIMEOUT
                while until not in bg.text():
                    assert proc.poll() is None, f"{name} exited {proc.returncode}:\n{bg.text()}"
                    assert time.monotonic() < deadline, f"{name}: no {until!r}:\n{bg.text()}"
                    time.sleep(0.1)
            elif verb == "stop":
                for name in arg.split():
                    stop(name)
            elif verb == "pause":
                time.sleep(float(arg))  # traffic between two steps, not a timing assertion
            else:
                assert verb == "skip", f"unknown marker {step.command!r}"
        assert not set(running) - {"amqpq"}, f"still running: {sorted(running)}"
    finally:
        for bg in running.values():
            os.killpg(bg.proc.pid, signal.SIGTERM)
            bg.proc.wait(timeout=30)
        http(REFERENCE_HTTP, "DELETE", f"/api/vhosts/{vhost}")
        http(REFERENCE_HTTP, "DELETE", f"/api/users/{user}")

    report = list(outputs.values())[-1]
    assert report.count("missing 0") == 2, report
    published_to_amqpq = _count(outputs["amqpq-publisher"], r"published (\d+)")
    assert _count(outputs["rabbit-publisher"], r"published (\d+)") > 0
    for queue in ("created", "audit"):
        # the consumers on amqpq got what was published to amqpq and, through the shovels,
        # what was published to RabbitMQ after the RabbitMQ consumers stopped
        assert _count(outputs[f"amqpq-{queue}"], r"consumed (\d+)") > published_to_amqpq


def _count(text: str, pattern: str) -> int:
    match = re.search(pattern, text)
    assert match, f"{pattern!r} not in {text!r}"
    return int(match.group(1))
