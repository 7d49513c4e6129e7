"""Durable broker state on disk, and recovery at start.

Topology (vhosts, users, permissions, policies, durable exchanges, queues and bindings) is
kept as one RabbitMQ-format definitions document, ``definitions.json`` in the data dir,
rewritten atomically (write temp, fsync, rename, fsync the folder) whenever it changes:
recovery then runs through the same import code as ``POST /api/definitions``. Messages are
recovered from each vhost's message store and its durable queues' indexes.

Recovery order: import definitions (creates vhosts, durable queues) -> share the RAM budget
among the durable queues -> scan each vhost's message store -> replay each durable queue's
index into its ready list (streamed) -> forget store records no queue references.

Source: https://www.rabbitmq.com/docs/definitions; RabbitMQ's recovery of durable queues
(``rabbit_amqqueue:recover``, ``rabbit_variable_queue:init``).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vhosts.dedup_persistence import recover_dedup
from vhosts.definitions import OPERATOR_POLICY, export_definitions, import_definitions
from vhosts.delayed import recover_delayed
from vhosts.policies import OPERATOR_KEYS, POLICY_KEYS

if TYPE_CHECKING:
    from broker.broker import Broker

log = logging.getLogger("amqpq.persistence")

DEFINITIONS_FILE = "definitions.json"
HOMES_KEY = "amqpq_queue_homes"  # [[vhost, queue, worker index], ...] with several workers


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a crash leaves the old or the new file, whole
    (a new file is owner-only, 0600).

    Raises:
        OSError: the new file could not be written (the old one is untouched).
    """
    tmp = path.with_name(path.name + ".tmp")
    try:
        # owner-only whatever the umask: definitions hold password hashes
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError:
        tmp.unlink(missing_ok=True)  # disk full: no half-written file left behind
        raise
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class TopologyStore:
    """Keeps ``definitions.json`` equal to the broker's durable definitions.

    The broker counts its definition changes (``broker.topology_version``, bumped by
    ``mark_changed``); the store remembers the count it last wrote or loaded, so the
    definitions are exported (a walk over every vhost, queue and binding) only when
    something changed, and a write that failed is tried again at the next save because the
    count still differs.
    """

    def __init__(self, broker: Broker, data_dir: Path) -> None:
        self.broker = broker
        self.path = Path(data_dir) / DEFINITIONS_FILE
        self._saved_version: int | None = None  # None: nothing written or loaded yet
        self._failing = False
        self.exports = 0  # definitions exported to be saved (stats, tests)
        self.read_only = False  # a worker other than 0 reads worker 0's file, never writes

    def snapshot(self) -> dict[str, Any]:
        doc = export_definitions(self.broker)
        workers = self.broker.workers
        if workers is not None:  # several workers: which one each durable queue lives on
            doc[HOMES_KEY] = workers.export_homes()
        return doc

    @property
    def pending(self) -> bool:
        """True when the definitions changed since they were last written or loaded."""
        return self._saved_version != self.broker.topology_version

    def save_if_changed(self) -> bool:
        """Rewrite the file when the definitions changed since the last save; True if
        written.

        Raises:
            OSError: the file could not be written (the old one stays whole; the change
                stays pending, so the next call tries again).
        """
        version = self.broker.topology_version
        if version == self._saved_version or self.read_only:
            return False
        current = self.snapshot()
        self.exports += 1
        write_atomically(self.path, json.dumps(current, indent=1, default=str).encode())
        self._saved_version = version
        return True

    def save(self) -> bool:
        """:meth:`save_if_changed`, with failures logged instead of raised: an OSError
        (disk full, read-only) once per run of failures, then "saved again" when a later
        call succeeds. True if written."""
        try:
            written = self.save_if_changed()
        except OSError as exc:  # the old file stays whole
            if not self._failing:
                log.error("could not save definitions (retrying every second): %s", exc)
            self._failing = True
            return False
        except Exception:
            log.exception("could not save definitions")
            return False
        if self._failing:
            log.warning("definitions saved again")
            self._failing = False
        return written

    def load(self) -> bool:
        """Import the saved definitions (False when there are none).

        Raises:
            ValueError: the file is unreadable or the import refused it.
        """
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return False
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise ValueError(f"{self.path}: not valid JSON: {exc}") from None
        if isinstance(data, dict):
            drop_unknown_policy_keys(data)
            homes = data.pop(HOMES_KEY, None)
            if homes and self.broker.workers is not None:
                self.broker.workers.import_homes(homes)
        import_definitions(self.broker, data)
        self._saved_version = self.broker.topology_version  # the file says just this
        return True


def drop_unknown_policy_keys(data: dict[str, Any]) -> list[str]:
    """Remove, in place, policy settings this version does not know from a saved document.

    Versions before 0.1 accepted any key in a policy (``max-lenght`` did nothing); the
    import now refuses them (RabbitMQ's 400). A broker's own saved state must still load, so
    recovery drops those keys (and a policy left with none) with a warning instead.

    Returns:
        one description per dropped key or policy (also logged).
    """
    dropped: list[str] = []

    def clean(where: str, holder: dict[str, Any], known: Any) -> bool:
        definition = holder.get("definition")
        if not isinstance(definition, dict):
            return True
        for key in [k for k in definition if k not in known]:
            dropped.append(f"{where}: setting '{key}'")
            del definition[key]
        if not definition:
            dropped.append(f"{where}: no setting left")
            return False
        return True

    policies = data.get("policies")
    if isinstance(policies, list):
        data["policies"] = [
            p for p in policies if not isinstance(p, dict)
            or clean(f"policy '{p.get('name')}' in vhost '{p.get('vhost')}'", p, POLICY_KEYS)]
    parameters = data.get("parameters")
    if isinstance(parameters, list):
        data["parameters"] = [
            p for p in parameters
            if not (isinstance(p, dict) and p.get("component") == OPERATOR_POLICY
                    and isinstance(p.get("value"), dict))
            or clean(f"operator policy '{p.get('name')}' in vhost '{p.get('vhost')}'",
                     p["value"], OPERATOR_KEYS)]
    for what in dropped:
        log.warning("saved definitions: dropped unknown %s", what)
    return dropped


def recover_messages(broker: Broker) -> dict[str, int]:
    """Rebuild durable queues from the message stores and queue indexes.

    Returns counts: ``messages`` recovered, ``queues``, ``skipped`` corrupt/torn records.
    Durable ``x-delayed-message`` exchanges hold their persistent messages again (logged).
    """
    counts = {"messages": 0, "queues": 0, "skipped": 0}
    # the queues to fill share the RAM budget from the start (not the first ones all of it)
    broker.ram_budget.presize(sum(1 for vhost in broker.vhosts.values()
                                  for q in vhost.queues.values() if q.index is not None))
    for vhost in broker.vhosts.values():
        storage = vhost.storage
        if storage is None:
            continue
        counts["skipped"] += storage.store.recover()
        for queue in vhost.queues.values():
            if not queue.durable or queue.index is None:
                continue
            queue.recover()
            counts["messages"] += queue.message_count
            counts["queues"] += 1
        storage.store.drop_unreferenced()
        delayed = recover_delayed(vhost)
        if delayed:
            log.info("vhost '%s': %d delayed messages recovered", vhost.name, delayed)
        keys = recover_dedup(vhost)
        if keys:
            log.info("vhost '%s': %d deduplication keys recovered", vhost.name, keys)
    return counts
