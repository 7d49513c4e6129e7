"""Peak RSS of a replicated quorum queue's (or stream's) nodes under a deep backlog, against
one node holding the same backlog in a classic durable queue (issue #30 item 3: every node's
peak RSS within 1.5x of the classic node's, for quorum queues at 1,000,000 messages and for
streams at 10,000,000).

On demand only (never part of the test run)::

    python -m benchmarks.quorum_rss                       # 1,000,000 messages
    python -m benchmarks.quorum_rss --messages 200000
    python -m benchmarks.quorum_rss --type stream --messages 10000000

In one run:

1. *classic*: one amqpq node without cluster options; a durable classic queue; ``--messages``
   persistent 200-byte messages published with confirms (:func:`benchmarks.quorum_bench.
   publish`); then the node's peak RSS (``VmHWM`` of /proc/<pid>/status) and current RSS.
2. *quorum*: etcd + 3 amqpq nodes; a quorum queue (``--type stream``: a stream with
   ``x-initial-cluster-size`` 3) declared through n1 (its leader, 3 in-sync replicas), the
   same messages published through n1; once all are confirmed (the in-sync replicas have
   them on disk) each node's peak and current RSS.

Nothing is consumed: the backlog stays while RSS is read. Results on stdout and in
``benchmarks/results/quorum_rss.json``: each node's figures in MB and its peak over the
classic node's.

With ``--catch-up N``, then: n3 stops, N more messages are published, n3 starts again and
fetches the tail it lacks from its own offset (the leader's log says from which offset and
how long the entries read from its log file took); seconds from n3's start until it is in
sync again. Then the same restart with n3's replica log deleted (a full copy: it fetches
every entry from offset 0), for comparison. (That step found the leader counting what a
member had before it restarted: fixed in ``replication.Replica``, 993c8b7.)
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path
from typing import Any

import pika

from benchmarks.quorum_bench import log_problems, publish, workdir
from tests.support.broker_process import BrokerProcess
from tests.support.cluster import api, cluster_node, wait_until
from tests.support.etcd import running_etcd

RESULTS = Path(__file__).resolve().parent / "results" / "quorum_rss.json"
CAUGHT_UP = re.compile(r"node \d+ caught up from the log file, offset (\d+) to (\d+) in "
                       r"([\d.]+) s")


def memory(pid: int) -> dict[str, float]:
    """``VmHWM`` (peak) and ``VmRSS`` (now) of process ``pid`` in MB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            out["peak_mb" if key == "VmHWM" else "rss_mb"] = round(int(value.split()[0]) / 1024,
                                                                   1)
    return out


def declare(port: int, queue: str, arguments: dict[str, Any]) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port, heartbeat=0))
    conn.channel().queue_declare(queue, durable=True, arguments=arguments)
    conn.close()


def classic(args: argparse.Namespace) -> dict[str, Any]:
    with workdir(args.keep, "amqpq-rss-classic-") as (base, res):
        node = BrokerProcess(base / "data", base / "classic.log", start_timeout=30)
        try:
            port = node.start().port
            declare(port, "rss.classic", {})
            res.clear()
            t0 = time.monotonic()
            res.update(publish(port, "rss.classic", args.messages, args.window))
            res["seconds"] = round(time.monotonic() - t0, 1)
            res.update(memory(node.pid))
        finally:
            res["log_problems"] = log_problems([node])
            node.close()
    return res


def quorum(args: argparse.Namespace) -> dict[str, Any]:
    queue = f"rss.{args.type}"
    arguments: dict[str, Any] = {"x-queue-type": args.type}
    if args.type == "stream":
        arguments["x-initial-cluster-size"] = 3
    with workdir(args.keep, "amqpq-rss-quorum-") as (base, res), running_etcd(base) as etcd:
        nodes = [cluster_node(base, f"n{i}", etcd) for i in (1, 2, 3)]
        path = f"/api/queues/%2F/{queue}"
        try:
            for node in nodes:
                node.start()
            declare(nodes[0].port, queue, arguments)
            for node in nodes:
                wait_until(lambda nd=node: len(api(nd, path).get("in_sync", [])) == 3,
                           f"3 in-sync replicas seen by {node.log_path.stem}", 30)
            res.clear()
            t0 = time.monotonic()
            res.update(publish(nodes[0].port, queue, args.messages, args.window))
            res["seconds"] = round(time.monotonic() - t0, 1)
            res["leader"] = api(nodes[0], path).get("leader")
            for node in nodes:
                res[node.log_path.stem] = memory(node.pid)
            if args.catch_up:
                res["catch_up"] = catch_up(nodes, path, args)
        finally:
            res["log_problems"] = log_problems(nodes)
            for node in nodes:
                node.close()
    return res


