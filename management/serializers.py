"""Broker objects as the JSON objects of RabbitMQ's management HTTP API.

Field names and value shapes follow RabbitMQ 3.10.8's answers (checked with curl): rates are
``{"rate": ...}`` computed when read (:mod:`management.rates`), ``null`` where RabbitMQ
writes ``null``. Erlang-runtime fields (``garbage_collection``, ``reductions``...) are left
out; a queue's ``backing_queue_status`` and paging figures come from
:mod:`queue_store.backing_status`.

Source: https://www.rabbitmq.com/docs/management#http-api (the API reference page, "HTTP API
Stats"), ``rabbit_mgmt_format.erl``.
"""

from __future__ import annotations

import base64
import hashlib
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote_plus

from broker.message_stats import deliver_get
from exchanges.binding import Binding
from management.cluster_view import peer_message_counts, peer_vhost_octets
from management.group_stats import message_groups_json
from queue_store.backing_status import memory_fields
from queue_store.consumer import Consumer
from queue_store.queue import Queue
from queue_store.queue_args import merge_operator_definition
from vhosts.definitions import jsonable
from vhosts.users import HASHING_ALGORITHM, User

if TYPE_CHECKING:
    from amqp_server.channel import Channel
    from amqp_server.connection import Connection
    from broker.broker import Broker
    from exchanges.exchange import Exchange
    from management.rates import Rates
    from management.state import ManagementState
    from vhosts.permissions import Permission

ZERO_RATE = {"rate": 0.0}
INTERNAL_USER = "rmq-internal"  # RabbitMQ's acting user for objects it made itself


def details(_rates: Rates | None = None, _key: tuple[str, ...] = (),
            **counts: int) -> dict[str, Any]:
    """``{"publish": 3, "publish_details": {"rate": 1.5}, ...}``: each count with its rate
    per second from ``_rates`` under ``_key + (name,)`` (0.0 without ``_rates``)."""
    out: dict[str, Any] = {}
    for key, value in counts.items():
        out[key] = value
        out[f"{key}_details"] = (dict(ZERO_RATE) if _rates is None
                                 else {"rate": _rates.rate((*_key, key), value)})
    return out


#: ``message_stats`` keys of vhosts, /api/overview and channels, in RabbitMQ's order
MESSAGE_STATS_KEYS: tuple[str, ...] = (
    "publish", "confirm", "return_unroutable", "drop_unroutable", "deliver",
    "deliver_no_ack", "get", "get_no_ack", "get_empty", "deliver_get", "redeliver", "ack")
_PUBLISHER_KEYS = ("publish", "confirm", "return_unroutable", "drop_unroutable")


def message_stats(counts: Mapping[str, int], rates: Rates | None, key: tuple[str, ...],
                  keys: Iterable[str] = MESSAGE_STATS_KEYS) -> dict[str, Any]:
    """RabbitMQ's ``message_stats`` from :mod:`broker.message_stats` counts (messages), each
    with its ``_details.rate`` (messages/s); ``deliver_get`` is derived."""
    values = {k: deliver_get(counts) if k == "deliver_get" else counts.get(k, 0)
              for k in keys}
    return details(rates, key, **values)


def channel_message_stats(ch: Channel, rates: Rates | None, key: tuple[str, ...]
                          ) -> dict[str, Any]:
    """A channel's ``message_stats``: the publisher keys once it has published, the consumer
    keys once it has fetched, been delivered or acked anything (as RabbitMQ, which shows
    only what a channel did; ``{}`` for an idle channel)."""
    counts = ch.message_counts()
    keys = [k for k in MESSAGE_STATS_KEYS if k not in _PUBLISHER_KEYS] \
        if any(counts[k] for k in ("deliver", "deliver_no_ack", "get", "get_no_ack",
                                   "get_empty", "ack")) else []
    if counts["publish"]:
        keys = [*_PUBLISHER_KEYS, *keys]
    return message_stats(counts, rates, key, keys)


def vhost_message_counts(broker: Broker, name: str) -> Counter[str]:
    """Counts of vhost ``name``: its closed channels plus its open ones (a channel closing,
    awaiting its CloseOk, is counted with the closed ones already)."""
    return broker.message_totals.vhost_totals(
        name, (ch.message_counts() for ch in open_channels(broker)
               if ch.vhost.name == name and not ch.counters.folded))


