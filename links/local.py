"""How a link reaches a broker: this broker for an ``amqp://`` URI without a host
(:class:`LocalBroker`), a URI as aiormq's URL (RabbitMQ's query parameters renamed), and the
passive-then-durable queue declare shovels and federation links both use.

Source: https://www.rabbitmq.com/docs/uri-query-parameters, aiormq's URL parameters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

import aiormq
from pamqp import constants as pamqp_constants

from links.uri import endpoint

#: RabbitMQ takes any UTF-8 queue or exchange name (up to 255 bytes); pamqp, under aiormq,
#: refuses characters outside ``[a-zA-Z0-9-_.:@#,/+ ]`` in the frames it builds, among them
#: the ``>`` of federation's ``federation: X -> node`` names. Its table of patterns is a
#: public constant: the links widen it to what the broker takes (the length is still checked).
for _domain in ("queue-name", "exchange-name"):
    pamqp_constants.DOMAIN_REGEX[_domain] = re.compile(r".*", re.DOTALL)

__all__ = ["LocalBroker", "connect_url", "declare_queue"]


@dataclass(frozen=True)
class LocalBroker:
    """How a shovel reaches this broker for an ``amqp://`` URI without a host: over loopback
    as the configured default user (RabbitMQ uses an internal direct connection as its
    built-in user ``none``, allowed into every vhost; amqpq has no such connection)."""

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


async def declare_queue(conn: aiormq.abc.AbstractConnection, name: str,
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
