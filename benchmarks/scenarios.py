"""The benchmark scenarios, each one bounded in message count and in time.

Every scenario is a function of a :class:`RunCtx` (one broker, one repetition) returning its
metrics; the context starts the load-generator processes, measures the broker's CPU seconds
(utime+stime delta from the first ``go`` to the last result) and its RSS (sampled every 50 ms;
VmHWM too for amqpq, which is a fresh process per run), and deletes the queues and exchanges it
declared afterwards, so that the shared RabbitMQ keeps no backlog.

Choices (documented here and printed with ``--describe``):

* bodies are 200 bytes, transient unless said otherwise; one publisher process writes
  pre-encoded batches (1,000 messages per write, 100 under a confirm window of 1,000);
* throughput is messages delivered (or confirmed) per second of wall time from ``go`` to the
  last delivery (or confirm); publishers and consumers run at the same time;
* (4) acks every message individually (``multiple=False``), like a client acking in its
  message callback; the acks for the deliveries of one socket read go out in one write;
* (5) and (6) have 10 queues consumed by 2 consumer processes (5 connections each) with
  auto-ack; (6) binds 1,000 wildcard keys (half ``s<i>.*.x``, half ``s<i>.#``, 100 per queue)
  and publishes over 10,000 distinct routing keys (each matching exactly one binding); so many
  keys that a per-key route cache (amqpq keeps 4,096) does not turn routing into a lookup;
* (7) 1,000 msg/s paced on an absolute schedule, send time (monotonic ns) in the first 8 body
  bytes, auto-ack consumer; the first 0.5 s is warm-up and not counted;
* (8) publishes the backlog without confirms (done when a passive declare counts every
  message), then drains it with one auto-ack consumer; peak RSS covers both phases;
* (10) publishes a deep persistent backlog (persistent 200-byte messages, confirm window
  1,000) to one durable queue, then drains it with one consumer acking every message
  (prefetch 1,000); peak RSS covers both phases. RabbitMQ gets fewer messages by default
  (``s10_rabbit``: it needs several GB per million), so its rates compare, its RSS does not
  scale; the time limit is 3x the backlog one;
* (9) opens connections 100 handshakes at a time, each with one channel and the heartbeat the
  broker proposes; RSS is sampled for 1 s after a 1 s settle while all are open; the delta is
  against the broker's settled RSS just before, and is also given per 1,000 connections (the
  reference RabbitMQ may accept fewer sockets than asked: its limit is fixed at boot from its
  file-descriptor limit, 832 sockets for 1,024 fds; the suite then opens what it can take).
"""

from __future__ import annotations

import multiprocessing
import os
import queue as queue_mod
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.brokers import PySpy, RssSampler, cpu_seconds, status_kb
from benchmarks.loadgen import worker_main
from tests.support.wire import Client

BODY = 200


class BenchError(Exception):
    pass


@dataclass
class Params:
    s1: int = 300_000
    s2: int = 200_000
    s3: int = 100_000
    s4: int = 200_000
    s5: int = 50_000
    s6: int = 200_000
    s7_rate: int = 1_000
    s7_duration: float = 10.0
    s8: int = 1_000_000
    s8_rabbit: int = 1_000_000
    s9: int = 1_000
    s9_rabbit: int = 1_000
    s10: int = 10_000_000
    s10_rabbit: int = 2_000_000  # RabbitMQ 3.10.8 needs about 2.5 GB per million here
    s11: int = 10_000  # messages per queue
    s11_rabbit: int = 1_000  # per queue on RabbitMQ (1 M in all: ~2.5 GB)
    s11_queues: int = 1_000
    s12: int = 150_000  # messages per pair (4 pairs)
    time_limit: float = 120.0
    backlog_time_limit: float = 600.0

    @classmethod
    def quick(cls) -> Params:
        return cls(s1=30_000, s2=20_000, s3=10_000, s4=20_000, s5=5_000, s6=20_000,
                   s7_duration=3.0, s8=100_000, s8_rabbit=100_000, s9=200, s9_rabbit=200, s10=100_000, s10_rabbit=100_000,
                   s11=100, s11_rabbit=100, s11_queues=100, s12=15_000, time_limit=30.0,
                   backlog_time_limit=60.0)


