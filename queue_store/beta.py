"""Beta messages: index entry in RAM, body on disk (RabbitMQ's ``q3``).

A :class:`BetaQueue` is a FIFO run of messages whose index entries (sequence number, expiry,
priority, flags, store msg_id, returns, body size and where the body is) sit in parallel
typed arrays, 46 bytes a message and no Python object per message, while the messages
themselves (routing info, properties, body, as :func:`msg_store.encode_payload` writes them)
go to a transient body file, ``<queue>.<level>.beta``. So the queue's length, byte total,
expiries and priorities stay known without reading a body back; bodies are read back in
batches (:meth:`BetaQueue.take`), one ``pread`` per contiguous run.

The body file is transient (deleted at start, like the paging file: a persistent message's
durable copy is in its queue index or the message store) and append-only; it is truncated
whenever the run empties. Writes go through a buffer; a write that fails (disk full) leaves
the rest in the buffer, where reads find it, and is retried at the next flush.

Source: RabbitMQ ``rabbit_variable_queue`` (beta: ``msg_status`` with ``msg = undefined``,
body in the message store, index entry in RAM).
"""

from __future__ import annotations

import math
import os
from array import array
from collections.abc import Iterator
from pathlib import Path

from queue_store.backing import QueuedMessage
from queue_store.disk_writes import WriteErrors, write_buffer
from queue_store.msg_store import decode_payload, encode_payload

F_REDELIVERED, F_INDEXED, F_LOGGED = 1, 2, 4
WRITE_CHUNK = 32 * 1024  # bytes buffered before a write (per queue: many queues page)
MAX_GAP = 64 * 1024  # bytes: a batch read spans gaps up to this, else reads again


