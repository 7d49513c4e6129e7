"""The two ends of a federation link as :class:`links.link.Link` takes them.

Federated exchange ``X`` (downstream, this broker) from an upstream: on the upstream the
link makes sure the upstream exchange exists (declared like ``X`` when missing), declares
the durable queue ``federation: <upstream exchange> -> <local cluster name>`` (``x-expires``
/ ``x-message-ttl`` from the upstream's ``expires`` / ``message-ttl``) and the internal
exchange ``<that queue> A`` (or ``B``, alternating on each start so the old one keeps
routing until the new one is bound) of type ``x-federation-upstream`` (``x-max-hops``,
``x-downstream-name``, ``x-downstream-vhost``: the upstream drops what would exceed
``max-hops`` or return here), bound to the queue and bound from the upstream exchange with
each of ``X``'s binding keys (:class:`BindingSync`). Each message is published to ``X`` with
its routing key and an ``x-received-from`` entry prepended.

Federated queue ``Q``: the upstream queue (``queue`` or the same name) is consumed with
``x-priority: -1`` and consumer tag ``federation-link-<upstream>`` only while ``Q`` is empty
and one of its consumers can take a message (:func:`queue_hungry`), and each message is
published to ``Q`` through the default exchange.

Source: ``rabbit_federation_exchange_link.erl``, ``rabbit_federation_queue_link.erl``,
https://www.rabbitmq.com/docs/federated-exchanges, /docs/federated-queues.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiormq
from aiormq.abc import DeliveredMessage
from pamqp import commands as spec

from exchanges.federation_upstream import ROUTING_HEADER, should_forward
from federation.params import Upstream
from links.link import Route, Source, Target
from links.local import LocalBroker, connect_url
from links.uri import endpoint, mask_uri

INTERNAL_PURPOSE = {"x-internal-purpose": "federation"}
BINDING_HEADER = "x-bound-from"


@dataclass(frozen=True)
class LocalExchange:
    """What the link needs of the federated exchange: its vhost, name and declare fields
    (to declare the upstream exchange like it when missing)."""

    vhost: str
    name: str
    type_name: str
    durable: bool = True
    auto_delete: bool = False
    internal: bool = False
    arguments: dict[str, Any] | None = None


def upstream_queue_name(up_exchange: str, up_vhost: str, cluster: str, vhost: str,
                        exchange: str) -> str:
    """``federation: <upstream exchange> -> <cluster>`` (``:<exchange>`` when the local
    name differs, ``:<vhost>:<exchange>`` when the vhost does), as RabbitMQ names it."""
    if vhost == up_vhost:
        down = "" if exchange == up_exchange else f":{exchange}"
    else:
        down = f":{vhost}:{exchange}"
    return f"federation: {up_exchange} -> {cluster}{down}"


async def _disposable(conn: aiormq.abc.AbstractConnection, step: Callable[[Any], Any]) -> Any:
    """Run ``step(channel)`` on a channel of its own (a refusal closes only that channel);
    returns its result or the AMQP error raised."""
    ch = await conn.channel()
    try:
        return await step(ch)
    except aiormq.exceptions.AMQPError as exc:
        return exc
    finally:
        if not ch.is_closed:
            await ch.close()


def _entry_headers(props: spec.Basic.Properties, entry: dict[str, Any],
                   trust_user_id: bool) -> spec.Basic.Properties:
    """``props`` with ``entry`` prepended to ``x-received-from`` (and ``user_id`` dropped
    unless the upstream is trusted for it, as RabbitMQ's link does)."""
    headers = dict(props.headers or {})
    previous = headers.get(ROUTING_HEADER)
    headers[ROUTING_HEADER] = [entry, *(previous if isinstance(previous, list) else [])]
    props.headers = headers
    if not trust_user_id:
        props.user_id = None
    return props


class ExchangeEnds:
    """The source and target of one federated exchange's link to one upstream URI.

    Args:
        up: the upstream. uri: the URI of this attempt. x: the federated exchange.
        cluster: this broker's cluster name (queue name, ``x-downstream-name``).
        local: how to reach this broker. suffix: ``A`` or ``B`` (the internal exchange).
        bindings: the federated exchange's bindings now, ``[(key, arguments)]``.
    """

    def __init__(self, up: Upstream, uri: str, x: LocalExchange, cluster: str,
                 local: LocalBroker, suffix: str,
                 bindings: Callable[[], list[tuple[str, dict[str, Any]]]]) -> None:
        self.up, self.uri, self.x, self.cluster = up, uri, x, cluster
        self.local, self.suffix, self.bindings = local, suffix, bindings
        self.up_vhost = endpoint(uri).vhost
        self.up_exchange = up.exchange or x.name
        self.queue = upstream_queue_name(self.up_exchange, self.up_vhost, cluster, x.vhost,
                                         x.name)
        self.internal = f"{self.queue} {suffix}"
        self.upstream_cluster: str | None = None  # from the upstream's server properties
        self.bound: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}

    def source(self) -> Source:
        return Source(url=connect_url(self.uri, self.local), setup=self._setup,
                      prefetch=self.up.prefetch, no_ack=self.up.ack_mode == "no-ack")

    async def _setup(self, conn: aiormq.abc.AbstractConnection
                     ) -> tuple[aiormq.abc.AbstractChannel, str, int]:
        props = getattr(conn, "server_properties", None) or {}
        name = props.get("cluster_name")
        self.upstream_cluster = name.decode() if isinstance(name, bytes) else name
        x = self.x
        missing = await _disposable(conn, lambda ch: ch.exchange_declare(
            self.up_exchange, passive=True))
        if isinstance(missing, aiormq.exceptions.ChannelNotFoundEntity):
            ch = await conn.channel()
            await ch.exchange_declare(self.up_exchange, exchange_type=x.type_name,
                                      durable=x.durable, auto_delete=x.auto_delete,
                                      internal=x.internal, arguments=x.arguments or None)
            await ch.close()
        ch = await conn.channel()
        args: dict[str, Any] = {}
        if self.up.expires is not None:
            args["x-expires"] = self.up.expires
        if self.up.message_ttl is not None:
            args["x-message-ttl"] = self.up.message_ttl
        args.update(INTERNAL_PURPOSE)
        ok = await ch.queue_declare(self.queue, durable=True, arguments=args)
        await _disposable(conn, lambda c: c.exchange_delete(self.internal))
        declared = await _disposable(conn, lambda c: c.exchange_declare(
            self.internal, exchange_type="x-federation-upstream", durable=True, internal=True,
            auto_delete=True, arguments={"x-max-hops": self.up.max_hops,
                                         "x-downstream-name": self.cluster,
                                         "x-downstream-vhost": x.vhost, **INTERNAL_PURPOSE}))
        if isinstance(declared, aiormq.exceptions.AMQPError):  # no such type: plain fanout
            await ch.exchange_declare(self.internal, exchange_type="fanout", durable=True,
                                      internal=True, auto_delete=True,
                                      arguments=dict(INTERNAL_PURPOSE))
        await ch.queue_bind(self.queue, self.internal, "")
        await self.sync(ch)
        old = f"{self.queue} {'A' if self.suffix == 'B' else 'B'}"
        await _disposable(conn, lambda c: c.exchange_delete(old))
        return ch, self.queue, int(ok.message_count or 0)

    async def delete_upstream(self) -> None:
        """Delete the upstream queue and both internal exchanges (the link stopped for
        good), on a connection of its own.

        Raises:
            aiormq.exceptions.AMQPError, OSError: the upstream could not be reached.
        """
        conn = await aiormq.connect(connect_url(self.uri, self.local))
        try:
            for suffix in ("A", "B"):
                await _disposable(conn, lambda c, s=suffix: c.exchange_delete(
                    f"{self.queue} {s}"))
            await _disposable(conn, lambda c: c.queue_delete(self.queue))
        finally:
            await conn.close()

    def _binding_args(self, args: dict[str, Any]) -> dict[str, Any] | None:
        """The upstream binding's arguments for a local binding's (RabbitMQ's
        ``update_binding``: an ``x-bound-from`` entry prepended with the hops left; None
        when the binding should propagate no further)."""
        previous = args.get(BINDING_HEADER)
        hops = self.up.max_hops
        if isinstance(previous, list) and previous:
            first = previous[0] if isinstance(previous[0], dict) else {}
            seen = any(isinstance(e, dict) and e.get("cluster-name") == self.upstream_cluster
                       and e.get("vhost") == self.up_vhost for e in previous)
            prev_hops = first.get("hops", 0)
            hops = 0 if seen else min(int(prev_hops) - 1, hops)
        if hops <= 0:
            return None
        entry = {"cluster-name": self.cluster, "vhost": self.x.vhost,
                 "exchange": f"{self.x.vhost}:{self.x.name} {self.suffix}", "hops": hops}
        return {**args, BINDING_HEADER: [entry, *(previous if isinstance(previous, list)
                                                  else [])]}

    async def sync(self, ch: aiormq.abc.AbstractChannel) -> int:
        """Bind the upstream exchange to the internal exchange with each local binding key
        not bound yet, and unbind those gone; returns how many changes were made."""
        wanted: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}
        for key, args in self.bindings():
            up_args = self._binding_args(args)
            if up_args is not None:
                wanted[(key, repr(sorted(args.items())))] = (key, up_args)
        changes = 0
        for k, (key, args) in list(self.bound.items()):
            if k not in wanted:
                await ch.exchange_unbind(self.internal, self.up_exchange, key,
                                         arguments=args or None)
                del self.bound[k]
                changes += 1
        for k, (key, args) in wanted.items():
            if k not in self.bound:
                await ch.exchange_bind(self.internal, self.up_exchange, key,
                                       arguments=args or None)
                self.bound[k] = (key, args)
                changes += 1
        return changes

    def target(self, node_uri: str | None = None) -> Target:
        confirm = self.up.ack_mode == "on-confirm"
        x, up = self.x, self.up
        masked = mask_uri(node_uri or self.uri)

        async def setup(conn: aiormq.abc.AbstractConnection) -> aiormq.abc.AbstractChannel:
            return await conn.channel(publisher_confirms=confirm)

        def route(message: DeliveredMessage) -> Route | None:
            props = message.header.properties
            if not should_forward(props.headers, up.max_hops, self.cluster, x.vhost):
                return None
            entry: dict[str, Any] = {"uri": masked, "exchange": x.name,
                                     "redelivered": bool(message.delivery.redelivered)}
            if self.upstream_cluster:
                entry["cluster-name"] = self.upstream_cluster
            entry["vhost"] = self.up_vhost
            return x.name, message.delivery.routing_key or "", _entry_headers(
                props, entry, up.trust_user_id)

        return Target(url=connect_url(f"amqp:///{_quote(x.vhost)}", self.local),
                      setup=setup, route=route, confirm=confirm)


