"""The brokers under test and /proc readings of their processes.

* :class:`Amqpq`: a fresh ``python -m amqp_server`` on a free port with a temporary data
  directory (started per run, so its VmHWM is the run's peak; see tests/support).
* :class:`RabbitMQ`: the reference RabbitMQ on 127.0.0.1:5672 (started with
  ``tools/reference-rabbitmq start``, i.e. ``make reference-rabbitmq``, when it is not up); its processes are the
  beam.smp running ``rabbit boot`` (not ``rabbitmqctl``'s short-lived beam.smp).

CPU seconds are utime+stime from ``/proc/<pid>/stat``; memory is VmRSS / VmHWM from
``/proc/<pid>/status``, summed over the broker's processes.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.support.broker_process import BrokerProcess, BrokerStartError

#: the repository's own starter of the reference RabbitMQ (make reference-rabbitmq)
RABBIT_TOOL = Path(__file__).resolve().parents[1] / "tools" / "reference-rabbitmq"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                rest = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(rest[11]) + int(rest[12])) / CLK_TCK
    return total


def status_kb(pids: list[int], key: str) -> int:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as fh:
                for line in fh:
                    if line.startswith(key + ":"):
                        total += int(line.split()[1])
                        break
        except OSError:
            continue
    return total


def mem_available_mb() -> float:
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    return 0.0


class RssSampler:
    """Samples the summed VmRSS of ``pids`` every ``interval`` s in a thread; ``peak_mb``."""

    def __init__(self, pids: list[int], interval: float = 0.05) -> None:
        self.pids, self.interval = pids, interval
        self.peak_kb = status_kb(pids, "VmRSS")
        self.last_kb = self.peak_kb
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            kb = status_kb(self.pids, "VmRSS")
            self.last_kb = kb
            self.peak_kb = max(self.peak_kb, kb)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join(2)
        self.peak_kb = max(self.peak_kb, status_kb(self.pids, "VmRSS"))
        return self.peak_kb / 1024

    @property
    def peak_mb(self) -> float:
        return self.peak_kb / 1024


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


class Amqpq:
    """A fresh amqpq broker process per run (:class:`tests.support.broker_process.BrokerProcess`
    with a temporary data dir, removed by :meth:`stop`)."""

    fresh_per_run = True

    def __init__(self, python: str = sys.executable, extra_args: tuple[str, ...] = (),
                 workers: int = 1) -> None:
        self.python, self.workers = python, workers
        self.extra_args = extra_args + (("--workers", str(workers)) if workers > 1 else ())
        self.name = "amqpq" if workers == 1 else f"amqpq-w{workers}"
        self.process: BrokerProcess | None = None
        self.port = 0
        self._pids: list[int] = []

    @property
    def pids(self) -> list[int]:
        """The broker's processes: with --workers N, the supervisor and its workers (read
        once the broker is up; a restarted worker is not followed)."""
        if self.process is None:
            return []
        if not self._pids:
            self._pids = [self.process.pid, *descendants(self.process.pid)]
        return self._pids

    @property
    def output(self) -> list[str]:
        """The last lines of the broker's stdout and stderr."""
        return self.process.log_text(4000).splitlines()[-50:] if self.process else []

    def start(self) -> None:
        self.process = BrokerProcess(python=self.python, args=self.extra_args, start_timeout=30)
        self._pids = []
        try:
            self.port = self.process.start().port
        except BrokerStartError as exc:
            self.stop()
            raise RuntimeError(f"amqpq did not start: {exc}") from None

    def alive(self) -> bool:
        return self.process is not None and self.process.alive()

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(timeout=15)
            self.process.close()
            self.process = None


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, their children...), from /proc."""
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            kids = [int(c) for c in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        except OSError:
            continue
        out.extend(kids)
        todo.extend(kids)
    return out


def rabbit_pids() -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if (d / "comm").read_text().strip() != "beam.smp":
                continue
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if b"rabbit boot" in cmd:
            pids.append(int(d.name))
    return pids


class RabbitMQ:
    """The reference RabbitMQ (long-running, shared: only our own queues are touched)."""

    name = "rabbitmq"
    fresh_per_run = False

    def __init__(self, port: int = 5672) -> None:
        self.port = port
        self._pids: list[int] = []

    @property
    def pids(self) -> list[int]:
        return self._pids

    def start(self) -> None:
        if not port_open(self.port) and RABBIT_TOOL.exists():
            print(f"rabbitmq: not reachable on 127.0.0.1:{self.port}, running {RABBIT_TOOL} start",
                  flush=True)
            subprocess.run([str(RABBIT_TOOL), "start"], check=False, timeout=300)
        if not port_open(self.port):
            raise RuntimeError(f"reference RabbitMQ not reachable on 127.0.0.1:{self.port}")
        self._pids = rabbit_pids()
        if not self._pids:
            raise RuntimeError("RabbitMQ is up but no beam.smp running 'rabbit boot' was found")

    def alive(self) -> bool:
        return all(Path(f"/proc/{p}").exists() for p in self._pids) and port_open(self.port)

    def socket_headroom(self) -> tuple[int, str]:
        """(sockets RabbitMQ can still accept, how it was found). Its socket limit is fixed
        at boot from the file-descriptor limit (1,024 fds: 832 sockets)."""
        try:
            out = subprocess.run(["rabbitmqctl", "-q", "status"], capture_output=True,
                                 text=True, timeout=60).stdout
            m = re.search(r"Sockets: (\d+), limit: (\d+)", re.sub(r"\x1b\[[0-9;]*m", "", out))
            if m:
                used, limit = int(m.group(1)), int(m.group(2))
                return limit - used, f"rabbitmqctl status: sockets {used} used, limit {limit}"
        except (OSError, subprocess.SubprocessError):
            pass
        soft = 0
        with contextlib.suppress(OSError, IndexError, ValueError):
            for line in Path(f"/proc/{self._pids[0]}/limits").read_text().splitlines():
                if line.startswith("Max open files"):
                    soft = int(line.split()[3])
        return int(soft * 0.8), f"/proc limits: {soft} open files"

    def stop(self) -> None:
        pass  # shared, long-running: never stopped by the benchmark


class PySpy:
    """``py-spy record -f raw`` on a pid until :meth:`stop` (SIGINT makes it write the file)."""

    def __init__(self, pid: int, out: Path, rate: int = 100) -> None:
        exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        self.out = out
        self.proc = subprocess.Popen(
            [exe, "record", "-p", str(pid), "-f", "raw", "-r", str(rate), "-o", str(out)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)  # attach before the load starts

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(2)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        with contextlib.suppress(Exception):
            err = self.proc.stderr.read() if self.proc.stderr else ""
            if not self.out.exists():
                print(f"py-spy wrote no profile: {err.strip()[-300:]}", flush=True)
