"""A node that joins a cluster is grown into quorum queues short of
``--quorum-target-group-size`` (RabbitMQ 4's continuous membership reconciliation): its own
etcd and nodes, ``-m slow``. Placement, rebalancing and maintenance mode run on the shared
three-node cluster of ``tests/test_cluster_membership.py``. Skipped without etcd."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.cluster import all_in_sync, api, cluster_node, declare, wait_until
from tests.support.etcd import ETCD, Etcd, running_etcd

pytest.importorskip("aetcd")
pytestmark = pytest.mark.skipif(ETCD is None, reason="etcd not installed (make etcd-deps)")


@pytest.mark.slow
def test_a_node_that_joins_is_grown_into_queues_short_of_the_target_size(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--quorum-target-group-size 3``: a queue declared on a two-node cluster gets the
    third node as a member once it starts (checked once a second here)."""
    monkeypatch.setenv("AMQPQ_QUORUM_RECONCILE_SECONDS", "1")  # the brokers' environment
    started: list[BrokerProcess] = []
    with running_etcd(tmp_path) as etcd:
        try:
            grow_cluster(etcd, tmp_path, started)
        finally:
            for node in started:
                node.close()


def grow_cluster(etcd: Etcd, tmp_path: Path, started: list[BrokerProcess]) -> None:
    """g1 and g2 up, a queue on them, then g3: it becomes the third member."""
    for name in ("g1", "g2"):
        started.append(cluster_node(tmp_path, name, etcd, "--quorum-target-group-size",
                                    "3").start())
    declare(started[0], "grow-me")
    wait_until(lambda: sorted(api(started[0], "/api/queues/%2F/grow-me").get("members")
                              or []) == ["g1", "g2"], "two members")
    started.append(cluster_node(tmp_path, "g3", etcd, "--quorum-target-group-size",
                                "3").start())
    wait_until(lambda: sorted(api(started[1], "/api/queues/%2F/grow-me").get("members")
                              or []) == ["g1", "g2", "g3"], "grown to three members")
    wait_until(lambda: all_in_sync(started[2], ["grow-me"]), "the new member in sync")
