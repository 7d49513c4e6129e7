"""Publishing and getting messages over HTTP (``/api/exchanges/.../publish``,
``/api/queues/.../get``), with the management plugin's body formats.

Publish body: ``{"properties": {...}, "routing_key": "k", "payload": "...",
"payload_encoding": "string" | "base64"}`` -> ``{"routed": true}``. Get body: ``{"count": 5,
"ackmode": "ack_requeue_true" | "ack_requeue_false" | "reject_requeue_true" |
"reject_requeue_false", "encoding": "auto" | "base64", "truncate": 50000}`` -> a list of
``{"payload_bytes", "redelivered", "exchange", "routing_key", "message_count",
"properties", "payload", "payload_encoding"}``. As in RabbitMQ 3.10.8, a message without
properties shows ``"properties": []``, and *_requeue_true modes put the messages back (flagged
redelivered) after all of them were taken, so ``count`` distinct messages come back.

Source: https://www.rabbitmq.com/docs/management#http-api (``/api/exchanges/vhost/name/publish``,
``/api/queues/vhost/name/get``); ``rabbit_mgmt_wm_exchange_publish.erl``,
``rabbit_mgmt_wm_queue_get.erl``.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import struct
from typing import Any

from pamqp import commands
from pamqp.header import ContentHeader

from amqp_common.errors import AMQPError, PreconditionFailed
from amqp_common.properties import join_properties, split_properties
from management import queue_requests
from management.bodies import check_table
from management.errors import ApiError, bad_request, key_missing
from queue_store.message import Message
from queue_store.outcomes import REJECTED, ROUTED, Settlement
from queue_store.queue import Delivery, Queue, QueuedMessage
from vhosts.definitions import jsonable
from vhosts.vhost import VirtualHost

ACK_MODES = ("ack_requeue_true", "ack_requeue_false", "reject_requeue_true",
             "reject_requeue_false")
_INT_PROPS = ("delivery_mode", "priority", "timestamp")
_STR_PROPS = ("content_type", "content_encoding", "correlation_id", "reply_to", "expiration",
              "message_id", "type", "user_id", "app_id", "cluster_id")


def require_keys(body: dict[str, Any], keys: tuple[str, ...]) -> None:
    """Raises 400 ``[{key_missing,k}]`` naming every absent key."""
    missing = [k for k in keys if k not in body]
    if missing:
        raise key_missing(missing)


def _no_nulls(value: Any) -> bool:
    if value is None:
        return False
    if isinstance(value, dict):
        return all(_no_nulls(v) for v in value.values())
    if isinstance(value, list):
        return all(_no_nulls(v) for v in value)
    return True


def properties_raw(props: Any, body_size: int, user: str) -> bytes:
    """Content-header property bytes (flags + list) from the JSON ``properties`` object.

    Raises:
        ApiError: 400 for a wrong type (``["not_int","delivery_mode"]``), a null
            (``null_not_allowed``), ``headers`` nested deeper than AMQP's 64 levels
            ("headers nested deeper than 64 levels") or a ``user_id`` other than the
            publisher's.
    """
    if props in (None, []):
        props = {}
    if not isinstance(props, dict):
        raise bad_request("properties must be an object")
    kwargs: dict[str, Any] = {}
    for key in _INT_PROPS:
        if key in props:
            value = props[key]
            if not isinstance(value, int) or isinstance(value, bool):
                raise bad_request(["not_int", key])
            kwargs[key] = value
    for key in _STR_PROPS:
        if key in props:
            value = props[key]
            if not isinstance(value, str):
                raise bad_request(["not_string", key])
            kwargs["message_type" if key == "type" else key] = value
    if "headers" in props:
        headers = props["headers"]
        if not isinstance(headers, dict):
            raise bad_request(["not_table", "headers"])
        check_table(headers, "headers")  # AMQP's 64 levels: encoding recurses per level
        if not _no_nulls(headers):
            raise bad_request("null_not_allowed")
        kwargs["headers"] = headers
    stamp = kwargs.pop("timestamp", None)
    if stamp is not None and not 0 <= stamp < 2**64:
        raise bad_request(["not_int", "timestamp"])
    user_id = kwargs.get("user_id")
    if user_id is not None and user_id != user:
        raise bad_request(f"406 PRECONDITION_FAILED - user_id property set to '{user_id}' "
                          f"but authenticated user was '{user}'")
    header = ContentHeader(0, body_size, commands.Basic.Properties(**kwargs))
    raw = header.marshal()[12:]
    if stamp is None:
        return raw
    fields = split_properties(raw)  # the u64 as sent: a datetime holds only up to year 9999
    fields["timestamp"] = struct.pack(">Q", stamp)
    return join_properties(fields)


def decode_payload(payload: Any, encoding: Any) -> bytes:
    if not isinstance(payload, str):
        raise bad_request("payload must be a string")
    if encoding == "string":
        return payload.encode("utf-8")
    if encoding == "base64":
        try:
            return base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise bad_request("payload is not valid base64") from None
    raise bad_request(["unsupported_encoding", encoding])


def publish(vhost: VirtualHost, exchange: str, body: dict[str, Any], user: str,
            check_topic: Any = None) -> bool:
    """Publish as Basic.Publish would, through the vhost's one publish pipeline
    (:meth:`~vhosts.vhost.VirtualHost.publish`: CC/BCC, alternate exchanges, queue limits);
    ``exchange`` ``""`` is the default exchange. True when a queue was reached.

    Raises:
        ApiError: 400 with RabbitMQ's ``"404 NOT_FOUND - no exchange ..."`` style reason for
            a broker refusal, ``"rejected Unable to publish message. Check queue limits."``
            when a queue refused it (x-overflow reject-publish; RabbitMQ's
            ``rabbit_mgmt_wm_exchange_publish`` answers its nack so), or a body error.
    """
    require_keys(body, ("properties", "routing_key", "payload", "payload_encoding"))
    routing_key = body["routing_key"]
    if not isinstance(routing_key, str):
        raise bad_request(["not_string", "routing_key"])
    payload = decode_payload(body["payload"], body["payload_encoding"])
    raw = properties_raw(body["properties"], len(payload), user)
    message = Message.create(exchange, routing_key, raw, payload)
    try:
        if message.expiration is not None:
            try:
                message.expiration_ms()
            except ValueError as exc:
                raise PreconditionFailed(
                    f"invalid expiration '{message.expiration}': {exc}") from None
        x = None
        if exchange != "":
            x = vhost.exchange(exchange)
            if x.internal:
                raise x.internal_error(vhost.name)
            if check_topic is not None and x.type_name == "topic":
                check_topic(exchange, routing_key)
    except AMQPError as exc:
        raise bad_request(f"{int(exc.code)} {exc.reply_text}") from None
    result = vhost.publish(x, message)
    if result & REJECTED:
        raise bad_request("rejected Unable to publish message. Check queue limits.")
    return bool(result & ROUTED)


def parse_get(body: dict[str, Any]) -> tuple[int, str, str, int | None]:
    """(count, ackmode, encoding, truncate) from a get request body (400 on bad ones)."""
    require_keys(body, ("count", "ackmode", "encoding"))
    try:
        count = int(body["count"])
    except (TypeError, ValueError):
        raise bad_request(["not_int", "count"]) from None
    encoding = body["encoding"]
    if encoding not in ("auto", "base64"):
        raise bad_request("Unsupported encoding. Please use auto or base64.")
    ackmode = body["ackmode"]
    if ackmode not in ACK_MODES:
        raise bad_request(f"Unsupported ackmode. Please use one of {', '.join(ACK_MODES)}.")
    truncate = body.get("truncate")
    if truncate is not None:
        try:
            truncate = int(truncate)
        except (TypeError, ValueError):
            raise bad_request(["not_int", "truncate"]) from None
    return count, ackmode, encoding, truncate


def properties_json(message: Message) -> dict[str, Any] | list[Any]:
    """The message's properties as RabbitMQ shows them (``[]`` when there are none)."""
    try:
        props = message.properties
    except ValueError:
        return []
    out: dict[str, Any] = {}
    for key in _STR_PROPS + _INT_PROPS + ("headers",):
        attr = "message_type" if key == "type" else key
        value = getattr(props, attr, None)
        if value is None or value == "":
            continue
        if isinstance(value, datetime.datetime):
            value = int(value.timestamp())
        out[key] = jsonable(value)
    return out or []