def vhost_octets(broker: Broker, name: str) -> tuple[int, int]:
    """``(recv_oct, send_oct)`` of vhost ``name``: bytes read from and written to the
    clients of its connections, closed ones included."""
    recv, send = broker.message_totals.octets.get(name, (0, 0))
    for conn in list(broker.connections):
        if conn.vhost_name == name:
            recv += conn.recv_oct
            send += conn.send_oct
    return recv, send


def node_message_counts(broker: Broker) -> Counter[str]:
    """Counts of the node (every vhost, closed channels included)."""
    return broker.message_totals.node_totals(
        ch.message_counts() for ch in open_channels(broker) if not ch.counters.folded)


# ---- users, vhosts, permissions ----------------------------------------------------------


def user_json(broker: Broker, user: User) -> dict[str, Any]:
    return {"name": user.name, "password_hash": user.password_hash,
            "hashing_algorithm": HASHING_ALGORITHM, "tags": list(user.tags),
            "limits": dict(broker.limits.users.get(user.name, {}))}


def permission_json(user: str, vhost: str, p: Permission) -> dict[str, Any]:
    return {"user": user, "vhost": vhost, "configure": p.configure, "write": p.write,
            "read": p.read}


def vhost_json(broker: Broker, name: str, node: str, rates: Rates | None = None
               ) -> dict[str, Any]:
    meta = broker.extras.metadata(name)
    vhost = broker.vhosts[name]
    ready = sum(q.message_count for q in vhost.queues.values())
    unacked = sum(q.unacked_count for q in vhost.queues.values())
    recv, send = vhost_octets(broker, name)
    peer_recv, peer_send = peer_vhost_octets(broker, name)
    return {
        "name": name, "description": meta["description"], "tags": meta["tags"],
        "default_queue_type": "undefined", "metadata": meta, "tracing": False,
        "cluster_state": {node: "running"},
        **details(rates, ("vhost", name), messages=ready + unacked, messages_ready=ready,
                  messages_unacknowledged=unacked),
        # bytes of its connections on every node and worker, with their rates (bytes/s)
        **details(rates, ("vhost", name), recv_oct=recv + peer_recv,
                  send_oct=send + peer_send),
        # every node's and worker's counts of the vhost (RabbitMQ sums the cluster's)
        "message_stats": message_stats(
            vhost_message_counts(broker, name) + peer_message_counts(broker, [name]),
            rates, ("vhost", name)),
    }


# ---- exchanges, bindings -----------------------------------------------------------------


def exchange_counts(broker: Broker) -> list[dict[str, Any]]:
    """This process's publish counters of every exchange published to here (``vhost``,
    ``name``, ``publish_in``, ``publish_out``: messages), for the other workers and nodes to
    sum (each routes its own clients' publishes through its own copy of the exchange)."""
    return [{"vhost": vname, "name": name, "publish_in": x.published,
             "publish_out": x.published - x.unroutable}
            for vname, vhost in list(broker.vhosts.items())
            for name, x in list(vhost.exchanges.items()) if x.published]


def exchange_json(vhost: str, x: Exchange | None, full: bool = False,
                  rates: Rates | None = None,
                  elsewhere: tuple[int, int] = (0, 0)) -> dict[str, Any]:
    """An exchange; ``None`` is the default exchange (name ``""``). ``message_stats``
    (``publish_in``, ``publish_out`` and their rates) sums this process's counters and
    ``elsewhere`` (the other workers' and nodes' ``(publish_in, publish_out)``), as
    RabbitMQ's management sums the cluster's; as in RabbitMQ 3.10.8 it is absent until the
    exchange was published to. The default exchange's publishes are not counted (its fast
    path counts nothing), so it has no ``message_stats``, where RabbitMQ shows them."""
    if x is None:
        out: dict[str, Any] = {"name": "", "vhost": vhost, "type": "direct", "durable": True,
                               "auto_delete": False, "internal": False, "arguments": {},
                               "user_who_performed_action": INTERNAL_USER}
    else:
        out = {"name": x.name, "vhost": vhost, "type": x.type_name, "durable": x.durable,
               "auto_delete": x.auto_delete, "internal": x.internal,
               "arguments": jsonable(x.arguments),
               "user_who_performed_action": INTERNAL_USER}
        publish_in = x.published + elsewhere[0]
        if publish_in:
            out["message_stats"] = details(
                rates, ("exchange", vhost, x.name), publish_in=publish_in,
                publish_out=x.published - x.unroutable + elsewhere[1])
        if x.delayed is not None:  # x-delayed-message: messages it holds (the plugin's field)
            out["messages_delayed"] = len(x.delayed)
    if full:
        out["incoming"] = []
        out["outgoing"] = []
    return out


