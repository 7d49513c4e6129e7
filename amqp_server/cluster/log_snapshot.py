"""The cluster's metadata as one snapshot: the records that rebuild a node's state.

A snapshot (:mod:`amqp_server.cluster.metadata` writes it to etcd, see there) is a list of
topology records in their wire form (:func:`broker.topology_records.to_wire`) which, applied
in order to a node that has nothing, give it the users, vhosts, permissions, policies,
parameters, limits, exchanges, queues and bindings the snapshotting node had applied at the
snapshot's etcd revision:

1. an :class:`~broker.topology_records.AccessChange` with the access document
   (:func:`broker.access_sync.access_document`) without its limits (a ``max-queues`` limit
   must not refuse the queues below);
2. every exchange but the default and ``amq.*`` ones (which a vhost has from its creation);
3. every queue, with the node it lives on (``home``: a quorum queue's leader) and, for an
   exclusive one, its owner connection ``(node, serial)``;
4. every binding (to an exclusive queue with that queue's owner);
5. the access document again, limits included.

:func:`identities` names what a set of records holds, so a node whose watch fell behind a
compaction can remove what the snapshot no longer has (:func:`removals`).

Source: RabbitMQ's Khepri keeps Raft snapshots of its metadata store the same way (the
state machine's state at an index, the log before it dropped).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from amqp_server.workers.ops import OwnerStub
from broker import topology_records as tr
from broker.access_sync import access_document

if TYPE_CHECKING:
    from broker.broker import Broker
    from queue_store.queue import Queue

Wire = dict[str, Any]
Identity = tuple[Any, ...]


def state_records(broker: Broker, index: int, home_of: Callable[[Queue], int]) -> list[Wire]:
    """The records (wire form) that rebuild ``broker``'s metadata on an empty node (see the
    module docstring). ``index``: this node's index (the owner of its own connections'
    exclusive queues); ``home_of(queue)``: the node a queue lives on."""
    doc = access_document(broker)
    first = dict(doc, users=[dict(u, limits={}) for u in doc["users"]],
                 vhosts=[dict(v, limits={}) for v in doc["vhosts"]])
    records: list[tr.Record] = [tr.AccessChange(first)]
    bindings: list[tr.Record] = []
    for vhost in (broker.vhosts[n] for n in sorted(broker.vhosts)):
        for x in sorted(vhost.exchanges.values(), key=lambda x: x.name):
            if x.name and not x.name.startswith("amq."):
                records.append(tr.ExchangeDeclare(vhost.name, x.name, x.type_name, x.durable,
                                                  x.auto_delete, x.internal,
                                                  dict(x.arguments)))
        owners: dict[str, Any] = {}
        for q in sorted(vhost.queues.values(), key=lambda q: q.name):
            owner = _owner_ref(q.exclusive_owner, index) if q.exclusive else None
            owners[q.name] = owner
            records.append(tr.QueueDeclare(vhost.name, q.name, q.durable, q.exclusive,
                                           q.auto_delete, dict(q.arguments), owner,
                                           q.name.startswith("amq."), home_of(q)))
        for b in vhost.bindings():
            if not b.source:
                continue
            owner = owners.get(b.destination.name) if b.destination.kind == "queue" else None
            bindings.append(tr.Bind(vhost.name, b.destination.kind, b.destination.name,
                                    b.source, b.routing_key, dict(b.arguments or {}), owner))
    records.extend(bindings)
    records.append(tr.AccessChange(doc))
    return [tr.to_wire(r) for r in records]


def _owner_ref(owner: object, index: int) -> Any:
    """The ``owner`` item of a record for an exclusive queue's owner connection."""
    if isinstance(owner, OwnerStub):
        return (owner.worker, owner.serial)
    serial = getattr(owner, "serial", None)
    return None if serial is None else (index, serial)


def identities(wires: Iterable[Wire]) -> set[Identity]:
    """What the declare and bind records among ``wires`` name: ``("x", vhost, name)``,
    ``("q", vhost, name)``, ``("b", vhost, source, dest_kind, dest, routing_key, args)``."""
    out: set[Identity] = set()
    for wire in wires:
        record = tr.from_wire(wire)
        if isinstance(record, tr.ExchangeDeclare):
            out.add(("x", record.vhost, record.name))
        elif isinstance(record, tr.QueueDeclare):
            out.add(("q", record.vhost, record.name))
        elif isinstance(record, tr.Bind):
            out.add(_binding_identity(record))
    return out


def _binding_identity(b: tr.Bind | tr.Unbind) -> Identity:
    args = json.dumps(b.arguments or {}, sort_keys=True, default=str)
    return ("b", b.vhost, b.source, b.dest_kind, b.dest_name, b.routing_key, args)


def removals(have: list[Wire], want: Iterable[Wire]) -> list[Wire]:
    """Records that remove from a node holding ``have`` (its :func:`state_records`) what
    ``want`` (a snapshot) lacks: unbinds, then queues forgotten (removed here only, never
    refused), then exchanges deleted."""
    keep = identities(want)
    unbinds: list[Wire] = []
    queues: list[Wire] = []
    exchanges: list[Wire] = []
    for wire in have:
        record = tr.from_wire(wire)
        if isinstance(record, tr.Bind) and _binding_identity(record) not in keep:
            unbinds.append(tr.to_wire(tr.Unbind(record.vhost, record.dest_kind,
                                                record.dest_name, record.source,
                                                record.routing_key, record.arguments,
                                                record.owner)))
        elif isinstance(record, tr.QueueDeclare) and ("q", record.vhost, record.name) not in keep:
            queues.append(tr.to_wire(tr.QueueForget(record.vhost, record.name)))
        elif (isinstance(record, tr.ExchangeDeclare)
              and ("x", record.vhost, record.name) not in keep):
            exchanges.append(tr.to_wire(tr.ExchangeDelete(record.vhost, record.name, False)))
    return unbinds + queues + exchanges


def death_record_obsolete(name: bytes, leases: dict[str, int]) -> bool:
    """Whether the log's ``down-<member>-<lease hex>`` record (``name``: its key after the
    log prefix), once a snapshot covers it, may be deleted: its member registered again
    since (``leases``: member -> the lease its ``members/<member>`` key names now, another
    one). Nobody writes that record again then: the member's next start records only the
    death of its latest registration, and a node that saw the death late writes it only
    while the member has not registered again (:mod:`amqp_server.cluster.metadata`). A
    member not registered since, or forgotten, keeps its record (re-created, it would be
    a second death replayed while the node may be running)."""
    if not name.startswith(b"down-"):
        return False
    member, _, lease = name[len(b"down-"):].rpartition(b"-")
    try:
        dead = int(lease, 16)
    except ValueError:
        return False
    now = leases.get(member.decode(errors="replace"))
    return now is not None and now != dead
