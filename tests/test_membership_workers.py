"""A cluster node of several workers as the membership lists it (no etcd: the registrations
read from it are set by hand): one entry per node, with its workers
(:meth:`amqp_server.cluster.membership.Membership.nodes`)."""

from __future__ import annotations

from amqp_server.cluster.membership import Membership, member_name
from broker.config import EtcdOptions


def test_workers_register_under_member_names_and_are_listed_by_node() -> None:
    assert member_name("n1", 0) == "n1"  # a node keeps its name, index and data
    assert member_name("n1", 1) == "n1/worker-1"
    m = Membership(EtcdOptions(url="http://127.0.0.1:2379"), "n1", {}, worker=1)
    assert (m.node, m.member, m.info["node"], m.info["worker"]) == ("n1", "n1/worker-1",
                                                                    "n1", 1)
    m.running = {
        "n1": {"name": "n1", "node": "n1", "worker": 0, "index": 1, "amqp_port": 5672},
        "n1/worker-1": {"name": "n1/worker-1", "node": "n1", "worker": 1, "index": 0},
        "n2": {"name": "n2", "index": 2},  # a node of one worker registered by an older amqpq
    }
    m.known = sorted([*m.running, "n3", "n3/worker-1"])  # n3 stopped
    listed = {n["name"]: n for n in m.nodes()}
    assert sorted(listed) == ["n1", "n2", "n3"]
    assert listed["n1"]["running"] and listed["n1"]["amqp_port"] == 5672
    assert listed["n1"]["index"] == 1  # worker 0's registration stands for the node
    assert listed["n1"]["workers"] == [{"index": 1, "worker": 0, "running": True},
                                       {"index": 0, "worker": 1, "running": True}]
    assert listed["n2"]["workers"] == [{"index": 2, "worker": 0, "running": True}]
    assert not listed["n3"]["running"]
    assert [w["worker"] for w in listed["n3"]["workers"]] == [0, 1]
