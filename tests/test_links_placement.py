"""Which node of a cluster runs a shovel or federation link (:func:`links.manager.runs_here`):
one node per link (rendezvous hashing over the running nodes), the same answer on every
node, a link moving only when its own node leaves, and none while no node is known."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from links.manager import runs_here


@dataclass
class Cluster:
    """What runs_here reads of a node's cluster view: its members and its own name."""
    running: list[str]
    me: str
    info: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        self.info = {"name": self.me}

    def nodes(self) -> list[dict[str, Any]]:
        return [{"name": n, "running": True} for n in self.running]


NODES = ["n1", "n2", "n3"]
KEYS = [("/", f"link-{i}") for i in range(60)]


def owners(running: list[str], key: tuple[str, str]) -> list[str]:
    return [me for me in running if runs_here(Cluster(running, me), me, key)]


def test_every_link_runs_on_exactly_one_node_and_all_nodes_agree() -> None:
    placed = [owners(NODES, key) for key in KEYS]
    assert all(len(o) == 1 for o in placed), placed
    assert {o[0] for o in placed} == set(NODES)  # 60 links: each node runs some


def test_a_link_moves_only_when_its_node_leaves() -> None:
    for key in KEYS:
        (owner,) = owners(NODES, key)
        for gone in NODES:
            rest = [n for n in NODES if n != gone]
            (after,) = owners(rest, key)
            if gone != owner:
                assert after == owner, (key, gone)


def test_no_link_runs_before_the_members_are_known_and_always_without_a_cluster() -> None:
    assert not runs_here(Cluster([], "n1"), "n1", KEYS[0])
    assert runs_here(None, "n1", KEYS[0])
