"""A quorum queue member that comes back with its disk lost (data directory deleted) while
etcd still lists it in sync: real etcd, three broker processes (replica log ids,
:mod:`amqp_server.cluster.log_ids`; the simulation's seed 724 with wipe_waits=False).

n1 leads and n2 are frozen (SIGSTOP: their leases expire, nobody can take n3 out of the
ISR); n3 is killed, its data directory deleted, and started again: the only live member in
sync, it may not lead with its empty log (before log ids it did, and the others truncated
every confirmed message to it). n2 resumed takes over with every message, and n3 rejoins
the ISR with its new log once it copied it. ``-m slow`` (a cluster of its own: ~30-60 s on
this machine). Skipped without etcd."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest

from tests.support.cluster import cluster_and_etcd, connect, wait_until
from tests.support.etcd import ETCD
from tests.support.failover import queue_state

pytest.importorskip("aetcd")
pytestmark = [pytest.mark.skipif(ETCD is None, reason="etcd not installed (make etcd-deps)"),
              pytest.mark.slow]

QQ = {"x-queue-type": "quorum"}
QUEUE = "disk.qq"
N = 50


@pytest.mark.timeout(300)
def test_a_member_back_with_its_disk_lost_does_not_lead(tmp_path: Path) -> None:
    with cluster_and_etcd(tmp_path, "--cluster-lease", "2") as nodes:
        n1, n2, n3 = nodes["n1"], nodes["n2"], nodes["n3"]
        conn = connect(n1)  # the declaring node leads
        ch = conn.channel()
        ch.queue_declare(QUEUE, durable=True, arguments=QQ)
        ch.confirm_delivery()
        for i in range(N):
            ch.basic_publish("", QUEUE, f"m{i}".encode(), mandatory=True)
        conn.close()
        wait_until(lambda: len(queue_state(n2, QUEUE).get("in_sync", [])) == 3,
                   "three in-sync replicas")
        assert "replica log ids of node(s)" in n1.log_path.read_text()
        os.kill(n1.pid, signal.SIGSTOP)
        os.kill(n2.pid, signal.SIGSTOP)
        try:
            n3.kill()
            shutil.rmtree(n3.data_dir)  # the disk lost
            n3.start()  # waits for its last registration to expire, as a node start does
            wait_until(lambda: "is not the one it was in sync with" in n3.log_path.read_text(),
                       "n3 refuses to lead with its new log", 30.0)
            state = queue_state(n3, QUEUE)
            assert state["leader"] != "n3"
            assert "n3" in state["in_sync"]  # still listed: only its log id tells
        finally:
            os.kill(n2.pid, signal.SIGCONT)
            os.kill(n1.pid, signal.SIGCONT)
        state = wait_until(lambda: (lambda s: s if s["leader"] in ("n1", "n2")
                                    and s["epoch"] > 1 else None)(queue_state(n2, QUEUE)),
                           "n1 or n2 leads again", 30.0)
        leader = nodes[str(state["leader"])]
        wait_until(lambda: len(queue_state(leader, QUEUE)["in_sync"]) == 3,
                   "n3 back in sync with its new log", 30.0)
        assert "replica log id" in n3.log_path.read_text()  # a new log, a new id
        conn = connect(leader)
        ch = conn.channel()
        bodies = []
        while (got := ch.basic_get(QUEUE, auto_ack=True))[0] is not None:
            bodies.append(got[2])
        assert bodies == [f"m{i}".encode() for i in range(N)]  # every confirmed message
        conn.close()
