"""The federation links of one broker process: which exchanges and queues are federated
(a policy with ``federation-upstream``, ``federation-upstream-set`` or
``federation-upstream-pattern`` matches them) from which upstreams (``federation-upstream``
parameters), one asyncio task per (exchange or queue, upstream), kept in step with the
policies, parameters and topology (looked at every second and on each change through the
HTTP API), with the status ``GET /api/federation-links`` shows.

Each link runs :class:`links.link.Link` in a loop: ``starting`` while it connects,
``running`` once it consumes, ``error`` with RabbitMQ's reason (``econnrefused``,
``unknown_host``, ``not_allowed``, ``{auth_failure,"ACCESS_REFUSED - ..."}``...) when a
connection, channel or declare fails; after the upstream's ``reconnect-delay`` it starts
again (with several URIs, the next one), and logs each step under ``amqpq.federation``. A
policy naming an upstream or set that does not exist starts no link (as RabbitMQ: no row)
and is logged once as a warning.

Where links run: as shovels do (:mod:`shovel.manager`): worker 0 with ``--workers``, and in
a cluster each link on one running node chosen by rendezvous hashing.

Source: https://www.rabbitmq.com/docs/federation, ``rabbit_federation_status.erl``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import socket
import time
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiormq

from federation.ends import ExchangeEnds, LocalExchange, QueueEnds
from federation.params import UPSTREAM, UPSTREAM_SET, Upstream, resolve
from links.link import Link, LinkError
from links.local import LocalBroker
from links.manager import ReconcilingManager, runs_here, timestamp
from links.uri import mask_uri
from vhosts.policies import FEDERATION_KEYS, matching_policy

if TYPE_CHECKING:
    from broker.broker import Broker

log = logging.getLogger("amqpq.federation")

BINDINGS_EVERY = 0.2  # s between two looks at a federated exchange's bindings
HUNGER_EVERY = 0.05  # s between two looks at a federated queue's consumers
_MANAGERS: weakref.WeakKeyDictionary[Any, FederationManager] = weakref.WeakKeyDictionary()
#: the exchange types a federation policy does not federate (RabbitMQ's: its own)
_NOT_FEDERATED = ("x-federation-upstream",)


def manager_of(broker: Broker) -> FederationManager | None:
    """The manager running ``broker``'s federation links in this process (None: none)."""
    return _MANAGERS.get(broker)


def error_text(exc: BaseException) -> str:
    """A failed link's ``error`` in RabbitMQ 3.10.8's words where it has one
    (``econnrefused``, ``unknown_host``, ``timeout``, ``not_allowed``,
    ``{auth_failure,"ACCESS_REFUSED - ..."}``), else the link's own reason."""
    seen: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in seen:
        seen.append(e)
        e = getattr(e, "cause", None) or e.__cause__ or e.__context__
    for e in seen:
        if isinstance(e, ConnectionRefusedError):
            return "econnrefused"
        if isinstance(e, socket.gaierror):
            return "unknown_host"
        if isinstance(e, aiormq.exceptions.ConnectionNotAllowed):
            return "not_allowed"
        if isinstance(e, aiormq.exceptions.ProbableAuthenticationError | aiormq.exceptions.AuthenticationError):
            return ('{auth_failure,"ACCESS_REFUSED - Login was refused using authentication '
                    'mechanism PLAIN. For details see the broker logfile."}')
        if isinstance(e, TimeoutError):
            return "timeout"
    return str(exc)


@dataclass(frozen=True)
class _Want:
    """One link the policies ask for."""

    kind: str  # "exchange" or "queue"
    vhost: str
    name: str
    upstream: Upstream
    exchange: LocalExchange | None = None
    declare: tuple[bool, bool, dict[str, Any]] | None = None  # a queue's


@dataclass
class _Running:
    want: _Want
    id: str
    status: str = "starting"
    error: str | None = None
    uri: str | None = None
    since: float = field(default_factory=time.time)
    task: asyncio.Task[None] | None = None
    suffix: str = "A"  # the internal exchange's; alternates on each start (B first)
    link: Link | None = None  # the current attempt's

    def set(self, status: str, error: str | None = None) -> None:
        self.status, self.error, self.since = status, error, time.time()


