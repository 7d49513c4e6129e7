"""Module-scoped pytest fixtures of cluster tests (a pytest plugin, ``tests/conftest.py``'s
``pytest_plugins``): ``etcd``, one etcd with TLS and auth (:func:`tests.support.etcd.
running_etcd`), and ``nodes``, three broker processes joined through it
(:func:`tests.support.cluster.running_cluster`). A module defines its own to change them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.cluster import running_cluster
from tests.support.etcd import Etcd, running_etcd


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Etcd]:
    with running_etcd(tmp_path_factory.mktemp("etcd")) as running:
        yield running


@pytest.fixture(scope="module")
def nodes(etcd: Etcd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[BrokerProcess]]:
    with running_cluster(tmp_path_factory.mktemp("cluster"), etcd) as started:
        yield started