class RunCtx:
    """One scenario run against one broker."""

    def __init__(self, broker: Any, params: Params, sid: int, rep: int,
                 mp: Any, profile: Path | None = None) -> None:
        self.broker, self.port, self.p, self.mp = broker, broker.port, params, mp
        self.prefix = f"bench-{os.getpid()}-s{sid}-r{rep}"
        self.queues: list[str] = []
        self.exchanges: list[str] = []
        self._admin: Client | None = None
        self.cpu0: float | None = None
        self.cpu_s = 0.0
        self.sampler: RssSampler | None = None
        self.profile_path = profile
        self.spy: PySpy | None = None
        self.gen_busy = 0.0  # busiest load-generator process: CPU seconds / wall seconds
        self.publish_peak_mb = 0.0  # peak RSS before a kill_and_restart (MB)
        self.cpu_carry = 0.0  # broker CPU seconds before a kill_and_restart

    # ---- topology
    def admin(self) -> Client:
        if self._admin is None:
            self._admin = Client(self.port)
            self._admin.channel(1)
        return self._admin

    def queue(self, suffix: str, durable: bool = False) -> str:
        name = f"{self.prefix}-{suffix}"
        self.admin().declare_queue(name, durable=durable)
        self.queues.append(name)
        return name

    def exchange(self, suffix: str, kind: str) -> str:
        name = f"{self.prefix}-{suffix}"
        self.admin().declare_exchange(name, kind)
        self.exchanges.append(name)
        return name

    def leftover(self, queues: list[str], grace: float = 3.0) -> str | None:
        """Messages still in ``queues`` after every consumer has counted its share and closed
        (a consumer that over-counted would leave some behind: unacked ones are requeued)."""
        deadline = time.monotonic() + grace
        while True:
            left = {q: self.admin().queue_count(q) for q in queues}
            if not any(left.values()):
                return None
            if time.monotonic() > deadline:
                return "messages left in queues after the run: " + ", ".join(
                    f"{q.rsplit('-', 1)[1]}={n}" for q, n in left.items() if n)
            time.sleep(0.2)

    def queue_counts(self, queues: list[str]) -> list[int]:
        """Ready messages of each queue (passive declares on the admin connection)."""
        return [self.admin().queue_count(q) for q in queues]

    def kill_and_restart(self, queues: list[str], expected: int) -> dict[str, Any]:
        """amqpq only (RabbitMQ here is a shared service, not killed): kill -9 the broker,
        start it on the same data dir and port; ``restart_s`` until it accepts connections,
        ``restart_rss_mb`` its peak RSS by then, and an error unless ``queues`` hold
        ``expected`` messages again."""
        process = getattr(self.broker, "process", None)
        if process is None:
            return {}
        if self._admin is not None:
            self._admin.close(timeout=2)
            self._admin = None
        self._end()
        self.cpu_carry = self.cpu_s
        if self.sampler is not None:
            self.publish_peak_mb = self.sampler.stop()
            self.sampler = None
        process.start_timeout = 900
        process.kill()
        t0 = time.monotonic()
        process.start()
        out: dict[str, Any] = {"restart_s": round(time.monotonic() - t0, 2),
                               "restart_rss_mb": round(
                                   status_kb(self.broker.pids, "VmHWM") / 1024, 1)}
        back = sum(self.queue_counts(queues))
        if back != expected:
            out["error"] = f"{back:,} of {expected:,} messages back after kill -9"
        self.cpu0 = None
        self._begin()
        return out

    def cleanup(self) -> None:
        """Delete what the run declared (a fresh connection: the admin one may be broken)."""
        if self._admin is not None:
            self._admin.close(timeout=2)
            self._admin = None
        if self.broker.fresh_per_run or not (self.queues or self.exchanges):
            return
        c = Client(self.port, timeout=120)
        try:
            c.channel(1)
            for q in self.queues:
                c.delete_queue(q)
            for x in self.exchanges:
                c.delete_exchange(x)
        finally:
            c.close()

    # ---- measurement window: first go .. last result
    def _begin(self) -> None:
        if self.cpu0 is None:
            if self.profile_path is not None and self.broker.name == "amqpq":
                self.spy = PySpy(self.broker.pids[0], self.profile_path)
            self.cpu0 = cpu_seconds(self.broker.pids)
            self.sampler = RssSampler(self.broker.pids)

    def _end(self) -> None:
        if self.cpu0 is not None:
            self.cpu_s = self.cpu_carry + cpu_seconds(self.broker.pids) - self.cpu0

    def finish(self) -> dict[str, Any]:
        out: dict[str, Any] = {"cpu_s": round(self.cpu_s, 3)}
        if self.sampler is not None:
            out["peak_rss_mb"] = round(max(self.sampler.stop(), self.publish_peak_mb), 1)
        if self.broker.fresh_per_run and self.broker.pids:
            # a fresh process: its lifetime peak is this run's peak
            out["hwm_mb"] = round(status_kb(self.broker.pids, "VmHWM") / 1024, 1)
            out["peak_rss_mb"] = max(out.get("peak_rss_mb", 0), out["hwm_mb"])
        if self.spy is not None:
            self.spy.stop()
            self.spy = None
        out["gen_busy_pct"] = round(100 * self.gen_busy, 1)
        return out

    # ---- load-generator processes
    def run_workers(self, specs: list[tuple[str, dict[str, Any]]], time_limit: float,
                    on_phase: Callable[[int, dict[str, Any]], None] | None = None,
                    ) -> tuple[float, list[dict[str, Any]]]:
        """Start one process per spec, wait until all are set up, release them together and
        collect their results. Returns (t_go, results in spec order)."""
        mp = self.mp
        ready_q, results_q = mp.Queue(), mp.Queue()
        go, release = mp.Event(), mp.Event()
        procs = []
        ok = False
        try:
            for idx, (kind, cfg) in enumerate(specs):
                cfg = dict(cfg, port=self.port)
                cfg.setdefault("time_limit", time_limit)
                p = mp.Process(target=worker_main, name=f"bench-{kind}-{idx}", daemon=True,
                               args=(idx, kind, cfg, ready_q, go, results_q, release))
                p.start()
                procs.append(p)
            errors, pending = [], len(specs)
            deadline = time.monotonic() + 60
            while pending:
                try:
                    _idx, status, msg = ready_q.get(timeout=max(0.1, deadline - time.monotonic()))
                except queue_mod.Empty:
                    raise BenchError("load generator set-up timed out") from None
                pending -= 1
                if status == "error":
                    errors.append(msg)
            if errors:
                raise BenchError("; ".join(errors))
            self._begin()
            t_go = time.monotonic()
            go.set()
            out: list[dict[str, Any] | None] = [None] * len(specs)
            deadline = t_go + time_limit + 30
            while any(r is None for r in out):
                try:
                    idx, kind, payload = results_q.get(
                        timeout=max(0.1, deadline - time.monotonic()))
                except queue_mod.Empty:
                    break
                if kind == "phase":
                    if on_phase is not None:
                        on_phase(idx, payload)
                    release.set()
                else:
                    out[idx] = payload
            self._end()
            wall = time.monotonic() - t_go
            results = [r if r is not None else {"error": "load generator did not report in time"}
                       for r in out]
            for r in results:
                if r.get("gen_cpu_s") and wall > 0:
                    self.gen_busy = max(self.gen_busy, r["gen_cpu_s"] / wall)
            ok = True
            return t_go, results
        finally:
            release.set()
            for p in procs:
                p.join(timeout=15 if ok else 0.5)
                if p.is_alive():
                    p.terminate()
                    p.join(5)
            ready_q.close()
            results_q.close()


