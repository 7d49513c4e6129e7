"""The dynamic shovels of one broker process: one asyncio task per ``shovel`` runtime
parameter, kept in step with the parameters (set over the HTTP API, the CLI, a definitions
import, or read back at boot), with the status ``GET /api/shovels`` shows.

Each shovel runs :class:`links.link.Link` in a loop: ``starting`` while it connects,
``running`` once it consumes, ``terminated`` with a ``reason`` when a connection, channel or
declare fails; after ``reconnect-delay`` seconds it starts again (with several URIs, the next
one is tried). ``src-delete-after`` (a number, or ``queue-length``: the source queue's length
when the shovel started) deletes the parameter once that many messages were moved.

Where shovels run: a lone broker runs all of them; with ``--workers N`` worker 0 does (the
server starts a manager there only); in a cluster each shovel runs on one running node,
chosen by rendezvous hashing of ``vhost/name`` over the running nodes' names, so it moves
to another node when its node leaves or dies (after the node's etcd lease expires).

Source: https://www.rabbitmq.com/docs/shovel-dynamic, https://www.rabbitmq.com/docs/shovel#status.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from links.link import Link, LinkError
from links.local import LocalBroker
from links.manager import ReconcilingManager, runs_here, timestamp
from shovel.ends import source_of, target_of
from shovel.params import COMPONENT, ShovelParamError, ShovelSpec, mask_uri, parse

if TYPE_CHECKING:
    from broker.broker import Broker

log = logging.getLogger("amqpq.shovel")

_MANAGERS: weakref.WeakKeyDictionary[Any, ShovelManager] = weakref.WeakKeyDictionary()


def manager_of(broker: Broker) -> ShovelManager | None:
    """The manager running ``broker``'s shovels in this process (None: none here, e.g. a
    management app built without a server)."""
    return _MANAGERS.get(broker)


@dataclass
class _Running:
    """One shovel's task and status."""

    vhost: str
    name: str
    value: Any
    spec: ShovelSpec | None = None
    state: str = "starting"
    reason: str | None = None
    since: float = field(default_factory=time.time)
    task: asyncio.Task[None] | None = None
    moved: int = 0  # messages moved so far (src-delete-after counts them)
    total: int | None = None  # src-delete-after: messages to move in all
    src_uri: str | None = None  # the URIs of the current attempt
    dest_uri: str | None = None

    def set(self, state: str, reason: str | None = None) -> None:
        self.state, self.reason, self.since = state, reason, time.time()


