"""Benchmark of replicated quorum queues: an amqpq cluster beside a single amqpq node and the
reference RabbitMQ (127.0.0.1:5672, when up).

On demand only (never part of the test run)::

    python -m benchmarks.quorum_bench                              # 100,000 messages, 3 reps
    python -m benchmarks.quorum_bench --messages 20000 --reps 1 --no-rabbitmq

Each setting, ``--reps`` rounds (a fresh queue ``x-queue-type: quorum``, durable, per round),
medians reported:

1. *Publish*: ``--messages`` persistent 200-byte messages with confirms over a raw pipelined
   connection, at most ``--window`` unconfirmed (a sliding window). Reported: confirmed msg/s,
   and nacks (counted, not resent).
2. *Consume*: a raw consumer (prefetch 1,000, ``Basic.Ack multiple`` every 500 and one for the
   rest) reads all of them. Reported: msg/s from Basic.Consume to the last delivery.

Before each round one probe message must be confirmed within 3 s (then fetched); else the queue
is deleted and another declared, counted as ``probe_failures`` (a queue whose commits stall
shows there).

Settings:

* ``cluster-leader``: etcd + 3 amqpq nodes (started once for the setting, reused by its
  rounds); the queue declared through n1 (its leader, 3 replicas, a publish is confirmed once
  the in-sync replicas have it on disk); publisher and consumer on n1.
* ``cluster-follower``: the same on a fresh cluster, publisher on n2 and consumer on n3 (each
  a node-link hop away from the leader).
* ``single``: one amqpq node without cluster options (1 replica).
* ``rabbitmq``: RabbitMQ 3.10.8, single node (skipped with ``--no-rabbitmq`` or when down).

*CPU*: for the amqpq settings, each node process's CPU time (user + system, from
``/proc/<pid>/stat``, every thread: the fsync pool too) over the publish phase, as CPU
seconds per 100,000 messages (``cpu_s_per_100k``: per node and their ``total``). The nodes and
the load generator share the machine's cores, so the total over the three nodes is what
bounds a 3-replica publish on one machine; unlike msg/s it hardly moves with other load.
``--cpu-only``: the cluster-leader setting, publish phase only, CPU figures (no consume:
the queue is purged).

Results: a table on stdout and ``benchmarks/results/quorum.json``, with the ERROR/WARNING/
Traceback lines of the amqpq node logs (up to the nodes' stop). The nodes' directories are
removed unless ``--keep`` or the setting failed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pika
from pamqp import commands

from benchmarks.brokers import port_open
from tests.support import wire
from tests.support.broker_process import BrokerProcess
from tests.support.cluster import api, cluster_node, wait_until
from tests.support.etcd import running_etcd

QQ = {"x-queue-type": "quorum"}
SIZE = 200
RESULTS = Path(__file__).resolve().parent / "results" / "quorum.json"
PROBLEM = re.compile(r"ERROR|CRITICAL|WARNING|Traceback")
IO_TIMEOUT = 60.0  # s without a confirm / delivery: a stall


def declare(port: int, queue: str, delete_first: bool = False, delete: bool = False) -> None:
    """Declare ``queue`` (quorum, durable) through ``port``; or delete it first, or only."""
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port, heartbeat=0))
    if delete_first or delete:
        conn.channel().queue_delete(queue)
    if not delete:
        conn.channel().queue_declare(queue, durable=True, arguments=QQ)
    conn.close()


def probe(port: int, queue: str, timeout: float = 3.0) -> bool:
    """Whether one message is confirmed within ``timeout`` (it is then taken off with
    Basic.Get): a replica that never gets the leader's chunks holds back every commit."""
    client = wire.Client(port, timeout=timeout)
    try:
        client.channel(1)
        client.confirm_select()
        client.sock.sendall(wire.publish_head("", queue, SIZE, persistent=True)
                            + wire.body_frame(b"x" * SIZE))
        client.expect(1, commands.Basic.Ack)
        client.call(1, commands.Basic.Get(queue=queue, no_ack=True), commands.Basic.GetOk)
        return True
    except (TimeoutError, wire.AmqpError):
        return False
    finally:
        client.close()


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system, all threads) process ``pid`` used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def publish(port: int, queue: str, n: int, window: int) -> dict[str, Any]:
    """``n`` persistent messages with confirms, ``window`` unconfirmed at most; msg/s, nacks."""
    client = wire.Client(port, timeout=IO_TIMEOUT)
    client.channel(1)
    client.confirm_select()
    one = wire.publish_head("", queue, SIZE, persistent=True) + wire.body_frame(b"x" * SIZE)
    confirms = wire.ConfirmTracker()
    confirms.feed(client.buf)
    sock = client.sock
    t0 = time.monotonic()
    sent = 0
    try:
        while confirms.confirmed < n:
            room = min(window - (sent - confirms.confirmed), n - sent)
            if room > 0 and (room >= window // 4 or sent + room == n):
                sock.sendall(one * room)
                sent += room
                continue
            data = sock.recv(1 << 16)
            confirms.feed(data)
            if not data or confirms.error:
                raise RuntimeError(f"publisher closed: {confirms.error or 'EOF'}")
    except TimeoutError:
        raise RuntimeError(f"publish stalled: {confirms.confirmed}/{sent} confirmed, no confirm "
                           f"for {IO_TIMEOUT:.0f} s") from None
    rate = n / (time.monotonic() - t0)
    client.close()
    return {"publish_rate": round(rate), "nacks": confirms.nacked}


def consume(port: int, queue: str, n: int) -> dict[str, Any]:
    """Read ``n`` messages (prefetch 1,000, ack every 500, multiple); msg/s. Deliveries are
    counted by their body frame's bytes (no decoding: the client is not the bottleneck)."""
    client = wire.Client(port, timeout=IO_TIMEOUT)
    client.channel(1)
    client.qos(1000)
    before = client.queue_count(queue)
    counter = wire.PatternCounter(wire.body_frame_pattern(SIZE))
    t0 = time.monotonic()
    client.consume(queue, no_ack=False, ctag="bench")
    counter.feed(client.buf, len(client.buf))
    sock, buf, acked = client.sock, bytearray(1 << 20), 0
    try:
        while True:
            target = min(counter.count // 500 * 500, n) if counter.count < n else n
            if target > acked:
                sock.sendall(wire.ack_frame(target, multiple=True))
                acked = target
            if counter.count >= n:
                break
            got = sock.recv_into(buf)
            if not got:
                raise RuntimeError("consumer connection closed by the broker")
            counter.feed(buf, got)
    except TimeoutError:
        raise RuntimeError(f"consume stalled: {counter.count}/{n} delivered, nothing for "
                           f"{IO_TIMEOUT:.0f} s") from None
    rate = counter.count / (time.monotonic() - t0)
    client.close()
    return {"consume_rate": round(rate), "count_before_consume": before}


@contextlib.contextmanager
def profiled(out: str, pids: dict[str, int], label: str) -> Iterator[None]:
    """With ``out`` (a directory), py-spy samples each process of ``pids`` meanwhile:
    collapsed stacks in ``out/<label>-<node>.txt`` (flamegraph.pl's input)."""
    if not out:
        yield
        return
    Path(out).mkdir(parents=True, exist_ok=True)
    spy = str(Path(sys.executable).with_name("py-spy"))
    procs = [subprocess.Popen([spy, "record", "--pid", str(pid), "--format", "raw",
                               "--rate", "200", "--nonblocking", "-o",
                               f"{out}/{label}-{node}.txt"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for node, pid in pids.items()]
    time.sleep(1.0)  # py-spy attached
    try:
        yield
    finally:
        for proc in procs:
            proc.send_signal(2)  # SIGINT: py-spy writes its file and exits
        for proc in procs:
            proc.wait(timeout=30)


def purge(port: int, queue: str) -> int:
    """Purge ``queue`` through ``port``: the messages it held."""
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port, heartbeat=0))
    try:
        return conn.channel().queue_purge(queue).method.message_count
    finally:
        conn.close()


def rounds(name: str, pub: int, cons: int, lead: int, args: argparse.Namespace,
           ready: Callable[[str, bool], dict[str, Any]] | None = None,
           delete_first: bool = False, pids: dict[str, int] | None = None) -> dict[str, Any]:
    """``args.reps`` rounds (declare through port ``lead``, publish through ``pub``, consume
    through ``cons``, delete); medians and each round. ``ready(queue, wait)``: waits for the
    queue's replicas (its leader, epoch), or (``wait`` False, after a failure) its state.
    ``pids``: node name -> process, whose CPU seconds per 100,000 messages published are
    reported (``cpu_s_per_100k``)."""
    done: list[dict[str, Any]] = []
    for r in range(args.reps):
        for attempt in range(5):
            queue = f"bench.qq.{name}.{r}.{attempt}"
            declare(lead, queue, delete_first)
            res: dict[str, Any] = ready(queue, True) if ready else {}
            if probe(pub, queue):
                break
            print(f"  {name} round {r + 1}: {queue} confirmed no probe in 3 s "
                  f"({ready(queue, False) if ready else ''}): another queue", flush=True)
            declare(lead, queue, delete=True)
        else:
            raise RuntimeError(f"round {r + 1}: 5 queues confirmed no probe message")
        res["probe_failures"] = attempt
        try:
            before = {k: cpu_seconds(pid) for k, pid in (pids or {}).items()}
            with profiled(args.py_spy, pids or {}, f"{name}-{r + 1}"):
                res.update(publish(pub, queue, args.messages, args.window))
            if pids:
                per = {k: (cpu_seconds(pid) - before[k]) * 100_000 / args.messages
                       for k, pid in pids.items()}
                res["cpu_s_per_100k"] = {**{k: round(v, 2) for k, v in per.items()},
                                         "total": round(sum(per.values()), 2)}
            if args.cpu_only:
                res["count_before_consume"] = purge(cons, queue)
            else:
                res.update(consume(cons, queue, args.messages))
        except RuntimeError as exc:
            state: Any = "?"
            with contextlib.suppress(Exception):
                state = ready(queue, False) if ready else state
            raise RuntimeError(f"round {r + 1}: {exc}; queue: {state}") from None
        declare(lead, queue, delete=True)
        odd = "" if res["count_before_consume"] == args.messages else " (COUNT MISMATCH)"
        print(f"  {name} round {r + 1}: {res}{odd}", flush=True)
        done.append(res)
    med = {k: round(statistics.median(d.get(k, 0) for d in done))
           for k in ("publish_rate", "consume_rate")}
    if pids:
        med["cpu_s_per_100k"] = {k: round(statistics.median(d["cpu_s_per_100k"][k]
                                                            for d in done), 2)
                                 for k in (*pids, "total")}
    return {**med, "nacks": sum(d["nacks"] for d in done),
            "probe_failures": sum(d["probe_failures"] for d in done), "rounds": done}


def log_problems(nodes: list[BrokerProcess]) -> dict[str, Any]:
    """ERROR/WARNING/Traceback lines of the nodes' logs (called before they are stopped: the
    warnings of a cluster's shutdown, nodes seen leaving, are not problems)."""
    found = {n.log_path.name: [ln for ln in n.log_text().splitlines() if PROBLEM.search(ln)]
             for n in nodes}
    return {name: {"count": len(lines), "first": lines[:8]} for name, lines in found.items()
            if lines}


@contextlib.contextmanager
def workdir(keep: bool, prefix: str) -> Iterator[tuple[Path, dict[str, Any]]]:
    """A temporary directory and the setting's result (to fill); removed unless ``keep`` or
    the result is an error."""
    base = Path(tempfile.mkdtemp(prefix=prefix))
    res: dict[str, Any] = {"error": "did not run"}
    try:
        yield base, res
    except (Exception, AssertionError) as exc:
        res["error"] = f"{type(exc).__name__}: {exc}"[:2000]
    finally:
        if keep or "error" in res:
            print(f"  kept {base}", flush=True)
        else:
            shutil.rmtree(base, ignore_errors=True)


def cluster_setting(name: str, pub: int, cons: int, args: argparse.Namespace) -> dict[str, Any]:
    """A fresh etcd + n1..n3 for this setting; queues declared through n1 (their leader)."""
    with workdir(args.keep, f"amqpq-qbench-{name}-") as (base, res), \
            running_etcd(base) as etcd:
        nodes = [cluster_node(base, f"n{i}", etcd) for i in (1, 2, 3)]

        def ready(queue: str, wait: bool) -> dict[str, Any]:
            path = f"/api/queues/%2F/{queue}"
            if not wait:
                keys = ("leader", "epoch", "in_sync", "replica_lag", "messages")
                return {nd.log_path.stem: {k: api(nd, path).get(k) for k in keys}
                        for nd in nodes}
            for node in nodes:  # every node knows it (routing, consuming), 3 in sync
                wait_until(lambda nd=node: len(api(nd, path).get("in_sync", [])) == 3,
                           f"{queue}: 3 in-sync replicas seen by {node.log_path.stem}", 30)
            state = api(nodes[0], path)
            return {"leader": state["leader"], "epoch": state["epoch"]}

        try:
            for node in nodes:
                node.start()
            res.clear()
            res.update(rounds(name, nodes[pub].port, nodes[cons].port, nodes[0].port, args,
                              ready, pids={nd.log_path.stem: nd.pid for nd in nodes}))
        finally:
            res["log_problems"] = log_problems(nodes)
            for node in nodes:
                node.close()
    return res


def single_setting(args: argparse.Namespace) -> dict[str, Any]:
    with workdir(args.keep, "amqpq-qbench-single-") as (base, res):
        node = BrokerProcess(base / "data", base / "single.log", start_timeout=30)
        try:
            port = node.start().port
            res.clear()
            res.update(rounds("single", port, port, port, args, pids={"single": node.pid}))
        finally:
            res["log_problems"] = log_problems([node])
            node.close()
    return res


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--window", type=int, default=1000)
    p.add_argument("--no-rabbitmq", action="store_true")
    p.add_argument("--keep", action="store_true", help="keep the nodes' data dirs and logs")
    p.add_argument("--only", default="", help="comma-separated settings (default: all)")
    p.add_argument("--cpu-only", action="store_true",
                   help="cluster-leader only, publish phase only: CPU per message")
    p.add_argument("--py-spy", default="", metavar="DIR",
                   help="sample every amqpq node with py-spy during each publish phase: "
                        "collapsed stacks in DIR")
    args = p.parse_args()
    if args.cpu_only:
        args.only, args.no_rabbitmq = "cluster-leader", True
    settings: dict[str, Callable[[], dict[str, Any]]] = {
        "cluster-leader": lambda: cluster_setting("cluster-leader", 0, 0, args),
        "cluster-follower": lambda: cluster_setting("cluster-follower", 1, 2, args),
        "single": lambda: single_setting(args),
        "rabbitmq": lambda: rounds("rabbitmq", 5672, 5672, 5672, args, delete_first=True),
    }
    chosen = [s for s in args.only.split(",") if s] or list(settings)
    out: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"),
                           "params": {"messages": args.messages, "reps": args.reps,
                                      "window": args.window, "size": SIZE}}
    t0 = time.monotonic()
    for name in chosen:
        if name == "rabbitmq" and (args.no_rabbitmq or not port_open(5672)):
            out[name] = "skipped" if args.no_rabbitmq else "not running on 127.0.0.1:5672"
            continue
        print(f"{name}:", flush=True)
        try:
            out[name] = settings[name]()
        except (Exception, AssertionError) as exc:  # report it, go on with the next setting
            out[name] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
        if "error" in out[name]:
            print(f"  {name} failed: {out[name]['error']}", flush=True)
    out["duration_s"] = round(time.monotonic() - t0, 1)
    print(f"\n{'setting':<18}{'publish msg/s':>15}{'consume msg/s':>15}{'nacks':>7}"
          f"{'probe fails':>13}")
    for name in chosen:
        r = out[name]
        if isinstance(r, dict) and "publish_rate" in r:
            print(f"{name:<18}{r['publish_rate']:>15,}{r['consume_rate']:>15,}{r['nacks']:>7}"
                  f"{r['probe_failures']:>13}")
        else:
            print(f"{name:<18}  {r if isinstance(r, str) else r['error'][:200]}")
        if isinstance(r, dict) and r.get("cpu_s_per_100k"):
            print(f"{'':<18}  CPU s per 100,000 published: {r['cpu_s_per_100k']}")
        if isinstance(r, dict) and r.get("log_problems"):
            print(f"{'':<18}  log problems: {json.dumps(r['log_problems'])[:300]}")
    results = RESULTS.with_name("quorum_cpu.json") if args.cpu_only else RESULTS
    results.parent.mkdir(exist_ok=True)
    results.write_text(json.dumps(out, indent=1) + "\n")
    print(f"written to {results}")


if __name__ == "__main__":
    main()
