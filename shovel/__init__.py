"""Dynamic shovels (RabbitMQ's ``rabbitmq_shovel`` plugin): runtime parameters of component
``shovel`` that move messages from a queue or exchange on one AMQP 0-9-1 broker to another
(or the same) broker. :mod:`shovel.params` validates the parameter, :mod:`links.link` moves
messages (aiormq at both ends; meant for federation links too), :mod:`shovel.ends` turns a
shovel into a link's ends, :mod:`shovel.manager` runs them in the broker process.

Layer: above ``broker`` (it reads the broker's parameters), below ``management`` (whose
routes show the status) and the AMQP server (which starts the manager).

Source: https://www.rabbitmq.com/docs/shovel-dynamic.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

from links.local import LocalBroker
from shovel.manager import ShovelManager, manager_of

if TYPE_CHECKING:
    from broker.broker import Broker
    from broker.config import BrokerConfig

__all__ = ["LocalBroker", "ShovelManager", "manager_of", "start_for_server"]

_ANY = {"0.0.0.0": "127.0.0.1", "::": "::1"}


def start_for_server(broker: Broker, config: BrokerConfig, amqp_port: int) -> ShovelManager:
    """Start the manager of ``broker``'s shovels in the running loop; ``amqp://`` reaches
    this broker on ``amqp_port`` of its first listen address as the default user."""
    host = config.listen_hosts[0] if config.listen_hosts else "127.0.0.1"
    host = _ANY.get(host, host)
    node = config.node_name or f"amqpq@{socket.gethostname().split('.')[0] or 'localhost'}"
    local = LocalBroker(host=f"[{host}]" if ":" in host else host, port=amqp_port,
                        user=config.default_user, password=config.default_pass)
    manager = ShovelManager(broker, local, node)
    manager.start()
    return manager
