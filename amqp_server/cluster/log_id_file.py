"""The file that keeps a replica log's id beside it (:mod:`amqp_server.cluster.log_ids`).

A quorum queue's replica log ``<digest>.log`` keeps its id in ``<digest>.log.id``; a
replicated stream's log directory in ``log.id`` inside it. The id is 16 hex digits (a random
64-bit number, never 0), written with an fsync of the file and its directory before the
replica sends its first fetch. Lost with the disk or the data directory, a log comes back
empty with a new id.

Opening (:func:`open_log_id`):

* the file is there: its id;
* no file (or an unreadable one) and the log is empty: a new log, a new id;
* no file and the log has entries: a log written before log ids (or whose id file alone
  was lost): it is *migrated*, given a new id. A queue whose etcd state predates log ids
  records it as the leader sees its fetches (admitted as before); a state that recorded
  another id for this node sees a new log (it leaves the ISR and rejoins by the normal
  rule), which is safe, only slower.
"""

from __future__ import annotations

import os
from pathlib import Path

from broker.persistence import write_atomically

__all__ = ["id_path", "open_log_id", "remove_log_id"]


def id_path(log_path: Path) -> Path:
    """Where the id of the log at ``log_path`` (a file, or a stream's directory) lives."""
    if log_path.is_dir():
        return log_path / "log.id"
    return log_path.with_name(log_path.name + ".id")


def open_log_id(log_path: Path, empty: bool) -> tuple[int, str]:
    """The id of the replica log at ``log_path`` (``empty``: it holds no entry and no
    snapshot), and how it was found: ``"read"``, ``"new"`` (a new log) or ``"migrated"`` (a
    log with entries and no id: given one now).

    Raises:
        OSError: the id file cannot be written (the replica must not run without one).
    """
    path = id_path(log_path)
    try:
        log_id = int(path.read_text(encoding="ascii").strip(), 16)
        if log_id > 0:
            return log_id, "read"
    except (OSError, ValueError):
        pass
    log_id = int.from_bytes(os.urandom(8), "big") or 1
    write_atomically(path, f"{log_id:016x}\n".encode("ascii"))
    return log_id, "new" if empty else "migrated"


def remove_log_id(log_path: Path) -> None:
    """Delete the id of a log deleted with its queue (a queue declared again under the
    same name gets a new log, and a new id)."""
    try:
        id_path(log_path).unlink()
    except FileNotFoundError:
        pass
