"""What every management handler needs: the broker, where it listens, the node name.

Handlers get it with :func:`state` from the request's application.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiohttp import web

from management.rates import Rates

if TYPE_CHECKING:
    from broker.broker import Broker

#: The RabbitMQ release whose management API this one follows (``management_version``).
RABBITMQ_VERSION = "3.10.8"


def node_name() -> str:
    """``amqpq@<short host name>``, in the place of RabbitMQ's ``rabbit@<host>``."""
    return f"amqpq@{socket.gethostname().split('.')[0] or 'localhost'}"


@dataclass
class ManagementState:
    """The broker behind one management app.

    Attributes:
        broker: shared broker state (used on the event-loop thread only).
        amqp_host, amqp_port: the AMQP listener (connection names ``peer -> host:port``).
        http_port: the management listener's port (set once it listens).
        rates: samples of the counters shown, for their ``*_details.rate``.
    """

    broker: Broker
    amqp_host: str = "127.0.0.1"
    amqp_port: int = 5672
    http_port: int = 15672
    node: str = field(default_factory=node_name)
    started_at: float = field(default_factory=time.time)
    rates: Rates = field(default_factory=Rates)

    @property
    def http_protocol(self) -> str:
        """``https`` when the management listener serves TLS, else ``http`` (the listener's
        protocol name in ``/api/overview`` and the health checks, as RabbitMQ names them)."""
        return "https" if self.broker.config.management.certfile else "http"


STATE_KEY: web.AppKey[ManagementState] = web.AppKey("amqpq_management", ManagementState)


def state(request: web.Request) -> ManagementState:
    """The :class:`ManagementState` of the app serving ``request``."""
    return request.app[STATE_KEY]
