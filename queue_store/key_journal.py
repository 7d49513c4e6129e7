"""The on-disk journal of a deduplication exchange's cache (``x-cache-persistence: disk``).

Theory of operation
-------------------
Every key the exchange's cache records is appended to one file per exchange::

    u32 key length | u32 CRC-32 of the rest | u64 deadline (wall-clock ms, 0 = none) |
    u8 kind (s: str, i: int, f: float) | key bytes

At start the file is replayed in order into the cache (entries past their deadline are
skipped; a torn or corrupt tail is logged and ignored), then rewritten with only the live
entries. While running, the file is rewritten the same way once it holds more than twice the
cache's size (plus 1,024) records, so it stays bounded. Writes are buffered and flushed with
the broker's other journals (:mod:`queue_store.durability`: plain writes after each batch of
input, fsync in the group commit), so a ``kill -9`` loses no key whose message was routed.
Keys of other kinds (tables, decimals, timestamps: rare) are kept in RAM only.

Recency is not journaled: after a restart the least recently *inserted* key is evicted
first.

Source: the ``rabbitmq-message-deduplication`` plugin's ``x-cache-persistence`` (a Mnesia
``disc_copies`` table there).
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from collections.abc import Hashable, Iterable
from pathlib import Path

from queue_store.disk_writes import write_buffer

log = logging.getLogger("amqpq.dedup")

_head = struct.Struct(">IIQ")  # key length, crc, deadline ms
COMPACT_SLACK = 1024


def _encode_key(key: Hashable) -> bytes | None:
    if isinstance(key, bool):
        return None
    if isinstance(key, str):
        return b"s" + key.encode("utf-8", "surrogateescape")
    if isinstance(key, int):
        return b"i" + str(key).encode()
    if isinstance(key, float):
        return b"f" + repr(key).encode()
    return None


def _decode_key(raw: bytes) -> Hashable:
    kind, data = raw[:1], raw[1:]
    if kind == b"s":
        return data.decode("utf-8", "surrogateescape")
    if kind == b"i":
        return int(data)
    if kind == b"f":
        return float(data)
    raise ValueError(f"unknown key kind {kind!r}")


class KeyJournal:
    """The journal file ``path`` of one exchange's keys (see the module docstring).

    Args:
        path: the file (its folder is created).
        size: the cache's size (entries), for the rewrite threshold.
    """

    def __init__(self, path: Path, size: int) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.size = size
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._buffer = bytearray()
        self.records = 0  # records in the file (and buffer) since the last rewrite
        self.unsynced = False
        self.dirty = False

    def record(self, key: Hashable, deadline_ms: int) -> None:
        """Append ``key`` (live until wall-clock ms ``deadline_ms``, 0: no deadline)."""
        raw = _encode_key(key)
        if raw is None:
            return
        rest = struct.pack(">Q", deadline_ms) + raw
        self._buffer += struct.pack(">II", len(raw), zlib.crc32(rest)) + rest
        self.records += 1
        self.dirty = True

    @property
    def needs_rewrite(self) -> bool:
        return self.records > 2 * self.size + COMPACT_SLACK

    def load(self, now_ms: int) -> list[tuple[Hashable, int]]:
        """The recorded (key, deadline ms) still live at ``now_ms``, oldest first (a key
        recorded again counts from its last record)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        out: dict[Hashable, int] = {}
        pos = 0
        while pos + _head.size <= len(data):
            length, crc, _deadline = _head.unpack_from(data, pos)
            end = pos + _head.size + length
            rest = data[pos + 8:end]
            if end > len(data) or zlib.crc32(rest) != crc:
                log.error("dedup journal %s: torn or corrupt record at offset %d: %d bytes "
                          "ignored", self.path, pos, len(data) - pos)
                break
            try:
                key = _decode_key(rest[8:])
            except ValueError:
                key = None
            deadline = struct.unpack_from(">Q", rest, 0)[0]
            if key is not None:
                out.pop(key, None)
                if deadline == 0 or deadline > now_ms:
                    out[key] = deadline
            pos = end
        return list(out.items())

    def rewrite(self, entries: Iterable[tuple[Hashable, int]]) -> bool:
        """Replace the file with ``entries`` (write temp, fsync, rename). Do not call while
        an fsync round may use the file (:attr:`Durability.syncing`). False when the new
        file could not be written (the old one stays)."""
        data = bytearray()
        count = 0
        for key, deadline in entries:
            raw = _encode_key(key)
            if raw is None:
                continue
            rest = struct.pack(">Q", deadline) + raw
            data += struct.pack(">II", len(raw), zlib.crc32(rest)) + rest
            count += 1
        tmp = self.path.with_suffix(".tmp")
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            log.error("dedup journal %s: not rewritten: %s", self.path, exc)
            return False
        os.close(self._fd)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        self._buffer.clear()
        self.records = count
        self.unsynced = self.dirty = False
        return True

    # ---- the durability interface (flushed and fsynced with the queue indexes) -----------

    def flush(self) -> OSError | None:
        if not self._buffer:
            self.dirty = False
            return None
        error = write_buffer(self._fd, self._buffer)
        self.unsynced = True
        self.dirty = error is not None
        return error

    def sync_fds(self) -> list[int]:
        self.flush()
        if not self.unsynced:
            return []
        self.unsynced = False
        return [self._fd]

    def after_sync(self) -> None:
        """Nothing to close."""

    def sync_failed(self) -> None:
        self.unsynced = True

    def close(self) -> None:
        self.flush()
        os.close(self._fd)

    def delete(self) -> None:
        """The exchange is gone: close and remove the file."""
        self.close()
        self.path.unlink(missing_ok=True)
