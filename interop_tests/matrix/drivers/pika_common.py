"""Pieces shared by the three pika drivers."""

from __future__ import annotations

from typing import Any

from interop_tests.matrix.driver import NA, msg, text


def parameters(url: str, heartbeat: int | None):
    """``pika.URLParameters`` with short timeouts (pika logs in with PLAIN only)."""
    import pika

    params = pika.URLParameters(url)
    params.connection_attempts = 1
    params.socket_timeout = 5
    params.stack_timeout = 10
    params.blocked_connection_timeout = 30
    if heartbeat is not None:
        params.heartbeat = heartbeat
    return params


def properties(props: dict | None):
    from pika import BasicProperties

    return BasicProperties(**(props or {}))


def message(method: Any, props: Any, body: bytes, *, message_count: int | None = None) -> dict:
    return msg(
        body=body,
        delivery_tag=method.delivery_tag,
        redelivered=method.redelivered,
        exchange=method.exchange,
        routing_key=method.routing_key,
        message_count=message_count,
        properties={name: getattr(props, name, None) for name in
                    ("content_type", "delivery_mode", "priority", "message_id",
                     "correlation_id", "user_id", "headers")},
        consumer_tag=getattr(method, "consumer_tag", None),
    )


def negotiated(impl: Any) -> dict[str, Any]:
    params = impl.params
    return {"frame_max": params.frame_max, "channel_max": params.channel_max,
            "heartbeat": params.heartbeat if params.heartbeat is not None else NA}


def server_properties(impl: Any) -> dict[str, Any]:
    return text(dict(impl.server_properties or {}))
