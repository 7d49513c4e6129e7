"""Replicated quorum queues of a cluster: leaders, followers, in-sync replicas, failover.

Theory of operation
-------------------
A quorum queue declared in a cluster (``x-queue-type: quorum``) has *members*: the declaring
node, its first leader, and the next running nodes, ``x-quorum-initial-group-size`` of them in
all (default 3, or the cluster's size when smaller). Its replication state lives in etcd
(``/amqpq/<cluster>/qq/<vhost>/<name>``, JSON)::

    {"leader": node index, "run": its etcd lease id, "epoch": n, "members": [...],
     "isr": [...], "log_ids": {"node index": "the id of the replica log it was admitted
     with, 16 hex digits", ...}}

and changes only by etcd transactions that compare the value they replace, so two nodes never
both win a change (no consensus here: etcd's).

* **Replication** (Kafka's in-sync replicas, leader epochs and fetches): each member keeps
  the queue's :class:`~queue_store.replica_log.ReplicaLog`, whose entries (ENQ, ACK, RET)
  carry the leader epoch that appended them. The rules are a sans-IO state machine,
  :class:`~amqp_server.cluster.replication.Replica`; :class:`QuorumGroup` feeds it events
  and carries out its actions (the table in :mod:`amqp_server.cluster.quorum_group`). The
  leader appends a turn's operations at its end, writes and fsyncs them; followers *fetch*
  from their log end (a REPL record on the node link, naming the epoch of their last entry
  and what they have fsynced: their acknowledgement) and get the entries after it, or
  ``Diverging`` when their tail is not the leader's (they cut it and fetch again), or a
  snapshot when the leader's log no longer holds that offset. The *high watermark* is the
  offset every in-sync replica (``isr``, the leader included) has on disk; entries below it
  are committed: a publish enters the leader's queue (:class:`ReplicatedQueue`), consumers
  see it, its publisher is confirmed; a requeued message comes back once its RET is
  committed. Nothing commits while the ISR is smaller than a majority of the members.
* **ISR changes** (:mod:`amqp_server.cluster.isr`) are asked of etcd by the leader: a
  follower that fetched nothing for ``isr.LAG_TIMEOUT`` (5 s) while behind is removed from
  ``isr`` (then commits go on without it); one is added back only once it has on disk
  everything committed and the leader's log as of its election. While a change is on its
  way the high watermark counts the ISR before and after it (the maximal ISR), so nothing
  commits without a member being added. So every replica in ``isr`` has every committed
  entry.
* **Failover**: when the leader's node dies (its etcd lease expires: a ``worker_down``
  record), every surviving in-sync member tries one transaction: leader = itself, epoch + 1,
  its ``run`` (the node's etcd lease id), ``isr`` without the old leader. One wins; its
  replica becomes the queue (every message flagged redelivered: it may have been delivered
  by the old leader) and delivers once it has committed what its log held when elected; the
  other members fetch from it. A node that finds itself named leader by a state of another
  run (it restarted, or its lease expired) takes a new epoch first (a leader transfer
  writes the target's ``run`` as its etcd registration says, so it leads that epoch at
  once); publishes to it wait meanwhile. Consumers of the queue on surviving nodes were sent
  Basic.Cancel (their consumer-cancel notification).
* **Fencing**: a follower takes entries only from the leader of the epoch it follows; a
  leader answers only fetches of its epoch and steps down when a fetch or etcd's watch shows
  a newer one: its uncommitted publishes are nacked, its consumers cancelled, its replica
  follows the new leader (cutting what the new leader does not have). A leader delivers only
  while its etcd session is surely alive, so an old leader resumed after a partition neither
  commits nor delivers again.

An acknowledgement still on its way to the followers when the leader dies is lost: that message
is delivered again (flagged redelivered), as with RabbitMQ when an ack was not yet committed by
the quorum.

Source: Kafka replication (ISR, high watermark, leader epochs: KIP-101, KIP-279, KIP-320);
RabbitMQ quorum queues (https://www.rabbitmq.com/docs/quorum-queues); etcd transactions.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from amqp_server.cluster import placement, replica_records, stream_group
from amqp_server.cluster.quorum_admin import QuorumAdmin
from amqp_server.cluster.quorum_group import QuorumGroup, log_ids_value, new_run
from amqp_server.cluster.quorum_queue import ReplicatedQueue, replicated_class
from amqp_server.cluster.stream_group import StreamGroup
from amqp_server.workers.link_codec import queue_key, split_queue_key
from amqp_server.workers.remote_queue import RemoteQueue
from queue_store.queue import Queue
from queue_store.queue_args import queue_type_of

if TYPE_CHECKING:
    from amqp_server.cluster.metadata import EtcdHub
    from amqp_server.workers.runtime import WorkerRuntime

log = logging.getLogger("amqpq.quorum")

DEFAULT_GROUP_SIZE = 3


class QuorumManager:
    """A node's quorum queue groups, their etcd state and their records (module docstring).

    Args:
        runtime: the node's runtime (links, results, queues).
        hub: the node's etcd hub (its watch brings the state of every quorum queue).
        data_dir: where replica logs live (``DATA_DIR/quorum``).
    """

    def __init__(self, runtime: WorkerRuntime, hub: EtcdHub, data_dir: Path) -> None:
        self.runtime = runtime
        self.hub = hub
        self.data_dir = data_dir
        self.prefix = hub.m.root + b"qq/"
        self.maintenance_prefix = hub.m.root + b"maintenance/"
        self.groups: dict[bytes, QuorumGroup] = {}
        self.states: dict[bytes, tuple[dict[str, Any], bytes]] = {}
        self._run = new_run()  # without an etcd lease id (not expected)
        #: streams being declared here: their arguments, until their group is made
        self.declaring: dict[bytes, dict[str, Any]] = {}
        #: nodes in maintenance (``amqpqctl drain``): etcd's ``maintenance/<node>`` keys
        self.drained: dict[str, int] = {}
        #: called with True/False when this node's own maintenance mark comes or goes
        #: (etcd's watch): :class:`~amqp_server.cluster.maintenance.Maintenance`
        self.on_node_mark: Callable[[bool], None] | None = None
        #: ``queue_leader_locator`` of the configuration (None: client-local)
        self.leader_locator: str | None = None
        #: operator commands: membership changes, leader transfers, rebalancing, drain,
        #: membership reconciliation (:class:`~amqp_server.cluster.quorum_admin.QuorumAdmin`)
        self.admin = QuorumAdmin(self)
        hub.watchers.append(self._on_etcd)

    async def load_states(self) -> None:
        """Read every quorum queue's state (before the node's queues are recovered, so a
        queue led elsewhere is not taken for one led here)."""
        for prefix in (self.prefix, self.maintenance_prefix):
            for kv in await self.hub.client.get_prefix(prefix):
                self._on_etcd("PUT", kv.key, kv.value)

    @property
    def run(self) -> int:
        """This node's incarnation for its replicas (:attr:`GroupState.run`): its etcd
        lease's id, new at every registration (a lease that expired is a new run)."""
        return int(self.hub.m.info.get("lease") or 0) or self._run

    def run_of(self, index: int) -> int:
        """Node ``index``'s incarnation (:attr:`run`) as its etcd registration says: the
        lease id; 0 when not known. A transfer naming a node writes it, so that node leads
        the new epoch as it is (a stale or unknown run is only slower: the node then takes
        one more epoch itself, as after a restart)."""
        if index == self.runtime.index:
            return self.run
        info = self.hub.m.running.get(self.hub.names.get(index, ""))
        return int((info or {}).get("lease") or 0)

    def _key(self, qkey: bytes) -> bytes:
        vhost, name = split_queue_key(qkey)
        return self.prefix + f"{quote(vhost, safe='')}/{quote(name, safe='')}".encode()

    def _on_etcd(self, kind: str, key: bytes, value: bytes | None) -> None:
        if key.startswith(self.maintenance_prefix):
            self._on_maintenance(kind, key, value)
            return
        if not key.startswith(self.prefix):
            return
        vhost, _, name = key[len(self.prefix):].decode().partition("/")
        qkey = queue_key(unquote(vhost), unquote(name))
        if kind != "PUT" or value is None:
            self.states.pop(qkey, None)
            return
        try:
            state = json.loads(value)
        except ValueError:
            return
        self.states[qkey] = (state, value)
        group = self.groups.get(qkey)
        if group is None and self.runtime.index in state.get("members", ()) \
                and self.runtime.queue_by_key(qkey) is not None:
            group = self.group(qkey)
        if int(state.get("leader", -1)) != self.runtime.index:
            q = self.runtime.queue_by_key(qkey)
            if isinstance(q, RemoteQueue):
                q.home = int(state["leader"])
        if group is not None:
            group.on_state(state, value)
        # publishes that waited for a leader go to the one etcd names now (or here)
        self.runtime.client.release_parked(self.runtime.queue_by_key)

    def group(self, qkey: bytes) -> QuorumGroup:
        group = self.groups.get(qkey)
        if group is None:
            vhost, name = split_queue_key(qkey)
            if self.is_stream(qkey):
                group = self.groups[qkey] = StreamGroup(self, vhost, name)
                stream_group.adopt(self, group)
            else:
                group = self.groups[qkey] = QuorumGroup(self, vhost, name)
        return group

    def is_stream(self, qkey: bytes) -> bool:
        """Is ``qkey`` a replicated stream (etcd's state says so, or the queue here is)?"""
        known = self.states.get(qkey)
        if known is not None:
            return known[0].get("type") == "stream"
        if qkey in self.declaring:
            return True
        q = self.runtime.queue_by_key(qkey)
        return q is not None and q.kind == "stream"

    def arguments_of(self, qkey: bytes) -> dict[str, Any]:
        """The Queue.Declare arguments of queue ``qkey`` (being declared here, or known)."""
        if qkey in self.declaring:
            return self.declaring[qkey]
        q = self.runtime.queue_by_key(qkey)
        return dict(q.arguments) if q is not None else {}

    def make_queue(self, name: str, vhost_name: str, home: int, kwargs: dict[str, Any]
                   ) -> Queue:
        """The queue object of quorum queue ``name`` on this node: its replicated queue
        where this node leads it, a stand-in for the leader elsewhere."""
        if queue_type_of(kwargs["arguments"]) == "stream":
            return stream_group.make_stream(self, name, vhost_name, home, kwargs)
        qkey = queue_key(vhost_name, name)
        known = self.states.get(qkey)
        leader = int(known[0]["leader"]) if known else home
        if leader != self.runtime.index:
            q = RemoteQueue(self.runtime.client, leader, name, vhost_name, **kwargs)
            if known and self.runtime.index in known[0]["members"]:
                group = self.group(qkey)
                asyncio.get_running_loop().call_soon(group.on_state, *known)
            return q
        group = self.group(qkey)
        queue = replicated_class(kwargs["arguments"])(name, vhost_name, group=group, **kwargs)
        group.lead(queue)  # it delivers once elected (a new epoch of this run) and serving
        if known:
            group.on_state(*known)
        else:
            self.runtime.keep_task(asyncio.ensure_future(self.create(group, kwargs)))
        return queue

    async def create(self, group: QuorumGroup, kwargs: dict[str, Any]) -> None:
        """A new quorum queue or stream: its members and epoch 1 in etcd (a stream's
        size: :func:`stream_group.initial_cluster_size`)."""
        arguments = kwargs.get("arguments") or {}
        stream = isinstance(group, StreamGroup)
        if stream:
            size = stream_group.new_stream_size(self, group.vhost, kwargs)
        else:
            size = int(arguments.get("x-quorum-initial-group-size") or DEFAULT_GROUP_SIZE)
        members = placement.choose_members(
            self.runtime.index, self.hub.running, self.drained_indexes(),
            [s for s, _ in self.states.values()], size, self.hub.nodes)
        # the leader's log id; the followers' are recorded once it sees their fetches
        log_ids = ((self.runtime.index, group.replica.log_id),)
        state: dict[str, Any] = {"leader": self.runtime.index, "run": group.replica.run,
                                 "epoch": 1, "members": members, "isr": members,
                                 "log_ids": log_ids_value(log_ids)}
        if stream:
            state["type"] = "stream"
        await self.replace_state(group.qkey, None, state)

    async def replace_state(self, qkey: bytes, raw: bytes | None, new: dict[str, Any]) -> bool:
        """Write queue ``qkey``'s state ``new`` if etcd still holds ``raw`` (None: if it
        holds none); False when someone changed it first."""
        client = self.hub.client
        tx = client.transactions
        key = self._key(qkey)
        guard = tx.create(key) == 0 if raw is None else tx.value(key) == raw
        won, _ = await client.transaction(compare=[guard],
                                          success=[tx.put(key, json.dumps(new).encode())],
                                          failure=[])
        return bool(won)

    def queue_of(self, group: QuorumGroup) -> Queue | None:
        return self.runtime.queue_by_key(group.qkey)

    def promote(self, group: QuorumGroup) -> None:
        """Elected: this node's replica becomes the queue (in place of the stand-in)."""
        old = self.queue_of(group)
        if old is None or not isinstance(old, RemoteQueue):
            return
        queue = replicated_class(old.arguments)(
            old.name, old.vhost_name, group=group, durable=old.durable,
            auto_delete=old.auto_delete, arguments=old.arguments, settings=old.settings,
            vhost=self._vhost(old.vhost_name))
        for consumer in list(old.consumers):  # not expected: cancelled when the leader died
            old.remove_consumer(consumer)
            consumer.channel.consumer_cancelled_by_broker(consumer)
        self._swap(old, queue)
        group.lead(queue)
        queue.dispatch()

    def replace(self, queue: ReplicatedQueue | Queue, leader: int | None) -> None:
        """A queue led here no longer is: a stand-in for ``leader`` takes its place; its
        consumers get Basic.Cancel."""
        remote = RemoteQueue(self.runtime.client, leader if leader is not None else -1, queue.name,
                             queue.vhost_name, durable=queue.durable,
                             auto_delete=queue.auto_delete, arguments=queue.arguments,
                             settings=queue.settings)
        remote.home_moves = True  # a quorum queue's or stream's: publishes wait for a leader
        self._swap(queue, remote)
        for consumer in queue.mark_deleted():
            consumer.channel.consumer_cancelled_by_broker(consumer)

    def _vhost(self, name: str) -> Any:
        return self.runtime.broker.vhosts[name]

    def _swap(self, old: Queue, new: Queue) -> None:
        vhost = self._vhost(old.vhost_name)
        if vhost.queues.get(old.name) is old:
            vhost.queues[old.name] = new

    def worker_down(self, w: int) -> None:
        """Node ``w`` died or stopped (an ordered record): the groups it led hold an
        election, and those it followed from a leader here drop it from the in-sync
        replicas at once (not after the lag timeout: their commits go on without it)."""
        for group in list(self.groups.values()):
            if group.state is not None and w in group.state["members"]:
                group.elect()

    def queue_removed(self, q: Queue) -> None:
        """A queue was deleted: when it is a quorum queue with a replica here, the replica
        goes and the leader removes its state (any other queue: nothing)."""
        group = self.groups.pop(queue_key(q.vhost_name, q.name), None)
        if group is None:
            return
        was_leading = group.leading
        group.close(remove=True)
        if was_leading:
            self.runtime.keep_task(asyncio.ensure_future(
                self.hub.client.delete(self._key(group.qkey))))

    def close(self) -> None:
        """The node stops: every group's replica log is closed (kept on disk)."""
        for group in self.groups.values():
            group.close()

    def on_repl(self, peer: int, body: bytes) -> None:
        """A REPL record's body from node ``peer``: to the queue's replica here (made when
        this node is a member of a queue it knows)."""
        try:
            qkey, record = replica_records.decode(body)
        except replica_records.RecordError as exc:
            log.error("replication record from node %d dropped: %s", peer, exc)
            return
        group = self.groups.get(qkey)
        if group is None:
            known = self.states.get(qkey)
            if known is None or self.runtime.index not in known[0]["members"] \
                    or self.runtime.queue_by_key(qkey) is None:
                return
            group = self.group(qkey)
            group.on_state(*known)
        group.on_record(peer, record)

    def tick(self) -> None:
        """Once a second: every group's timers (one that fails is logged: the others and
        the node's tick go on), then membership reconciliation."""
        for group in list(self.groups.values()):
            try:
                group.tick()
            except Exception:
                log.exception("%s '%s' in vhost '%s': tick failed", group.what, group.name,
                              group.vhost)
        self.admin.reconcile(asyncio.get_running_loop().time())

    def drop(self, group: QuorumGroup) -> None:
        """This node is no longer a member (``delete_member``, ``shrink``): its replica goes
        (a stream's queue here becomes a stand-in for its leader)."""
        if self.groups.get(group.qkey) is group:
            del self.groups[group.qkey]
            if isinstance(group, StreamGroup) and group.queue is not None:
                self.replace(group.queue, int(group.state["leader"]) if group.state else -1)
            log.info("quorum queue '%s' in vhost '%s': replica on this node removed",
                     group.name, group.vhost)
            group.close(remove=True)

    # ---- maintenance marks, a new queue's leader, node names (cluster/placement.py) -----

    def _on_maintenance(self, kind: str, key: bytes, value: bytes | None) -> None:
        name = unquote(key[len(self.maintenance_prefix):].decode())
        if kind != "PUT" or value is None:
            self.drained.pop(name, None)
        else:
            try:
                self.drained[name] = int(json.loads(value)["index"])
            except (ValueError, KeyError, TypeError):
                return
        if name == self.hub.m.node and self.on_node_mark is not None:
            self.on_node_mark(name in self.drained)  # every worker of a drained node

    def drained_indexes(self) -> set[int]:
        """Member indexes of the nodes in maintenance (``amqpqctl drain``): every worker
        of such a node."""
        return set(self.drained.values()) | {i for i, n in self.hub.nodes.items()
                                              if n in self.drained}

    async def set_maintenance(self, on: bool) -> None:
        """Mark this node as in maintenance in etcd (``drain``), or not any more
        (``revive``): every node stops (or resumes) placing leaders on it."""
        key = self.maintenance_prefix + quote(self.hub.m.node, safe="").encode()
        if on:
            await self.hub.client.put(key, json.dumps({"index": self.runtime.index}).encode())
            self.drained[self.hub.m.node] = self.runtime.index
        else:
            await self.hub.client.delete(key)
            self.drained.pop(self.hub.m.node, None)

    def declare_home(self, arguments: dict[str, Any], policy: Any) -> int:
        """The node that should lead a new quorum queue declared here (its declare record's
        home): :func:`placement.choose_leader` with the queue's leader locator (``policy``:
        the matching policy's ``queue-leader-locator``, None without one)."""
        locator = placement.leader_locator(arguments.get("x-queue-leader-locator"), policy,
                                           self.leader_locator)
        return placement.choose_leader(self.runtime.index, self.hub.running,
                                       self.drained_indexes(),
                                       [s for s, _ in self.states.values()], locator)

    def node_name(self, index: int) -> str:
        """The name of the node member ``index`` is a worker of (``node-<index>`` when
        unknown)."""
        if index == self.runtime.index:
            return self.hub.m.node
        return self.hub.nodes.get(index, f"node-{index}")

    def fields(self, q: Queue) -> dict[str, Any]:
        """RabbitMQ's quorum queue fields of ``q`` for the API: leader, members, online
        (node names)."""
        known = self.states.get(queue_key(q.vhost_name, q.name))
        if known is None:
            return {}
        state = known[0]
        name = self.node_name  # a node's workers all show as the node

        running = self.hub.running
        group = self.groups.get(queue_key(q.vhost_name, q.name))
        lag = None
        if group is not None and group.leading:  # operations each follower is behind
            lag = {name(m): group.log.lsn - group.progress.get(m, 0)
                   for m in state["members"] if m != self.runtime.index}
        return {"leader": name(int(state["leader"])), "replica_lag": lag,
                "members": [name(i) for i in state["members"]],
                "online": [name(i) for i in state["members"] if i in running],
                "in_sync": [name(i) for i in state["isr"]], "epoch": state["epoch"]}
