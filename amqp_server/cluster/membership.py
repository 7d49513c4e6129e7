"""Cluster membership in etcd (``amqpq-server --node-name N --cluster-etcd URL``).

How nodes find each other. At start a node gets its *index* (the number that names it on
the node links: allocated once per name by an etcd transaction and kept in
``/amqpq/<cluster>/index/<node name>``), waits until a registration of its name left by a run
killed moments ago has expired (one still there after its lease, ``--cluster-lease``,
default :data:`LEASE_TTL` seconds, is a running node: refused), then writes
``/amqpq/<cluster>/nodes/<node name>`` (name, AMQP and cluster ports, pid, start time, index,
lease id; JSON) under an etcd *lease* of that many seconds that it refreshes every second (a
third of the lease when that is shorter), and ``/amqpq/<cluster>/members/<node name>`` (the
same value) with no lease: the cluster's members. A node that dies (kill -9, partition,
SIGSTOP) stops refreshing, etcd drops its ``nodes`` key when the lease expires, and this
module's node list loses it at its next read (once a second); it stays a member, listed
``running: false`` (as RabbitMQ lists a stopped cluster member), until
``forget_cluster_node`` removes it. A stopped node that resumes after its lease expired
registers again. Leadership and membership are etcd's (no consensus here); the topology log,
and the ordered record of a node's death, are :mod:`amqp_server.cluster.metadata`,
replication :mod:`amqp_server.cluster.quorum`.

**A node of several workers** (``--workers N`` with ``--node-name``): each worker process is
a *member* of its own, registered as above under its member name: the node's name for worker
0 (so a node keeps its index and data when it goes from one worker to several), and
``<node>/worker-<i>`` (:func:`member_name`) for worker ``i``; its registration says
``"node": <node name>, "worker": i``. Everything that counts members (indexes, node links,
leases, the records of a death) counts workers; what people see counts nodes:
:meth:`Membership.nodes` lists one entry per node (running while any of its workers is,
with its ``workers``), and ``forget_cluster_node`` forgets every worker of the node.

The client is ``aetcd`` (asyncio, etcd's gRPC API), opened by
:mod:`amqp_server.cluster.etcd_client` (TLS, etcd's user/password auth) and imported only when
a node connects, so this module imports without the ``cluster`` extra. It also holds
:func:`parse_etcd_url` (``--cluster-etcd``) and :func:`read_secret_file` (the etcd password
file and ``--cluster-secret-file``). Without ``--cluster-etcd`` none of this runs and etcd is
not needed.

Source: etcd leases (https://etcd.io/docs/v3.4/learning/api/#lease-api); RabbitMQ's
``rabbitmqctl cluster_status`` and ``GET /api/nodes`` for what is shown.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import stat
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from broker.config import EtcdOptions

log = logging.getLogger("amqpq.cluster")

LEASE_TTL = 5  # seconds without a refresh before etcd forgets a node (default; --cluster-lease)
POLL = 1.0  # seconds between reads of the node list (and lease refreshes)


def member_name(node: str, worker: int) -> str:
    """The name worker ``worker`` of node ``node`` registers under in etcd: ``node`` itself
    for worker 0, ``<node>/worker-<i>`` for the others (a node name has no ``/``)."""
    return node if not worker else f"{node}/worker-{worker}"


def node_of(info: dict[str, Any]) -> str:
    """The node a registration (its JSON value as a dict) belongs to: its ``node``, or its
    ``name`` for a registration of a node of one worker written before workers had one."""
    return str(info.get("node") or info.get("name") or "")


def load_info(value: bytes) -> dict[str, Any]:
    """A node's JSON registration value as a dict ({} when it is not one)."""
    try:
        item = json.loads(value)
    except ValueError:
        return {}
    return item if isinstance(item, dict) else {}


class ClusterError(Exception):
    """etcd cannot be reached or refused the node (the server exits with this message)."""