def args_hash(arguments: dict[str, Any]) -> str:
    """A short stable hash of binding arguments for properties keys (RabbitMQ hashes the
    Erlang term with ``erlang:phash2``, which this does not reproduce: the keys differ from
    RabbitMQ's, but are used the same way)."""
    canonical = repr(sorted((str(k), repr(jsonable(v))) for k, v in arguments.items()))
    digest = hashlib.sha256(canonical.encode()).digest()[:4]
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _quote_binding(text: str) -> str:
    return quote_plus(text).replace("~", "%7E")


def properties_key(routing_key: str, arguments: dict[str, Any]) -> str:
    """RabbitMQ's binding ``properties_key``: ``~`` for an empty key without arguments, the
    quoted routing key, or ``key~<args hash>``."""
    if not arguments:
        return "~" if routing_key == "" else _quote_binding(routing_key)
    return f"{_quote_binding(routing_key)}~{_quote_binding(args_hash(arguments))}"


def binding_json(vhost: str, b: Binding) -> dict[str, Any]:
    return {"source": b.source, "vhost": vhost, "destination": b.destination.name,
            "destination_type": b.destination.kind, "routing_key": b.routing_key,
            "arguments": jsonable(b.arguments),
            "properties_key": properties_key(b.routing_key, b.arguments)}


def default_binding_json(vhost: str, queue: str) -> dict[str, Any]:
    """The default exchange's implicit binding of every queue (listed by RabbitMQ)."""
    return {"source": "", "vhost": vhost, "destination": queue, "destination_type": "queue",
            "routing_key": queue, "arguments": {}, "properties_key": properties_key(queue, {})}


# ---- connections, channels, consumers ----------------------------------------------------


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def connection_name(conn: Connection, st: ManagementState) -> str:
    """``127.0.0.1:54321 -> 127.0.0.1:5672``, RabbitMQ's connection name."""
    peer_host, peer_port = conn.peer or ("127.0.0.1", 0)
    return f"{_host_port(peer_host, peer_port)} -> {_host_port(st.amqp_host, st.amqp_port)}"


def _state_name(conn: Connection) -> str:
    value = getattr(conn.state, "value", str(conn.state))
    return {"open": "running", "closing": "closing", "closed": "closed"}.get(value, "starting")


def connection_json(conn: Connection, st: ManagementState) -> dict[str, Any]:
    peer_host, peer_port = conn.peer or ("127.0.0.1", 0)
    props = jsonable(conn.client_properties or {})
    connected_at = time.time() - max(0.0, conn.clock() - conn.created_at)
    out: dict[str, Any] = {
        "name": connection_name(conn, st), "node": st.node, "type": "network",
        "protocol": "AMQP 0-9-1", "auth_mechanism": getattr(conn, "auth_mechanism", "PLAIN"),
        "user": conn.user or "", "user_who_performed_action": conn.user or "",
        "vhost": conn.vhost_name, "host": st.amqp_host, "port": st.amqp_port,
        "peer_host": peer_host, "peer_port": peer_port, "ssl": False,
        "ssl_protocol": None, "ssl_key_exchange": None, "ssl_cipher": None, "ssl_hash": None,
        "peer_cert_subject": None, "peer_cert_issuer": None, "peer_cert_validity": None,
        "state": _state_name(conn), "channels": len(conn.channels),
        "channel_max": conn.channel_max, "frame_max": conn.frame_max,
        "timeout": conn.heartbeat, "connected_at": int(connected_at * 1000),
        "client_properties": props,
        **socket_stats(conn, st),
    }
    if isinstance(props, dict) and isinstance(props.get("connection_name"), str):
        out["user_provided_name"] = props["connection_name"]
    return out