def _errors(*results: dict[str, Any]) -> str | None:
    errs = [r["error"] for r in results if r.get("error")]
    return "; ".join(errs) if errs else None


def _rate(n: float, t0: float, t1: float | None) -> float | None:
    if not n or t1 is None or t1 <= t0:
        return None
    return n / (t1 - t0)


# ------------------------------------------------------------------------------ scenarios
def s1_transient(ctx: RunCtx) -> dict[str, Any]:
    n = ctx.p.s1
    q = ctx.queue("q")
    t_go, (con, pub) = ctx.run_workers([
        ("consumer", {"queues": [q], "expected": n, "body_size": BODY, "no_ack": True}),
        ("publisher", {"exchange": "", "routing_keys": [q], "count": n, "body_size": BODY,
                       "batch": 1000}),
    ], ctx.p.time_limit)
    return {"messages": con.get("received", 0),
            "rate": _rate(con.get("received", 0), t_go, con.get("t_last")),
            "publish_rate": _rate(pub.get("sent", 0), t_go, pub.get("t_sent")),
            "error": _errors(con, pub) or ctx.leftover([q])}


def s12_four_pairs(ctx: RunCtx) -> dict[str, Any]:
    """4 independent publisher -> queue -> no-ack consumer pairs at once (8 connections,
    transient, 200 B); each consumer declares its queue, so with --workers N a queue lives on
    its consumer's worker and a publisher lands on either."""
    n = ctx.p.s12
    qs = [f"{ctx.prefix}-pair{i}" for i in range(4)]
    ctx.queues.extend(qs)
    specs: list[tuple[str, dict[str, Any]]] = [
        ("consumer", {"queues": [q], "expected": n, "body_size": BODY, "no_ack": True,
                      "declare": True}) for q in qs]
    specs += [("publisher", {"exchange": "", "routing_keys": [q], "count": n,
                             "body_size": BODY, "batch": 1000}) for q in qs]
    t_go, results = ctx.run_workers(specs, ctx.p.time_limit)
    cons, pubs = results[:4], results[4:]
    received = sum(c.get("received", 0) for c in cons)
    t_last = max((c.get("t_last") or 0.0) for c in cons) or None
    sent = sum(p.get("sent", 0) for p in pubs)
    t_sent = max((p.get("t_sent") or 0.0) for p in pubs) or None
    return {"messages": received, "rate": _rate(received, t_go, t_last),
            "publish_rate": _rate(sent, t_go, t_sent),
            "error": _errors(*results) or ctx.leftover(qs)}


