"""The cluster's permanent id: RabbitMQ's ``internal_cluster_id`` global parameter.

RabbitMQ makes ``rabbitmq-cluster-id-<22 url-safe base64 characters>`` once per cluster
(``rabbit_nodes:persistent_cluster_id/0``), keeps it as the global runtime parameter
``internal_cluster_id`` in its metadata store (so every node of a cluster has the same one,
``GET /api/global-parameters`` and a definitions export show it, and an import or a PUT
replaces it; checked on 3.10.8) and labels ``rabbitmq_identity_info`` with it
(``rabbitmq_cluster_permanent_id``).

Here: a broker without a cluster takes the id saved in its definitions, else the one kept in
``DATA_DIR/cluster_permanent_id`` (made there once; amqpq's Prometheus endpoint used that file
before the parameter existed, so an upgraded node keeps its id). A cluster node whose state
lacks it once it has read the cluster's state (its saved definitions' id does not count:
:func:`forget_saved_cluster_id`) proposes its own as an access delta (``adopt_cluster_id``)
ordered through etcd like every access change: applied on every node in the one order, the
first one wins and the later ones change nothing, so all nodes agree, and a node that joins
later reads it with the rest of the access state (the metadata snapshot and log). A
definitions import that carries one replaces it on every node, as on RabbitMQ.

Source: https://www.rabbitmq.com/docs/prometheus (``rabbitmq_identity_info``),
``rabbit_nodes.erl`` (``persistent_cluster_id``).
"""

from __future__ import annotations

import base64
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from broker.access_sync import change_access
from vhosts.extras import INTERNAL_CLUSTER_ID

if TYPE_CHECKING:
    from broker.broker import Broker

log = logging.getLogger("amqpq.cluster")

CLUSTER_ID_FILE = "cluster_permanent_id"  # in the data dir

__all__ = ["CLUSTER_ID_FILE", "adopt_cluster_id", "cluster_permanent_id",
           "forget_saved_cluster_id", "new_cluster_id"]


def new_cluster_id() -> str:
    """A fresh ``rabbitmq-cluster-id-<random>`` (RabbitMQ's shape: 16 random bytes)."""
    return "rabbitmq-cluster-id-" + base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")


def cluster_permanent_id(data_dir: Path) -> str:
    """The id kept in ``data_dir/cluster_permanent_id``, made (and kept) on first use; a
    fresh one per call when the data dir cannot be written (logged)."""
    path = Path(data_dir) / CLUSTER_ID_FILE
    try:
        text = path.read_text(encoding="ascii").strip()
        if text:
            return text
    except (OSError, UnicodeDecodeError):
        pass
    made = new_cluster_id()
    try:
        path.write_text(made + "\n", encoding="ascii")
    except OSError as exc:
        log.warning("cannot keep the cluster id in %s: %s", path, exc.strerror)
    return made


async def adopt_cluster_id(broker: Broker, data_dir: Path) -> str | None:
    """Give ``broker`` its cluster's ``internal_cluster_id`` when its state has none (see
    the module docstring): this node's id (:func:`cluster_permanent_id` of ``data_dir``)
    set at once without a cluster, proposed through etcd in one (where an earlier
    proposal may win). Returns the id the broker has then (None only if the cluster's
    ordering did not answer)."""
    extras = broker.extras
    if extras.global_value(INTERNAL_CLUSTER_ID) is None:
        await change_access(broker, {"op": "adopt_cluster_id",
                                     "value": cluster_permanent_id(data_dir)})
    return extras.global_value(INTERNAL_CLUSTER_ID)


def forget_saved_cluster_id(broker: Broker) -> None:
    """A cluster node, before it reads the cluster's state: the id its saved definitions
    hold does not count (it may be another cluster's, or a single node's it was before),
    only the one the cluster's log and snapshot give it."""
    extras = broker.extras
    extras.global_parameters[:] = [p for p in extras.global_parameters
                                   if p.get("name") != INTERNAL_CLUSTER_ID]
