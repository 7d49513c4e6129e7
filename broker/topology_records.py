"""Topology changes as plain records, and the one function that applies them.

A declare, bind, unbind or delete (from AMQP, :mod:`amqp_server.topology_methods`, or from the
HTTP API) is a record; :func:`apply_op` applies one to a broker's vhosts. With several
workers the records are ordered by the supervisor and every worker applies each in that
order (:mod:`amqp_server.workers.runtime`), so all hold the same exchanges, queues and
bindings. Applying is deterministic: the same record on the same state raises the same
error (404/405/406 with RabbitMQ's texts) on every worker; only the asking one reports it.

Records are frozen dataclasses, one per kind (:data:`Record`); ``owner`` names the asking
connection, ``(worker, connection serial)``, or is None for the HTTP API. Besides the
topology records, :class:`WorkerDown` (a worker or cluster node died) and
:class:`AccessChange` (users, vhosts, permissions, policies: :mod:`broker.access_sync`) go
through the same ordered log; the worker runtime applies those two itself.

Wire form (:func:`to_wire`, :func:`from_wire`): the one form a record takes on the worker
link and in etcd's log (:mod:`amqp_server.cluster.metadata` keeps it forever), a value of
the link's tagged JSON (:mod:`amqp_server.workers.link_values`):

* **version 1** (written now): a dict ``{"kind": KIND, "version": 1, field: value, ...}``
  with every field of the record's class by name, e.g. ``{"kind": "xdel", "version": 1,
  "vhost": "/", "name": "x", "if_unused": False}``.
* **version 0** (written before versions existed, still read from old etcd logs): a tuple,
  first item the kind, the fields in this order::

    ("xdecl", vhost, name, type, durable, auto_delete, internal, arguments)
    ("xdel", vhost, name, if_unused)
    ("bind" | "unbind", vhost, dest_kind, dest_name, source, routing_key, arguments, owner)
    ("qdecl", vhost, name, durable, exclusive, auto_delete, arguments, owner, server_named,
     home)
    ("qdel", vhost, name, if_unused, if_empty, owner)
    ("qforget", vhost, name)          # the home deleted it (auto-delete, x-expires, owner gone)
    ("worker_down", index)
    ("access", document)

  (``qplace``, an unplaced queue placed on a worker, exists in version 1 only; a ``qdecl``
  record's ``home`` below 0 declares such a queue: ``-1 - declaring worker``.)

A record of an unknown kind, of a version newer than :data:`VERSION` (written by a newer
amqpq) or otherwise malformed is not applied: :func:`from_wire` returns None and logs an
error once per kind and version (a node replaying a log goes on with the next record rather
than failing at start again and again).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from exchanges.binding import Destination

if TYPE_CHECKING:
    from broker.broker import Broker

log = logging.getLogger("amqpq.topology")

VERSION = 1  # the wire form written (see the module docstring)
OwnerOf = Callable[[Any], object | None]


@dataclass(frozen=True, slots=True)
class _Named:
    """The fields every exchange and queue record starts with."""
    vhost: str
    name: str


@dataclass(frozen=True, slots=True)
class ExchangeDeclare(_Named):
    KIND: ClassVar[str] = "xdecl"
    type: str  # "direct", "topic", "x-consistent-hash"...
    durable: bool
    auto_delete: bool
    internal: bool
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ExchangeDelete(_Named):
    KIND: ClassVar[str] = "xdel"
    if_unused: bool


@dataclass(frozen=True, slots=True)
class _BindingChange:
    """The fields of :class:`Bind` and :class:`Unbind` (``dest_kind``: ``"queue"`` or
    ``"exchange"``; ``owner`` as in the module docstring)."""
    vhost: str
    dest_kind: str
    dest_name: str
    source: str
    routing_key: str
    arguments: dict[str, Any] | None
    owner: Any


@dataclass(frozen=True, slots=True)
class Bind(_BindingChange):
    """Bind ``source`` to the destination."""
    KIND: ClassVar[str] = "bind"


@dataclass(frozen=True, slots=True)
class Unbind(_BindingChange):
    """Remove the binding of ``source`` to the destination."""
    KIND: ClassVar[str] = "unbind"


@dataclass(frozen=True, slots=True)
class QueueDeclare(_Named):
    """``home``: the worker (cluster node) whose queue it is; the others hold a stand-in."""
    KIND: ClassVar[str] = "qdecl"
    durable: bool
    exclusive: bool
    auto_delete: bool
    arguments: dict[str, Any]
    owner: Any
    server_named: bool
    home: int


@dataclass(frozen=True, slots=True)
class QueueDelete(_Named):
    KIND: ClassVar[str] = "qdel"
    if_unused: bool  # refuse (406) while it has consumers
    if_empty: bool  # refuse (406) while it holds messages
    owner: Any


@dataclass(frozen=True, slots=True)
class QueueForget(_Named):
    """The home deleted the queue by itself (auto-delete, x-expires, owner gone)."""
    KIND: ClassVar[str] = "qforget"


@dataclass(frozen=True, slots=True)
class WorkerDown:
    """Worker (cluster node) ``worker`` died."""
    KIND: ClassVar[str] = "worker_down"
    worker: int


@dataclass(frozen=True, slots=True)
class AccessChange:
    """``document``: :func:`broker.access_sync.access_document` (password hashes included:
    never logged), or in a cluster a delta of :func:`broker.access_sync.apply_delta`
    (``{"op": "put_user", ...}``: one change, a password as its hash)."""
    KIND: ClassVar[str] = "access"
    document: dict[str, Any]


@dataclass(frozen=True, slots=True)
class QueuePlace(_Named):
    """An unplaced queue (``--workers N``, :mod:`amqp_server.workers.placement`) lives on
    ``worker`` from now on: the first such record for a queue places it, later ones change
    nothing. The worker runtime applies it itself, as WorkerDown and AccessChange."""
    KIND: ClassVar[str] = "qplace"
    worker: int


Record = (ExchangeDeclare | ExchangeDelete | Bind | Unbind | QueueDeclare | QueueDelete
          | QueueForget | QueuePlace | WorkerDown | AccessChange)
Op = Record  # what apply_op and the callers name a record
KINDS: dict[str, type[Any]] = {cls.KIND: cls for cls in (
    ExchangeDeclare, ExchangeDelete, Bind, Unbind, QueueDeclare, QueueDelete, QueueForget,
    QueuePlace, WorkerDown, AccessChange)}
_FIELDS = {cls: tuple(f.name for f in dataclasses.fields(cls)) for cls in KINDS.values()}
_MISSING = object()
_reported: set[tuple[str, object]] = set()  # (kind, version) already logged as unreadable


def to_wire(record: Record) -> dict[str, Any]:
    """``record`` in its wire form, version :data:`VERSION` (a dict of plain values)."""
    wire: dict[str, Any] = {"kind": record.KIND, "version": VERSION}
    for name in _FIELDS[type(record)]:
        wire[name] = getattr(record, name)
    return wire


def from_wire(value: Any) -> Record | None:
    """The record ``value`` holds: the version 1 dict or the version 0 tuple (see the
    module docstring). None for an unknown kind, a newer version or a malformed value,
    logged as an error once per kind and version."""
    kind: object = type(value).__name__
    version: object = None
    fields: Any = None
    if isinstance(value, dict):
        kind, version = value.get("kind"), value.get("version")
        cls = KINDS.get(kind) if isinstance(kind, str) else None
        if cls is not None and type(version) is int and 1 <= version <= VERSION:
            fields = [value.get(name, _MISSING) for name in _FIELDS[cls]]
    elif isinstance(value, tuple) and value:
        kind, version = value[0], 0
        cls = KINDS.get(kind) if isinstance(kind, str) else None
        if cls is not None and len(value) == len(_FIELDS[cls]) + 1:
            fields = value[1:]
    if fields is not None and _MISSING not in fields:
        return cls(*fields)  # type: ignore[misc, no-any-return]
    key = (str(kind)[:40], version if isinstance(version, int) else None)
    if key not in _reported:
        _reported.add(key)
        log.error("topology record of kind %r version %r not understood (written by a newer "
                  "amqpq, or damaged): skipped; this broker knows version %d of kinds %s",
                  key[0], key[1], VERSION, ", ".join(KINDS))
    return None


def summary(record: Record) -> str:
    """``record`` for a log line: its kind and what it names, never an access document."""
    if isinstance(record, AccessChange):
        return "access"
    if isinstance(record, WorkerDown):
        return f"worker_down {record.worker}"
    name = record.name if isinstance(record, _Named) else record.dest_name
    return f"{record.KIND} {record.vhost!r} {name!r}"


async def change_topology(broker: Broker, op: Record) -> Any:
    """Apply ``op`` for the HTTP API (no connection): at once with one worker, after every
    worker has it in order with several. Raises what :func:`apply_op` raises."""
    if broker.workers is None:
        return apply_op(broker, op, lambda ref: None)
    return await broker.workers.submit_async(op)


def apply_op(broker: Broker, op: Record, owner_of: OwnerOf) -> Any:
    """Apply one topology record (not :class:`WorkerDown`, :class:`AccessChange` nor
    :class:`QueuePlace`, which the worker runtime applies) to
    ``broker``'s vhosts; returns what the vhost returned (the queue for
    :class:`QueueDeclare`, the message count for :class:`QueueDelete`).

    Raises:
        AMQPError: what the vhost raises (NotFound 404, ResourceLocked 405, ...).
        KeyError: an unknown vhost (deleted meanwhile).
        TypeError: a WorkerDown, AccessChange or QueuePlace record.
    """
    if isinstance(op, WorkerDown | AccessChange | QueuePlace):
        raise TypeError(f"not a topology record: {summary(op)}")
    vhost = broker.vhosts[op.vhost]
    t = type(op)
    if t is ExchangeDeclare:
        return vhost.declare_exchange(op.name, op.type, False, op.durable, op.auto_delete,
                                      op.internal, op.arguments)
    if t is QueueDeclare:
        return vhost.declare_queue(op.name, False, op.durable, op.exclusive, op.auto_delete,
                                   op.arguments, owner_of(op.owner), op.server_named,
                                   op.home)
    if t is Bind or t is Unbind:
        change = vhost.bind if t is Bind else vhost.unbind
        return change(Destination(op.dest_kind, op.dest_name), op.source, op.routing_key,
                      op.arguments, owner_of(op.owner))
    if t is ExchangeDelete:
        return vhost.delete_exchange(op.name, op.if_unused)
    if t is QueueDelete:
        return vhost.delete_queue(op.name, op.if_unused, op.if_empty, owner_of(op.owner),
                                  everywhere=True)
    if t is QueueForget:
        q = vhost.queues.get(op.name)
        return 0 if q is None else vhost.remove_queue(q, everywhere=True)
    raise TypeError(f"not a topology record: {op!r}")