def socket_stats(conn: Connection, st: ManagementState) -> dict[str, Any]:
    """A connection's socket figures as RabbitMQ 3.10.8 shows them: ``recv_oct`` /
    ``send_oct`` (bytes read from and written to the socket, with their
    ``_details.rate`` in bytes/s), ``recv_cnt`` / ``send_cnt`` (reads and writes; RabbitMQ
    counts TCP packets) and ``send_pend`` (bytes not yet taken by the transport)."""
    key = ("connection", connection_name(conn, st))
    return {"recv_cnt": conn.recv_cnt, **details(st.rates, key, recv_oct=conn.recv_oct),
            "send_cnt": conn.send_cnt, **details(st.rates, key, send_oct=conn.send_oct),
            "send_pend": len(conn.output)}


def channel_name(ch: Channel, st: ManagementState) -> str:
    return f"{connection_name(ch.connection, st)} ({ch.number})"


def channel_json(ch: Channel, st: ManagementState) -> dict[str, Any]:
    conn = ch.connection
    peer_host, peer_port = conn.peer or ("127.0.0.1", 0)
    tx = ch.tx
    return {
        "name": channel_name(ch, st), "node": st.node, "number": ch.number,
        "user": conn.user or "", "user_who_performed_action": conn.user or "",
        "vhost": conn.vhost_name,
        "connection_details": {"name": connection_name(conn, st), "peer_host": peer_host,
                               "peer_port": peer_port},
        "state": "closing" if ch.closing else "running",
        "consumer_count": len(ch.consumers), "prefetch_count": ch.prefetch_count,
        "global_prefetch_count": ch.global_prefetch, "confirm": ch.confirms is not None,
        "transactional": tx is not None, "messages_unacknowledged": len(ch.unacked),
        "messages_uncommitted": len(tx) if tx else 0, "acks_uncommitted": 0,
        "messages_unconfirmed": 0 if ch.confirms is None else ch.confirms.unconfirmed_count,
        "pending_raft_commands": 0,
        "message_stats": channel_message_stats(ch, st.rates, ("channel", channel_name(ch, st))),
    }


def consumer_json(c: Consumer, st: ManagementState) -> dict[str, Any]:
    ch = cast("Channel", c.channel)
    conn = getattr(ch, "connection", None)
    if conn is None:  # --workers N: the consumer's client is on another worker (its ``peer``)
        details: dict[str, Any] = {"name": f"worker {getattr(ch, 'peer', '?')}", "number": 0,
                                   "connection_name": "", "peer_host": "", "peer_port": 0,
                                   "node": st.node, "user": ""}
    else:
        peer_host, peer_port = conn.peer or ("127.0.0.1", 0)
        details = {"name": channel_name(ch, st), "number": ch.number,
                   "connection_name": connection_name(conn, st),
                   "peer_host": peer_host, "peer_port": peer_port,
                   "node": st.node, "user": conn.user or ""}
    return {
        "consumer_tag": c.tag, "exclusive": c.exclusive, "ack_required": not c.no_ack,
        "prefetch_count": c.prefetch, "active": True, "activity_status": "up",
        "arguments": jsonable(c.arguments),
        "queue": {"name": c.queue.name, "vhost": c.queue.vhost_name},
        "channel_details": details,
    }


def open_channels(broker: Broker) -> Iterable[Channel]:
    for conn in list(broker.connections):
        yield from list(conn.channels.values())


# ---- queues ------------------------------------------------------------------------------


@dataclass
class UnackedTotals:
    """Unacknowledged deliveries per queue (count, body bytes), from every channel."""

    by_queue: dict[int, tuple[int, int]]

    @classmethod
    def collect(cls, broker: Broker) -> UnackedTotals:
        totals: dict[int, tuple[int, int]] = {}
        for ch in open_channels(broker):
            for qm, q, _ in ch.unacked.values():
                n, size = totals.get(id(q), (0, 0))
                totals[id(q)] = (n + 1, size + len(qm.message.body))
        return cls(totals)

    def bytes_of(self, q: Queue) -> int:
        return self.by_queue.get(id(q), (0, 0))[1]