def read_secret_file(path: Path, option: str = "--cluster-etcd-password-file") -> str:
    """The first line of a file holding a secret (``option`` names it in messages: the etcd
    password file, ``--cluster-secret-file``), without surrounding white space; a file other
    users may read is logged as a warning.

    Raises:
        ClusterError: the file is missing, unreadable or its first line empty (the message
            names the file, never its content).
    """
    try:
        text = path.read_text()
        mode = path.stat().st_mode
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not text"
        raise ClusterError(f"cannot read {option} {path}: {reason}") from None
    lines = text.splitlines()
    if not lines or not lines[0].strip():
        raise ClusterError(f"{option} {path} is empty")
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("%s %s can be read by other users (chmod 600 it)", option, path)
    return lines[0].strip()


def parse_etcd_url(url: str) -> tuple[str, int, bool]:
    """(host, port, TLS) of ``http://HOST:PORT`` or ``https://HOST:PORT`` (port 2379 when
    left out).

    Raises:
        ValueError: another scheme, no host, a path, or credentials in the URL (they would
            be logged: ``--cluster-etcd-user`` and ``--cluster-etcd-password-file`` instead).
    """
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None:
        raise ValueError("--cluster-etcd must not carry credentials: use "
                         "--cluster-etcd-user and --cluster-etcd-password-file")
    try:
        port = parts.port or 2379
    except ValueError:
        port = 0
    if parts.scheme not in ("http", "https") or not parts.hostname or not port \
            or parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"--cluster-etcd must be http://HOST:PORT or https://HOST:PORT, "
                         f"got {url!r}")
    return parts.hostname, port, parts.scheme == "https"


