"""Command-line options of the Prometheus listener and what the server does with them.

``--prometheus-port`` (default 15692, the ``rabbitmq_prometheus`` plugin's; when ``--port 0``
is given without it, 0 too, so a broker started on free ports does not take RabbitMQ's) and
``--no-prometheus``. The listener binds the AMQP host. An explicitly requested port that is
taken stops the start (``OSError``); the default one being taken only logs an error, so that a
broker still runs beside a RabbitMQ that holds 15692. The parsed options are
``BrokerConfig.prometheus`` (:class:`~broker.config.PrometheusOptions`).

Source: https://www.rabbitmq.com/docs/prometheus#configuration (``prometheus.tcp.port``).
"""

from __future__ import annotations

import argparse
import logging
from typing import TYPE_CHECKING

from aiohttp import web

from broker.cluster_identity import cluster_permanent_id
from broker.config import PrometheusOptions
from management.prometheus.app import DEFAULT_PORT, start_prometheus
from management.prometheus.collectors import NodeIdentity
from management.serve import start_listener
from management.state import node_name

if TYPE_CHECKING:
    from broker.broker import Broker
    from broker.config import BrokerConfig

log = logging.getLogger("amqpq.prometheus")


__all__ = ["PrometheusOptions", "add_arguments", "cluster_permanent_id", "from_args",
           "start_for_server"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--prometheus-port`` and ``--no-prometheus`` to ``parser``."""
    parser.add_argument("--prometheus-port", type=int, default=None,
                        help=f"Prometheus metrics port (default {DEFAULT_PORT}; 0 with "
                        "--port 0)")
    parser.add_argument("--no-prometheus", action="store_true",
                        help="do not serve Prometheus metrics")


def from_args(args: argparse.Namespace, parser: argparse.ArgumentParser
              ) -> PrometheusOptions:
    """The options of :func:`add_arguments` as parsed (``parser.error``, exit 2, on a bad
    port)."""
    port = args.prometheus_port
    if port is not None and not 0 <= port <= 65535:
        parser.error(f"--prometheus-port must be 0..65535, got {port}")
    return PrometheusOptions(not args.no_prometheus, port)


async def start_for_server(broker: Broker, config: BrokerConfig,
                           amqp_port: int) -> web.AppRunner | None:
    """Start the Prometheus listener as the options say (None when disabled or not
    started).

    Raises:
        OSError: an explicitly requested port cannot be bound.
    """
    opts = config.prometheus
    if not opts.enabled:
        return None
    node = config.node_name or node_name()  # a cluster node's --node-name, as the API's
    identity = NodeIdentity(node=node, cluster=node,  # the id as at start: the fallback
                            cluster_id=cluster_permanent_id(config.data_dir),
                            version=config.version)
    return await start_listener(
        lambda port: start_prometheus(broker, identity, config.listen_hosts, port,
                                      amqp_port=amqp_port, optional=config.optional_hosts),
        opts.port, config.port, DEFAULT_PORT, "Prometheus metrics", log)
