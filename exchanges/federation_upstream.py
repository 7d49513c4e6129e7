"""The ``x-federation-upstream`` exchange type (RabbitMQ's ``rabbitmq_federation`` plugin):
the internal exchange a federation link declares on its upstream broker, between the
upstream exchange and the link's queue. It routes like fanout, except a message that
already made ``x-max-hops`` hops (entries in its ``x-received-from`` header) or that came
through the downstream it feeds (an entry whose ``cluster-name`` and ``vhost`` are the
exchange's ``x-downstream-name`` and ``x-downstream-vhost``) goes nowhere: RabbitMQ's
cycle detection, so a message never returns to a broker it left.

Source: ``rabbit_federation_upstream_exchange.erl``, ``rabbit_federation_util:should_forward/4``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from amqp_common.errors import PreconditionFailed
from exchanges.binding import Destination
from exchanges.fanout import FanoutExchange

#: the header a federation link prepends an entry to on each hop
ROUTING_HEADER = "x-received-from"


def _text(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def should_forward(headers: Mapping[str, Any] | None, max_hops: int,
                   downstream_name: str | None, downstream_vhost: str | None) -> bool:
    """Whether a message with ``headers`` may cross one more federation link towards the
    downstream ``downstream_name`` (its cluster name) / ``downstream_vhost``: fewer than
    ``max_hops`` ``x-received-from`` entries and none from that downstream. None for the
    name or vhost: not checked (an upstream exchange declared without them)."""
    if not headers:
        return True
    entries = headers.get(ROUTING_HEADER)
    if not isinstance(entries, list):
        return True
    if len(entries) >= max_hops:
        return False
    if downstream_name is None or downstream_vhost is None:
        return True
    for entry in entries:
        if (isinstance(entry, Mapping)
                and _text(entry.get("cluster-name")) == downstream_name
                and _text(entry.get("vhost")) == downstream_vhost):
            return False
    return True


class FederationUpstreamExchange(FanoutExchange):
    """Fanout filtered by :func:`should_forward` with the exchange's ``x-max-hops`` (a
    number, required: 406 ``Argument x-max-hops missing`` as RabbitMQ answers),
    ``x-downstream-name`` and ``x-downstream-vhost`` arguments."""

    needs_headers = True  # route reads x-received-from

    def __init__(self, arguments: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        args = arguments or {}
        hops = args.get("x-max-hops")
        if hops is None:
            raise PreconditionFailed("Argument x-max-hops missing")
        if not isinstance(hops, int) or isinstance(hops, bool):
            raise PreconditionFailed("Argument x-max-hops must be of type long")
        self.max_hops = hops
        name, vhost = _text(args.get("x-downstream-name")), _text(args.get("x-downstream-vhost"))
        self.downstream_name = name if isinstance(name, str) else None
        self.downstream_vhost = vhost if isinstance(vhost, str) else None

    def route(self, routing_key: str, headers: Mapping[str, Any] | None) -> set[Destination]:
        if not should_forward(headers, self.max_hops, self.downstream_name,
                              self.downstream_vhost):
            return set()
        return super().route(routing_key, headers)
