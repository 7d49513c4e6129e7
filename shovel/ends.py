"""A shovel's two ends as :mod:`links.link` needs them: the URL to connect to (``amqp://``
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
from typing import Any

import aiormq
from aiormq.abc import DeliveredMessage
from pamqp import commands as spec

from links.link import Route, Source, Target
from links.local import LocalBroker, connect_url, declare_queue
from shovel.params import ShovelSpec, mask_uri


def source_of(shovel: ShovelSpec, uri: str, local: LocalBroker) -> Source:
    """The link source of ``shovel`` through ``uri``."""

    async def setup(conn: aiormq.abc.AbstractConnection
                    ) -> tuple[aiormq.abc.AbstractChannel, str, int]:
        if shovel.src_queue is not None:
            ch, count = await declare_queue(conn, shovel.src_queue, shovel.src_queue_args)
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
            ch, _ = await declare_queue(conn, shovel.dest_queue, shovel.dest_queue_args,
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