class ShovelManager(ReconcilingManager):
    """Runs the shovels of ``broker`` in the running event loop (``start``, ``poke``,
    ``stop``: :class:`links.manager.ReconcilingManager`'s).

    Args:
        broker: whose ``shovel`` parameters (``broker.extras.parameters``) are run.
        local: how ``amqp://`` (no host) reaches this broker.
        node: this node's name (status ``node``, the ``x-shovelled`` header).
    """

    def __init__(self, broker: Broker, local: LocalBroker, node: str) -> None:
        super().__init__(log, "shovel parameters")
        self.broker, self.local, self.node = broker, local, node
        self._shovels: dict[tuple[str, str], _Running] = {}
        _MANAGERS[broker] = self

    def _tasks(self) -> list[asyncio.Task[None]]:
        """Every shovel's task (stopping one returns its unacked source deliveries)."""
        return [r.task for r in self._shovels.values() if r.task is not None]

    def _stopped(self) -> None:
        self._shovels.clear()
        _MANAGERS.pop(self.broker, None)

    def _stored(self) -> dict[tuple[str, str], Any]:
        return {(p.get("vhost"), p.get("name")): p.get("value")
                for p in self.broker.extras.parameters if p.get("component") == COMPONENT
                and p.get("vhost") in self.broker.vhosts}

    def _mine(self, vhost: str, name: str) -> bool:
        """In a cluster: whether this node runs shovel ``vhost/name`` (the running node
        with the highest hash of its name and the shovel's)."""
        return runs_here(self.broker.cluster, self.node, (vhost, name))

    def reconcile(self) -> None:
        """Start shovels whose parameter is new or changed, stop those removed."""
        stored = self._stored()
        for key in [k for k in self._shovels if k not in stored
                    or stored[k] != self._shovels[k].value or not self._mine(*k)]:
            self._cancel(key)
        for key, value in stored.items():
            if key not in self._shovels and self._mine(*key):
                self._launch(key[0], key[1], value)

    def _cancel(self, key: tuple[str, str]) -> None:
        run = self._shovels.pop(key)
        if run.task is not None:
            run.task.cancel()
        log.info("Shovel '%s' in vhost '%s' stopped", key[1], key[0])

    def _launch(self, vhost: str, name: str, value: Any) -> None:
        run = _Running(vhost, name, value)
        self._shovels[(vhost, name)] = run
        try:
            run.spec = parse(vhost, name, value)
        except ShovelParamError as exc:  # stored by a definitions import unchecked
            run.set("terminated", " ".join(str(exc).split("\n")))
            log.error("Shovel '%s' in vhost '%s' has an invalid definition: %s", name,
                      vhost, run.reason)
            return
        run.task = asyncio.get_running_loop().create_task(self._run(run))

    def restart(self, vhost: str, name: str) -> bool:
        """Restart shovel ``vhost/name`` (its connections are closed and opened again);
        False when this node runs no such shovel."""
        run = self._shovels.get((vhost, name))
        if run is None:
            return False
        self._cancel((vhost, name))
        self._launch(vhost, name, run.value)
        return True

    async def _run(self, run: _Running) -> None:
        spec = run.spec
        assert spec is not None
        attempt = 0
        while True:
            src_uri = spec.src_uris[attempt % len(spec.src_uris)] if spec.src_uris else ""
            dest_uri = spec.dest_uris[attempt % len(spec.dest_uris)] if spec.dest_uris else ""
            attempt += 1
            run.src_uri, run.dest_uri = src_uri, dest_uri
            run.set("starting")
            try:
                if not src_uri or not dest_uri:
                    raise LinkError("no URI to connect to")
                if isinstance(spec.delete_after, int):
                    run.total = spec.delete_after
                limit = None if run.total is None else run.total - run.moved
                link = Link(source_of(spec, src_uri, self.local),
                            target_of(spec, dest_uri, self.local, self.node, src_uri),
                            limit=limit,
                            limit_from_length=limit is None
                            and spec.delete_after == "queue-length",
                            name=spec.name, on_running=lambda: self._running(run))
                try:
                    await link.run()
                finally:
                    run.moved += link.moved
                    if run.total is None and link.limit is not None:
                        run.total = link.limit  # the queue's length when it first started
                log.info("Shovel '%s' in vhost '%s' moved %d messages (src-delete-after "
                         "reached): deleting it", spec.name, spec.vhost, run.moved)
                self._delete_parameter(spec.vhost, spec.name, run.value)
                return
            except asyncio.CancelledError:
                raise
            except LinkError as exc:
                reason = str(exc)
            except Exception as exc:  # noqa: BLE001 - a shovel never brings the broker down
                log.exception("Shovel '%s' in vhost '%s' failed", spec.name, spec.vhost)
                reason = f"{type(exc).__name__}: {exc}"
            run.set("terminated", reason)
            log.error("Shovel '%s' in vhost '%s' (source %s, destination %s): %s; "
                      "reconnecting in %g s", spec.name, spec.vhost, mask_uri(src_uri),
                      mask_uri(dest_uri), reason, spec.reconnect_delay)
            await asyncio.sleep(spec.reconnect_delay)

    def _running(self, run: _Running) -> None:
        run.set("running")
        log.info("Shovel '%s' in vhost '%s' is running", run.name, run.vhost)

    def _delete_parameter(self, vhost: str, name: str, value: Any) -> None:
        self.broker.extras.remove_parameter(COMPONENT, vhost, name, value)
        self._shovels.pop((vhost, name), None)
        if self.broker.workers is not None:
            self.broker.workers.share_access(False)
        self.broker.mark_changed()
        self.broker.after_batch()

    def status(self) -> list[dict[str, Any]]:
        """``GET /api/shovels`` rows, RabbitMQ's fields: ``node``, ``timestamp``, ``name``,
        ``vhost``, ``type`` (``dynamic``), ``state`` (``starting``, ``running``,
        ``terminated``), then while running the ends (``src_uri`` and ``dest_uri`` without
        credentials, ``src_protocol``, ``src_queue``...), when terminated ``reason``."""
        rows = []
        for (vhost, name), run in sorted(self._shovels.items()):
            row: dict[str, Any] = {"node": self.node, "timestamp": timestamp(run.since),
                                   "name": name, "vhost": vhost, "type": "dynamic",
                                   "state": run.state}
            if run.state == "running" and run.spec is not None:
                row.update(run.spec.status_fields(run.src_uri, run.dest_uri))
            if run.state == "terminated":
                row["reason"] = run.reason
            rows.append(row)
        return rows
