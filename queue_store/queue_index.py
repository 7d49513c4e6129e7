"""The queue index: a durable queue's journal of its persistent messages.

For each persistent message on a durable queue the index records *publish* (sequence number,
msg_id in the message store, expiry, priority), *deliver* (so a restart can set the
redelivered flag), *return* (quorum queues: the delivery count so far, in the msg_id field)
and *ack* (the message is gone). Each record is 30 bytes with a CRC-32::

    u8 kind | u64 seq | u64 msg_id | u64 expiry (wall-clock ms, 0 = none) | u8 priority | u32 crc

A small message (body below ``queue_index_embed_msgs_below`` bytes, 4,096 by default, as in
RabbitMQ) is not written to the shared message store: its publish record *embeds* it (the
payload follows the record; see :mod:`queue_store.index_scan`), so the store keeps no
in-RAM index entry for it and a deep backlog of small persistent messages costs no RAM per
message.

Recovery replays the journal (:func:`queue_store.index_scan.live_entries`, streamed):
published and not acked is live; a torn or corrupt record is logged and skipped (a torn tail
is truncated). The journal is segmented: the current segment
is rotated when acked records dominate it, and a rotated segment is deleted once all its
messages are acked; at recovery the journal is rewritten with only its live records (write
temp + fsync + rename).

Source: RabbitMQ ``rabbit_queue_index`` / ``rabbit_classic_queue_index_v2``.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

from queue_store.disk_writes import SegmentSync, write_buffer
from queue_store.index_scan import (
    ACK,
    DELIVER,
    EMBED,
    MAX_EMBED,
    PUBLISH,
    RECORD_SIZE,
    RETURN,
    IndexEntry,
    live_entries,
    segment_numbers,
)
from queue_store.journal_recovery import JournalFile

__all__ = ["ACK", "DELIVER", "EMBED", "PUBLISH", "RECORD_SIZE", "RETURN", "IndexEntry",
           "QueueIndex"]

log = logging.getLogger("amqpq.queue_index")

_body = struct.Struct(">BQQQB")
_crc = struct.Struct(">I")
COMPACT_MIN_ACKS = 10_000
EMBED_MSGS_BELOW = 4096  # bytes of body (RabbitMQ's queue_index_embed_msgs_below)


def _record(kind: int, seq: int, msg_id: int = 0, expiry_ms: int = 0, priority: int = 0
            ) -> bytes:
    body = _body.pack(kind, seq, msg_id, expiry_ms, priority)
    return body + _crc.pack(zlib.crc32(body))


def embedded_record(seq: int, payload: bytes, expiry_ms: int = 0, priority: int = 0) -> bytes:
    """A publish record that carries the message ``payload`` itself.

    Raises:
        ValueError: the payload is larger than ``MAX_EMBED`` bytes.
    """
    if len(payload) > MAX_EMBED:
        raise ValueError(f"payload of {len(payload)} bytes is too large to embed")
    body = _body.pack(EMBED, seq, len(payload), expiry_ms, priority)
    return body + _crc.pack(zlib.crc32(payload, zlib.crc32(body))) + payload


class QueueIndex(SegmentSync):
    """The journal of one durable queue, appended through a buffer.

    The journal is segmented: the current segment is ``path``; when its acked records
    dominate (more than ``COMPACT_MIN_ACKS`` and twice its live ones) it is rotated to
    ``path.N`` and a new one started. A rotated segment is deleted as soon as every message
    it published is acked, so a queue with a standing backlog keeps a bounded journal
    (RabbitMQ's queue index segments).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._buffer = bytearray()
        self.live = 0  # live messages in the whole journal
        self.acked = 0  # ack records in the current segment
        self._cur_first = 0  # first seq published into the current segment (0: none yet)
        self._cur_last = 0
        self._cur_live = 0
        # rotated segments: number -> [first seq, last seq, live messages]
        self._rotated: dict[int, list[int]] = {}
        self._next_segment = 1 + max(self._segment_numbers(self.path), default=0)
        self._init_sync()
        self.dirty = False  # records in the buffer

    _segment_numbers = staticmethod(segment_numbers)

    def _segment_path(self, number: int) -> Path:
        return self.path.with_name(f"{self.path.name}.{number}")

    def publish(self, seq: int, msg_id: int, expiry_ms: int = 0, priority: int = 0) -> None:
        self._buffer += _record(PUBLISH, seq, msg_id, expiry_ms, priority)
        self.live += 1
        self._cur_live += 1
        if not self._cur_first:
            self._cur_first = seq
        self._cur_last = seq
        self.dirty = True

    def publish_embedded(self, seq: int, payload: bytes, expiry_ms: int = 0,
                         priority: int = 0) -> None:
        """Publish a message whose ``payload`` (:func:`msg_store.encode_payload`) lives in
        the journal itself rather than in the message store."""
        self._buffer += embedded_record(seq, payload, expiry_ms, priority)
        if len(self._buffer) >= 1 << 20:  # bytes: a deep backlog's journal stays on disk
            self.flush()
        self.live += 1
        self._cur_live += 1
        if not self._cur_first:
            self._cur_first = seq
        self._cur_last = seq
        self.dirty = True

    def deliver(self, seq: int) -> None:
        self._buffer += _record(DELIVER, seq)
        self.dirty = True

    def returned(self, seq: int, count: int) -> None:
        """A quorum queue's message went back to the queue; ``count`` returns so far."""
        self._buffer += _record(RETURN, seq, count)
        self.dirty = True

    def ack(self, seq: int) -> None:
        self._buffer += _record(ACK, seq)
        if len(self._buffer) >= 1 << 20:  # bytes (a purge of millions)
            self.flush()
        self.live -= 1
        self.acked += 1
        self.dirty = True
        if self._cur_first and seq >= self._cur_first:
            self._cur_live -= 1
        else:
            for seg in self._rotated.values():
                if seg[0] <= seq <= seg[1]:
                    seg[2] -= 1
                    if seg[2] <= 0:
                        self._drop_dead_segments()
                    break
        if self.needs_compaction():
            self._rotate()

    def _rotate(self) -> None:
        """Start a new current segment; the old one waits for its last ack. Skipped (tried
        again at the next ack) when the buffer cannot be written or no file can be created."""
        if self.flush() is not None:
            return
        fresh = self.path.with_name(self.path.name + ".new")
        try:
            fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
        except OSError as exc:
            log.error("queue index %s: cannot rotate: %s", self.path, exc)
            return
        number = self._next_segment
        self._next_segment += 1
        os.replace(self.path, self._segment_path(number))
        os.replace(fresh, self.path)
        self._retired_fds.append(self._fd)  # closed after its data is fsynced
        self._fd = fd
        if self._cur_live > 0:
            self._rotated[number] = [self._cur_first, self._cur_last, self._cur_live]
        else:
            self._segment_path(number).unlink(missing_ok=True)
        self._cur_first = self._cur_live = self.acked = 0

    def _drop_dead_segments(self) -> None:
        """Delete rotated segments whose messages are all acked, oldest first, stopping at
        the first with live messages: a newer segment may hold the acks of an older one's
        messages, so it must outlive it (or a restart would bring those messages back)."""
        for number in sorted(self._rotated):
            if self._rotated[number][2] > 0:
                break
            del self._rotated[number]
            self._segment_path(number).unlink(missing_ok=True)

    def adopt(self, files: list[JournalFile]) -> None:
        """Recovery without a rewrite (:mod:`queue_store.journal_recovery`): resume the
        segment bookkeeping from the summary pass's view of the files (rotated segments
        oldest first, then the current journal)."""
        *rotated, current = files
        self._rotated = {}
        for jf in rotated:
            number = int(jf.path.name.rsplit(".", 1)[1])
            self._rotated[number] = [jf.first, jf.last, jf.live]
        self._drop_dead_segments()
        self.live = sum(jf.live for jf in files)
        self._cur_first, self._cur_last = current.first, current.last
        self._cur_live = current.live
        self.acked = current.acks

    def flush(self) -> OSError | None:
        """Write the buffer to the file (no fsync). Returns the error when not all of it
        could be written (disk full): the rest stays buffered for a retry."""
        if not self._buffer:
            self.dirty = False
            return None
        before = len(self._buffer)
        error = write_buffer(self._fd, self._buffer)
        if len(self._buffer) < before:
            self.unsynced = True
        self.dirty = error is not None
        return error


    def needs_compaction(self) -> bool:
        return self.acked > COMPACT_MIN_ACKS and self.acked > 2 * max(self._cur_live, 1)

    def compact(self, entries: Iterable[IndexEntry]) -> bool:
        """Rewrite the journal with only ``entries`` (the whole live state, in sequence
        order; consumed once, streamed to the new file), atomically, and drop the rotated
        segments and any records still buffered. False when the new journal cannot be
        written (disk full): the old journal then stays as it is (it replays to the same
        live state; ``entries`` is still consumed) and only the counters are reset."""
        tmp = self.path.with_suffix(".tmp")
        count = first = last = 0
        it = iter(entries)
        try:
            with open(tmp, "wb") as fh:
                data = bytearray()
                for e in it:
                    count += 1
                    first = first or e.seq
                    last = e.seq
                    if e.payload is not None:
                        data += embedded_record(e.seq, e.payload, e.expiry_ms, e.priority)
                    else:
                        data += _record(PUBLISH, e.seq, e.msg_id, e.expiry_ms, e.priority)
                    if e.delivered:
                        data += _record(DELIVER, e.seq)
                    if e.returns:
                        data += _record(RETURN, e.seq, e.returns)
                    if len(data) >= 1 << 20:
                        fh.write(data)
                        data.clear()
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            for e in it:
                count += 1
                first = first or e.seq
                last = e.seq
            tmp.unlink(missing_ok=True)
            log.error("queue index %s: not compacted: %s", self.path, exc)
            self._reset_counts(count, first, last)
            return False
        os.replace(tmp, self.path)
        self._buffer.clear()
        self.dirty = False
        os.close(self._fd)
        for number in self._segment_numbers(self.path):
            self._segment_path(number).unlink(missing_ok=True)
        self._rotated.clear()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        self._reset_counts(count, first, last)
        return True

    def _reset_counts(self, count: int, first: int, last: int) -> None:
        self.live = self._cur_live = count
        self._cur_first = first
        self._cur_last = last
        self.acked = 0

    def close(self) -> None:
        error = self.flush()
        if error is not None:
            log.error("queue index %s: %d bytes not written at shutdown: %s", self.path,
                      len(self._buffer), error)
        os.close(self._fd)
        for fd in self._retired_fds + self._syncing_fds:
            os.close(fd)
        self._retired_fds, self._syncing_fds = [], []

    def retire(self) -> None:
        """The queue was deleted: move the journal aside at once (a queue of the same name
        may be declared before :meth:`delete` runs)."""
        for number in self._segment_numbers(self.path):
            self._segment_path(number).unlink(missing_ok=True)
        self._rotated.clear()
        retired = self.path.with_name(f"{self.path.name}.deleted-{os.getpid()}-{id(self)}")
        os.replace(self.path, retired)
        self.path = retired

    def delete(self) -> None:
        """Close and remove the journal."""
        self.close()
        self.path.unlink(missing_ok=True)

    @staticmethod
    def recover(path: Path) -> list[IndexEntry]:
        """The live entries of journal ``path`` (and its rotated segments ``path.N``) in
        sequence order (empty if missing), as a list; :meth:`iter_live` streams them."""
        return list(live_entries(Path(path)))

    @staticmethod
    def iter_live(path: Path) -> Iterator[IndexEntry]:
        """:meth:`recover` streamed, in bounded memory (see :mod:`queue_store.index_scan`)."""
        return live_entries(Path(path))