def link_id(kind: str, vhost: str, name: str, upstream: str) -> str:
    """A link's ``id`` (8 hex digits, stable across restarts, as RabbitMQ's)."""
    return hashlib.sha256(f"{kind}\0{vhost}\0{name}\0{upstream}".encode()).hexdigest()[:8]


class FederationManager(ReconcilingManager):
    """Runs the federation links of ``broker`` in the running event loop (``start``,
    ``poke``, ``stop``: :class:`links.manager.ReconcilingManager`'s; every second it looks
    at the policies, parameters and topology).

    Args:
        broker: whose policies, parameters, exchanges and queues are followed.
        local: how to reach this broker (the downstream end of every link).
        node: this node's name (status ``node``).
        cluster: this broker's cluster name: the upstream queue is ``federation: X ->
            <cluster>``, the upstream's ``x-downstream-name`` (cycle detection).
    """

    def __init__(self, broker: Broker, local: LocalBroker, node: str, cluster: str) -> None:
        super().__init__(log, "federation policies")
        self.broker, self.local, self.node, self.cluster = broker, local, node, cluster
        self._links: dict[tuple[str, str, str, str], _Running] = {}
        self._warned: set[str] = set()
        self._cleanups: set[asyncio.Task[None]] = set()
        _MANAGERS[broker] = self

    def _tasks(self) -> list[asyncio.Task[None]]:
        """Every link's task (stopping one returns its unacked upstream deliveries to the
        upstream queue) and the upstream cleanups under way."""
        tasks = [r.task for r in self._links.values() if r.task is not None]
        return tasks + list(self._cleanups)

    def _stopped(self) -> None:
        self._links.clear()
        _MANAGERS.pop(self.broker, None)

    # ---- what is wanted ------------------------------------------------------------------

    def _params(self, vhost: str) -> tuple[dict[str, Any], dict[str, Any]]:
        ups: dict[str, Any] = {}
        sets: dict[str, Any] = {}
        for p in self.broker.extras.parameters:
            if p.get("vhost") != vhost:
                continue
            if p.get("component") == UPSTREAM:
                ups[p.get("name")] = p.get("value")
            elif p.get("component") == UPSTREAM_SET:
                sets[p.get("name")] = p.get("value")
        return ups, sets

    def _upstreams(self, vhost: str, definition: dict[str, Any], params: Any,
                   what: str) -> list[Upstream]:
        found, problems = resolve(vhost, definition, *params)
        for problem in problems:
            text = f"Federation {what}: {problem}"
            if text not in self._warned:
                self._warned.add(text)
                log.warning("%s; no link started for it", text)
        return found

    def wanted(self) -> dict[tuple[str, str, str, str], _Want]:
        """Every link the policies ask for now, by (kind, vhost, name, upstream)."""
        out: dict[tuple[str, str, str, str], _Want] = {}
        for vhost in list(self.broker.vhosts.values()):
            if not any(k in p.definition for p in vhost.policies.values()
                       for k in FEDERATION_KEYS):
                continue
            params = self._params(vhost.name)
            for x in list(vhost.exchanges.values()):
                if not x.name or x.name.startswith("amq.") or x.type_name in _NOT_FEDERATED:
                    continue
                policy = matching_policy(vhost.policies, "exchange", x.name)
                if policy is None or not any(k in policy.definition for k in FEDERATION_KEYS):
                    continue
                local = LocalExchange(vhost.name, x.name, x.type_name, x.durable,
                                      x.auto_delete, x.internal, dict(x.arguments) or None)
                for up in self._upstreams(vhost.name, policy.definition, params,
                                          f"exchange '{x.name}' in vhost '{vhost.name}'"):
                    out[("exchange", vhost.name, x.name, up.name)] = _Want(
                        "exchange", vhost.name, x.name, up, exchange=local)
            for q in list(vhost.queues.values()):
                if q.name.startswith("amq."):
                    continue
                kind = getattr(q, "kind", "classic")
                policy = matching_policy(vhost.policies, "queue", q.name,
                                         kind if isinstance(kind, str) else "classic")
                if policy is None or not any(k in policy.definition for k in FEDERATION_KEYS):
                    continue
                declare = (bool(getattr(q, "durable", True)),
                           bool(getattr(q, "auto_delete", False)),
                           dict(getattr(q, "arguments", {}) or {}))
                for up in self._upstreams(vhost.name, policy.definition, params,
                                          f"queue '{q.name}' in vhost '{vhost.name}'"):
                    out[("queue", vhost.name, q.name, up.name)] = _Want(
                        "queue", vhost.name, q.name, up, declare=declare)
        return out

    def cluster_name(self) -> str:
        """The name a federated exchange's upstream queue (``federation: X -> <name>``) and
        ``x-downstream-name`` carry: ``cluster`` without a cluster; in one, its first
        member's name in sorted order (running or not, as ``/api/overview``'s
        ``cluster_name``), the same on every node, so a link that moves to another node
        takes from the same upstream queue (what was published while it moved included)."""
        members = self.broker.cluster.nodes() if self.broker.cluster is not None else []
        names = [str(n["name"]) for n in members]
        return min(names) if names else self.cluster

    def _mine(self, key: tuple[str, str, str, str]) -> bool:
        return runs_here(self.broker.cluster, self.node, key)

    def reconcile(self) -> None:
        """Start links newly asked for (or whose upstream changed), stop the others. A
        federated exchange's link that no policy asks for any more (policy, upstream or
        exchange removed) also deletes its queue and internal exchange on the upstream, as
        RabbitMQ 3.10.8 does; one that only moves to another node or restarts keeps them."""
        everywhere = self.wanted()
        wanted = {k: w for k, w in everywhere.items() if self._mine(k)}
        for key in [k for k, r in self._links.items() if wanted.get(k) != r.want]:
            run = self._links[key]
            self._cancel(key)
            if key not in everywhere and key[0] == "exchange" and run.uri is not None:
                task = asyncio.get_running_loop().create_task(self._clean_upstream(run))
                self._cleanups.add(task)
                task.add_done_callback(self._cleanups.discard)
        for key, want in wanted.items():
            if key not in self._links:
                self._launch(key, want)

    def _cancel(self, key: tuple[str, str, str, str]) -> None:
        run = self._links.pop(key)
        if run.task is not None:
            run.task.cancel()
        log.info("Federation link for %s '%s' in vhost '%s' (upstream: %s) stopped",
                 key[0], key[2], key[1], key[3])

    async def _clean_upstream(self, run: _Running) -> None:
        """Delete a stopped exchange link's upstream queue and internal exchanges (best
        effort: an upstream that cannot be reached keeps them; logged)."""
        want, uri = run.want, run.uri
        assert want.exchange is not None and uri is not None
        ends = ExchangeEnds(want.upstream, uri, want.exchange, self.cluster_name(), self.local,
                            run.suffix, lambda: [])
        try:
            await asyncio.wait_for(ends.delete_upstream(), 30)
            log.info("Federation link for exchange '%s' in vhost '%s' (upstream: %s): "
                     "deleted '%s' and its exchange on the upstream", want.name, want.vhost,
                     want.upstream.name, ends.queue)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - cleanup is best effort
            log.warning("Federation link for exchange '%s' in vhost '%s' (upstream: %s): "
                        "could not delete its upstream queue: %s", want.name, want.vhost,
                        want.upstream.name, error_text(exc))

    def _launch(self, key: tuple[str, str, str, str], want: _Want) -> None:
        run = _Running(want, link_id(*key))
        self._links[key] = run
        run.task = asyncio.get_running_loop().create_task(self._run(run))

    def restart(self, vhost: str, id_: str) -> bool:
        """Restart link ``id_`` of ``vhost`` (connections closed and opened again); False
        when this node runs no such link."""
        for key, run in list(self._links.items()):
            if run.id == id_ and key[1] == vhost:
                self._cancel(key)
                self._launch(key, run.want)
                return True
        return False

    # ---- one link ------------------------------------------------------------------------

    def _bindings(self, vhost: str, name: str) -> list[tuple[str, dict[str, Any]]]:
        v = self.broker.vhosts.get(vhost)
        x = v.exchanges.get(name) if v is not None else None
        if x is None:
            return []
        return [(b.routing_key, dict(b.arguments)) for b in list(x.bindings.values())]

    def _hungry(self, vhost: str, name: str) -> bool:
        """Whether federated queue ``name`` is empty and one of its consumers can take a
        message (RabbitMQ's queue decorator: the link runs only then)."""
        v = self.broker.vhosts.get(vhost)
        q = v.queues.get(name) if v is not None else None
        if q is None or q.message_count > 0:
            return False
        consumers = getattr(q, "consumers", None)
        if callable(consumers):
            return any(c.can_take() for c in consumers())
        return q.consumer_count > 0  # a queue on another worker or node: its count only

    async def _run(self, run: _Running) -> None:
        want = run.want
        up = want.upstream
        what = f"{want.kind} '{want.name}' in vhost '{want.vhost}'"
        attempt = 0
        while True:
            uri = up.uris[attempt % len(up.uris)]
            attempt += 1
            run.uri = uri
            run.suffix = "A" if run.suffix == "B" else "B"
            run.set("starting")
            try:
                await self._attempt(run, uri, what)
                raise LinkError("link stopped")
            except asyncio.CancelledError:
                raise
            except LinkError as exc:
                error = error_text(exc)
            except Exception as exc:  # noqa: BLE001 - a link never brings the broker down
                log.exception("Federation link for %s failed", what)
                error = f"{type(exc).__name__}: {exc}"
            run.set("error", error)
            log.warning("Federation link for %s (upstream: %s, %s) failed: %s; reconnecting "
                        "in %g s", what, up.name, mask_uri(uri), error, up.reconnect_delay)
            await asyncio.sleep(up.reconnect_delay)

    async def _attempt(self, run: _Running, uri: str, what: str) -> None:
        want, up = run.want, run.want.upstream

        def running() -> None:
            run.set("running")
            log.info("Federation link for %s (upstream: %s, %s) is running", what, up.name,
                     mask_uri(uri))

        side: Any
        if want.kind == "exchange":
            assert want.exchange is not None
            ends = ExchangeEnds(up, uri, want.exchange, self.cluster_name(), self.local, run.suffix,
                                lambda: self._bindings(want.vhost, want.name))
            link = Link(ends.source(), ends.target(), name=what, on_running=running)

            async def side(link: Link) -> None:  # keep the upstream bindings in step
                while True:
                    await asyncio.sleep(BINDINGS_EVERY)
                    if link.source_channel is not None and link.queue is not None:
                        await ends.sync(link.source_channel)
        else:
            assert want.declare is not None
            qends = QueueEnds(up, uri, want.vhost, want.name, want.declare, self.local)
            link = Link(qends.source(), qends.target(), name=what, on_running=running)

            async def side(link: Link) -> None:  # consume only while local consumers wait
                while True:
                    await asyncio.sleep(HUNGER_EVERY)
                    if link.source_channel is None or link.queue is None:
                        continue
                    if self._hungry(want.vhost, want.name):
                        await link.resume()
                    else:
                        await link.pause()

        async def guarded() -> None:
            try:
                await side(link)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the link stops with the reason
                link.fail(f"upstream bindings or consumer failed: {error_text(exc)}")

        run.link = link
        helper = asyncio.get_running_loop().create_task(guarded())
        try:
            await link.run()
        finally:
            helper.cancel()

    # ---- status --------------------------------------------------------------------------

    def status(self) -> list[dict[str, Any]]:
        """``GET /api/federation-links`` rows, RabbitMQ 3.10.8's fields in its order:
        ``node``, ``exchange`` + ``upstream_exchange`` (or ``queue`` + ``upstream_queue``
        + ``consumer_tag``), ``type``, ``vhost``, ``upstream``, ``id``, ``status``
        (``starting``, ``running``, ``error`` with ``error``), when running
        ``local_connection`` (the link's connection to this broker, named as
        ``/api/connections`` names it), ``uri`` (no credentials), ``timestamp``."""
        rows = []
        for (kind, vhost, name, upstream), run in sorted(self._links.items()):
            up = run.want.upstream
            row: dict[str, Any] = {"node": self.node}
            if kind == "exchange":
                row.update({"exchange": name, "upstream_exchange": up.exchange or name})
            else:
                row.update({"queue": name, "upstream_queue": up.queue or name,
                            "consumer_tag": up.consumer_tag or f"federation-link-{up.name}"})
            row.update({"type": kind, "vhost": vhost, "upstream": upstream, "id": run.id,
                        "status": run.status})
            if run.status == "error":
                row["error"] = run.error
            if run.status == "running" and run.link is not None \
                    and run.link.target_connection_name:
                row["local_connection"] = run.link.target_connection_name
            row["uri"] = mask_uri(run.uri or up.uris[0])
            row["timestamp"] = timestamp(run.since)
            rows.append(row)
        return rows