def _confirm_run(ctx: RunCtx, n: int, durable: bool) -> dict[str, Any]:
    q = ctx.queue("q", durable=durable)
    t_go, (pub,) = ctx.run_workers([
        ("publisher", {"exchange": "", "routing_keys": [q], "count": n, "body_size": BODY,
                       "confirm": 1000, "batch": 100, "persistent": durable}),
    ], ctx.p.time_limit)
    err = _errors(pub)
    if not err and pub.get("nacked"):
        err = f"{pub['nacked']} nacks"
    return {"messages": pub.get("confirmed", 0),
            "rate": _rate(pub.get("confirmed", 0), t_go, pub.get("t_sent")), "error": err}


def s2_confirms(ctx: RunCtx) -> dict[str, Any]:
    return _confirm_run(ctx, ctx.p.s2, durable=False)


def s3_persistent(ctx: RunCtx) -> dict[str, Any]:
    return _confirm_run(ctx, ctx.p.s3, durable=True)


def s4_manual_ack(ctx: RunCtx) -> dict[str, Any]:
    n = ctx.p.s4
    q = ctx.queue("q")
    t_go, (con, pub) = ctx.run_workers([
        ("consumer", {"queues": [q], "expected": n, "body_size": BODY, "no_ack": False,
                      "prefetch": 100}),
        ("publisher", {"exchange": "", "routing_keys": [q], "count": n, "body_size": BODY,
                       "batch": 1000}),
    ], ctx.p.time_limit)
    return {"messages": con.get("received", 0),
            "rate": _rate(con.get("received", 0), t_go, con.get("t_last")),
            "error": _errors(con, pub) or ctx.leftover([q])}


def _multi_queue_run(ctx: RunCtx, exchange: str, queues: list[str], keys: list[str],
                     per_queue: dict[str, int], n: int) -> dict[str, Any]:
    halves = [queues[0::2], queues[1::2]]
    specs: list[tuple[str, dict[str, Any]]] = [
        ("consumer", {"queues": qs, "expected": sum(per_queue[q] for q in qs),
                      "body_size": BODY, "no_ack": True}) for qs in halves]
    specs.append(("publisher", {"exchange": exchange, "routing_keys": keys, "count": n,
                                "body_size": BODY, "batch": 1000}))
    t_go, results = ctx.run_workers(specs, ctx.p.time_limit)
    cons = results[:-1]
    got = sum(c.get("received", 0) for c in cons)
    ends = [c.get("t_last") for c in cons if c.get("t_last")]
    t_end = max(ends) if ends else None
    return {"messages": got, "rate": _rate(got, t_go, t_end),
            "publish_rate": _rate(n, t_go, t_end),
            "error": _errors(*results) or ctx.leftover(queues)}


