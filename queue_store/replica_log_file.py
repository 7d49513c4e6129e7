"""A quorum queue replica's log file read and written by position: the file operations of
:class:`queue_store.replica_log.ReplicaLog` that need none of its state (entries read back
from a point of its entry index, where a truncation cuts the file, a log's state written as
a snapshot section, a received snapshot written aside, records appended and fsynced).

Source: the record format of :mod:`queue_store.replica_log_records`; Kafka's log
truncation (KIP-101) for :func:`cut_position`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from queue_store.replica_log_records import (
    BASE,
    BASE_BODY,
    ENTRY_KINDS,
    EPOCH,
    EPOCH_BODY,
    READ_CHUNK,
    iter_records,
    make_enq,
    make_record,
    scan_file,
    write_all,
)

__all__ = ["append_synced", "cut_position", "read_entries_at", "write_checked",
           "write_section"]


def read_entries_at(fd: int, size: int, point: tuple[int, int, int], first: int, count: int,
                    end: int) -> list[tuple[int, bytes]]:
    """Up to ``count`` entries ``(epoch, record)`` of the file ``fd`` (``size`` bytes) from
    offset ``first`` and below offset ``end``, scanned from ``point``: ``(LSN before the
    entry there, its file position, the epoch there)``, an entry index point at or before
    ``first`` (:meth:`queue_store.replica_log_index.EntryIndex.locate`). Blocking."""
    lsn, pos, epoch = point
    out: list[tuple[int, bytes]] = []
    for kind, record, _ in scan_file(fd, size, pos, chunk=256 * 1024):
        if kind == EPOCH:
            (epoch,) = EPOCH_BODY.unpack_from(record, 9)
        elif kind in ENTRY_KINDS:
            if lsn >= first:
                out.append((epoch, record))
            lsn += 1
            if lsn >= end or len(out) >= count:
                break
    return out


def cut_position(fd: int, size: int, offset: int) -> int:
    """The file position after the entry at LSN ``offset`` (``offset`` entries kept), or
    after the file's last whole record when it holds fewer: where a truncation cuts the file
    ``fd`` of ``size`` bytes (a snapshot section's BASE record is always kept)."""
    lsn, cut = 0, 0
    for kind, record, pos in scan_file(fd, size):
        if lsn >= offset and kind != BASE:
            break
        if kind == BASE:
            lsn = BASE_BODY.unpack_from(record, 9)[0]
        elif kind in ENTRY_KINDS:
            lsn += 1
        cut = pos + len(record)
    return cut


def write_section(dest: Path, lsn: int, next_offset: int, epoch: int,
                  messages: Iterable[tuple[int, tuple[bytes, bytes, bytes, int]]]) -> None:
    """Write the file ``dest`` (created or emptied, owner-only) as a snapshot section: BASE
    (``lsn`` before the live messages, ``next_offset``, ``epoch`` of its last entry), then an
    ENQ record per ``(offset, (exrk, props, body, returns))`` of ``messages``, fsynced.
    Streams: :data:`~queue_store.replica_log_records.READ_CHUNK` at a time."""
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        parts = [make_record(BASE, BASE_BODY.pack(lsn, next_offset), EPOCH_BODY.pack(epoch))]
        held = len(parts[0])
        for offset, message in messages:
            parts.append(make_enq(offset, message[3], *message[:3]))
            held += len(parts[-1])
            if held >= READ_CHUNK:
                write_all(fd, b"".join(parts))
                parts, held = [], 0
        write_all(fd, b"".join(parts))
        os.fsync(fd)
    finally:
        os.close(fd)


def write_checked(dest: Path, data: bytes) -> None:
    """Write ``data`` (a snapshot's bytes) to the file ``dest`` (created or emptied,
    owner-only; not fsynced) once every record of it is checked whole.

    Raises:
        ReplicaLogError: a cut or damaged record.
    """
    for _ in iter_records(data):  # whole and checked
        pass
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        write_all(fd, data)
    finally:
        os.close(fd)


def append_synced(dest: Path, data: bytes) -> None:
    """Append ``data`` to the existing file ``dest`` and fsync it."""
    fd = os.open(dest, os.O_WRONLY | os.O_APPEND)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