def restart_follower(nodes: list[BrokerProcess], path: str, fresh: bool,
                     publish_first: int, args: argparse.Namespace) -> dict[str, Any]:
    """Stop n3, publish ``publish_first`` messages, (``fresh``: delete its replica logs),
    start it; seconds until the leader sees it in sync, the leader's caught-up line."""
    leader, n3 = nodes[0], nodes[2]
    n3.stop()
    wait_until(lambda: len(api(leader, path).get("in_sync", [])) == 2, "n3 out of sync", 60)
    if publish_first:
        publish(leader.port, "rss.quorum", publish_first, args.window)
    if fresh:
        for log in (n3.data_dir / "quorum").glob("*.log"):
            log.unlink()
    seen = len(CAUGHT_UP.findall(leader.log_text()))
    t0 = time.monotonic()
    n3.start_timeout = 600  # it reads its replica log before it listens
    n3.start()
    wait_until(lambda: len(api(leader, path).get("in_sync", [])) == 3, "n3 in sync", 3600)
    took = time.monotonic() - t0
    wait_until(lambda: len(CAUGHT_UP.findall(leader.log_text())) > seen, "caught-up line", 60)
    first, last, secs = CAUGHT_UP.findall(leader.log_text())[seen]
    return {"in_sync_after_start_s": round(took, 1), "from_offset": int(first),
            "to_offset": int(last), "file_fetch_s": float(secs), **memory(n3.pid)}


def catch_up(nodes: list[BrokerProcess], path: str, args: argparse.Namespace
             ) -> dict[str, Any]:
    tail = restart_follower(nodes, path, False, args.catch_up, args)
    print(f"  tail: {tail}", flush=True)
    full = restart_follower(nodes, path, True, 0, args)
    print(f"  full copy: {full}", flush=True)
    return {"tail": tail, "full_copy": full}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--window", type=int, default=1000)
    p.add_argument("--type", choices=("quorum", "stream"), default="quorum",
                   help="the replicated queue's x-queue-type")
    p.add_argument("--catch-up", type=int, default=0,
                   help="then messages published while n3 is stopped (0: no catch-up run)")
    p.add_argument("--keep", action="store_true", help="keep the nodes' data dirs and logs")
    p.add_argument("--no-classic", action="store_true", help="skip the classic node")
    args = p.parse_args()
    if args.catch_up and args.type != "quorum":
        p.error("--catch-up is for --type quorum (tests/test_cluster_streams.py checks a "
                "stream's)")
    out: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"),
                           "messages": args.messages, "size": 200, "type": args.type}
    for name, run in (("classic", classic), ("quorum", quorum)):
        if name == "classic" and args.no_classic:
            out[name] = {"error": "not run (--no-classic)"}
            continue
        print(f"{name}:", flush=True)
        try:
            out[name] = run(args)
        except (Exception, AssertionError) as exc:
            out[name] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
        print(f"  {json.dumps(out[name])[:600]}", flush=True)
    base = out["classic"].get("peak_mb")
    q = out["quorum"]
    if base and "error" not in q:
        print(f"\n{'node':<10}{'peak MB':>10}{'now MB':>10}{'x classic':>11}")
        print(f"{'classic':<10}{base:>10}{out['classic']['rss_mb']:>10}{1.0:>11.2f}")
        for name in ("n1", "n2", "n3"):
            m = q[name]
            m["x_classic"] = round(m["peak_mb"] / base, 2)
            print(f"{name:<10}{m['peak_mb']:>10}{m['rss_mb']:>10}{m['x_classic']:>11.2f}")
    RESULTS.parent.mkdir(exist_ok=True)
    results = RESULTS if args.type == "quorum" else RESULTS.with_name("stream_rss.json")
    results.write_text(json.dumps(out, indent=1) + "\n")
    print(f"written to {results}")


if __name__ == "__main__":
    main()