def queue_message_stats(q: Queue, rates: Rates | None) -> dict[str, Any]:
    """A queue's ``message_stats`` (RabbitMQ's queue keys: no publisher-side ones)."""
    c = q.counters
    manual = c.manual_deliveries(q.unacked_count)
    return details(rates, ("queue", q.vhost_name, q.name), publish=q.published,
                   deliver=manual, deliver_no_ack=q.delivered - manual - c.got - c.got_no_ack,
                   get=c.got,
                   get_no_ack=c.got_no_ack, get_empty=c.get_empty, deliver_get=q.delivered,
                   redeliver=c.redelivered, ack=c.acked)


def queue_json(q: Queue, st: ManagementState, unacked: UnackedTotals,
               full: bool = False) -> dict[str, Any]:
    vhost = st.broker.vhosts.get(q.vhost_name)
    policy, operator = q.settings.policy, q.settings.operator_policy
    definition = merge_operator_definition(
        vhost.policies[policy].definition
        if vhost is not None and policy in vhost.policies else {},
        vhost.operator_policies[operator].definition
        if vhost is not None and operator in vhost.operator_policies else {})
    consumers = q.consumers
    ready, unacked_n = q.message_count, q.unacked_count
    ready_bytes = int(getattr(q.ready, "bytes", 0))
    unacked_bytes = unacked.bytes_of(q)
    exclusive_tag = next((c.tag for c in consumers if c.exclusive), None)
    sac = consumers[0].tag if consumers and q.settings.single_active_consumer else None
    out: dict[str, Any] = {
        "name": q.name, "vhost": q.vhost_name, "durable": q.durable, "auto_delete": q.auto_delete,
        "exclusive": q.exclusive, "arguments": jsonable(q.arguments), "node": st.node,
        "type": q.kind, "state": "running", "policy": policy,
        "operator_policy": q.settings.operator_policy,
        "effective_policy_definition": jsonable(definition),
        "consumers": len(consumers), "exclusive_consumer_tag": exclusive_tag,
        "single_active_consumer_tag": sac,
        "consumer_capacity": 1.0 if consumers else 0,
        "consumer_utilisation": 1.0 if consumers else 0,
        "memory": ready_bytes + unacked_bytes, "head_message_timestamp": None,
        "recoverable_slaves": None,
        **details(st.rates, ("queue", q.vhost_name, q.name), messages=ready + unacked_n,
                  messages_ready=ready, messages_unacknowledged=unacked_n),
        "message_bytes": ready_bytes + unacked_bytes, "message_bytes_ready": ready_bytes,
        "message_bytes_unacknowledged": unacked_bytes,
        **memory_fields(q, unacked_n, unacked_bytes,  # messages_ram, backing_queue_status...
                        lambda name, value: st.rates.rate(("queue", q.vhost_name, q.name,
                                                           "bqs", name), value)),
        "message_stats": queue_message_stats(q, st.rates),
    }
    workers = st.broker.workers
    if workers is not None:  # amqpq's, with --workers N: the worker the queue lives on
        out["worker"] = workers.home_of(q)
    stream_fields = getattr(q, "stream_fields", None)
    if stream_fields is not None:  # amqpq's: first/last offset, segments
        out.update(stream_fields())
    if (q.quorum or q.kind == "stream") and workers is not None \
            and workers.quorum is not None:  # a cluster: leader, members, online, in_sync
        out.update(workers.quorum.fields(q))
    elif q.quorum:  # one node: it leads and is the only member
        out.update(leader=st.node, members=[st.node], online=[st.node])
    groups = message_groups_json(q, lambda c: consumer_json(c, st)["channel_details"])
    if groups is not None:  # x-group-by queues only
        out["message_groups"] = groups
    owner = q.exclusive_owner if q.exclusive else None
    if owner is not None and owner in st.broker.connections:
        peer_host, peer_port = owner.peer or ("127.0.0.1", 0)
        out["owner_pid_details"] = {"name": connection_name(owner, st),
                                    "peer_host": peer_host, "peer_port": peer_port}
    if full:
        out["consumer_details"] = [consumer_json(c, st) for c in consumers]
        out["deliveries"] = []
        out["incoming"] = []
    return out
