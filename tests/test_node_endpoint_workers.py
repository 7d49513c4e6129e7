"""The Prometheus endpoint of a cluster node of several workers (each worker a cluster
member) reports the node's clients and counters: its own workers', not the other nodes'
(:func:`management.prometheus.elsewhere.gather`, :func:`management.cluster_view.
own_workers`, ``client_totals``), without processes: a broker stand-in with the runtime's
and the membership's answers."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from management.cluster_view import client_totals, own_workers
from management.prometheus.elsewhere import gather

NODES = [{"name": "n1", "workers": [{"index": 0}, {"index": 1}]},
         {"name": "n2", "workers": [{"index": 2}, {"index": 3}, {"index": None}]}]


class Runtime:
    """What the endpoint calls on ``broker.workers``: member 2, worker 0 of node n2."""

    index = 2

    def __init__(self) -> None:
        self.peer_summaries: dict[int, tuple[dict[str, Any], float]] = {}

    async def gather_json(self, kind: str, only: Any = None) -> list[dict[str, Any]]:
        return [{"name": f"{kind}-of-{w}", "worker": w} for w in (0, 1, 3)]


def _broker(node: str = "n2", nodes: list[dict[str, Any]] = NODES) -> Any:
    return SimpleNamespace(workers=Runtime(), config=SimpleNamespace(node_name=node),
                           cluster=SimpleNamespace(nodes=lambda: nodes), connections=set())


def test_a_node_endpoint_has_its_own_workers_clients_and_counters_only() -> None:
    broker = _broker()
    assert own_workers(broker) == {3}

    async def scrape() -> Any:
        now = asyncio.get_running_loop().time()
        for index in (0, 1, 3):
            broker.workers.peer_summaries[index] = (
                {"index": index, "connections": 10 + index, "channels": 1, "consumers": 0,
                 "message_counts": {"publish": 100 * (index + 1)}}, now)
        return await gather(broker), client_totals(broker, own_workers(broker))

    there, totals = asyncio.run(scrape())
    assert [c["name"] for c in there.channels] == ["channels-of-3"]
    assert [c["name"] for c in there.connections] == ["connections-of-3"]
    assert there.counts == {"publish": 400}  # worker 3's, not n1's workers' 100 and 200
    assert totals == {"connections": 13, "channels": 1, "consumers": 0}


def test_a_node_of_one_worker_adds_nothing() -> None:
    broker = _broker("n1", [{"name": "n1", "workers": [{"index": 2}]}])
    assert own_workers(broker) == set()
    there = asyncio.run(gather(broker))
    assert (there.channels, there.connections, dict(there.counts)) == ([], [], {})