class Membership:
    """This node's registration and the cluster's node list.

    Args:
        etcd: how to reach etcd: URL (``https://127.0.0.1:2379``), TLS files, user and
            password file (the ``--cluster-etcd*`` options).
        node: this node's name (``--node-name``).
        info: what other nodes learn of this one (ports), JSON-serialisable.
        cluster: key prefix (one etcd can hold several clusters).
        worker: this process's worker index on its node (``--workers N``; 0 for the first
            or only one).

    Attributes:
        node: the node's name (``--node-name``), the same for every worker of the node.
        member: the name this process registers under (:func:`member_name`).
        running: member name -> its info, as read from etcd last (this one included).
        known: every member name seen since start, sorted.
    """

    def __init__(self, etcd: EtcdOptions, node: str, info: dict[str, Any],
                 cluster: str = "default", worker: int = 0) -> None:
        self.host, self.port, _ = parse_etcd_url(etcd.url or "")
        self.etcd = etcd
        self.url = etcd.url
        self.node = node
        self.worker = worker
        self.member = member_name(node, worker)
        self.info = {"name": self.member, "node": node, "worker": worker, "pid": os.getpid(),
                     "started": time.time(), **info}
        self.root = f"/amqpq/{cluster}/".encode()
        self.prefix = self.root + b"nodes/"
        self.members_prefix = self.root + b"members/"
        self.index_prefix = self.root + b"index/"
        self.index = -1  # this node's index in the cluster (:meth:`connect`)
        self.previous_lease = 0  # the lease of this name's last registration (0: none)
        self.running: dict[str, dict[str, Any]] = {}
        self.known: list[str] = []
        self._client: Any = None
        self._lease: Any = None
        self._task: asyncio.Task[None] | None = None
        #: event-loop time when the last lease grant or refresh that etcd answered was sent:
        #: this node's registration is surely alive until that plus the lease's seconds
        self.refreshed_at = 0.0

    @property
    def client(self) -> Any:
        """The ``aetcd.Client`` (after :meth:`connect`): an
        :class:`~amqp_server.cluster.etcd_client.EtcdClient`, every etcd call of the node."""
        return self._client

    async def start(self) -> None:
        """Connect, register (a node of the same name already running is refused) and read
        the node list once (:meth:`connect`, then :meth:`register`).

        Raises:
            ClusterError: etcd unreachable, ``aetcd`` not installed, or the name is taken.
        """
        await self.connect()
        await self.register()

    async def connect(self) -> None:
        """Open the etcd client and learn this node's index (allocated once per name and
        kept in etcd: ``/amqpq/<cluster>/index/<name>``) and its previous lease (the
        registration of its last run, whose death the cluster must record).

        Raises:
            ClusterError: etcd unreachable, refused the TLS handshake or the user's password;
                a TLS or password file unusable; ``aetcd`` not installed.
        """
        try:
            import aetcd

            from amqp_server.cluster.etcd_client import AuthenticationFailed, open_client
        except ImportError:
            raise ClusterError("--cluster-etcd needs the aetcd package "
                               "(pip install 'amqpq[cluster]')") from None
        self._client = open_client(self.etcd)
        try:
            self.index = await self._allocate_index()
            await self._wait_name_free()
            old = await self._client.get(self.members_prefix + self.member.encode())
            if old is not None:
                self.previous_lease = int(load_info(old.value).get("lease") or 0)
        except AuthenticationFailed as exc:
            await self.stop()
            raise ClusterError(f"etcd at {self.url} refused user {self.etcd.user}: {exc} "
                               f"(--cluster-etcd-password-file "
                               f"{self.etcd.password_file})") from None
        except aetcd.exceptions.ClientError as exc:
            await self.stop()
            raise ClusterError(f"cannot reach etcd at {self.url}: {exc}") from None

    async def register(self) -> None:
        """Register under a fresh lease and start refreshing it (:meth:`connect` already
        waited for this name's last registration to expire).

        Raises:
            ClusterError: etcd unreachable or the name taken by a running node.
        """
        import aetcd
        try:
            await self._register()
            await self._read()
        except aetcd.exceptions.ClientError as exc:
            await self.stop()
            raise ClusterError(f"cannot reach etcd at {self.url}: {exc}") from None
        self._task = asyncio.create_task(self._loop())
        log.info("node %s (index %d) joined cluster through etcd %s: running nodes %s",
                 self.member, self.index, self.url, ", ".join(self.running))

    async def _wait_name_free(self) -> None:
        """Wait until no running node has this name: the registration of a run killed
        moments ago expires within the lease (``etcd.lease_ttl``); one still there after that is a node
        that runs.

        Raises:
            ClusterError: a node of this name is running.
        """
        key = self.prefix + self.member.encode()
        deadline = asyncio.get_running_loop().time() + self.etcd.lease_ttl + 2
        while await self._client.get(key) is not None:
            if asyncio.get_running_loop().time() > deadline:
                await self.stop()
                raise ClusterError(f"a node named {self.member} is already running in the "
                                   f"cluster (etcd {self.url})")
            await asyncio.sleep(0.5)

    async def _allocate_index(self) -> int:
        """This name's node index: read, or taken from the counter by a transaction."""
        key = self.index_prefix + self.member.encode()
        counter = self.index_prefix[:-1] + b"-next"
        tx = self._client.transactions
        while True:
            got = await self._client.get(key)
            if got is not None:
                return int(got.value)
            current = await self._client.get(counter)
            n = int(current.value) if current is not None else 0
            guard = (tx.version(counter) == 0) if current is None else \
                (tx.mod(counter) == current.mod_revision)
            ok, _ = await self._client.transaction(
                compare=[guard, tx.create(key) == 0],
                success=[tx.put(counter, str(n + 1).encode()), tx.put(key, str(n).encode())],
                failure=[])
            if ok:
                return n

    async def _register(self) -> None:
        key = self.prefix + self.member.encode()
        sent = asyncio.get_running_loop().time()
        self._lease = await self._client.lease(self.etcd.lease_ttl)
        self.refreshed_at = sent
        self.info["lease"] = self._lease.id
        self.info["index"] = self.index
        ok, _ = await self._client.transaction(
            compare=[self._client.transactions.create(key) == 0],
            success=[self._client.transactions.put(key, json.dumps(self.info).encode(),
                                                   lease=self._lease)],
            failure=[])
        if not ok:
            await self._lease.revoke()
            raise ClusterError(f"a node named {self.member} is already running in the cluster "
                               f"(etcd {self.url})")
        await self._client.put(self.members_prefix + self.member.encode(),
                               json.dumps(self.info).encode())

    async def _read(self) -> None:
        found = {}
        for kv in await self._client.get_prefix(self.prefix):
            try:
                item = json.loads(kv.value)
            except ValueError:
                continue
            found[kv.key[len(self.prefix):].decode()] = item
        members = [kv.key[len(self.members_prefix):].decode()
                   for kv in await self._client.get_prefix(self.members_prefix)]
        self.known = sorted(set(members) | set(found))
        for name in set(self.running) - set(found):
            log.warning("node %s left the cluster (its etcd lease expired)", name)
        for name in set(found) - set(self.running):
            if self.running:
                log.info("node %s joined the cluster", name)
        self.running = found

    async def _loop(self) -> None:
        import aetcd
        while True:
            await asyncio.sleep(min(POLL, self.etcd.lease_ttl / 3))
            try:
                sent = asyncio.get_running_loop().time()
                response = await self._lease.refresh()
                if not getattr(response[0] if isinstance(response, list) else response,
                               "TTL", 1):
                    # the lease expired (this node was stopped longer than the TTL): join again
                    log.warning("this node's etcd lease expired; registering again")
                    await self._register()
                else:
                    self.refreshed_at = sent
                await self._read()
            except (aetcd.exceptions.ClientError, ClusterError) as exc:
                log.warning("etcd %s: %s", self.url, exc)
            except Exception:
                log.exception("cluster membership loop failed")

    async def forget(self, name: str) -> str:
        """Remove stopped node ``name`` (``rabbitmqctl forget_cluster_node``), every worker
        of it: ``"forgotten"``, ``"unknown"`` (not a member) or ``"running"`` (refused: a
        worker of it runs; stop it first, as RabbitMQ requires)."""
        await self._read()
        if any(self._node_of(m) == name for m in self.running):
            return "running"
        members = [m for m in self.known if self._node_of(m) == name]
        if not members:
            return "unknown"
        for member in members:
            await self._client.delete(self.members_prefix + member.encode())
        await self._read()
        return "forgotten"

    def _node_of(self, member: str) -> str:
        """The node of member ``member`` (its registration says; else the name up to
        ``/worker-``)."""
        info = self.running.get(member)
        return node_of(info) if info else member.split("/worker-")[0]

    def nodes(self) -> list[dict[str, Any]]:
        """Every node seen, one entry each: the info of its first worker (the lowest worker
        index registered), ``name`` the node's, ``running`` (any of its workers is in etcd
        now) and ``workers`` (``[{"index", "worker", "running"}]``, by worker index)."""
        grouped: dict[str, list[tuple[int, str]]] = {}
        for member in self.known:
            info = self.running.get(member) or {}
            worker = int(info.get("worker") or 0) if info else \
                int(member.split("/worker-")[1]) if "/worker-" in member else 0
            grouped.setdefault(self._node_of(member), []).append((worker, member))
        out = []
        for name, members in sorted(grouped.items()):
            members.sort()
            up = [m for _, m in members if m in self.running]
            item = dict(self.running[up[0]]) if up else {"name": name}
            item["name"] = name
            item["running"] = bool(up)
            item["workers"] = [
                {"index": self.running[m].get("index") if m in self.running else None,
                 "worker": w, "running": m in self.running} for w, m in members]
            out.append(item)
        return out

    async def stop(self) -> None:
        """Leave: revoke the lease (the node is gone for the others at once)."""
        if self._task is not None:
            self._task.cancel()
        if self._client is None:
            return
        try:
            if self._lease is not None:
                await self._lease.revoke()
        except Exception:  # etcd gone: the lease expires by itself
            pass
        try:
            await self._client.close()
        except Exception:
            pass