def s5_fanout(ctx: RunCtx) -> dict[str, Any]:
    n = ctx.p.s5
    x = ctx.exchange("fanout", "fanout")
    qs = [ctx.queue(f"q{i}") for i in range(10)]
    ctx.admin().bind_many([(q, x, "") for q in qs])
    return _multi_queue_run(ctx, x, qs, ["k"], {q: n for q in qs}, n)


TOPIC_BINDINGS = 1_000
TOPIC_KEYS = 10_000


def s6_topic(ctx: RunCtx) -> dict[str, Any]:
    n = ctx.p.s6
    x = ctx.exchange("topic", "topic")
    qs = [ctx.queue(f"q{i}") for i in range(10)]
    binds = [(qs[i % 10], x, f"s{i}.*.x" if i % 2 == 0 else f"s{i}.#")
             for i in range(TOPIC_BINDINGS)]
    ctx.admin().bind_many(binds)
    # key j matches only binding j % 1000, which goes to queue j % 10
    keys = [f"s{j % TOPIC_BINDINGS}.w{j // TOPIC_BINDINGS}.x" for j in range(TOPIC_KEYS)]
    per_queue = {q: 0 for q in qs}
    full, rest = divmod(n, 10)
    for i, q in enumerate(qs):
        per_queue[q] = full + (1 if i < rest else 0)
    return _multi_queue_run(ctx, x, qs, keys, per_queue, n)


def s7_latency(ctx: RunCtx) -> dict[str, Any]:
    rate, duration = ctx.p.s7_rate, ctx.p.s7_duration
    n = int(rate * duration)
    q = ctx.queue("lat")
    _t_go, (con, pub) = ctx.run_workers([
        ("latency_con", {"queue": q, "expected": n, "warmup": int(rate * 0.5),
                         "time_limit": duration + 20}),
        ("latency_pub", {"exchange": "", "routing_key": q, "rate": rate,
                         "duration": duration, "body_size": BODY}),
    ], duration + 20)
    out = {"messages": con.get("received", 0), "p50_ms": con.get("p50_ms"),
           "p90_ms": con.get("p90_ms"), "p99_ms": con.get("p99_ms"),
           "max_ms": con.get("max_ms"), "late": pub.get("late"), "error": _errors(con, pub)}
    if pub.get("late", 0) > n // 100:
        # latency is measured from the real send time, so the run still counts; but a
        # publisher that cannot keep its schedule means the machine was busy
        out["warning"] = f"publisher > 5 ms behind its schedule for {pub['late']} messages"
    return out


def s8_backlog(ctx: RunCtx) -> dict[str, Any]:
    n = ctx.p.s8_rabbit if ctx.broker.name == "rabbitmq" else ctx.p.s8
    tl = ctx.p.backlog_time_limit
    q = ctx.queue("backlog")
    t_go, (pub,) = ctx.run_workers([
        ("publisher", {"exchange": "", "routing_keys": [q], "count": n, "body_size": BODY,
                       "batch": 1000, "wait_queue": q, "wait_count": n}),
    ], tl)
    out: dict[str, Any] = {"backlog": n, "publish_rate": _rate(n, t_go, pub.get("t_done")),
                           "error": _errors(pub)}
    assert ctx.sampler is not None
    out["rss_full_mb"] = round(ctx.sampler.last_kb / 1024, 1)
    if out["error"]:
        return out
    t_go2, (con,) = ctx.run_workers([
        ("consumer", {"queues": [q], "expected": n, "body_size": BODY, "no_ack": True,
                      "consume_on_go": True}),
    ], tl)
    out.update(messages=con.get("received", 0),
               drain_rate=_rate(con.get("received", 0), t_go2, con.get("t_last")),
               error=_errors(con) or ctx.leftover([q]))
    return out


