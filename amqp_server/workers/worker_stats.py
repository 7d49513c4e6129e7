"""A worker's figures and alarms, shared with the other workers (``--workers N``).

Every second each worker sends the others a summary (:meth:`PeerStats.summary`: pid,
clients, queues and messages, its own alarms, connections per vhost and user). Worker 0,
which serves the HTTP API, lists them (``/api/workers``) and sums them (overview and
Prometheus totals); every worker counts the others' connections and channels against the
connection and channel limits (:meth:`PeerStats.elsewhere`), so those are broker-wide
(within a second); and publishers are blocked on every worker while any worker has a memory
or disk alarm (RabbitMQ blocks publishers on every node while one node has one).

A part of :class:`~amqp_server.workers.runtime.WorkerRuntime` with its own state; the runtime
hands it the ``stats``, ``list``/``close`` and ``answer`` control records it receives.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from amqp_server.workers.links import Links
from amqp_server.workers.remote_queue import RemoteQueue
from management.node_figures import resource_figures
from management.serializers import (
    UnackedTotals,
    channel_json,
    connection_json,
    consumer_json,
    exchange_counts,
    node_message_counts,
    queue_json,
    vhost_message_counts,
    vhost_octets,
)
from management.state import ManagementState, node_name

if TYPE_CHECKING:
    from broker.broker import Broker


ASK_TIMEOUT = 2.0  # seconds worker 0 waits for the others' lists


class PeerStats:
    """Summaries of every worker; broker-wide totals, limits and alarms.

    Args:
        broker: this worker's broker (its connections, queues, alarms).
        index, count: this worker's index and how many workers (or nodes) there are.
        links: the links to the other workers (which are up: ``links.out``).
        send_control: sends a control record to a peer
            (:meth:`~amqp_server.workers.links.Links.send_control`).
    """

    def __init__(self, broker: Broker, index: int, count: int, links: Links,
                 send_control: Callable[[int, tuple[Any, ...]], None]) -> None:
        self.broker = broker
        self.index = index
        self.count = count
        self.links = links
        self.send_control = send_control
        #: index -> (the peer's last summary, loop time it came)
        self.peer_summaries: dict[int, tuple[dict[str, Any], float]] = {}
        self._asks: dict[int, asyncio.Future[Any]] = {}
        self._ask_ids = itertools.count(1)
        self._json_state: ManagementState | None = None
        self._local_alarm: tuple[bool, str] = (False, "low on memory")
        self.started_at = time.time()  # uptime in the summary

    def on_stats(self, peer: int, summary: dict[str, Any]) -> None:
        """Worker ``peer``'s summary (its once-a-second ``stats`` record)."""
        self.peer_summaries[peer] = (summary, asyncio.get_running_loop().time())
        if summary.get("local_alarm", [False])[0] or self.broker.alarms_active:
            self._apply_alarms()

    # ---- the HTTP API's lists over every worker (worker 0 asks, the others answer) ------

    async def _ask_all(self, record: tuple[Any, ...]) -> list[Any]:
        """Send ``record`` (its item 1 is filled with a request id) to every worker that
        is up; their answers, those that came within :data:`ASK_TIMEOUT`."""
        loop = asyncio.get_running_loop()
        asked = []
        for peer in list(self.links.out):
            ask_id = next(self._ask_ids)
            future: asyncio.Future[Any] = loop.create_future()
            self._asks[ask_id] = future
            self.send_control(peer, (record[0], ask_id, *record[2:]))
            asked.append((ask_id, future))
        if not asked:
            return []
        await asyncio.wait([f for _, f in asked], timeout=ASK_TIMEOUT)
        answers = []
        for ask_id, future in asked:
            self._asks.pop(ask_id, None)
            if future.done():
                answers.append(future.result())
        return answers

    async def gather_json(self, kind: str,
                          only: list[tuple[str, str]] | None = None) -> list[dict[str, Any]]:
        """The other workers' (or nodes') ``connections``, ``channels``, ``consumers`` or
        ``queues`` (those living on each) as the HTTP API shows them, each with ``worker``
        (``exchanges``: their publish counters, :func:`management.serializers.
        exchange_counts`);
        ``only``: for ``queues``, just these ``(vhost, name)`` queues (a queue's page need
        not make every home describe all of its queues)."""
        record: tuple[Any, ...] = ("list", 0, kind)
        if only is not None:
            record = (*record, [[v, n] for v, n in only])
        return [item for items in await self._ask_all(record) for item in items]

    async def close_elsewhere(self, name: str, text: str) -> bool:
        """Close connection ``name`` (the API's name) wherever it is (320, ``text``);
        False when no other worker has it."""
        return any(await self._ask_all(("close", 0, name, text)))

    def on_ask(self, peer: int, rec: tuple[Any, ...]) -> None:
        """Answer worker ``peer``'s ``list`` or ``close`` record."""
        kind, ask_id = rec[0], rec[1]
        broker = self.broker
        st = self._json_state
        if st is None:
            st = self._json_state = self._make_json_state()
        answer: Any
        if kind == "close":
            answer = False
            for conn in list(broker.connections):
                if conn.vhost_name and connection_json(conn, st)["name"] == rec[2]:
                    conn.close(320, rec[3])
                    answer = True
        elif rec[2] == "queues":  # those that live here (not stand-ins), as this node shows them
            unacked = UnackedTotals.collect(broker)
            if len(rec) > 3 and rec[3] is not None:  # those asked for only
                vhosts = broker.vhosts
                found = [vhosts[v].queues.get(n) if v in vhosts else None for v, n in rec[3]]
                queues = [q for q in found if q is not None]
            else:
                queues = [q for v in list(broker.vhosts.values()) for q in v.queues.values()]
            answer = [queue_json(q, st, unacked) | {"worker": self.index}
                      for q in queues if not isinstance(q, RemoteQueue)]
        elif rec[2] == "exchanges":  # the publish counters of exchanges published to here
            answer = exchange_counts(broker)
        elif rec[2] == "connections":
            answer = [connection_json(c, st) | {"worker": self.index}
                      for c in list(broker.connections) if c.vhost_name]
        else:
            channels = [ch for c in list(broker.connections) if c.vhost_name
                        for ch in c.channels.values()]
            if rec[2] == "channels":
                answer = [channel_json(ch, st) | {"worker": self.index} for ch in channels]
            else:
                answer = [consumer_json(c, st) | {"worker": self.index}
                          for ch in channels for c in ch.consumers.values()]
        self.send_control(peer, ("answer", ask_id, answer))

    def _make_json_state(self) -> ManagementState:
        """How this process names its objects in the API: its node name (a cluster node's
        ``--node-name``) and the AMQP port it really listens on (``--port 0`` too), so that
        an answer to another worker or node carries the names clients see."""
        broker = self.broker
        cluster = broker.cluster
        port = broker.config.port
        if cluster is not None:
            port = int(cluster.info.get("amqp_port") or port)
        return ManagementState(broker, amqp_host=broker.config.host, amqp_port=port,
                               node=broker.config.node_name or node_name(),
                               started_at=self.started_at)

    def on_answer(self, rec: tuple[Any, ...]) -> None:
        future = self._asks.get(rec[1])
        if future is not None and not future.done():
            future.set_result(rec[2])

    def summary(self) -> dict[str, Any]:
        """This worker's figures for ``/api/workers`` and the broker-wide totals (a cluster
        member's with its ``node_name`` and ``worker``: :meth:`_cluster_place`)."""
        broker = self.broker
        channels = [ch for conn in list(broker.connections) for ch in conn.channels.values()]
        home = [q for v in broker.vhosts.values() for q in v.queues.values()
                if not isinstance(q, RemoteQueue)]
        alarms = broker.alarms
        by_vhost: dict[str, int] = {}
        by_user: dict[str, int] = {}
        channels_by_user: dict[str, int] = {}
        for conn in broker.connections:
            if conn.vhost is not None:  # open (past Connection.Open)
                by_vhost[conn.vhost_name] = by_vhost.get(conn.vhost_name, 0) + 1
                user = conn.user or ""
                by_user[user] = by_user.get(user, 0) + 1
                channels_by_user[user] = channels_by_user.get(user, 0) + len(conn.channels)
        return {"index": self.index, "pid": os.getpid(), "connections": len(broker.connections),
                "open_by_vhost": by_vhost, "open_by_user": by_user,
                "channels_by_user": channels_by_user,
                "channels": len(channels),
                "consumers": sum(len(ch.consumers) for ch in channels),
                "queues": len(home), "messages_ready": sum(q.message_count for q in home),
                "messages_unacknowledged": sum(q.unacked_count for q in home),
                "mem_alarm": bool(alarms and alarms.memory),
                "disk_free_alarm": bool(alarms and alarms.disk),
                "local_alarm": [self._local_alarm[0], self._local_alarm[1]],
                # a cluster node's /api/nodes shows the other nodes' resources from these
                "node": resource_figures(broker, self.started_at),
                # message counters (RabbitMQ's message_stats keys), summed by the overview
                # and vhosts on any node or worker: the node's, and per vhost
                "message_counts": dict(node_message_counts(broker)),
                "vhost_message_counts": {name: dict(vhost_message_counts(broker, name))
                                         for name in list(broker.vhosts)},
                # bytes of each vhost's connections here (the vhosts' recv_oct/send_oct)
                "vhost_octets": {name: list(vhost_octets(broker, name))
                                 for name in list(broker.vhosts)},
                **self._cluster_place()}

    def _cluster_place(self) -> dict[str, Any]:
        """A cluster member's node name and worker index on it (``node_name``, ``worker``:
        a node of several workers lists each worker under its node); {} without a cluster."""
        cluster = self.broker.cluster
        if cluster is None:
            return {}
        info = cluster.info
        return {"node_name": str(info.get("node") or info.get("name") or ""),
                "worker": int(info.get("worker") or 0)}

    def workers(self) -> list[dict[str, Any]]:
        """Every worker's last summary (this one's now), ``up`` when its link is open; a
        cluster node's: every node heard from too (nodes that joined after it, whose index is
        past the count it started with)."""
        now = asyncio.get_running_loop().time()
        out = []
        for index in sorted(set(range(self.count)) | set(self.peer_summaries)):
            if index == self.index:
                item = self.summary()
            elif index in self.peer_summaries:
                item = dict(self.peer_summaries[index][0])
            else:
                item = {"index": index}
            item["up"] = index == self.index or (
                index in self.links.out and index in self.peer_summaries
                and now - self.peer_summaries[index][1] < 5.0)
            out.append(item)
        return out

    def totals(self) -> dict[str, int]:
        """Connections, channels and consumers summed over every worker (last summaries)."""
        keys = ("connections", "channels", "consumers")
        return {k: sum(int(w.get(k, 0)) for w in self.workers()) for k in keys}

    def elsewhere(self, key: str, name: str | None = None) -> int:
        """What the other workers that are up last reported (once a second): open
        connections (``key`` "open_by_vhost"/"open_by_user" with a vhost or user name, or
        "connections") or a user's channels ("channels_by_user"), summed; for limits
        counted broker-wide."""
        total = 0
        for index, (summary, _) in self.peer_summaries.items():
            if index not in self.links.out:
                continue
            value = summary.get(key, 0)
            total += int(value.get(name, 0) if isinstance(value, dict) else value)
        return total

    def local_alarm(self, active: bool, reason: str) -> None:
        """This worker's own memory/disk alarm changed: the broker-wide view follows."""
        self._local_alarm = (active, reason)
        self._apply_alarms()

    def _apply_alarms(self) -> None:
        """Publishers are blocked on every worker while any worker has an alarm (as
        RabbitMQ blocks publishers on every node while one node has one)."""
        active, reason = self._local_alarm
        if not active:
            for summary, _ in self.peer_summaries.values():
                if summary.get("local_alarm", [False])[0]:
                    active, reason = True, str(summary["local_alarm"][1])
                    break
        if (active, reason) != (self.broker.alarms_active, self.broker.alarm_reason):
            self.broker.set_alarm(active, reason)

