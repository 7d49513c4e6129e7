"""A quorum queue follower that was stopped while its leader took many messages catches up,
once restarted, by fetching what it lacks from its own offset: the leader reads those entries
from its replica log file (they are below the entries it keeps in RAM) instead of sending a
snapshot of the whole queue, and says so in its log. Three real broker processes and etcd
(slow: about half a minute)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks.quorum_bench import publish
from tests.support.cluster import QQ, api, cluster_and_etcd, connect, wait_until
from tests.support.etcd import ETCD

pytestmark = pytest.mark.skipif(ETCD is None, reason="etcd not installed (make etcd-deps)")

QUEUE = "catch.up"
FROM_FILE = re.compile(r"node (\d+) fetches from offset (\d+), below the entries kept in RAM "
                       r"\(from offset (\d+)\): entries sent from the log file")
CAUGHT_UP = re.compile(r"node (\d+) caught up from the log file, offset (\d+) to (\d+)")


@pytest.mark.slow
def test_a_restarted_follower_fetches_the_tail_it_missed_from_the_leaders_log_file(
        tmp_path: Path) -> None:
    with cluster_and_etcd(tmp_path) as nodes:
        n1, n3 = nodes["n1"], nodes["n3"]
        conn = connect(n1)
        conn.channel().queue_declare(QUEUE, durable=True, arguments=QQ)
        conn.close()
        path = f"/api/queues/%2F/{QUEUE}"
        wait_until(lambda: len(api(n1, path).get("in_sync", [])) == 3, "3 in-sync replicas")
        publish(n1.port, QUEUE, 2_000, 500)
        wait_until(lambda: api(n3, path).get("messages") == 2_000, "n3 has the first 2,000")
        n3.stop()
        wait_until(lambda: len(api(n1, path).get("in_sync", [])) == 2, "n3 out of sync")
        # past twice the entries the leader keeps in RAM (8,192): its log start moves on
        publish(n1.port, QUEUE, 40_000, 1_000)
        n3.start()
        wait_until(lambda: len(api(n1, path).get("in_sync", [])) == 3, "n3 back in sync", 120)
        text = n1.log_text()
        found = FROM_FILE.search(text)
        assert found is not None, text[-3000:]
        assert int(found.group(2)) >= 2_000  # its own offset, not 0: the tail it lacks
        assert int(found.group(3)) > int(found.group(2))
        assert "snapshot at offset" not in text
        wait_until(lambda: CAUGHT_UP.search(n1.log_text()), "the caught-up line", 30)
        n1.stop()  # n3 may now lead: it holds every message
        wait_until(lambda: api(n3, path).get("messages") == 42_000, "42,000 on n3's side", 60)
