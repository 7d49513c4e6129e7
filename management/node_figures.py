"""A node's resource figures as RabbitMQ's ``/api/nodes`` shows them: memory (RSS) and its
high watermark, free disk on the data dir's file system and its limit, file descriptors,
sockets, threads, uptime. Computed by :mod:`management.routes.nodes` for the node it runs on,
and sent once a second by every cluster node to the others (the runtime's summary,
:class:`~amqp_server.workers.worker_stats.PeerStats`) so that any node's ``/api/nodes``
shows every node's.

Source: https://www.rabbitmq.com/docs/management#http-api (GET /api/nodes: ``mem_used``,
``mem_limit``, ``disk_free``, ``disk_free_limit``, ``fd_used``, ``fd_total``,
``sockets_used``, ``sockets_total``, ``proc_used``, ``uptime``).
"""

from __future__ import annotations

import os
import resource
import shutil
import threading
import time
from typing import TYPE_CHECKING, Any

from broker.alarms import DEFAULT_WATERMARK, process_rss, total_memory

if TYPE_CHECKING:
    from broker.broker import Broker

__all__ = ["resource_figures"]


def _fds_used() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def resource_figures(broker: Broker, started_at: float) -> dict[str, Any]:
    """This process's figures (bytes, counts; ``uptime`` in ms since ``started_at``, a
    ``time.time()``)."""
    config = broker.config
    alarms = broker.alarms
    watermark = config.memory_high_watermark or DEFAULT_WATERMARK
    mem_limit = alarms.limit if alarms is not None else (
        int(watermark * total_memory()) if watermark <= 1.0 else int(watermark))
    try:
        disk_free = shutil.disk_usage(config.data_dir).free
    except OSError:
        disk_free = 0
    fd_total = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return {
        "os_pid": str(os.getpid()), "uptime": int((time.time() - started_at) * 1000),
        "processors": os.cpu_count() or 1,
        "mem_used": process_rss(), "mem_limit": mem_limit,
        "disk_free": disk_free, "disk_free_limit": config.disk_free_limit,
        "fd_used": _fds_used(), "fd_total": fd_total,
        "sockets_used": len(broker.connections),
        "sockets_total": config.max_connections or fd_total,
        "proc_used": threading.active_count(),
    }
