"""The ``message_groups`` object of a queue declared with ``x-group-by`` (amqpq's own field of
``GET /api/queues/{vhost}/{name}``; RabbitMQ has no message groups).

Shape::

    "message_groups": {
        "group_by": "header:JMSXGroupID",
        "keys": 120,          # keys with messages staged in RAM or unacknowledged
        "keys_held": 7,       # keys a consumer (or Basic.Get) holds
        "consumers": [        # every consumer, then cancelled ones still holding keys
            {"consumer_tag": "ctag-1", "channel_details": {...}, "keys": 4, "unacked": 9},
            {"consumer_tag": null, "channel_details": null, "keys": 1, "unacked": 1}  # Basic.Get
        ]
    }
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from queue_store.consumer import Consumer
from queue_store.grouped_queue import GroupedQueue
from queue_store.queue import Queue


def message_groups_json(q: Queue, channel_details: Callable[[Consumer], dict[str, Any]]
                        ) -> dict[str, Any] | None:
    """The ``message_groups`` object of ``q`` (None for a queue without groups);
    ``channel_details(consumer)`` gives a consumer's ``channel_details`` as /api/consumers
    shows it."""
    if not isinstance(q, GroupedQueue):
        return None
    stats = q.group_stats()
    consumers = []
    for holder, keys, unacked in stats["holders"]:
        is_consumer = isinstance(holder, Consumer)
        consumers.append({
            "consumer_tag": holder.tag if is_consumer else None,
            "channel_details": channel_details(holder) if is_consumer else None,
            "keys": keys, "unacked": unacked})
    return {"group_by": stats["group_by"], "keys": stats["keys"],
            "keys_held": stats["keys_held"], "consumers": consumers}