class BetaQueue:
    """Index entries in RAM (typed arrays), bodies in a transient file.

    Args:
        path: the body file (created on first use, truncated when the run empties).
        errors: told when the body file cannot be written (disk full).
    """

    def __init__(self, path: Path, errors: WriteErrors | None = None) -> None:
        self.path = Path(path)
        self.errors = errors
        self._seq = array("Q")
        self._expires = array("d")  # NaN: none
        self._priority = array("B")
        self._flags = array("B")
        self._msg_id = array("Q")
        self._returns = array("I")
        self._size = array("I")  # body bytes (what x-max-length-bytes counts)
        self._offset = array("Q")  # of the payload in the body file
        self._length = array("I")  # payload bytes
        self._head = 0  # index of the first live entry in the arrays
        self.bytes = 0  # body bytes of the live entries
        self.file_size = 0  # bytes in the body file, written or buffered
        self._written = 0  # bytes actually written to the file
        self._buf = bytearray()
        self._fd = -1

    def __len__(self) -> int:
        return len(self._seq) - self._head

    @property
    def head_seq(self) -> int:
        return self._seq[self._head]

    # ---- in ------------------------------------------------------------------------------

    def _write(self, qm: QueuedMessage) -> tuple[int, int]:
        payload = encode_payload(qm.message)
        offset = self.file_size
        self._buf += payload
        self.file_size += len(payload)
        if len(self._buf) >= WRITE_CHUNK:
            self.flush()
        return offset, len(payload)

    def _entry(self, qm: QueuedMessage) -> tuple[int, float, int, int, int, int, int, int, int]:
        offset, length = self._write(qm)
        flags = ((F_REDELIVERED if qm.redelivered else 0) | (F_INDEXED if qm.indexed else 0)
                 | (F_LOGGED if qm.delivery_logged else 0))
        expires = qm.expires_at if qm.expires_at is not None else math.nan
        return (qm.seq, expires, qm.priority, flags, qm.msg_id, qm.returns,
                len(qm.message.body), offset, length)

    def append(self, qm: QueuedMessage) -> None:
        """alpha -> beta at the tail: write the body, keep the index entry."""
        e = self._entry(qm)
        for column, value in zip(self._columns(), e, strict=True):
            column.append(value)  # type: ignore[attr-defined]
        self.bytes += e[6]

    def prepend(self, qms: list[QueuedMessage]) -> None:
        """alpha -> beta at the head: ``qms`` (in order) are all older than the run."""
        if not qms:
            return
        entries = [self._entry(qm) for qm in qms]
        for i, column in enumerate(self._columns()):
            fresh = array(column.typecode, (e[i] for e in entries))  # type: ignore[attr-defined]
            fresh.extend(column[self._head:])  # type: ignore[index]
            setattr(self, self._names[i], fresh)
        self._head = 0
        self.bytes += sum(e[6] for e in entries)

    _names = ("_seq", "_expires", "_priority", "_flags", "_msg_id", "_returns", "_size",
              "_offset", "_length")

    def _columns(self) -> list[array]:  # type: ignore[type-arg]
        return [getattr(self, name) for name in self._names]

    # ---- out -----------------------------------------------------------------------------

    def take(self, n: int, bodies: bool = True) -> list[QueuedMessage]:
        """beta -> alpha: the first ``n`` messages, their bodies read back in as few reads as
        the file layout allows (``bodies`` False: index entries only, message None).

        Raises:
            OSError: the body file cannot be read.
        """
        start = self._head
        end = min(start + n, len(self._seq))
        if end <= start:
            return []
        out: list[QueuedMessage] = []
        seq, exp, pri, flags, mid = (self._seq, self._expires, self._priority, self._flags,
                                     self._msg_id)
        returns, size = self._returns, self._size
        payloads = self._read(start, end) if bodies else None
        for i in range(start, end):
            f = flags[i]
            e = exp[i]
            message = None
            if payloads is not None:
                message = decode_payload(payloads[i - start])
                message.store_id = mid[i]
            qm = QueuedMessage(seq[i], message, bool(f & F_REDELIVERED),  # type: ignore[arg-type]
                               None if math.isnan(e) else e, pri[i])
            qm.msg_id = mid[i]
            qm.indexed = bool(f & F_INDEXED)
            qm.delivery_logged = bool(f & F_LOGGED)
            qm.returns = returns[i]
            qm.size = size[i]
            self.bytes -= size[i]
            out.append(qm)
        self._head = end
        if self._head == len(self._seq):
            self.reset()
        elif self._head >= 4096 and self._head * 2 >= len(self._seq):
            for name in self._names:  # drop the consumed prefix of each column
                column = getattr(self, name)
                setattr(self, name, column[self._head:])
            self._head = 0
        return out

    def _read(self, start: int, end: int) -> list[bytes]:
        """The payloads of entries start..end-1, read in contiguous runs."""
        self.flush()
        offsets, lengths = self._offset, self._length
        out: list[bytes] = []
        i = start
        while i < end:
            j = i + 1
            run_end = offsets[i] + lengths[i]
            while j < end and offsets[j] >= run_end and offsets[j] - run_end <= MAX_GAP:
                run_end = offsets[j] + lengths[j]
                j += 1
            base = offsets[i]
            data = self._pread(base, run_end - base)
            for k in range(i, j):
                out.append(data[offsets[k] - base:offsets[k] - base + lengths[k]])
            i = j
        return out

    def _pread(self, offset: int, length: int) -> bytes:
        data = b""
        if offset < self._written:
            n = min(length, self._written - offset)
            data = os.pread(self._fd, n, offset)
            if len(data) != n:
                raise OSError(f"body file {self.path} ended early at {offset + len(data)}")
        if len(data) < length:  # the rest is still buffered (a write failed)
            start = offset + len(data) - self._written
            data += bytes(self._buf[start:start + length - len(data)])
        return data

    def __iter__(self) -> Iterator[int]:
        """Sequence numbers, head first."""
        return iter(self._seq[self._head:])

    # ---- file ----------------------------------------------------------------------------

    def flush(self) -> OSError | None:
        """Write buffered bodies to the body file. Returns the error when not all could be
        written (disk full): the rest stays buffered, readable, for a retry."""
        if not self._buf:
            return None
        if self._fd < 0:
            try:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            except OSError as exc:
                if self.errors is not None:
                    self.errors.update(self, exc)
                return exc
        before = len(self._buf)
        error = write_buffer(self._fd, self._buf, self._written)
        self._written += before - len(self._buf)
        if self.errors is not None:
            self.errors.update(self, error)
        return error

    def reset(self) -> None:
        """The run is empty: drop the body file's contents and the arrays."""
        for name in self._names:
            setattr(self, name, array(getattr(self, name).typecode))
        self._head = 0
        self.bytes = self.file_size = self._written = 0
        self._buf.clear()
        if self.errors is not None:
            self.errors.clear(self)
        if self._fd >= 0:
            os.ftruncate(self._fd, 0)

    def close(self, delete: bool = True) -> None:
        """Release the body file (deleted by default: it is transient)."""
        if self.errors is not None:
            self.errors.clear(self)
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if delete:
            self.path.unlink(missing_ok=True)
