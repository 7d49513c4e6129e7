"""``GET /metrics``: Prometheus text exposition of the broker's gauges, without
authentication, as the ``rabbitmq_prometheus`` plugin serves them (it listens on its own port,
15692; here they share the management port).

Metric names are rabbitmq_prometheus's: ``rabbitmq_connections``, ``rabbitmq_channels``,
``rabbitmq_consumers``, ``rabbitmq_queues``, and per queue (labels ``vhost``, ``queue``, as
its per-object endpoint gives them) ``rabbitmq_queue_messages_ready``,
``rabbitmq_queue_messages_unacked``, ``rabbitmq_queue_messages``,
``rabbitmq_queue_consumers``.

Source: https://www.rabbitmq.com/docs/prometheus, https://prometheus.io/docs/instrumenting/exposition_formats/.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from management.serializers import open_channels
from management.state import state
from queue_store.queue import Queue

routes = web.RouteTableDef()

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _metric(lines: list[str], name: str, help_text: str,
            samples: list[tuple[dict[str, str], int]]) -> None:
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} gauge")
    for labels, value in samples:
        if labels:
            text = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
            lines.append(f"{name}{{{text}}} {value}")
        else:
            lines.append(f"{name} {value}")


def render(request: web.Request) -> str:
    """The exposition text for the broker behind ``request``."""
    broker = state(request).broker
    channels = list(open_channels(broker))
    queues = [(v.name, q) for _, v in sorted(broker.vhosts.items())
              for _, q in sorted(v.queues.items())]
    lines: list[str] = []
    _metric(lines, "rabbitmq_connections", "Connections currently open",
            [({}, len(broker.connections))])
    _metric(lines, "rabbitmq_channels", "Channels currently open", [({}, len(channels))])
    _metric(lines, "rabbitmq_consumers", "Consumers currently connected",
            [({}, sum(len(ch.consumers) for ch in channels))])
    _metric(lines, "rabbitmq_queues", "Queues available", [({}, len(queues))])
    per_queue: tuple[tuple[str, str, Callable[[Queue], int]], ...] = (
        ("rabbitmq_queue_messages_ready", "Messages ready to be delivered to consumers",
         lambda q: q.message_count),
        ("rabbitmq_queue_messages_unacked",
         "Messages delivered to consumers but not yet acknowledged", lambda q: q.unacked_count),
        ("rabbitmq_queue_messages", "Sum of ready and unacknowledged messages - total queue "
         "depth", lambda q: q.message_count + q.unacked_count),
        ("rabbitmq_queue_consumers", "Consumers on a queue", lambda q: q.consumer_count),
    )
    for name, help_text, value in per_queue:
        _metric(lines, name, help_text,
                [({"vhost": vh, "queue": q.name}, int(value(q))) for vh, q in queues])
    return "\n".join(lines) + "\n"


@routes.get("/metrics")
async def metrics(request: web.Request) -> web.Response:
    return web.Response(body=render(request).encode(), headers={"Content-Type": CONTENT_TYPE})