def s10_deep_persistent(ctx: RunCtx) -> dict[str, Any]:
    n = ctx.p.s10_rabbit if ctx.broker.name == "rabbitmq" else ctx.p.s10
    tl = 3 * ctx.p.backlog_time_limit
    q = ctx.queue("deep", durable=True)
    t_go, (pub,) = ctx.run_workers([
        ("publisher", {"exchange": "", "routing_keys": [q], "count": n, "body_size": BODY,
                       "confirm": 1000, "batch": 100, "persistent": True}),
    ], tl)
    out: dict[str, Any] = {"backlog": n, "publish_rate": _rate(n, t_go, pub.get("t_done")),
                           "error": _errors(pub)}
    if out["error"]:
        return out
    out.update(ctx.kill_and_restart([q], n))
    if out.get("error"):
        return out
    t_go2, (con,) = ctx.run_workers([
        ("consumer", {"queues": [q], "expected": n, "body_size": BODY, "no_ack": False,
                      "prefetch": 1000, "consume_on_go": True}),
    ], tl)
    out.update(messages=con.get("received", 0),
               drain_rate=_rate(con.get("received", 0), t_go2, con.get("t_last")),
               error=_errors(con) or ctx.leftover([q]))
    return out


def s11_many_durable_queues(ctx: RunCtx) -> dict[str, Any]:
    """1,000 durable queues x 10,000 persistent 200-byte messages, published with confirms
    (one publisher, round-robin over the queues); on amqpq then kill -9, restart, and the
    time until every message is back (recovery). RabbitMQ gets ``s11_rabbit`` per queue."""
    per = ctx.p.s11_rabbit if ctx.broker.name == "rabbitmq" else ctx.p.s11
    queues = [ctx.queue(f"many{i}", durable=True) for i in range(ctx.p.s11_queues)]
    n = per * len(queues)
    t_go, (pub,) = ctx.run_workers([
        ("publisher", {"exchange": "", "routing_keys": queues, "count": n, "body_size": BODY,
                       "confirm": 1000, "batch": 100, "persistent": True}),
    ], 3 * ctx.p.backlog_time_limit)
    out: dict[str, Any] = {"queues": len(queues), "messages": n,
                           "publish_rate": _rate(n, t_go, pub.get("t_done")),
                           "error": _errors(pub)}
    if out["error"]:
        return out
    counts = ctx.queue_counts(queues)
    if sum(counts) != n:
        out["error"] = f"{sum(counts):,} of {n:,} messages in the queues after the publish"
        return out
    out.update(ctx.kill_and_restart(queues, n))
    return out


def settled_rss_kb(pids: list[int], limit: float = 15.0) -> int:
    """VmRSS once it has moved less than 0.5 MB per 0.5 s for 2 s (a previous run's memory
    being given back would otherwise show as a negative delta), or after ``limit`` s."""
    deadline = time.monotonic() + limit
    prev = status_kb(pids, "VmRSS")
    steady = 0
    while True:
        time.sleep(0.5)
        cur = status_kb(pids, "VmRSS")
        steady = steady + 1 if abs(cur - prev) < 512 else 0
        if steady >= 4 or time.monotonic() > deadline:
            return cur
        prev = cur


def s9_idle_connections(ctx: RunCtx) -> dict[str, Any]:
    n = ctx.p.s9_rabbit if ctx.broker.name == "rabbitmq" else ctx.p.s9
    pids = ctx.broker.pids
    base_kb = settled_rss_kb(pids)
    seen: dict[str, Any] = {}

    def on_phase(_idx: int, payload: dict[str, Any]) -> None:
        seen.update(payload)
        time.sleep(1.0)
        peak = 0
        for _ in range(10):
            peak = max(peak, status_kb(pids, "VmRSS"))
            time.sleep(0.1)
        seen["rss_kb"] = peak

    _t_go, (res,) = ctx.run_workers([
        ("idle", {"connections": n, "concurrency": 100, "hold_limit": 60}),
    ], ctx.p.time_limit, on_phase=on_phase)
    rss_kb = seen.get("rss_kb", 0)
    opened = res.get("opened", seen.get("opened", 0))
    delta = (rss_kb - base_kb) / 1024 if rss_kb else None
    return {"connections": opened,
            "setup_s": res.get("setup_s", seen.get("setup_s")),
            "rss_mb": round(rss_kb / 1024, 1) if rss_kb else None,
            "rss_delta_mb": round(delta, 1) if delta is not None else None,
            "rss_per_1000_mb": round(delta * 1000 / opened, 1) if delta and opened else None,
            "rss_base_mb": round(base_kb / 1024, 1), "error": _errors(res)}


