"""``/api/overview``, ``/api/whoami`` and ``/api/aliveness-test/{vhost}`` (the health checks
are in :mod:`management.routes.health`).

Source: https://www.rabbitmq.com/docs/management#http-api.
"""

from __future__ import annotations

from collections import Counter

from aiohttp import web

from exchanges import EXCHANGE_TYPES
from management.auth import check_permission, principal, visible_vhosts
from management.cluster_view import client_totals, cluster_name, peer_message_counts
from management.messages import get_messages, publish
from management.routes.common import ok, readable_vhost
from management.serializers import (
    details,
    message_stats,
    node_message_counts,
    open_channels,
    vhost_message_counts,
)
from management.state import RABBITMQ_VERSION, state

routes = web.RouteTableDef()

_TYPE_DESCRIPTIONS = {
    "direct": "AMQP direct exchange, as per the AMQP specification",
    "fanout": "AMQP fanout exchange, as per the AMQP specification",
    "headers": "AMQP headers exchange, as per the AMQP specification",
    "topic": "AMQP topic exchange, as per the AMQP specification",
    "x-consistent-hash": "Consistent Hashing Exchange",
    "x-message-deduplication": "Message Deduplication Exchange",
    "x-delayed-message": "Delayed Message Exchange.",
    "x-federation-upstream": "Federation upstream helper exchange",
}
#: RabbitMQ 3.10.8 lists a plugin's internal type with its purpose
_INTERNAL_PURPOSE = {"x-federation-upstream": "federation"}


@routes.get("/api/overview")
async def overview(request: web.Request) -> web.Response:
    """The broker's overview. Monitoring and administrator users get totals over every vhost
    and client, ``message_stats`` (and their rates) summed over every node and worker; other users, as in RabbitMQ 3.10.8, totals over the vhosts they have
    permissions in (``object_totals`` exchanges and queues, ``queue_totals``,
    ``message_stats``) and their own connections and channels (no ``consumers`` count)."""
    st = state(request)
    broker = st.broker
    who = principal(request)
    names = visible_vhosts(request)
    queues = [q for n in names for q in broker.vhosts[n].queues.values()]
    ready = sum(q.message_count for q in queues)
    unacked = sum(q.unacked_count for q in queues)
    channels = list(open_channels(broker))
    if who.is_monitor:
        totals = client_totals(broker)  # every worker's and node's clients
        # every node's and worker's, as RabbitMQ's overview sums the cluster's
        counts = node_message_counts(broker) + peer_message_counts(broker)
        key: tuple[str, ...] = ("overview",)
    else:
        totals = {"channels": sum(1 for ch in channels if ch.connection.user == who.name),
                  "connections": sum(1 for c in broker.connections if c.user == who.name)}
        if broker.workers is not None:
            totals["channels"] += broker.workers.elsewhere("channels_by_user", who.name)
            totals["connections"] += broker.workers.elsewhere("open_by_user", who.name)
        counts = sum((vhost_message_counts(broker, n) for n in names), Counter())
        counts += peer_message_counts(broker, names)
        key = ("overview", "user", who.name)  # rates of this user's view, not the node's
    return ok({
        "management_version": RABBITMQ_VERSION, "rates_mode": "basic",
        "sample_retention_policies": {"global": [600, 3600, 28800, 86400],
                                      "basic": [600, 3600], "detailed": [600]},
        "exchange_types": [{"name": n, "description": _TYPE_DESCRIPTIONS.get(n, n),
                            **({"internal_purpose": _INTERNAL_PURPOSE[n]}
                               if n in _INTERNAL_PURPOSE else {}),
                            "enabled": True} for n in sorted(EXCHANGE_TYPES)],
        "product_version": broker.config.version, "product_name": broker.config.product,
        "rabbitmq_version": RABBITMQ_VERSION, "cluster_name": cluster_name(st), "node": st.node,
        "disable_stats": False, "enable_queue_totals": False,
        "statistics_db_event_queue": 0,
        "message_stats": message_stats(counts, st.rates, key),
        "queue_totals": details(st.rates, key,
                                messages=ready + unacked, messages_ready=ready,
                                messages_unacknowledged=unacked),
        "object_totals": {
            **totals,
            "exchanges": sum(len(broker.vhosts[n].exchanges) + 1 for n in names),
            "queues": len(queues)},
        "listeners": [
            {"node": st.node, "protocol": "amqp", "ip_address": st.amqp_host,
             "port": st.amqp_port, "socket_opts": {}},
            {"node": st.node, "protocol": st.http_protocol, "ip_address": st.amqp_host,
             "port": st.http_port, "socket_opts": {}}],
        "contexts": [{"node": st.node, "description": "amqpq management", "path": "/",
                      "port": str(st.http_port), "ssl_opts": []}],
    })


@routes.get("/api/whoami")
async def whoami(request: web.Request) -> web.Response:
    who = principal(request)
    return ok({"name": who.name, "tags": list(who.tags)})


@routes.get("/api/aliveness-test/{vhost}")
async def aliveness(request: web.Request) -> web.Response:
    """Declare queue ``aliveness-test``, publish a message to it and get it back."""
    vhost = readable_vhost(request)
    check_permission(request, vhost.name, "configure", "queue", "aliveness-test")
    q = vhost.declare_queue("aliveness-test")
    publish(vhost, "", {"properties": {}, "routing_key": "aliveness-test",
                        "payload": "test_message", "payload_encoding": "string"},
            principal(request).name)
    got = await get_messages(q, 1, "ack_requeue_false", "auto", None)
    if not got or got[0]["payload"] != "test_message":
        return web.json_response({"status": "failed", "reason": "message lost"}, status=500)
    return ok({"status": "ok"})
