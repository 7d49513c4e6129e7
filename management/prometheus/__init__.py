"""Prometheus metrics with the ``rabbitmq_prometheus`` plugin's names, on their own port
(15692), so RabbitMQ's published Grafana dashboards work unchanged.

:mod:`~management.prometheus.collectors` reads the broker at scrape time,
:mod:`~management.prometheus.app` serves it, :mod:`~management.prometheus.options` is the
command line (``--prometheus-port``, ``--no-prometheus``).

Source: https://www.rabbitmq.com/docs/prometheus.
"""

from management.prometheus.app import (
    DEFAULT_PORT,
    build_app,
    prometheus_port,
    start_prometheus,
    stop_prometheus,
)

__all__ = ["DEFAULT_PORT", "build_app", "prometheus_port", "start_prometheus",
           "stop_prometheus"]
