"""Federation (RabbitMQ's ``rabbitmq_federation`` plugin): ``federation-upstream`` and
``federation-upstream-set`` runtime parameters, the ``federation-upstream`` /
``federation-upstream-set`` / ``federation-upstream-pattern`` policy keys, federated
exchanges and federated queues. :mod:`federation.params` validates the parameters,
:mod:`federation.ends` builds a link's two ends (over :mod:`links.link`, the shovels' link),
:mod:`federation.manager` runs the links in the broker process and gives their status. The
upstream side's ``x-federation-upstream`` exchange type is in
:mod:`exchanges.federation_upstream`.

Layer: beside ``shovel``, above ``links`` and ``broker``, below ``management`` (whose routes
show the status) and the AMQP server (which starts the manager).

Source: https://www.rabbitmq.com/docs/federation, /docs/federation-reference.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

from federation.manager import FederationManager, manager_of
from links.local import LocalBroker

if TYPE_CHECKING:
    from broker.broker import Broker
    from broker.config import BrokerConfig

__all__ = ["FederationManager", "manager_of", "start_for_server"]

_ANY = {"0.0.0.0": "127.0.0.1", "::": "::1"}


def start_for_server(broker: Broker, config: BrokerConfig, amqp_port: int) -> FederationManager:
    """Start the manager of ``broker``'s federation links in the running loop; the
    downstream end reaches this broker on ``amqp_port`` of its first listen address as the
    default user. The cluster name (upstream queue names, cycle detection) is the node's
    name, as RabbitMQ's default cluster name is."""
    host = config.listen_hosts[0] if config.listen_hosts else "127.0.0.1"
    host = _ANY.get(host, host)
    node = config.node_name or f"amqpq@{socket.gethostname().split('.')[0] or 'localhost'}"
    local = LocalBroker(host=f"[{host}]" if ":" in host else host, port=amqp_port,
                        user=config.default_user, password=config.default_pass)
    manager = FederationManager(broker, local, node, node)
    manager.start()
    return manager
