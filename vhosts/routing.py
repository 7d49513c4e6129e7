"""Routing beyond one exchange's own bindings: the walk over exchange-to-exchange bindings
and alternate exchanges, and routing one message with several keys (``CC``/``BCC``, dead
lettering's keys).

:meth:`VirtualHost.route <vhosts.vhost.VirtualHost.route>` answers the common case (an
exchange bound to queues only) itself and comes here only when a destination is an exchange,
or when nothing was reached and the exchange has an alternate exchange.

Source: https://www.rabbitmq.com/docs/e2e, /docs/ae, /docs/sender-selected.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from exchanges.binding import Destination
from exchanges.deduplication import DuplicateMessage
from exchanges.exchange import Exchange
from queue_store.message import Message
from queue_store.queue import Queue

if TYPE_CHECKING:
    from vhosts.vhost import VirtualHost

_DROPPED: set[Destination] = set()  # a downstream exchange dropped a duplicate (never mutated)


def walk(exchanges: dict[str, Exchange], queues: dict[str, Queue], exchange: Exchange,
         dests: set[Destination], routing_key: str, message: Message) -> list[Queue]:
    """The queues reached from ``exchange``, whose router gave ``dests``, each once.

    Follows exchange-to-exchange bindings (each exchange visited once, so cycles end) and the
    alternate exchange of each exchange that routes to nothing. Raises DuplicateMessage when
    an ``x-message-deduplication`` exchange on the way dropped it and no queue was reached.
    """
    found: dict[str, Queue] = {}
    visited = {exchange.name}
    pending = [(exchange, dests)]
    dropped = False
    while pending:
        x, dests = pending.pop()
        if dests is _DROPPED:
            dropped = True
            continue
        if not dests:
            ae_name = x.alternate_exchange
            ae = exchanges.get(ae_name) if ae_name is not None else None
            if ae is not None and ae.name not in visited:
                visited.add(ae.name)
                pending.append((ae, _route_one(ae, routing_key, message)))
            continue
        for d in dests:
            if d.kind == "queue":
                q = queues.get(d.name)
                if q is not None:
                    found[d.name] = q
            elif d.name not in visited:
                nxt = exchanges.get(d.name)
                if nxt is not None:
                    visited.add(d.name)
                    pending.append((nxt, _route_one(nxt, routing_key, message)))
    if dropped and not found:
        raise DuplicateMessage(routing_key)
    return list(found.values())


def _route_one(x: Exchange, routing_key: str, message: Message) -> set[Destination]:
    router = x.router
    try:
        if router.needs_message:  # x-consistent-hash: may hash a property
            return router.route_message(routing_key, message)
        return router.route(routing_key, message.headers if router.needs_headers else None)
    except DuplicateMessage:  # an x-message-deduplication exchange behind a binding
        return _DROPPED


def route_keys(vhost: VirtualHost, exchange: Exchange | None, keys: list[str],
               message: Message, found: list[Queue], routed: bool = False) -> list[Queue]:
    """``found`` plus the queues each of ``keys`` reaches from ``exchange`` (None: the
    default exchange) in ``vhost``, each queue once. Raises DuplicateMessage when the first
    routing (``routed``: done before) was a duplicate."""
    by_id = {id(q): q for q in found}
    for key in keys:
        try:
            more = vhost.route_default(key) if exchange is None \
                else vhost.route(exchange, key, message)
        except DuplicateMessage:  # again for another key: seen by its first routing
            if not routed:
                raise
            continue
        routed = True
        by_id.update((id(q), q) for q in more)
    return list(by_id.values())
