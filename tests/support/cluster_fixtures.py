"""Module-scoped pytest fixtures of cluster tests (a pytest plugin, ``tests/conftest.py``'s
``pytest_plugins``): ``etcd``, one etcd with TLS and auth (:func:`tests.support.etcd.
running_etcd`), and ``nodes``, three broker processes joined through it
(:func:`tests.support.cluster.running_cluster`). A module defines its own to change them.

``shared_cluster``: the same etcd and three nodes, one start for the modules in a row that
use it (:mod:`tests.support.shared_fixtures`); such a module leaves the cluster as it found
it (names of its own, no node stopped or killed) and takes it with::

    etcd, nodes = on_the_shared_cluster()
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.cluster import running_cluster
from tests.support.etcd import Etcd, running_etcd
from tests.support.shared_fixtures import shared_while_consecutive


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Etcd]:
    with running_etcd(tmp_path_factory.mktemp("etcd")) as running:
        yield running


@pytest.fixture(scope="module")
def nodes(etcd: Etcd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[BrokerProcess]]:
    with running_cluster(tmp_path_factory.mktemp("cluster"), etcd) as started:
        yield started


@dataclass
class SharedCluster:
    """etcd and nodes n1, n2, n3 joined through it (``shared_cluster``)."""

    etcd: Etcd
    nodes: list[BrokerProcess]


@contextmanager
def _shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedCluster]:
    with running_etcd(tmp_path_factory.mktemp("etcd")) as running, \
            running_cluster(tmp_path_factory.mktemp("cluster"), running) as started:
        yield SharedCluster(running, started)


shared_cluster = shared_while_consecutive("shared_cluster", _shared_cluster)


def on_the_shared_cluster() -> tuple[Callable[..., Etcd], Callable[..., list[BrokerProcess]]]:
    """The ``etcd`` and ``nodes`` fixtures of a module that runs on ``shared_cluster``
    (``etcd, nodes = on_the_shared_cluster()`` at module level): the shared etcd and its
    nodes n1, n2, n3 instead of a cluster of the module's own."""

    @pytest.fixture(name="etcd")
    def shared_etcd(shared_cluster: SharedCluster) -> Etcd:
        return shared_cluster.etcd

    @pytest.fixture(name="nodes")
    def shared_nodes(shared_cluster: SharedCluster) -> list[BrokerProcess]:
        return shared_cluster.nodes

    return shared_etcd, shared_nodes