def _quote(vhost: str) -> str:
    return quote(vhost, safe="")


class QueueEnds:
    """The source and target of one federated queue's link to one upstream URI.

    Args:
        up: the upstream. uri: the URI of this attempt. vhost, queue: the federated queue.
        declare: the local queue's ``(durable, auto_delete, arguments)``, to declare the
            upstream queue like it when missing. local: how to reach this broker.
    """

    def __init__(self, up: Upstream, uri: str, vhost: str, queue: str,
                 declare: tuple[bool, bool, dict[str, Any]], local: LocalBroker) -> None:
        self.up, self.uri, self.vhost, self.queue = up, uri, vhost, queue
        self.declare, self.local = declare, local
        self.up_queue = up.queue or queue
        self.consumer_tag = up.consumer_tag or f"federation-link-{up.name}"

    def source(self) -> Source:
        return Source(url=connect_url(self.uri, self.local), setup=self._setup,
                      prefetch=self.up.prefetch, no_ack=self.up.ack_mode == "no-ack",
                      consumer_tag=self.consumer_tag,
                      consume_arguments={"x-priority": -1}, paused=True)

    async def _setup(self, conn: aiormq.abc.AbstractConnection
                     ) -> tuple[aiormq.abc.AbstractChannel, str, int]:
        props = getattr(conn, "server_properties", None) or {}
        caps = props.get("capabilities") or {}
        if not caps.get("consumer_priorities"):
            raise aiormq.exceptions.AMQPError("upstream_lacks_consumer_priorities")
        passive = await _disposable(conn, lambda ch: ch.queue_declare(self.up_queue,
                                                                      passive=True))
        ch = await conn.channel()
        if isinstance(passive, aiormq.exceptions.AMQPError):
            durable, auto_delete, args = self.declare
            ok = await ch.queue_declare(self.up_queue, durable=durable,
                                        auto_delete=auto_delete, arguments=args or None)
            return ch, self.up_queue, int(ok.message_count or 0)
        return ch, self.up_queue, int(passive.message_count or 0)

    def target(self) -> Target:
        confirm = self.up.ack_mode == "on-confirm"
        up, masked = self.up, mask_uri(self.uri)
        table = {"uri": masked, "virtual_host": endpoint(self.uri).vhost,
                 "queue": self.up_queue}

        async def setup(conn: aiormq.abc.AbstractConnection) -> aiormq.abc.AbstractChannel:
            return await conn.channel(publisher_confirms=confirm)

        def route(message: DeliveredMessage) -> Route:
            props = message.header.properties
            headers = dict(props.headers or {})
            been = headers.get(ROUTING_HEADER)
            count = 0
            if isinstance(been, list):
                rest = []
                for e in been:
                    if isinstance(e, dict) and all(e.get(k) == table[k] for k in table):
                        count = int(e.get("visit-count") or 0)
                    else:
                        rest.append(e)
                headers[ROUTING_HEADER] = rest
            else:
                headers["x-original-exchange"] = message.delivery.exchange or ""
                headers["x-original-routing-key"] = message.delivery.routing_key or ""
                headers.pop(ROUTING_HEADER, None)
            if "CC" in headers:
                headers["x-original-cc"] = headers.pop("CC")
            props.headers = headers
            entry = {**table, "redelivered": bool(message.delivery.redelivered),
                     "visit-count": count + 1}
            return "", self.queue, _entry_headers(props, entry, up.trust_user_id)

        return Target(url=connect_url(f"amqp:///{_quote(self.vhost)}", self.local),
                      setup=setup, route=route, confirm=confirm)
