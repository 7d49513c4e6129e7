"""Durable broker state on disk, and recovery at start.

Topology (vhosts, users, permissions, policies, durable exchanges, queues and bindings) is
kept as one RabbitMQ-format definitions document, ``definitions.json`` in the data dir,
rewritten atomically (write temp, fsync, rename, fsync the folder) whenever it changes:
recovery then runs through the same import code as ``POST /api/definitions``. Messages are
recovered from each vhost's message store and its durable queues' indexes.

Recovery order: import definitions (creates vhosts, durable queues) -> scan each vhost's
message store -> replay each durable queue's index into its ready list -> forget store
records no queue references.

Source: https://www.rabbitmq.com/docs/definitions; RabbitMQ's recovery of durable queues
(``rabbit_amqqueue:recover``, ``rabbit_variable_queue:init``).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vhosts.definitions import export_definitions, import_definitions

if TYPE_CHECKING:
    from amqp_server.broker import Broker

log = logging.getLogger("amqpq.persistence")

DEFINITIONS_FILE = "definitions.json"


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a crash leaves the old or the new file, whole.

    Raises:
        OSError: the new file could not be written (the old one is untouched).
    """
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as fh:
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
    """Keeps ``definitions.json`` equal to the broker's durable definitions."""

    def __init__(self, broker: Broker, data_dir: Path) -> None:
        self.broker = broker
        self.path = Path(data_dir) / DEFINITIONS_FILE
        self._last: dict[str, Any] | None = None

    def snapshot(self) -> dict[str, Any]:
        return export_definitions(self.broker)

    def save_if_changed(self) -> bool:
        """Rewrite the file when the durable definitions changed; True if written."""
        current = self.snapshot()
        if current == self._last:
            return False
        write_atomically(self.path, json.dumps(current, indent=1, default=str).encode())
        self._last = current
        return True

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
        import_definitions(self.broker, data)
        self._last = self.snapshot()
        return True


def recover_messages(broker: Broker) -> dict[str, int]:
    """Rebuild durable queues from the message stores and queue indexes.

    Returns counts: ``messages`` recovered, ``queues``, ``skipped`` corrupt/torn records.
    """
    counts = {"messages": 0, "queues": 0, "skipped": 0}
    for vhost in broker.vhosts.values():
        storage = vhost.storage
        if storage is None:
            continue
        counts["skipped"] += storage.store.recover()
        for queue in vhost.queues.values():
            if not queue.durable or queue.index is None:
                continue
            entries = storage.recover_index(queue.name)
            queue.restore(entries)
            counts["messages"] += queue.message_count
            counts["queues"] += 1
        storage.store.drop_unreferenced()
    return counts