# ------------------------------------------------------------------------ scenario table
@dataclass
class Metric:
    key: str
    label: str
    unit: str
    higher_better: bool
    target: str | None = None  # e.g. "ratio>=1.5", "ratio<=1.0", "amqpq<=512"
    fmt: str = "{:,.0f}"


@dataclass
class Scenario:
    sid: int
    name: str
    fn: Callable[[RunCtx], dict[str, Any]]
    metrics: list[Metric] = field(default_factory=list)
    work_key: str = "messages"  # what CPU µs are counted per


RATE = "msg/s"
SCENARIOS = [
    Scenario(1, "transient pub->consume, auto-ack", s1_transient,
             [Metric("rate", "delivered", RATE, True, "ratio>=1.5"),
              Metric("publish_rate", "published", RATE, True)]),
    Scenario(2, "confirms, window 1,000", s2_confirms,
             [Metric("rate", "confirmed", RATE, True, "ratio>=1.0")]),
    Scenario(3, "persistent+durable+confirms", s3_persistent,
             [Metric("rate", "confirmed", RATE, True, "ratio>=1.0")]),
    Scenario(4, "prefetch 100, ack each", s4_manual_ack,
             [Metric("rate", "acked", RATE, True, "ratio>=1.0")]),
    Scenario(5, "fanout to 10 queues", s5_fanout,
             [Metric("rate", "deliveries", RATE, True, "ratio>=1.0"),
              Metric("publish_rate", "published", RATE, True)]),
    Scenario(6, "topic, 1,000 wildcard binds", s6_topic,
             [Metric("rate", "delivered", RATE, True, "ratio>=1.0")]),
    Scenario(7, "latency at 1,000 msg/s", s7_latency,
             [Metric("p50_ms", "p50", "ms", False, fmt="{:.2f}"),
              Metric("p99_ms", "p99", "ms", False, "ratio<=1.0", fmt="{:.2f}"),
              Metric("max_ms", "max", "ms", False, fmt="{:.2f}")]),
    Scenario(8, "backlog: publish, drain", s8_backlog,
             [Metric("publish_rate", "publish", RATE, True),
              Metric("drain_rate", "drain", RATE, True, "ratio>=1.0"),
              Metric("peak_rss_mb", "peak RSS", "MB", False, "amqpq<=512", fmt="{:,.0f}")]),
    Scenario(9, "idle connections", s9_idle_connections,
             [Metric("connections", "opened", "", True),
              Metric("setup_s", "set-up", "s", False, fmt="{:.2f}"),
              Metric("rss_mb", "RSS", "MB", False, "ratio<=1.0", fmt="{:,.0f}"),
              Metric("rss_delta_mb", "RSS added", "MB", False, fmt="{:,.1f}"),
              Metric("rss_per_1000_mb", "added/1k conn", "MB", False, "ratio<=1.0",
                     fmt="{:,.1f}")],
             work_key="connections"),
    Scenario(10, "deep persistent backlog: confirms, ack drain", s10_deep_persistent,
             [Metric("publish_rate", "publish", RATE, True, "ratio>=1.0"),
              Metric("drain_rate", "drain", RATE, True, "ratio>=1.0"),
              Metric("peak_rss_mb", "peak RSS", "MB", False, "amqpq<=512", fmt="{:,.0f}"),
              Metric("restart_s", "kill -9, restart", "s", False, fmt="{:.1f}"),
              Metric("restart_rss_mb", "RSS at restart", "MB", False, fmt="{:,.0f}")]),
    Scenario(11, "1,000 durable queues x 10,000 persistent", s11_many_durable_queues,
             [Metric("publish_rate", "publish", RATE, True),  # RabbitMQ holds 1/10 of it
              Metric("peak_rss_mb", "peak RSS", "MB", False, "amqpq<=512", fmt="{:,.0f}"),
              Metric("restart_s", "kill -9, restart", "s", False, "amqpq<=60", fmt="{:.1f}"),
              Metric("restart_rss_mb", "RSS at restart", "MB", False, fmt="{:,.0f}")]),
    Scenario(12, "4 independent pairs, auto-ack", s12_four_pairs,
             [Metric("rate", "delivered", RATE, True, "ratio>=1.3"),
              Metric("publish_rate", "published", RATE, True)]),
]


def mp_context() -> Any:
    return multiprocessing.get_context("spawn")