def _message_json(qm: QueuedMessage, remaining: int, encoding: str,
                  truncate: int | None) -> dict[str, Any]:
    msg = qm.message
    body = msg.body if truncate is None else msg.body[:max(truncate, 0)]
    text: str | None = None
    if encoding == "auto":
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            text = None
    return {
        "payload_bytes": len(msg.body), "redelivered": qm.redelivered,
        "exchange": msg.exchange, "routing_key": msg.routing_key,
        "message_count": remaining, "properties": properties_json(msg),
        "payload": text if text is not None else base64.b64encode(body).decode(),
        "payload_encoding": "string" if text is not None else "base64",
    }


async def get_messages(q: Queue, count: int, ackmode: str, encoding: str,
                       truncate: int | None) -> list[dict[str, Any]]:
    """Take up to ``count`` messages from ``q`` as Basic.Get would (from its home when it
    lives on another worker or node), then settle them by ``ackmode`` (requeued ones go back
    to their places, flagged redelivered). Raises AMQPError (the home's 404)."""
    no_ack = ackmode == "ack_requeue_false"
    taken: list[Delivery] = []
    out: list[dict[str, Any]] = []
    for _ in range(max(count, 0)):
        qm, left = await queue_requests.get(q, no_ack)
        if qm is None:
            break
        out.append(_message_json(qm, left, encoding, truncate))
        if not no_ack:
            taken.append((qm, q, None))
    if taken:
        q.settle(taken, Settlement.REJECT if ackmode == "reject_requeue_false"
                 else Settlement.REQUEUE)
    return out


__all__ = ["ApiError", "get_messages", "parse_get", "publish", "properties_json"]
