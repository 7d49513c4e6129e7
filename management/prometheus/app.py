"""The Prometheus listener: ``/metrics``, ``/metrics/per-object`` and
``/metrics/detailed`` on their own port (15692, as the ``rabbitmq_prometheus`` plugin), without
authentication, in the broker's event loop.

Each broker gets its own ``CollectorRegistry`` holding one :class:`BrokerCollector`; the
exposition text is ``prometheus_client``'s (Prometheus text 0.0.4, or OpenMetrics 1.0.0 when
the scraper's ``Accept`` asks for ``application/openmetrics-text``), gzip-compressed when the
scraper accepts it.

``/metrics/detailed`` takes ``family=NAME`` (repeatable; RabbitMQ's family names,
:data:`~management.prometheus.collectors.DETAILED_FAMILIES`, others ignored) and
``vhost=NAME`` (repeatable; only those vhosts' queues). Without a family it answers only the
identity families, as RabbitMQ does.

Source: https://www.rabbitmq.com/docs/prometheus#metric-aggregation,
https://www.rabbitmq.com/docs/prometheus#detailed-endpoint.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from management.prometheus.collectors import BrokerCollector, NodeIdentity, Scope
from management.prometheus.elsewhere import gather
from management.serve import runner_port, serve_app, stop_runner
from management.state import ManagementState

if TYPE_CHECKING:
    from broker.broker import Broker

log = logging.getLogger("amqpq.prometheus")

DEFAULT_PORT = 15692
COLLECTOR_KEY: web.AppKey[BrokerCollector] = web.AppKey("amqpq_prometheus", BrokerCollector)


def _registry(collector: BrokerCollector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


async def _respond(request: web.Request, scope: Scope) -> web.Response:
    collector = request.app[COLLECTOR_KEY]
    # --workers N: the other workers' channels, connections and counters (one node)
    collector = collector.scoped(scope, await gather(collector.st.broker))
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    response = web.Response(body=encoder(_registry(collector)),
                            headers={"Content-Type": content_type})
    if "gzip" in request.headers.get("Accept-Encoding", ""):
        response.enable_compression()
    return response


async def metrics(request: web.Request) -> web.Response:
    """``/metrics``: every family, aggregated (no per-object labels)."""
    return await _respond(request, Scope())


async def per_object(request: web.Request) -> web.Response:
    """``/metrics/per-object``: every family, one sample per queue/channel/connection."""
    return await _respond(request, Scope(per_object=True))


async def detailed(request: web.Request) -> web.Response:
    """``/metrics/detailed?family=...&vhost=...``: the families asked for, per object."""
    families = frozenset(request.query.getall("family", []))
    vhosts = request.query.getall("vhost", [])
    return await _respond(request, Scope(per_object=True, families=families,
                                         vhosts=frozenset(vhosts) if vhosts else None))


def build_app(broker: Broker, identity: NodeIdentity, amqp_host: str = "127.0.0.1",
              amqp_port: int = 5672) -> web.Application:
    """The Prometheus application for ``broker`` (the AMQP listener's address names
    connections and channels in per-object labels, as in the management API)."""
    app = web.Application()
    st = ManagementState(broker, amqp_host, amqp_port, node=identity.node)
    app[COLLECTOR_KEY] = BrokerCollector(st, identity)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/metrics/per-object", per_object)
    app.router.add_get("/metrics/detailed", detailed)
    return app


async def start_prometheus(broker: Broker, identity: NodeIdentity, host: str | Sequence[str],
                           port: int = DEFAULT_PORT, amqp_port: int = 5672,
                           optional: Sequence[str] = ()) -> web.AppRunner:
    """Serve the metrics on ``port`` of every address in ``host`` (0: a free port, see
    :func:`prometheus_port`).

    Raises:
        ListenError (an OSError): an address cannot be bound.
    """
    hosts = [host] if isinstance(host, str) else list(host)
    runner = await serve_app(build_app(broker, identity, hosts[0], amqp_port), hosts, port,
                             optional)
    log.info("Prometheus metrics listening on %s port %d", ", ".join(hosts),
             runner_port(runner))
    return runner


prometheus_port = runner_port  # the port a Prometheus runner listens on
stop_prometheus = stop_runner  # stop serving (idempotent; None is accepted)
