"""The queue index: a durable queue's journal of its persistent messages.

For each persistent message on a durable queue the index records *publish* (sequence number,
msg_id in the message store, expiry, priority), *deliver* (so a restart can set the
redelivered flag) and *ack* (the message is gone). Each record is 30 bytes with a CRC-32::

    u8 kind | u64 seq | u64 msg_id | u64 expiry (wall-clock ms, 0 = none) | u8 priority | u32 crc

Recovery replays the journal: published and not acked is live; a torn or corrupt record is
logged and skipped (a torn tail is truncated). The journal is rewritten with only its live
records (write temp + fsync + rename) when acked records dominate.

Source: RabbitMQ ``rabbit_queue_index`` / ``rabbit_classic_queue_index_v2``.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("amqpq.queue_index")

_body = struct.Struct(">BQQQB")
RECORD_SIZE = _body.size + 4
PUBLISH, DELIVER, ACK = 1, 2, 3
COMPACT_MIN_ACKS = 10_000


@dataclass(slots=True)
class IndexEntry:
    """A live message recovered from the index."""

    seq: int
    msg_id: int
    delivered: bool = False
    expiry_ms: int = 0  # wall-clock ms since the epoch, 0 = none
    priority: int = 0


def _record(kind: int, seq: int, msg_id: int = 0, expiry_ms: int = 0, priority: int = 0
            ) -> bytes:
    body = _body.pack(kind, seq, msg_id, expiry_ms, priority)
    return body + struct.pack(">I", zlib.crc32(body))


class QueueIndex:
    """The journal file of one durable queue (``path``), appended through a buffer."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._buffer = bytearray()
        self.live = 0
        self.acked = 0
        self.dirty = False  # records in the buffer
        self.unsynced = False  # records written but not fsynced

    def publish(self, seq: int, msg_id: int, expiry_ms: int = 0, priority: int = 0) -> None:
        self._buffer += _record(PUBLISH, seq, msg_id, expiry_ms, priority)
        self.live += 1
        self.dirty = True

    def deliver(self, seq: int) -> None:
        self._buffer += _record(DELIVER, seq)
        self.dirty = True

    def ack(self, seq: int) -> None:
        self._buffer += _record(ACK, seq)
        self.live -= 1
        self.acked += 1
        self.dirty = True

    def flush(self) -> None:
        """Write the buffer to the file (no fsync)."""
        if self._buffer:
            os.write(self._fd, self._buffer)
            self._buffer.clear()
            self.unsynced = True
        self.dirty = False

    def sync_fd(self) -> int:
        """Flush; the fd to fsync for everything written so far, or -1 if none."""
        self.flush()
        if not self.unsynced:
            return -1
        self.unsynced = False
        return self._fd

    def needs_compaction(self) -> bool:
        return self.acked > COMPACT_MIN_ACKS and self.acked > 2 * max(self.live, 1)

    def compact(self, entries: list[IndexEntry]) -> None:
        """Rewrite the journal with only ``entries`` (the live messages), atomically."""
        tmp = self.path.with_suffix(".tmp")
        data = bytearray()
        for e in entries:
            data += _record(PUBLISH, e.seq, e.msg_id, e.expiry_ms, e.priority)
            if e.delivered:
                data += _record(DELIVER, e.seq)
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        self.flush()
        os.close(self._fd)
        os.replace(tmp, self.path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        self.live = len(entries)
        self.acked = 0

    def close(self) -> None:
        self.flush()
        os.close(self._fd)

    def retire(self) -> None:
        """The queue was deleted: move the journal aside at once (a queue of the same name
        may be declared before :meth:`delete` runs)."""
        retired = self.path.with_name(f"{self.path.name}.deleted-{os.getpid()}-{id(self)}")
        os.replace(self.path, retired)
        self.path = retired

    def delete(self) -> None:
        """Close and remove the journal."""
        os.close(self._fd)
        self.path.unlink(missing_ok=True)

    @staticmethod
    def recover(path: Path) -> list[IndexEntry]:
        """The live entries of journal ``path`` in sequence order (empty if missing)."""
        try:
            data = Path(path).read_bytes()
        except FileNotFoundError:
            return []
        entries: dict[int, IndexEntry] = {}
        usable = len(data) - len(data) % RECORD_SIZE
        if usable != len(data):
            log.error("queue index %s: torn record of %d bytes at the end truncated", path,
                      len(data) - usable)
            with open(path, "r+b") as fh:
                fh.truncate(usable)
        for pos in range(0, usable, RECORD_SIZE):
            body = data[pos:pos + _body.size]
            (crc,) = struct.unpack_from(">I", data, pos + _body.size)
            if zlib.crc32(body) != crc:
                log.error("queue index %s: corrupt record at offset %d skipped", path, pos)
                continue
            kind, seq, msg_id, expiry, priority = _body.unpack(body)
            if kind == PUBLISH:
                entries[seq] = IndexEntry(seq, msg_id, False, expiry, priority)
            elif kind == DELIVER and seq in entries:
                entries[seq].delivered = True
            elif kind == ACK:
                entries.pop(seq, None)
        return [entries[s] for s in sorted(entries)]
