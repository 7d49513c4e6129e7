"""The management HTTP API (RabbitMQ's ``rabbitmq_management`` equivalent) and, in
:mod:`management.prometheus`, the Prometheus metrics; served by aiohttp in the broker's event loop.

Source: https://www.rabbitmq.com/docs/management.
"""

from management.app import (
    DEFAULT_PORT,
    build_app,
    management_port,
    start_management,
    stop_management,
)

__all__ = ["DEFAULT_PORT", "build_app", "management_port", "start_management",
           "stop_management"]
