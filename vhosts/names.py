"""Names in a vhost: the predeclared exchanges, the reserved ``amq.`` prefix, the default
exchange ``""``, and server-generated queue names and consumer tags, with RabbitMQ's texts.

Source: RabbitMQ ``rabbit_exchange:declare_default/1``, ``rabbit_channel`` (reserved names,
``rabbit_guid:binary/2`` for ``amq.gen-``/``amq.ctag-`` names); AMQP 0-9-1 spec 1.6.2.1,
1.7.2.1.
"""

from __future__ import annotations

import base64
import os
from typing import Any

from amqp_common.errors import AccessRefused, PreconditionFailed
from queue_store.queue_args import queue_type_of

# Predeclared exchanges of every vhost (RabbitMQ's rabbit_exchange:declare_default/1).
DEFAULT_EXCHANGES = {
    "amq.direct": "direct",
    "amq.fanout": "fanout",
    "amq.topic": "topic",
    "amq.headers": "headers",
    "amq.match": "headers",
}


def server_generated_name(prefix: str) -> str:
    """``amq.gen-<22 chars>``/``amq.ctag-<22 chars>``: 16 random bytes, URL-safe base64."""
    return prefix + base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()


def check_server_named_allowed(arguments: dict[str, Any]) -> None:
    """Raises PreconditionFailed (406) for a server-named quorum queue (RabbitMQ refuses
    them: a quorum queue outlives its connection)."""
    if queue_type_of(arguments) == "quorum":
        raise PreconditionFailed(
            "Cannot declare a server-named queue for type rabbit_quorum_queue")


def check_not_default_exchange(name: str) -> None:
    """Raises AccessRefused (403) for the default exchange ``""``."""
    if name == "":
        raise AccessRefused("operation not permitted on the default exchange")


def check_name(kind: str, name: str) -> None:
    """Raises AccessRefused (403) for a name with the reserved ``amq.`` prefix."""
    if name.startswith("amq."):
        raise AccessRefused(f"{kind} name '{name}' contains reserved prefix 'amq.*'")
