"""Cluster-wide metadata in etcd: one ordered log of topology records for every node.

With ``--cluster-etcd`` a node is to the cluster what a worker is to a ``--workers N``
broker (:mod:`amqp_server.workers.runtime`), and etcd plays the supervisor's ordering part:

* A declare, bind, unbind, delete, or a change of users, vhosts, permissions, policies and
  limits (:mod:`broker.access_sync`: a delta, or the whole document) is a record
  (:mod:`broker.topology_records`, in its versioned wire form inside the link's
  ``("apply", origin, op_id, record, incarnation)`` tuple) written to etcd as a key of its
  own under ``/amqpq/<cluster>/log/``. etcd gives every write a *revision*; the records' creation
  revisions are the one order every node applies them in.
* Each node **watches** ``/amqpq/<cluster>/`` from the revision it has read up to, so it
  sees the log's new records, the nodes' registrations (``nodes/<name>``, under a lease) and
  their expiry in one stream, in revision order. The asking node answers its client once
  its own copy came back through the watch: a declare is answered after etcd accepted it.
* A node that **starts** reads the latest snapshot and the log after it (in creation order)
  before it accepts clients, then links to the running nodes (``peer_up``) and is in step
  (``synced``).
* The watch's events are handed to the runtime in one batch each time the watch has no more
  (one definitions save for a burst of records); the revision applied is then the batch's
  last.
* A node's **death** (its lease expired: kill -9, a partition, SIGSTOP) becomes a
  ``worker_down`` record in the log, written once (an etcd transaction on a key named for
  the dead registration's lease) by whichever node saw it first, or by the node itself at its
  next start. So a node starting later replays the death at the same place.
* **Compaction**: one node (the running node of the lowest index, as etcd's registrations
  say) writes a *snapshot* every :data:`SNAPSHOT_RECORDS` log records, or after
  :data:`SNAPSHOT_SECONDS` when fewer came: the records that rebuild its whole state at the
  etcd revision it has applied (:mod:`amqp_server.cluster.log_snapshot`), in chunks under
  ``snapshot-data/<id>/``, then the pointer ``snapshot`` (``{"revision", "id", "chunks"}``)
  by a compare-and-swap on its previous version (two nodes cannot both install one). Then it
  deletes the log's records created at or before that revision (a ``down-*`` record only
  once its node registered again, :func:`~amqp_server.cluster.log_snapshot.
  death_record_obsolete`: each is written once per death, and a deleted one must not be
  written again) and compacts etcd's history to it. A node starting applies
  the snapshot, then the log records created after its revision. A node whose watch cannot go
  on because its revision was compacted (it was cut off from etcd meanwhile) reads the
  snapshot and the tail again: what the snapshot lacks is removed, the rest applied over.

Source: etcd's watch and transaction API (https://etcd.io/docs/v3.4/learning/api/);
RabbitMQ keeps its metadata in Mnesia (3.13) or Khepri (Raft), replicated on every node.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from amqp_server.cluster.log_snapshot import death_record_obsolete, removals
from amqp_server.cluster.membership import Membership, load_info, node_of
from amqp_server.workers import link_values
from amqp_server.workers.link_codec import CONTROL
from broker.topology_records import WorkerDown, to_wire

log = logging.getLogger("amqpq.cluster")

Records = list[tuple[int, bytes]]
Wire = dict[str, Any]
RETRY = 1.0  # seconds before a failed etcd write or a broken watch is tried again
#: log records after which a snapshot is written (env AMQPQ_METADATA_SNAPSHOT_RECORDS)
SNAPSHOT_RECORDS = int(os.environ.get("AMQPQ_METADATA_SNAPSHOT_RECORDS", "10000"))
#: seconds after which a snapshot is written when fewer records came (at least one;
#: env AMQPQ_METADATA_SNAPSHOT_SECONDS)
SNAPSHOT_SECONDS = float(os.environ.get("AMQPQ_METADATA_SNAPSHOT_SECONDS", "600"))
CHUNK_BYTES = 512 * 1024  # a snapshot's chunk (etcd refuses requests over 1.5 MiB)
DELETES_PER_TXN = 100  # etcd's --max-txn-ops is 128 by default
KEYS_PER_TXN = 1000  # log records deleted by one transaction (each is a watch event)
YIELD_EVERY = 200  # watch events handled before the loop lets other tasks run


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
        self._seen = 0  # the last revision the watch gave (applied at the next _flush)
        self._batch: Records = []  # records of the watch's events, not yet handed over
        self._flush_scheduled = False
        self.names: dict[int, str] = {}  # member index -> member name (registered members)
        #: member index -> the name of its node (a worker of a node of several: the node's)
        self.nodes: dict[int, str] = {membership.index: membership.node}
        self.running: set[int] = {membership.index}  # indexes of registered nodes
        self.watchers: list[Callable[[str, bytes, bytes | None], None]] = []
        #: the records rebuilding this node's state (:func:`log_snapshot.state_records`)
        self.state_source: Callable[[], list[Wire]] | None = None
        self.snapshot_key = membership.root + b"snapshot"
        self.snapshot_prefix = membership.root + b"snapshot-data/"
        self.snapshot: dict[str, Any] = {}  # the pointer's value, as last seen
        self._snapshot_mod = 0  # the pointer's mod revision (0: none yet)
        self.since_snapshot = 0  # log records written since the last snapshot (about)
        self._last_record = 0  # the revision of the last log record seen
        self._snapshot_time = time.monotonic()
        self.snapshots_written = 0

    @property
    def client(self) -> Any:
        return self.m.client

    async def hello(self) -> None:
        """Record the death of this name's previous run, read the latest snapshot, the log
        after it and the running nodes, hand them to the runtime (then ``synced``), and start
        watching (and compacting, when this node is the one that does)."""
        if self.m.previous_lease:
            await self._record_down(self.m.member, self.m.index, self.m.previous_lease)
        started = time.monotonic()
        snapshot, tail, others = await self._read_all()
        replayed = [(CONTROL, value) for value in snapshot + tail]
        peers: Records = []
        for kv in others:
            if kv.key.startswith(self.m.prefix):
                info = load_info(kv.value)
                if "index" in info and info.get("name") != self.m.member:
                    self._learn(info)
                    peers.append((CONTROL, link_values.encode(("peer_up", int(info["index"])))))
            else:  # the state of everything else (quorum queues...)
                for watcher in self.watchers:
                    watcher("PUT", kv.key, kv.value)
        records = [*replayed, *peers, (CONTROL, link_values.encode(("synced",)))]
        self.on_records(-1, records)
        log.info("cluster metadata: %d snapshot records (etcd revision %d) and %d log records "
                 "replayed in %.2f s (etcd revision %d)", len(snapshot),
                 int(self.snapshot.get("revision", 0)), len(tail),
                 time.monotonic() - started, self._revision)
        self._tasks.append(asyncio.create_task(self._write_loop()))
        self._tasks.append(asyncio.create_task(self._watch_loop()))
        self._tasks.append(asyncio.create_task(self._compact_loop()))

    async def _read_all(self) -> tuple[list[bytes], list[bytes], list[Any]]:
        """One read of everything at one etcd revision (then :attr:`_revision`): the
        snapshot's ``apply`` records, the log's records created after it (each as the runtime
        takes it), and the other keys (registrations, quorum queue states...)."""
        everything = await self.client.get_prefix(self.m.root, sort_order="ascend",
                                                  sort_target="create")
        self._flush()  # anything a broken watch gave first
        self._revision = self._seen = everything.header.revision  # the watch goes on from here
        pointer: dict[str, Any] = {}
        chunks: dict[bytes, bytes] = {}
        logs: list[Any] = []
        others: list[Any] = []
        for kv in everything:
            if kv.key == self.snapshot_key:
                pointer = load_info(kv.value)
                self._snapshot_mod = kv.mod_revision
            elif kv.key.startswith(self.snapshot_prefix):
                chunks[bytes(kv.key)] = bytes(kv.value)
            elif kv.key.startswith(self.log_prefix):
                logs.append(kv)
            else:
                others.append(kv)
        self.snapshot = pointer
        base = int(pointer.get("revision", 0))
        snapshot: list[bytes] = []
        if pointer:
            prefix = self.snapshot_prefix + str(pointer.get("id")).encode() + b"/"
            for key in sorted(k for k in chunks if k.startswith(prefix)):
                snapshot.extend(line for line in chunks[key].split(b"\n") if line)
        after = [kv for kv in logs if kv.create_revision > base]
        tail = [self._own(kv.value) for kv in after]
        self._last_record = max([self._last_record, *(kv.create_revision for kv in after)])
        self.since_snapshot = len(after)
        return snapshot, tail, others

    def _own(self, value: bytes) -> bytes:
        """A log record as the runtime takes it: one written by this node in an earlier run
        as replayed (nobody here waits for it)."""
        rec = link_values.decode(value)
        if rec[1] == self.m.index and (len(rec) < 5 or rec[4] != self.incarnation):
            return self._replayed(rec)
        return value

    @staticmethod
    def _replayed(rec: tuple[Any, ...]) -> bytes:
        """A log record that nobody here waits for (read at start, or written by an earlier
        run of this node): origin -1, as the supervisor replays."""
        return link_values.encode(("apply", -1, 0, rec[3]))

    def _learn(self, info: dict[str, Any]) -> None:
        index = int(info["index"])
        self.names[index] = str(info.get("name"))
        self.nodes[index] = node_of(info)
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
            # (zero-padded: one run's records sort in the order written, see _delete_log_up_to)
            key = self.log_prefix + \
                f"{self.m.member}-{self.incarnation}-{next(self._seq):012d}".encode()
            value = link_values.encode(("apply", self.m.index, record[1], record[2],
                                        self.incarnation))
            await self.client.put(key, value)

    async def _delete_log_up_to(self, revision: int) -> int:
        """Delete the log's records created at or before ``revision`` (a ``down-*`` one only
        once its node registered again: :func:`death_record_obsolete`): each
        run of such keys in key order is one range deletion, guarded by a comparison that
        every key in the range is that old (a record written meanwhile whose key falls in the
        range fails the guard; that run is then deleted key by key). Returns how many."""
        runs: list[tuple[bytes, bytes, list[bytes]]] = []  # (first, range end, keys)
        current: list[bytes] = []
        down = self.log_prefix + b"down-"
        members = self.m.members_prefix
        leases = {bytes(kv.key[len(members):]).decode(): int(load_info(kv.value).get("lease")
                                                              or 0)
                  for kv in await self.client.get_prefix(members)}
        async for page in self.client.key_revisions(self.log_prefix):
            for key, created in page:
                if created <= revision and (not key.startswith(down) or death_record_obsolete(
                        key[len(self.log_prefix):], leases)):
                    current.append(key)
                    if len(current) < KEYS_PER_TXN:
                        continue
                if current:
                    runs.append((current[0], current[-1] + b"\0", current))
                    current = []
        if current:
            runs.append((current[0], current[-1] + b"\0", current))
        batches: list[list[tuple[bytes, bytes, list[bytes]]]] = [[]]
        for run in runs:  # at most KEYS_PER_TXN keys and DELETES_PER_TXN / 2 ranges each
            if batches[-1] and (len(batches[-1]) >= DELETES_PER_TXN // 2 or sum(
                    len(r[2]) for r in batches[-1]) + len(run[2]) > KEYS_PER_TXN):
                batches.append([])
            batches[-1].append(run)
        tx = self.client.transactions
        deleted = 0
        for batch in batches:
            if not batch:
                continue
            ok, _ = await self.client.transaction(
                compare=[tx.create(first, range_end=end) < revision + 1
                         for first, end, _ in batch],
                success=[tx.delete(first, range_end=end) for first, end, _ in batch],
                failure=[])
            if ok:
                deleted += sum(len(keys) for _, _, keys in batch)
                continue
            for _, _, keys in batch:  # one by one: each of these keys is old
                for j in range(0, len(keys), DELETES_PER_TXN):
                    await self.client.transaction(
                        compare=[], success=[tx.delete(k) for k in keys[j:j + DELETES_PER_TXN]],
                        failure=[])
                    deleted += len(keys[j:j + DELETES_PER_TXN])
        return deleted

    async def barrier(self, timeout: float = 2.0) -> None:
        """Return once this node applied every record etcd held when called (a write of
        this node's ``barrier/<name>`` key, seen back through the watch), or after
        ``timeout`` s (etcd slow or gone: the caller goes on with what it has)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            response = await asyncio.wait_for(
                self.client.put(self.m.root + b"barrier/" + self.m.member.encode(), b""), timeout)
        except Exception:
            return
        target = response.header.revision
        while self._revision < target and loop.time() < deadline:
            await asyncio.sleep(0.002)

    async def _record_down(self, name: str, index: int, lease: int,
                           died_at: int | None = None) -> None:
        """Append ``worker_down`` for registration ``lease`` of node ``name``, once however
        many nodes try (the key is the lease's). ``died_at``: the etcd revision that deleted
        the registration, for a death seen on the watch: then written only while ``name``
        has not registered again since (its ``members/`` key not rewritten after it), so a
        record that a snapshot covered and compaction deleted is never written again."""
        key = self.log_prefix + f"down-{name}-{lease:x}".encode()
        value = link_values.encode(("apply", -1, 0, to_wire(WorkerDown(index)), ""))
        tx = self.client.transactions
        compare = [tx.create(key) == 0]
        if died_at is not None:
            compare.append(tx.mod(self.m.members_prefix + name.encode()) < died_at + 1)
        await self.client.transaction(compare=compare, success=[tx.put(key, value)],
                                      failure=[])

    # ---- the watch -----------------------------------------------------------------------

    async def _watch_loop(self) -> None:
        import aetcd
        while True:
            try:
                watch = await self.client.watch_prefix(self.m.root,
                                                       start_revision=self._revision + 1,
                                                       prev_kv=True)
                seen = 0
                async for event in watch:
                    self._on_event(event)
                    seen += 1
                    if seen % YIELD_EVERY == 0:  # a burst (a compaction's deletions) must
                        await asyncio.sleep(0)  # not starve the lease refresh
            except asyncio.CancelledError:
                raise
            except aetcd.exceptions.RevisionCompactedError as exc:
                log.warning("etcd watch: revision %d was compacted (%s); reading the metadata "
                            "snapshot and the log after it again", self._revision + 1, exc)
                try:
                    await self._resync()
                    continue
                except asyncio.CancelledError:
                    raise
                except Exception as again:
                    log.warning("reading the metadata snapshot failed (%r); trying again",
                                again)
            except Exception as exc:
                log.warning("etcd watch broke (%r); watching again from revision %d", exc,
                            self._revision + 1)
            await asyncio.sleep(RETRY)

    async def _resync(self) -> None:
        """The watch cannot go on (its revision was compacted): make this node's state the
        snapshot's (what it lacks removed, the rest applied over what is here), then apply
        the log after it, and learn the registrations again."""
        snapshot, tail, others = await self._read_all()
        want = [link_values.decode(v)[3] for v in snapshot]
        have = self.state_source() if self.state_source is not None else []
        gone = [link_values.encode(("apply", -1, 0, w)) for w in removals(have, want)]
        records = [(CONTROL, v) for v in gone + snapshot + tail]
        for kv in others:
            if kv.key.startswith(self.m.prefix):
                info = load_info(kv.value)
                index = int(info.get("index", -1))
                if index >= 0 and info.get("name") != self.m.member and index not in self.running:
                    self._learn(info)
                    records.append((CONTROL, link_values.encode(("peer_up", index))))
            else:
                for watcher in self.watchers:
                    watcher("PUT", kv.key, kv.value)
        self.on_records(-1, records)
        log.info("cluster metadata read again: %d removed, %d snapshot and %d log records "
                 "applied (etcd revision %d)", len(gone), len(snapshot), len(tail),
                 self._revision)

    def _on_event(self, event: Any) -> None:
        kv = event.kv
        self._seen = max(self._seen, kv.mod_revision)
        if not self._flush_scheduled:  # once the watch waits: every event it had, at once
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)
        key: bytes = kv.key
        if key.startswith(self.log_prefix):
            if event.kind == "PUT" and kv.version == 1:
                self.since_snapshot += 1
                self._last_record = kv.mod_revision
                self._on_log(kv.value)
            return
        if key == self.snapshot_key or key.startswith(self.snapshot_prefix):
            if key == self.snapshot_key and event.kind == "PUT":
                self.snapshot = load_info(kv.value)
                self._snapshot_mod = kv.mod_revision
                self.since_snapshot = 0
                self._snapshot_time = time.monotonic()
            return
        elif key.startswith(self.m.prefix):
            if event.kind == "PUT" and kv.version == 1:
                info = load_info(kv.value)
                if "index" in info and info.get("name") != self.m.member:
                    self._learn(info)
                    log.info("node %s (index %s) is up: linking to it", info.get("name"),
                             info["index"])
                    self._batch.append((CONTROL, link_values.encode(
                        ("peer_up", int(info["index"])))))
            elif event.kind == "DELETE" and event.prev_kv is not None:
                info = load_info(event.prev_kv.value)
                if "index" in info and "lease" in info:
                    if info.get("name") != self.m.member:
                        self.running.discard(int(info["index"]))
                    log.warning("node %s is down (its etcd lease expired)", info.get("name"))
                    task = asyncio.create_task(self._record_down(
                        str(info["name"]), int(info["index"]), int(info["lease"]),
                        kv.mod_revision))
                    self._tasks.append(task)
                    task.add_done_callback(self._tasks.remove)
        for watcher in self.watchers:
            watcher(event.kind, key, kv.value if event.kind == "PUT" else None)

    def _on_log(self, value: bytes) -> None:
        """A new log record: passed on as it is (the runtime reads ``apply``'s first four
        items; the fifth, the writer's incarnation, tells an earlier run's records)."""
        self._batch.append((CONTROL, self._own(value)))

    def _flush(self) -> None:
        """Hand the records of the events the watch had to the runtime in one batch (one
        definitions save for a burst of declares, not one each); the revision applied is then
        the last event's."""
        self._flush_scheduled = False
        batch, self._batch = self._batch, []
        if batch:
            self.on_records(-1, batch)
        self._revision = max(self._revision, self._seen)

    # ---- compaction ----------------------------------------------------------------------

    async def _compact_loop(self) -> None:
        """Once a second: this node writes a snapshot when it is the running node of the
        lowest index and :data:`SNAPSHOT_RECORDS` records came since the last one (or
        :data:`SNAPSHOT_SECONDS` passed and at least one came)."""
        while True:
            await asyncio.sleep(1.0)
            behind = self._last_record > int(self.snapshot.get("revision", 0))
            due = behind and (self.since_snapshot >= SNAPSHOT_RECORDS
                              or time.monotonic() - self._snapshot_time >= SNAPSHOT_SECONDS)
            if not due or self.state_source is None or min(self.running) != self.m.index:
                continue
            try:
                await self.write_snapshot()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("metadata snapshot failed (%r); trying again later", exc)
                self._snapshot_time = time.monotonic()

    async def write_snapshot(self) -> bool:
        """Write a snapshot of this node's state at the revision it has applied, delete the
        log records it covers and compact etcd's history to it (see the module docstring).
        False when another node installed one meanwhile (nothing of this one is kept).

        Raises:
            aetcd.exceptions.ClientError: etcd unreachable (what was written stays
            consistent: the pointer is written last, records deleted after it).
        """
        assert self.state_source is not None
        started = time.monotonic()
        revision, expected, old = self._revision, self._snapshot_mod, self.snapshot.get("id")
        lines = [link_values.encode(("apply", -1, 0, w)) for w in self.state_source()]
        count = self.since_snapshot
        chunks: list[bytes] = []
        current: list[bytes] = []
        size = 0
        for line in lines:
            if current and size + len(line) > CHUNK_BYTES:
                chunks.append(b"\n".join(current))
                current, size = [], 0
            current.append(line)
            size += len(line) + 1
        chunks.append(b"\n".join(current))
        sid = f"{revision:016x}-{os.urandom(3).hex()}"
        prefix = self.snapshot_prefix + sid.encode() + b"/"
        for i, chunk in enumerate(chunks):
            await self.client.put(prefix + f"{i:06d}".encode(), chunk)
        tx = self.client.transactions
        guard = (tx.create(self.snapshot_key) == 0) if not expected else \
            (tx.mod(self.snapshot_key) == expected)
        pointer = json.dumps({"revision": revision, "id": sid, "chunks": len(chunks),
                              "records": len(lines), "node": self.m.member}).encode()
        ok, _ = await self.client.transaction(
            compare=[guard], success=[tx.put(self.snapshot_key, pointer)], failure=[])
        if not ok:
            await self.client.delete_prefix(prefix)
            return False
        if old:
            await self.client.delete_prefix(self.snapshot_prefix + str(old).encode() + b"/")
        deleted = await self._delete_log_up_to(revision)
        await self.client.compact(revision)
        self.snapshots_written += 1
        log.info("metadata snapshot at etcd revision %d: %d records in %d chunk(s) after %d "
                 "log records; %d log records deleted, etcd history compacted (%.2f s)",
                 revision, len(lines), len(chunks), count, deleted,
                 time.monotonic() - started)
        return True

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()
