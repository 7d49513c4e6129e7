"""amqpq benchmark suite: every scenario against amqpq and the reference RabbitMQ, side by side.

Usage (on demand only, never part of the test run)::

    python -m benchmarks.run                 # full suite, 3 repetitions (~15-20 min)
    python -m benchmarks.run --quick         # smaller counts, 1 repetition: a smoke run (< 3 min)
    python -m benchmarks.run --only 1,3,7 --reps 5
    python -m benchmarks.run --no-rabbitmq   # amqpq only
    python -m benchmarks.run --only 2 --reps 1 --no-rabbitmq --profile /tmp/prof  # + py-spy
    python -m benchmarks.run --only 10 --reps 1  # on demand: 10 M persistent backlog
    python -m benchmarks.run --only 11 --reps 1  # on demand: 1,000 durable queues x 10,000

Scenarios (see ``benchmarks/scenarios.py`` for the exact choices):
 1 transient publish->consume, 1 queue, 200 B, auto-ack   6 topic exchange, 1,000 wildcard bindings
 2 publish with confirms (window 1,000)                   7 latency p50/p99 at 1,000 msg/s
 3 persistent + durable + confirms                        8 backlog of 1M: publish, drain, peak RSS
 4 consume, prefetch 100, manual ack of every message     9 1,000 idle connections: set-up, RSS
 5 fanout to 10 queues                                   10 deep persistent backlog, 10 M (on demand)
                                                         11 1,000 durable queues x 10,000 (on demand)

amqpq is a fresh ``python -m amqp_server`` subprocess on a free port for every run; RabbitMQ is
the one on 127.0.0.1:5672 (only the queues/exchanges a run declares are touched, and deleted
after it). Repetitions alternate between the brokers; scenarios run in the order
9, 7, 1-6, 8 (memory- and latency-sensitive ones first, the big backlog last). Prints min/median/max per metric, the
ratio of medians amqpq/RabbitMQ, the broker's CPU seconds and RSS, and writes
``benchmarks/results/latest.json`` and ``benchmarks/results/ratios.png``.

Before the scenarios it measures the load generator's own ceiling against a null server (a
subprocess that answers the handshake, then only discards / only streams deliveries), so a
scenario result far below it is the broker's, not the generator's. Everything is bounded in
message count and in time, and talks to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.brokers import Amqpq, RabbitMQ, mem_available_mb
from benchmarks.loadgen import raise_nofile
from benchmarks.scenarios import SCENARIOS, BenchError, Params, RunCtx, Scenario, mp_context
from tests.support import wire

RESULTS_DIR = Path(__file__).resolve().parent / "results"
BACKLOG_RABBIT_MEM_MB = 10_000  # full backlog on RabbitMQ only with this much memory free
BACKLOG_RABBIT_REDUCED = 250_000
# memory- and latency-sensitive scenarios first (RabbitMQ gives memory back slowly after a
# backlog, which would show as noise in the RSS of 9), the 1M backlog last
EXEC_ORDER = [9, 7, 1, 12, 2, 3, 4, 5, 6, 8, 10, 11]
# the 10 M persistent backlog and the 1,000 durable queues (tens of minutes): only with --only
ON_DEMAND = {10, 11}


# ----------------------------------------------------------------------------- machine
def _proc_ticks() -> dict[int, tuple[int, str]]:
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                raw = fh.read()
        except OSError:
            continue
        comm = raw[raw.find("(") + 1:raw.rfind(")")]
        rest = raw.rsplit(")", 1)[1].split()
        out[int(d)] = (int(rest[11]) + int(rest[12]), comm)
    return out


def other_load(seconds: float = 1.0) -> list[dict[str, Any]]:
    """Processes that used > 5% of a core over ``seconds`` (other work on the machine)."""
    a = _proc_ticks()
    time.sleep(seconds)
    b = _proc_ticks()
    tck = os.sysconf("SC_CLK_TCK")
    busy = []
    for pid, (ticks, comm) in b.items():
        if pid == os.getpid() or pid not in a:
            continue
        pct = 100 * (ticks - a[pid][0]) / tck / seconds
        if pct > 5:
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                cmd = comm
            busy.append({"pid": pid, "cpu_pct": round(pct), "cmd": cmd.strip()[:90] or comm})
    return sorted(busy, key=lambda r: -r["cpu_pct"])


def loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


# ------------------------------------------------------------------------------ ceiling
class _NullServer:
    name = "nullsink"
    fresh_per_run = False

    def __init__(self, deliver: int) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "benchmarks.nullsink", "--deliver",
                                      str(deliver)], stdout=subprocess.PIPE, text=True,
                                     cwd=Path(__file__).resolve().parent.parent)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        self.port = int(line.rsplit(" ", 1)[1])

    @property
    def pids(self) -> list[int]:
        return [self.proc.pid]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def measure_ceilings(mp: Any, quick: bool) -> dict[str, Any]:
    """The load generator against a null server: what one process of each kind can do."""
    n_pub = 300_000 if quick else 1_000_000
    n_con = 300_000 if quick else 1_000_000
    out: dict[str, Any] = {}
    # parse only, no socket: the consumer's counting on a buffer of deliveries
    stream = wire.deliver_bytes("bench-q", 123456, "bench-q", b"x" * 200) * 4000
    counter = wire.PatternCounter(wire.body_frame_pattern(200))
    buf = bytearray(stream)
    t = time.perf_counter()
    for _ in range(250):
        counter.feed(buf, len(buf))
    out["consumer_parse_only"] = counter.count / (time.perf_counter() - t)
    sink = _NullServer(n_con)
    params = Params(time_limit=60)
    try:
        runs = {
            "publisher": ("publisher", {"exchange": "", "routing_keys": ["q"], "count": n_pub,
                                        "body_size": 200, "batch": 1000}),
            "publisher_confirm_1000": ("publisher", {"exchange": "", "routing_keys": ["q"],
                                                     "count": n_pub, "body_size": 200,
                                                     "batch": 100, "confirm": 1000}),
            "consumer_auto_ack": ("consumer", {"queues": ["q"], "expected": n_con,
                                               "body_size": 200, "no_ack": True}),
            "consumer_ack_each": ("consumer", {"queues": ["q"], "expected": n_con,
                                               "body_size": 200, "no_ack": False,
                                               "prefetch": 100}),
        }
        for key, spec in runs.items():
            ctx = RunCtx(sink, params, 0, 0, mp)
            try:
                t_go, (r,) = ctx.run_workers([spec], 60)
            except BenchError as exc:
                out[key] = None
                out[key + "_error"] = str(exc)
                continue
            n = r.get("received") or r.get("confirmed") or r.get("sent") or 0
            end = r.get("t_last") or r.get("t_sent")
            out[key] = n / (end - t_go) if end and end > t_go else None
            out[key + "_gen_cpu_pct"] = round(100 * ctx.gen_busy)
            if r.get("error"):
                out[key + "_error"] = r["error"]
    finally:
        sink.stop()
    return out


# ------------------------------------------------------------------------------- report
def _stats(vals: list[float]) -> dict[str, float] | None:
    if not vals:
        return None
    return {"min": min(vals), "median": statistics.median(vals), "max": max(vals), "n": len(vals)}


def _fmt(v: float | None, fmt: str) -> str:
    return "-" if v is None else fmt.format(v)


def _check(target: str | None, a: float | None, r: float | None) -> tuple[str, float | None]:
    """('yes'|'NO'|'n/a'|'', ratio) for a target like 'ratio>=1.5' or 'amqpq<=512'."""
    ratio = a / r if a is not None and r is not None and a > 0 and r > 0 else None
    if not target:
        return "", ratio
    op = ">=" if ">=" in target else "<="
    lhs, num_s = target.split(op)
    num = float(num_s)
    val = ratio if lhs == "ratio" else a
    if val is None:
        return "n/a", ratio
    ok = val >= num if op == ">=" else val <= num
    return ("yes" if ok else "NO"), ratio


def summarise(scenarios: list[Scenario], runs: dict[int, dict[str, list[dict[str, Any]]]],
              brokers: list[str]) -> dict[int, Any]:
    summary: dict[int, Any] = {}
    for sc in scenarios:
        per = runs.get(sc.sid, {})
        entry: dict[str, Any] = {"metrics": {}, "resources": {}}
        for m in sc.metrics + _resource_metrics():
            row: dict[str, Any] = {}
            for b in brokers:
                ok = [r for r in per.get(b, []) if not r.get("error")]
                row[b] = _stats([r[m.key] for r in ok if r.get(m.key) is not None])
            a = row.get("amqpq")
            r = row.get("rabbitmq")
            met, ratio = _check(m.target, a["median"] if a else None, r["median"] if r else None)
            row.update(ratio=ratio, target=m.target, met=met)
            for b in brokers:  # --workers N columns: their own ratio and target check
                if b.startswith("amqpq-w") and row.get(b):
                    bmet, bratio = _check(m.target, row[b]["median"],
                                          r["median"] if r else None)
                    row[f"ratio_{b}"], row[f"met_{b}"] = bratio, bmet
                    if a and a["median"]:
                        row[f"vs_amqpq_{b}"] = row[b]["median"] / a["median"]
            (entry["metrics"] if m in sc.metrics else entry["resources"])[m.key] = row
        for b in brokers:
            ok = [r for r in per.get(b, []) if not r.get("error")]
            cpu_per = [r["cpu_s"] / r[sc.work_key] * 1e6 for r in ok
                       if r.get(sc.work_key) and r.get("cpu_s") is not None]
            entry["resources"].setdefault("cpu_us_per_unit", {})[b] = _stats(cpu_per)
            entry.setdefault("failed_runs", {})[b] = [r["error"] for r in per.get(b, [])
                                                      if r.get("error")]
        summary[sc.sid] = entry
    return summary


def _resource_metrics() -> list[Any]:
    from benchmarks.scenarios import Metric
    return [Metric("cpu_s", "broker CPU", "s", False, fmt="{:.1f}"),
            Metric("peak_rss_mb", "broker peak RSS", "MB", False, fmt="{:,.0f}"),
            Metric("gen_busy_pct", "busiest generator process", "% CPU", False, fmt="{:.0f}")]


def print_table(scenarios: list[Scenario], summary: dict[int, Any], brokers: list[str],
                reps: int) -> list[dict[str, Any]]:
    has_r = "rabbitmq" in brokers
    print()
    print(f"== results: min / median / max over {reps} repetition(s); ratio = median amqpq / "
          "median RabbitMQ ==")
    hdr = (f"{'scenario':<34} {'metric':<16} {'amqpq min/med/max':>30}  "
           + (f"{'RabbitMQ min/med/max':>30}  {'ratio':>6}  " if has_r else "")
           + f"{'target':<11} met")
    print(hdr)
    print("-" * len(hdr))
    targets = []

    def mmm(st: dict[str, float] | None, fmt: str) -> str:
        if not st:
            return "-"
        return " / ".join(_fmt(st[k], fmt) for k in ("min", "median", "max"))

    for sc in scenarios:
        e = summary[sc.sid]
        first = True
        for m in sc.metrics:
            row = e["metrics"][m.key]
            name = f"{sc.sid} {sc.name}" if first else ""
            first = False
            label = f"{m.label} {m.unit}"
            line = f"{name:<34} {label:<16} {mmm(row.get('amqpq'), m.fmt):>30}  "
            if has_r:
                ratio = "-" if row["ratio"] is None else f"{row['ratio']:.2f}"
                line += f"{mmm(row.get('rabbitmq'), m.fmt):>30}  {ratio:>6}  "
            tgt = (m.target or "").replace("ratio", "x").replace("amqpq", "")
            line += f"{tgt:<11} {row['met']}"
            print(line)
            for b in brokers:
                if not b.startswith("amqpq-w"):
                    continue
                r_b = row.get(f"ratio_{b}")
                vs = row.get(f"vs_amqpq_{b}")
                print(f"{'':<34} {'  ' + b:<16} {mmm(row.get(b), m.fmt):>30}  "
                      + (f"{'':>30}  {'-' if r_b is None else format(r_b, '.2f'):>6}  "
                         if has_r else "")
                      + f"{tgt:<11} {row.get(f'met_{b}', '')}"
                      + ("" if vs is None else f"  ({vs:.2f}x amqpq)"))
            if m.target:
                targets.append({"scenario": sc.sid, "name": sc.name, "metric": m.key,
                                "label": m.label, "target": m.target, "met": row["met"],
                                "ratio": row["ratio"],
                                "amqpq": (row.get("amqpq") or {}).get("median"),
                                "rabbitmq": (row.get("rabbitmq") or {}).get("median"),
                                "higher_better": m.higher_better})
        for b in brokers:
            if e["failed_runs"].get(b):
                print(f"{'':<34} !! {b}: {len(e['failed_runs'][b])} failed run(s): "
                      f"{e['failed_runs'][b][0][:150]}")
    print()
    print("== broker resources (medians): CPU seconds of the broker over the run, CPU per message "
          "(or per connection), peak RSS; busiest load-generator process (% of one core) ==")
    hdr2 = f"{'scenario':<34} " + "  ".join(
        f"{b + ' cpu s':>14} {'µs/unit':>8} {'peak MB':>8} {'gen %':>6}" for b in brokers)
    print(hdr2)
    print("-" * len(hdr2))
    for sc in scenarios:
        e = summary[sc.sid]["resources"]
        cells = []
        for b in brokers:
            def med(key: str, b: str = b, e: dict[str, Any] = e) -> float | None:
                st = e.get(key, {}).get(b)
                return st["median"] if st else None
            cells.append(f"{_fmt(med('cpu_s'), '{:.1f}'):>14} "
                         f"{_fmt(med('cpu_us_per_unit'), '{:.1f}'):>8} "
                         f"{_fmt(med('peak_rss_mb'), '{:,.0f}'):>8} "
                         f"{_fmt(med('gen_busy_pct'), '{:.0f}'):>6}")
        print(f"{str(sc.sid) + ' ' + sc.name:<34} " + "  ".join(cells))
    return targets


def plot(targets: list[dict[str, Any]], summary: dict[int, Any], path: Path, title: str) -> str:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib not installed (pip install -e '.[bench]'): no chart"
    rows = [t for t in targets if t["ratio"] is not None]
    if not rows:
        return "no ratios to chart (RabbitMQ not run?)"
    labels = [f"{t['scenario']} {t['name']}: {t['label']} "
              + ("(higher is better" if t["higher_better"] else "(lower is better")
              + f"; target {t['target'].replace('ratio', 'x').replace('amqpq<=512', '<=512 MB')})"
              for t in rows]
    vals = [t["ratio"] for t in rows]
    colors = ["#2e9d4f" if t["met"] == "yes" else "#d0433a" if t["met"] == "NO" else "#888888"
              for t in rows]
    fig, ax = plt.subplots(figsize=(10, 0.5 * len(rows) + 1.8))
    y = list(range(len(rows)))[::-1]
    ax.barh(y, vals, color=colors)
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", linewidth=1)
    for yi, t in zip(y, rows, strict=True):
        tgt = t["target"]
        if tgt.startswith("ratio"):
            goal = float(tgt[7:])
            ax.plot([goal, goal], [yi - 0.4, yi + 0.4], color="#333333", linestyle="--")
        ax.text(t["ratio"], yi, f" {t['ratio']:.2f}x", va="center", fontsize=9)
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=9)
    ax.set_xlabel("amqpq / RabbitMQ, medians, log scale\ndashed: target; green: met; red: missed")
    ax.set_title(title, fontsize=10)
    lo, hi = min(vals + [0.5]), max(vals + [2.0])
    ax.set_xlim(lo / 1.5, hi * 2)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"chart: {path}"


# --------------------------------------------------------------------------------- main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.run",
                                description="amqpq vs RabbitMQ benchmark suite",
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("Scenarios", 1)[1].split("\n\n")[0])
    p.add_argument("--reps", type=int, default=None,
                   help="repetitions per scenario and broker (default 3; 1 with --quick)")
    p.add_argument("--only", default="", help="comma-separated scenario numbers, e.g. 1,3,7")
    p.add_argument("--quick", action="store_true", help="smaller counts (smoke run, < 3 min)")
    p.add_argument("--no-rabbitmq", action="store_true", help="amqpq only")
    p.add_argument("--no-amqpq", action="store_true", help="RabbitMQ only (debugging)")
    p.add_argument("--rabbit-port", type=int, default=5672)
    p.add_argument("--workers", default="1", metavar="N[,M...]",
                   help="amqpq --workers settings to run, each a column of its own beside "
                        "RabbitMQ (e.g. 1,2; default 1)")
    p.add_argument("--no-ceiling", action="store_true",
                   help="skip measuring the load generator's ceiling")
    p.add_argument("--backlog", type=int, default=None,
                   help="scenario 8 message count (default 1,000,000; 100,000 with --quick)")
    p.add_argument("--rabbit-backlog", type=int, default=None,
                   help="scenario 8 count on RabbitMQ (default: as --backlog when "
                   f"{BACKLOG_RABBIT_MEM_MB // 1000} GB are available, else "
                   f"{BACKLOG_RABBIT_REDUCED:,})")
    p.add_argument("--connections", type=int, default=None, help="scenario 9 connections")
    p.add_argument("--json", type=Path, default=RESULTS_DIR / "latest.json")
    p.add_argument("--png", type=Path, default=RESULTS_DIR / "ratios.png")
    p.add_argument("--profile", type=Path, default=None, metavar="DIR",
                   help="py-spy record (raw) amqpq during each of its runs into DIR "
                   "(summarise with python -m benchmarks.profile_summary FILE)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    raise_nofile()
    params = Params.quick() if args.quick else Params()
    reps = args.reps if args.reps is not None else (1 if args.quick else 3)
    if args.backlog is not None:
        params.s8 = params.s8_rabbit = args.backlog
    if args.connections is not None:
        params.s9 = args.connections
    only = {int(x) for x in args.only.split(",") if x.strip()} if args.only else None
    scenarios = [s for s in SCENARIOS
                 if s.sid in only] if only else [s for s in SCENARIOS if s.sid not in ON_DEMAND]
    if not scenarios:
        print("no scenario selected", file=sys.stderr)
        return 2
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    mp = mp_context()
    t_start = time.time()
    notes: list[str] = []

    print(f"amqpq benchmark suite — {time.strftime('%Y-%m-%d %H:%M:%S')}, "
          f"{os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{'quick' if args.quick else 'full'} counts, {reps} rep(s)")
    la0 = loadavg()
    busy = other_load()
    print(f"load average {la0}; other processes using CPU now: "
          + (", ".join(f"{b['cpu_pct']}% {b['cmd'][:60]}" for b in busy[:6]) or "none"))
    if busy:
        notes.append("other work was running on the machine at the start (see other_load): "
                      "results, CPU and RabbitMQ RSS are affected")

    ceilings: dict[str, Any] = {}
    if not args.no_ceiling:
        ceilings = measure_ceilings(mp, args.quick)
        print("load generator ceiling (1 process each, vs a null server subprocess): "
              + ", ".join(f"{k.replace('_', ' ')} {v:,.0f} msg/s" for k, v in ceilings.items()
                          if isinstance(v, float)))
        for k, v in ceilings.items():
            if k.endswith("_error"):
                print(f"  ceiling {k[:-6]}: {v}")

    worker_counts = [int(w) for w in args.workers.split(",") if w.strip()]
    brokers: list[Any] = [] if args.no_amqpq else [Amqpq(workers=w) for w in worker_counts]
    if not args.no_rabbitmq:
        rabbit = RabbitMQ(args.rabbit_port)
        try:
            rabbit.start()
            brokers.append(rabbit)
        except Exception as exc:  # noqa: BLE001
            print(f"RabbitMQ unavailable, running amqpq only: {exc}")
            notes.append(f"RabbitMQ unavailable: {exc}")
    names = [b.name for b in brokers]
    if "rabbitmq" in names and any(s.sid == 8 for s in scenarios):
        avail = mem_available_mb()
        if args.rabbit_backlog is not None:
            params.s8_rabbit = args.rabbit_backlog
        elif avail < BACKLOG_RABBIT_MEM_MB:
            params.s8_rabbit = min(params.s8, BACKLOG_RABBIT_REDUCED)
        if params.s8_rabbit != params.s8:
            msg = (f"scenario 8 on RabbitMQ uses {params.s8_rabbit:,} messages, not "
                   f"{params.s8:,} ({avail:,.0f} MB available; RabbitMQ needs several GB for "
                   "1M): its rates compare, its peak RSS does not")
            print("NOTE: " + msg)
            notes.append(msg)

    if "rabbitmq" in names and any(s.sid == 9 for s in scenarios):
        headroom, how = brokers[names.index("rabbitmq")].socket_headroom()
        if headroom - 32 < params.s9:
            params.s9_rabbit = max(10, headroom - 32)
            msg = (f"scenario 9 on RabbitMQ opens {params.s9_rabbit:,} connections, not "
                   f"{params.s9:,}: it cannot accept more sockets ({how}; its limit is fixed "
                   "when it starts: restart it with a higher `ulimit -n` for the full count); "
                   "compare 'added/1k conn'")
            print("NOTE: " + msg)
            notes.append(msg)

    runs: dict[int, dict[str, list[dict[str, Any]]]] = {}
    order = sorted(scenarios, key=lambda s: EXEC_ORDER.index(s.sid))
    for sc in order:
        for rep in range(reps):
            for broker in brokers:
                res = run_one(sc, broker, rep, params, mp, args.profile)
                runs.setdefault(sc.sid, {}).setdefault(broker.name, []).append(res)
                print(f"  [{sc.sid}] rep {rep + 1} {broker.name:<8} " + _one_line(sc, res),
                      flush=True)
    la1 = loadavg()

    summary = summarise(scenarios, runs, names)
    targets = print_table(scenarios, summary, names, reps)
    print()
    print("== targets (medians) ==")
    for t in targets:
        print(f"  {t['met'] or '-':<4} {t['scenario']} {t['name']}: {t['label']} "
              f"{t['target']} (ratio {'-' if t['ratio'] is None else format(t['ratio'], '.2f')}"
              f", amqpq {_fmt(t['amqpq'], '{:,.2f}')}, RabbitMQ {_fmt(t['rabbitmq'], '{:,.2f}')})")
    if args.quick:
        notes.append("quick counts: targets are defined for the full counts, indicative only")
    notes.append(f"load average at start {la0}, at end {la1}")
    for n in notes:
        print("note: " + n)

    doc = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t_start)),
        "duration_s": round(time.time() - t_start, 1),
        "argv": sys.argv[1:] if argv is None else argv,
        "machine": {"cores": os.cpu_count(), "python": platform.python_version(),
                    "mem_available_mb_at_start": round(mem_available_mb())},
        "other_load_at_start": busy, "loadavg_start": la0, "loadavg_end": la1,
        "params": vars(params), "reps": reps, "brokers": names, "notes": notes,
        "load_generator_ceiling_msgs_per_s": ceilings,
        "scenarios": {str(sc.sid): {"name": sc.name, "runs": runs.get(sc.sid, {}),
                                    "summary": summary[sc.sid]} for sc in scenarios},
        "targets": targets,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    print(f"results: {args.json}")
    print(plot(targets, summary, args.png,
               f"amqpq / RabbitMQ 3.10 — {doc['started']}, {reps} rep(s), "
               f"{'quick' if args.quick else 'full'} counts"))
    print(f"total {time.time() - t_start:.0f} s")
    return 0


def _one_line(sc: Scenario, res: dict[str, Any]) -> str:
    parts = []
    for m in sc.metrics:
        v = res.get(m.key)
        if v is not None:
            parts.append(f"{m.label} {_fmt(v, m.fmt)} {m.unit}")
    parts.append(f"cpu {_fmt(res.get('cpu_s'), '{:.1f}')} s")
    parts.append(f"peak RSS {_fmt(res.get('peak_rss_mb'), '{:,.0f}')} MB")
    parts.append(f"gen {_fmt(res.get('gen_busy_pct'), '{:.0f}')}%")
    line = ", ".join(parts)
    if res.get("warning"):
        line += f"  (warning: {res['warning']})"
    if res.get("error"):
        line += f"  !! {res['error'][:200]}"
    return line


def run_one(sc: Scenario, broker: Any, rep: int, params: Params, mp: Any,
            profile_dir: Path | None) -> dict[str, Any]:
    prof = None
    if profile_dir is not None and broker.name == "amqpq":
        prof = profile_dir / f"s{sc.sid}-rep{rep + 1}.txt"
    res: dict[str, Any]
    try:
        if broker.fresh_per_run:
            broker.start()
        ctx = RunCtx(broker, params, sc.sid, rep, mp, prof)
        try:
            res = sc.fn(ctx)
        except Exception as exc:  # noqa: BLE001 - a failed run is reported, the suite goes on
            res = {"error": f"{type(exc).__name__}: {exc}"}
        res.update(ctx.finish())
        if not broker.alive():
            tail = " | ".join(list(getattr(broker, "output", []))[-5:])
            res["error"] = (res.get("error") or "") + f" broker died {tail}"
        try:
            ctx.cleanup()
        except Exception as exc:  # noqa: BLE001
            res["cleanup_error"] = f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # noqa: BLE001
        res = {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        if broker.fresh_per_run:
            broker.stop()
    if not res.get("error"):
        res.pop("error", None)
    if prof is not None:
        res["profile"] = str(prof)
    return res


if __name__ == "__main__":
    sys.exit(main())
