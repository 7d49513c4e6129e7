"""Cluster-wide metadata in etcd: one ordered log of topology records for every node.

With ``--cluster-etcd`` a node is to the cluster what a worker is to a ``--workers N``
broker (:mod:`amqp_server.workers.runtime`), and etcd plays the supervisor's ordering part:

* A declare, bind, unbind, delete, or a change of users, vhosts, permissions and policies is
  a record (:mod:`broker.topology_records`, in its versioned wire form inside the link's
  ``("apply", origin, op_id, record, incarnation)`` tuple) written to etcd as a key of its
  own under ``/amqpq/<cluster>/log/``. etcd gives every write a *revision*; the records' creation
  revisions are the one order every node applies them in.
* Each node **watches** ``/amqpq/<cluster>/`` from the revision it has read up to, so it
  sees the log's new records, the nodes' registrations (``nodes/<name>``, under a lease) and
  their expiry in one stream, in revision order. The asking node answers its client once
  its own copy came back through the watch: a declare is answered after etcd accepted it.
* A node that **starts** reads the whole log (in creation order) before it accepts clients,
  then links to the running nodes (``peer_up``) and is in step (``synced``).
* A node's **death** (its lease expired: kill -9, a partition, SIGSTOP) becomes a
  ``worker_down`` record in the log, written once (an etcd transaction on a key named for
  the dead registration's lease) by whichever node saw it first, or by the node itself at its
  next start. So a node starting later replays the death at the same place.

The log is never compacted yet: a node starting reads every record since the cluster began
(a few hundred bytes each).

Source: etcd's watch and transaction API (https://etcd.io/docs/v3.4/learning/api/);
RabbitMQ keeps its metadata in Mnesia (3.13) or Khepri (Raft), replicated on every node.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from collections.abc import Callable
from typing import Any

from amqp_server.cluster.membership import Membership, load_info
from amqp_server.workers import link_values
from amqp_server.workers.link_codec import CONTROL
from broker.topology_records import WorkerDown, to_wire

log = logging.getLogger("amqpq.cluster")

Records = list[tuple[int, bytes]]
RETRY = 1.0  # seconds before a failed etcd write or a broken watch is tried again


class EtcdHub:
    """The etcd side of a node's runtime: what the supervisor's hub link is to a worker.

    Args:
        membership: this node's registration (connected: index known).
        on_records: ``(-1, records)`` with CONTROL records for the runtime (``apply``,
            ``peer_up``, ``synced``), as a worker gets them from its supervisor.
        on_address: ``(index, host, port)`` of a node that registered (its link address).
    """

    def __init__(self, membership: Membership,
                 on_records: Callable[[int, Records], None],
                 on_address: Callable[[int, str, int], None]) -> None:
        self.m = membership
        self.on_records = on_records
        self.on_address = on_address
        self.log_prefix = membership.root + b"log/"
        self.incarnation = os.urandom(6).hex()  # tells this run's records from older ones
        self._seq = itertools.count(1)
        self._writes: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._revision = 0  # the last revision applied
        self.names: dict[int, str] = {}  # node index -> name (registered nodes)
        self.running: set[int] = {membership.index}  # indexes of registered nodes
        self.watchers: list[Callable[[str, bytes, bytes | None], None]] = []

    @property
    def client(self) -> Any:
        return self.m.client

    async def hello(self) -> None:
        """Record the death of this name's previous run, read the whole log and the running
        nodes, hand them to the runtime (then ``synced``), and start watching."""
        if self.m.previous_lease:
            await self._record_down(self.m.node, self.m.index, self.m.previous_lease)
        everything = await self.client.get_prefix(self.m.root, sort_order="ascend",
                                                  sort_target="create")
        self._revision = revision = everything.header.revision  # the watch goes on from here
        replayed: Records = []
        peers: Records = []
        for kv in everything:
            if kv.key.startswith(self.log_prefix):
                replayed.append((CONTROL, self._replayed(link_values.decode(kv.value))))
            elif kv.key.startswith(self.m.prefix):
                info = load_info(kv.value)
                if "index" in info and info.get("name") != self.m.node:
                    self._learn(info)
                    peers.append((CONTROL, link_values.encode(("peer_up", int(info["index"])))))
            else:  # the state of everything else (quorum queues...)
                for watcher in self.watchers:
                    watcher("PUT", kv.key, kv.value)
        records = [*replayed, *peers, (CONTROL, link_values.encode(("synced",)))]
        self.on_records(-1, records)
        log.info("cluster metadata: %d log records replayed (etcd revision %d)",
                 len(replayed), revision)
        self._tasks.append(asyncio.create_task(self._write_loop()))
        self._tasks.append(asyncio.create_task(self._watch_loop()))

    @staticmethod
    def _replayed(rec: tuple[Any, ...]) -> bytes:
        """A log record that nobody here waits for (read at start, or written by an earlier
        run of this node): origin -1, as the supervisor replays."""
        return link_values.encode(("apply", -1, 0, rec[3]))

    def _learn(self, info: dict[str, Any]) -> None:
        index = int(info["index"])
        self.names[index] = str(info.get("name"))
        self.running.add(index)
        host = str(info.get("cluster_host") or info.get("host") or "127.0.0.1")
        self.on_address(index, host, int(info.get("cluster_port") or 0))

    # ---- writes --------------------------------------------------------------------------

    def send(self, record: tuple[Any, ...]) -> None:
        """A hub record from the runtime: ``("submit", op_id, op)`` goes to the log (in the
        order sent); others (``ready``) mean nothing here."""
        self._writes.put_nowait(record)

    async def _write_loop(self) -> None:
        while True:
            record = await self._writes.get()
            while True:
                try:
                    await self._write(record)
                    break
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.warning("etcd write failed (%r); retrying", exc)
                    await asyncio.sleep(RETRY)

    async def _write(self, record: tuple[Any, ...]) -> None:
        if record[0] == "submit":
            key = self.log_prefix + f"{self.m.node}-{self.incarnation}-{next(self._seq)}".encode()
            value = link_values.encode(("apply", self.m.index, record[1], record[2],
                                        self.incarnation))
            await self.client.put(key, value)

    async def barrier(self, timeout: float = 2.0) -> None:
        """Return once this node applied every record etcd held when called (a write of
        this node's ``barrier/<name>`` key, seen back through the watch), or after
        ``timeout`` s (etcd slow or gone: the caller goes on with what it has)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            response = await asyncio.wait_for(
                self.client.put(self.m.root + b"barrier/" + self.m.node.encode(), b""), timeout)
        except Exception:
            return
        target = response.header.revision
        while self._revision < target and loop.time() < deadline:
            await asyncio.sleep(0.002)

    async def _record_down(self, name: str, index: int, lease: int) -> None:
        """Append ``worker_down`` for registration ``lease`` of node ``name``, once however
        many nodes try (the key is the lease's)."""
        key = self.log_prefix + f"down-{name}-{lease:x}".encode()
        value = link_values.encode(("apply", -1, 0, to_wire(WorkerDown(index)), ""))
        tx = self.client.transactions
        await self.client.transaction(compare=[tx.create(key) == 0],
                                      success=[tx.put(key, value)], failure=[])

    # ---- the watch -----------------------------------------------------------------------

    async def _watch_loop(self) -> None:
        while True:
            try:
                watch = await self.client.watch_prefix(self.m.root,
                                                       start_revision=self._revision + 1,
                                                       prev_kv=True)
                async for event in watch:
                    self._on_event(event)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("etcd watch broke (%r); watching again from revision %d", exc,
                            self._revision + 1)
            await asyncio.sleep(RETRY)

    def _on_event(self, event: Any) -> None:
        kv = event.kv
        self._revision = max(self._revision, kv.mod_revision)
        key: bytes = kv.key
        if key.startswith(self.log_prefix):
            if event.kind == "PUT" and kv.version == 1:
                self._on_log(kv.value)
        elif key.startswith(self.m.prefix):
            if event.kind == "PUT" and kv.version == 1:
                info = load_info(kv.value)
                if "index" in info and info.get("name") != self.m.node:
                    self._learn(info)
                    log.info("node %s (index %s) is up: linking to it", info.get("name"),
                             info["index"])
                    self.on_records(-1, [(CONTROL, link_values.encode(
                        ("peer_up", int(info["index"]))))])
            elif event.kind == "DELETE" and event.prev_kv is not None:
                info = load_info(event.prev_kv.value)
                if "index" in info and "lease" in info:
                    if info.get("name") != self.m.node:
                        self.running.discard(int(info["index"]))
                    log.warning("node %s is down (its etcd lease expired)", info.get("name"))
                    task = asyncio.create_task(self._record_down(
                        str(info["name"]), int(info["index"]), int(info["lease"])))
                    self._tasks.append(task)
                    task.add_done_callback(self._tasks.remove)
        for watcher in self.watchers:
            watcher(event.kind, key, kv.value if event.kind == "PUT" else None)

    def _on_log(self, value: bytes) -> None:
        """A new log record: passed on as it is (the runtime reads ``apply``'s first four
        items; the fifth, the writer's incarnation, tells an earlier run's records)."""
        rec = link_values.decode(value)
        if rec[1] == self.m.index and rec[4] != self.incarnation:
            value = self._replayed(rec)
        self.on_records(-1, [(CONTROL, value)])

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()
