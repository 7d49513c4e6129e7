"""The cluster's permanent id (RabbitMQ's ``internal_cluster_id`` global parameter,
:mod:`broker.cluster_identity`), without processes: the first proposal ordered wins on every
node, a whole access document without it keeps it, an import replaces it (as RabbitMQ 3.10.8
does), a broker without a cluster takes its data dir's, and a cluster node forgets the one
its saved definitions held before it reads the cluster's state."""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker.access_sync import access_document, apply_access, apply_delta
from broker.broker import Broker
from broker.cluster_identity import (
    adopt_cluster_id,
    cluster_permanent_id,
    forget_saved_cluster_id,
    new_cluster_id,
)
from broker.config import BrokerConfig
from vhosts.definitions import export_definitions, import_definitions
from vhosts.extras import INTERNAL_CLUSTER_ID


def _id(broker: Broker) -> object:
    return broker.extras.global_value(INTERNAL_CLUSTER_ID)


def test_the_first_proposal_in_the_log_wins_on_every_node() -> None:
    nodes = [Broker(BrokerConfig()) for _ in range(3)]
    log = [{"op": "adopt_cluster_id", "value": f"rabbitmq-cluster-id-{n}"} for n in "abc"]
    for node in nodes:  # every node applies the one order
        results = [apply_delta(node, delta) for delta in log]
        assert results == [True, False, False]
    assert {_id(n) for n in nodes} == {"rabbitmq-cluster-id-a"}


def test_a_document_without_it_keeps_it_and_an_import_replaces_it() -> None:
    node = Broker(BrokerConfig())
    apply_delta(node, {"op": "adopt_cluster_id", "value": "rabbitmq-cluster-id-a"})
    older = Broker(BrokerConfig())  # a document made before its maker adopted the id
    older.add_vhost("docs")
    assert apply_access(node, access_document(older)) is True
    assert _id(node) == "rabbitmq-cluster-id-a" and "docs" in node.vhosts
    doc = export_definitions(node)
    assert {"name": INTERNAL_CLUSTER_ID, "value": "rabbitmq-cluster-id-a"} in \
        doc["global_parameters"]
    import_definitions(node, {"global_parameters": [
        {"name": INTERNAL_CLUSTER_ID, "value": "rabbitmq-cluster-id-imported"}]})
    assert _id(node) == "rabbitmq-cluster-id-imported"
    assert len(node.extras.global_parameters) == 1


def test_without_a_cluster_the_data_dirs_id_is_taken_and_kept(tmp_path: Path) -> None:
    broker = Broker(BrokerConfig())
    got = asyncio.run(adopt_cluster_id(broker, tmp_path))
    assert got == cluster_permanent_id(tmp_path) == _id(broker)
    assert str(got).startswith("rabbitmq-cluster-id-") and len(str(got)) == 20 + 22
    again = Broker(BrokerConfig())
    assert asyncio.run(adopt_cluster_id(again, tmp_path)) == got  # after a restart
    imported = Broker(BrokerConfig())  # saved definitions carry one (e.g. imported): kept
    imported.extras.set_global(INTERNAL_CLUSTER_ID, "rabbitmq-cluster-id-saved")
    assert asyncio.run(adopt_cluster_id(imported, tmp_path)) == "rabbitmq-cluster-id-saved"


def test_a_cluster_node_forgets_its_saved_id_before_reading_the_clusters() -> None:
    node = Broker(BrokerConfig())
    node.extras.set_global("other", 1)
    node.extras.set_global(INTERNAL_CLUSTER_ID, new_cluster_id())
    forget_saved_cluster_id(node)
    assert _id(node) is None and node.extras.global_value("other") == 1
