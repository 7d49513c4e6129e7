"""A shovel's two ends as :mod:`shovel.link` needs them: the URL to connect to (``amqp://``
with no host: this broker), what to declare, and how each message is republished.

As RabbitMQ 3.10's dynamic shovel: ``src-queue`` is declared durable when missing (with
``src-queue-args``; an existing queue is used as it is: a passive declare first, so a quorum
or stream queue works); ``src-exchange`` gets a server-named exclusive queue bound with
``src-exchange-key`` (default ``#``); ``dest-queue`` is declared like ``src-queue`` and
published to through the default exchange; ``dest-exchange`` is published to with
``dest-exchange-key`` or the message's own routing key; with neither, each message keeps its
exchange and routing key. ``dest-add-forward-headers`` prepends an ``x-shovelled`` entry,
``dest-add-timestamp-header`` sets ``x-shovelled-timestamp`` (s), ``dest-publish-properties``
overrides properties.

Source: https://www.rabbitmq.com/docs/shovel-dynamic, ``rabbit_amqp091_shovel.erl``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

import aiormq
from aiormq.abc import DeliveredMessage
from pamqp import commands as spec

from shovel.link import Route, Source, Target
from shovel.params import ShovelSpec, endpoint, mask_uri


@dataclass(frozen=True)
class LocalBroker:
    """How a shovel reaches this broker for an ``amqp://`` URI without a host: over loopback
    as the configured default user (RabbitMQ uses an internal direct connection as the user
    who set the parameter; amqpq has no such connection)."""

    host: str = "127.0.0.1"
    port: int = 5672
    user: str = "guest"
    password: str = "guest"


#: RabbitMQ's URI query parameters (https://www.rabbitmq.com/docs/uri-query-parameters) that
#: aiormq knows under another name
_QUERY_NAMES = {"cacertfile": "cafile", "certfile": "certfile", "keyfile": "keyfile",
                "heartbeat": "heartbeat"}


def _query(query: str) -> str:
    """RabbitMQ's URI query as aiormq's: ``cacertfile`` -> ``cafile``, ``verify=verify_none``
    -> ``no_verify_ssl=1``, ``connection_timeout`` (ms) -> ``timeout`` (s),
    ``auth_mechanism=external`` -> ``auth=external``; others are dropped."""
    out = []
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name in _QUERY_NAMES:
            out.append((_QUERY_NAMES[name], value))
        elif name == "verify" and value == "verify_none":
            out.append(("no_verify_ssl", "1"))
        elif name == "connection_timeout" and value.isdigit():
            out.append(("timeout", str(max(1, int(value) // 1000))))
        elif name == "auth_mechanism" and value.lower() == "external":
            out.append(("auth", "external"))
    return urlencode(out)


def connect_url(uri: str, local: LocalBroker) -> str:
    """The aiormq URL of one shovel URI (``amqp://``: ``local``; vhost ``/`` by default),
    its query in aiormq's names."""
    ep = endpoint(uri)
    query = _query(ep.query)
    if ep.local:
        base = (f"amqp://{quote(local.user, safe='')}:{quote(local.password, safe='')}"
                f"@{local.host}:{local.port}/{quote(ep.vhost, safe='')}")
    else:
        base = uri.split("?", 1)[0]
    return f"{base}?{query}" if query else base


async def _declare_queue(conn: aiormq.abc.AbstractConnection, name: str,
                         args: dict[str, Any], confirm: bool = False
                         ) -> tuple[aiormq.abc.AbstractChannel, int]:
    """A passive declare, then a durable one when the queue is missing (the 404 closed the
    channel: a new one is opened). Returns the channel to use and the message count."""
    ch = await conn.channel(publisher_confirms=confirm)
    try:
        ok = await ch.queue_declare(name, passive=True)
        return ch, int(ok.message_count or 0)
    except aiormq.exceptions.ChannelNotFoundEntity:
        pass
    ch = await conn.channel(publisher_confirms=confirm)
    ok = await ch.queue_declare(name, durable=True, arguments=args or None)
    return ch, int(ok.message_count or 0)


def source_of(shovel: ShovelSpec, uri: str, local: LocalBroker) -> Source:
    """The link source of ``shovel`` through ``uri``."""

    async def setup(conn: aiormq.abc.AbstractConnection
                    ) -> tuple[aiormq.abc.AbstractChannel, str, int]:
        if shovel.src_queue is not None:
            ch, count = await _declare_queue(conn, shovel.src_queue, shovel.src_queue_args)
            return ch, shovel.src_queue, count
        ch = await conn.channel()
        ok = await ch.queue_declare("", exclusive=True)
        await ch.queue_bind(ok.queue, shovel.src_exchange or "", shovel.src_exchange_key)
        return ch, str(ok.queue), 0

    return Source(url=connect_url(uri, local), setup=setup, prefetch=shovel.prefetch,
                  no_ack=shovel.ack_mode == "no-ack")


def target_of(shovel: ShovelSpec, uri: str, local: LocalBroker, node: str,
              src_uri: str) -> Target:
    """The link target of ``shovel`` through ``uri`` (``node``, ``src_uri``: what the
    ``x-shovelled`` header names)."""

    confirm = shovel.ack_mode == "on-confirm"

    async def setup(conn: aiormq.abc.AbstractConnection) -> aiormq.abc.AbstractChannel:
        if shovel.dest_queue is not None:
            ch, _ = await _declare_queue(conn, shovel.dest_queue, shovel.dest_queue_args,
                                         confirm)
            return ch
        return await conn.channel(publisher_confirms=confirm)

    forward = _forward_entry(shovel, node, src_uri, uri) if shovel.add_forward_headers else None

    def route(message: DeliveredMessage) -> Route:
        delivery = message.delivery
        if shovel.dest_queue is not None:
            exchange, key = "", shovel.dest_queue
        elif shovel.dest_exchange is not None:
            exchange = shovel.dest_exchange
            key = (shovel.dest_exchange_key if shovel.dest_exchange_key is not None
                   else delivery.routing_key or "")
        else:
            exchange, key = delivery.exchange or "", delivery.routing_key or ""
        return exchange, key, _properties(shovel, message.header.properties, forward)

    return Target(url=connect_url(uri, local), setup=setup, route=route,
                  confirm=confirm)


def _forward_entry(shovel: ShovelSpec, node: str, src_uri: str, dest_uri: str
                   ) -> dict[str, Any]:
    entry: dict[str, Any] = {"shovelled-by": node, "shovel-type": "dynamic",
                             "shovel-name": shovel.name, "shovel-vhost": shovel.vhost,
                             "src-uri": mask_uri(src_uri), "dest-uri": mask_uri(dest_uri)}
    # RabbitMQ 3.10.8's order: the URIs, then the source, then the destination
    entry.update(shovel.end_names("-"))
    return entry


#: RabbitMQ's property names (dest-publish-properties) -> pamqp's
_PROPERTY_NAMES = {name: name for name in (
    "content_type", "content_encoding", "headers", "delivery_mode", "priority",
    "correlation_id", "reply_to", "expiration", "message_id", "timestamp", "user_id",
    "app_id", "cluster_id")} | {"type": "message_type"}


def _properties(shovel: ShovelSpec, props: spec.Basic.Properties,
                forward: dict[str, Any] | None) -> spec.Basic.Properties:
    if not (forward or shovel.add_timestamp_header or shovel.publish_properties):
        return props
    fields = {name: getattr(props, name, None) for name in _PROPERTY_NAMES.values()}
    for name, value in shovel.publish_properties.items():
        if name in _PROPERTY_NAMES:
            fields[_PROPERTY_NAMES[name]] = value
    headers = dict(fields.get("headers") or {})
    if forward is not None:
        headers["x-shovelled"] = [forward, *list(headers.get("x-shovelled") or [])]
    if shovel.add_timestamp_header:
        headers["x-shovelled-timestamp"] = int(time.time())
    fields["headers"] = headers or None
    if fields.get("cluster_id") is None:
        fields["cluster_id"] = ""
    return spec.Basic.Properties(**fields)
