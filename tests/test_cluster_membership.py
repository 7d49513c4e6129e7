"""Cluster membership in etcd (``--node-name``, ``--cluster-etcd``): three nodes and a real
etcd (Debian's ``etcd-server``, ``make etcd-deps``) on loopback ports of their own; skipped
when etcd or the ``aetcd`` client is not installed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.broker_process import BrokerProcess, free_port
from tests.support.cluster import api, ctl
from tests.support.etcd import ETCD, Etcd

pytest.importorskip("aetcd")
pytestmark = pytest.mark.skipif(ETCD is None, reason="etcd not installed (make etcd-deps)")
WAIT = 15.0


def running(node: BrokerProcess) -> dict[str, bool]:
    listed = api(node, "/api/nodes")
    assert isinstance(listed, list)
    return {n["name"]: n["running"] for n in listed}


def wait_for(node: BrokerProcess, want: dict[str, bool]) -> None:
    deadline = time.monotonic() + WAIT
    while (have := running(node)) != want:
        assert time.monotonic() < deadline, have
        time.sleep(0.2)


def test_every_node_sees_the_others_and_a_dead_one_goes_not_running(
        nodes: list[BrokerProcess]) -> None:
    everyone = {"n1": True, "n2": True, "n3": True}
    for node in nodes:
        wait_for(node, everyone)
    own = api(nodes[1], "/api/nodes/n2")
    assert isinstance(own, dict) and own["name"] == "n2" and "mem_used" in own  # full fields
    nodes[2].kill()  # kill -9: its etcd lease expires (5 s)
    wait_for(nodes[0], {"n1": True, "n2": True, "n3": False})
    out = subprocess.run(
        [sys.executable, "-m", "amqpqctl", "--port", str(nodes[0].management_port),
         "cluster_status"], capture_output=True, text=True, timeout=30,
        cwd=Path(__file__).resolve().parents[1])
    assert out.returncode == 0, out.stderr
    disk = out.stdout.split("Disk Nodes")[1].split("Running Nodes")[0].split()
    run = out.stdout.split("Running Nodes")[1].split("Alarms")[0].split()
    assert (sorted(disk), sorted(run)) == (["n1", "n2", "n3"], ["n1", "n2"])
    refused = ctl(nodes[0], "forget_cluster_node", "n2")  # running: refused, one line
    assert refused.returncode != 0 and "n2 is running" in refused.stderr
    assert ctl(nodes[0], "forget_cluster_node", "n3").returncode == 0  # stopped: forgotten
    wait_for(nodes[1], {"n1": True, "n2": True})
    nodes[2].start()  # back: a member and running again everywhere
    wait_for(nodes[1], {"n1": True, "n2": True, "n3": True})


def test_a_stopped_node_is_not_running_and_rejoins_when_it_resumes(
        nodes: list[BrokerProcess]) -> None:
    everyone = {"n1": True, "n2": True, "n3": True}
    wait_for(nodes[0], everyone)
    os.kill(nodes[1].pid, signal.SIGSTOP)  # a partitioned node: its lease expires
    try:
        wait_for(nodes[0], {"n1": True, "n2": False, "n3": True})
    finally:
        os.kill(nodes[1].pid, signal.SIGCONT)
    wait_for(nodes[2], everyone)  # it noticed its lease was gone and registered again


def test_a_second_node_of_the_same_name_is_refused(etcd: Etcd, nodes: list[BrokerProcess],
                                                     tmp_path: Path) -> None:
    twin = subprocess.run(
        [sys.executable, "-m", "amqp_server", "--port", "0", "--data-dir", str(tmp_path),
         "--no-management", "--no-prometheus", "--node-name", "n1", *etcd.args,
         "--cluster-port", "0"],
        capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[1])
    assert twin.returncode == 1
    assert "a node named n1 is already running" in twin.stderr.strip().splitlines()[-1]


def test_an_unreachable_etcd_is_one_line_and_exit_1(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "amqp_server", "--port", "0", "--data-dir", str(tmp_path),
         "--no-management", "--no-prometheus", "--cluster-etcd",
         f"http://127.0.0.1:{free_port()}"],
        capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[1])
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[-1].startswith("amqpq-server: cannot reach etcd at")
