"""Recovering a durable queue from its journal without reading what is not needed yet.

Theory of operation
-------------------
Restoring a queue by replaying its whole journal (:func:`index_scan.live_entries`) reads
every record twice, decodes every message, pages the backlog out again into beta and delta
and rewrites the journal: minutes for ten million messages. RabbitMQ's CQv2 instead recovers
counts from its index and reads messages when the queue needs them. So does this module:

1. **Summary pass** (:func:`summarize`): one sequential read of the journal's files that
   parses record headers only (struct unpacks, no message objects, no CRC of embedded
   payloads: their CRC is checked when they are read for real). It collects what recovery
   needs before any message: the acked, delivered and returned sequence numbers (8 bytes
   each), each file's first/last publish and counts (so the queue index resumes its segment
   bookkeeping without a rewrite), the live count, an estimate of the live body bytes, the
   highest sequence number, whether any message has an expiry, and the msg_ids of live
   messages kept in the shared message store (retained at once, before the store forgets
   unreferenced records). Any record that does not check (kind out of range, a short
   record's CRC, a length running past the file) sends that file through the robust
   :func:`index_scan.scan` (which skips or truncates damage, as before).
2. **The head** (``RAM budget`` messages) is read and decoded into alpha now.
3. **The rest stays in the journal**: a :class:`JournalRun` is the head of the queue's
   delta (:meth:`VariableQueue.attach_run`); each refill reads the next batch of live
   records from the files (opened at recovery, read only up to their recovered length, so
   records appended or segments rotated since do not disturb it) and skips acked ones.
   New publishes page out behind it, so FIFO order holds.

A journal where acked records dominate (more dead publishes than live ones) is compacted
first, streaming the live records' bytes (no decoding),
and the run then reads the compacted file. Priority queues and journals that are not in
sequence order take the eager path (:meth:`Queue.restore`).

Body bytes of the run are an estimate until read: exact when the journal holds no acks
(a deep backlog that was only published to), else the live count times the journal's mean
message size (store-held messages counted by their store record size).

Source: RabbitMQ ``rabbit_classic_queue_index_v2`` (recovery from segment files, messages
read on demand), ``rabbit_variable_queue`` (delta).
"""

from __future__ import annotations

import logging
import zlib
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from queue_store.backing import QueuedMessage
from queue_store.index_scan import (
    ACK,
    CHUNK,
    CRC,
    DELIVER,
    EMBED,
    HEADER,
    MAX_EMBED,
    PUBLISH,
    RECORD_SIZE,
    RETURN,
    IndexEntry,
    Record,
    journal_files,
    live_from,
    scan_file,
)

log = logging.getLogger("amqpq.queue_index")

_PAYLOAD_OVERHEAD = 6  # bytes: u16 routing-info length + u32 properties length
RUN_CHUNK = 128 * 1024  # bytes read at a time by a run (held while it waits: per queue)


def _body_size(buf: bytes, start: int = 0, length: int = -1) -> int:
    """Body bytes of the embedded payload (routing info, properties, body) at
    ``buf[start:start + length]`` (default: all of ``buf``), read without copying it."""
    if length < 0:
        length = len(buf) - start
    n = (buf[start] << 8) | buf[start + 1]
    p = start + 2 + n
    return length - _PAYLOAD_OVERHEAD - n - int.from_bytes(buf[p:p + 4], "big")


@dataclass(slots=True)
class JournalFile:
    """One journal file as the summary pass found it: ``size`` bytes of whole records (read
    no further), the first and last publish seq in it, its publishes and ack records."""

    path: Path
    size: int = 0
    first: int = 0
    last: int = 0
    publishes: int = 0
    acks: int = 0
    live: int = 0  # publishes not acked (set after the pass)


@dataclass(slots=True)
class JournalSummary:
    """What the summary pass learnt of a journal (see the module docstring)."""

    files: list[JournalFile]
    acked: array  # sorted seqs of ack records
    delivered: array  # sorted seqs of deliver records
    returns: dict[int, int]
    live: int = 0
    live_bytes: int = 0  # estimate of the live messages' body bytes
    max_seq: int = 0
    has_expiry: bool = False
    ordered: bool = True
    stored_seqs: array = field(default_factory=lambda: array("Q"))  # store-held, live
    stored_ids: array = field(default_factory=lambda: array("Q"))

    @property
    def dead(self) -> int:
        """Publish records in the journal whose message is acked."""
        return sum(f.publishes for f in self.files) - self.live


def _fast_records(buf: bytes, pos: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """(kind, seq, field, expiry, body_size) of the whole records in ``buf[pos:end]``;
    raises ValueError at the first one that does not check."""
    unpack = HEADER.unpack_from
    crc_of = CRC.unpack_from
    while pos + RECORD_SIZE <= end:
        kind, seq, fld, expiry, _ = unpack(buf, pos)
        if kind == EMBED:
            if fld > MAX_EMBED or fld < _PAYLOAD_OVERHEAD:
                raise ValueError(pos)
            stop = pos + RECORD_SIZE + fld
            if stop > end:
                return
            yield kind, seq, fld, expiry, _body_size(buf, pos + RECORD_SIZE, fld)
            pos = stop
            continue
        if not PUBLISH <= kind <= RETURN or (
                zlib.crc32(buf[pos:pos + HEADER.size]) != crc_of(buf, pos + HEADER.size)[0]):
            raise ValueError(pos)
        yield kind, seq, fld, expiry, 0
        pos += RECORD_SIZE


def _file_records(jf: JournalFile) -> Iterator[tuple[int, int, int, int, int]]:
    """Records of one file for the summary pass: fast header parsing up to the first
    record that does not check (or a torn tail), the robust scan from there (it skips
    damage and truncates a torn tail). Sets ``jf.size``."""
    try:
        fh = open(jf.path, "r+b")
    except FileNotFoundError:
        return
    with fh:
        buf, base = b"", 0  # base: file offset of buf[0], always a record boundary
        while True:
            more = fh.read(CHUNK)
            buf += more
            pos = 0  # bytes of buf parsed into whole records
            try:
                for rec in _fast_records(buf, 0, len(buf)):
                    yield rec
                    pos += RECORD_SIZE + (rec[2] if rec[0] == EMBED else 0)
            except ValueError:
                base += pos  # the record at ``base`` does not check
                break
            base += pos
            buf = buf[pos:]
            if not more:
                if not buf:
                    jf.size = base
                    return
                break  # bytes left over at the end: a torn tail
        log.warning("queue index %s: damage at offset %d, read with the careful scan",
                    jf.path, base)
        fh.seek(base)
        for kind, seq, fld, expiry, _prio, payload in scan_file(fh, jf.path, start=base):
            yield kind, seq, fld, expiry, 0 if payload is None else _body_size(payload)
        jf.size = fh.seek(0, 2)


def summarize(path: Path, body_size: Callable[[int], int]) -> JournalSummary:
    """One pass over the journal ``path`` (and its rotated segments), headers only.

    Args:
        body_size: the size estimate (bytes) of a message held in the shared store, by msg_id.
    """
    files = [JournalFile(p) for p in journal_files(path)]
    acks, delivers = array("Q"), array("Q")
    returns: dict[int, int] = {}
    publish_bytes = publishes = 0
    s = JournalSummary(files, acks, delivers, returns)
    seqs, ids = array("Q"), array("Q")
    last = 0
    for jf in files:
        for kind, seq, fld, expiry, size in _file_records(jf):
            if kind == EMBED or kind == PUBLISH:
                if seq <= last:
                    s.ordered = False
                last = seq
                if not jf.first:
                    jf.first = seq
                jf.last = seq
                jf.publishes += 1
                publishes += 1
                if expiry:
                    s.has_expiry = True
                if kind == PUBLISH:
                    seqs.append(seq)
                    ids.append(fld)
                    size = body_size(fld)
                publish_bytes += size
            elif kind == ACK:
                acks.append(seq)
                jf.acks += 1
            elif kind == DELIVER:
                delivers.append(seq)
            else:
                returns[seq] = fld
    s.acked = array("Q", sorted(acks))
    s.delivered = array("Q", sorted(delivers))
    s.max_seq = last
    for jf in files:
        if jf.publishes:
            acked_here = bisect_right(s.acked, jf.last) - bisect_left(s.acked, jf.first)
            jf.live = jf.publishes - acked_here
    s.live = sum(jf.live for jf in files)
    if publishes:
        s.live_bytes = publish_bytes if not acks else publish_bytes * s.live // publishes
    acked = s.acked
    for seq, msg_id in zip(seqs, ids, strict=True):
        i = bisect_left(acked, seq)
        if i == len(acked) or acked[i] != seq:
            s.stored_seqs.append(seq)
            s.stored_ids.append(msg_id)
    return s


class JournalRun:
    """The live records of a recovered journal still on disk: the head of a queue's delta.

    Args:
        summary: from :func:`summarize` (its acked/delivered/returns arrays are kept).
        count, nbytes: live messages in the run and their body bytes (estimate).
        body_size: the size estimate of a store-held message, by msg_id (as summarized).
        load: makes a QueuedMessage from an IndexEntry (``bodies`` False: index entry
            only, ``message`` None); None when the message cannot be read (logged).
        lost: seqs of store-held messages whose store record is gone (skipped).
    """

    def __init__(self, summary: JournalSummary, count: int, nbytes: int,
                 load: Callable[[IndexEntry, bool], QueuedMessage | None],
                 lost: set[int], body_size: Callable[[int], int]) -> None:
        self.count = count
        self.bytes = nbytes
        self._stored_size = body_size
        self._load = load
        self._lost = lost
        self._entries = live_entries(summary)

    def take(self, n: int, bodies: bool = True) -> list[QueuedMessage]:
        """Up to ``n`` messages from the run's head, in order (fewer at its end)."""
        out: list[QueuedMessage] = []
        lost = self._lost
        for e in self._entries:
            if e.seq in lost:
                continue
            qm = self._load(e, bodies)
            self.count -= 1
            size = (_body_size(e.payload) if e.payload is not None
                    else self._stored_size(e.msg_id))
            self.bytes = max(0, self.bytes - size) if self.count else 0
            if qm is not None:
                out.append(qm)
            if len(out) >= n or not self.count:
                break
        else:
            if self.count:
                log.error("recovered journal ended with %d messages unread", self.count)
            self.count = self.bytes = 0
        return out

    def close(self) -> None:
        self._entries.close()


def live_entries(s: JournalSummary) -> Iterator[IndexEntry]:
    """The live entries of the summarized files in order, read lazily from descriptors
    opened now, each file read only up to its recovered size (the acks are the summary's:
    no second pass over the files to find them)."""
    handles: list[tuple[BinaryIO, JournalFile]] = []
    for jf in s.files:
        if jf.live <= 0:
            continue
        try:
            handles.append((open(jf.path, "rb"), jf))
        except FileNotFoundError:
            log.error("queue index %s: vanished before it was read", jf.path)
    return _stream(handles, s)


def _stream(handles: list[tuple[BinaryIO, JournalFile]], s: JournalSummary
            ) -> Iterator[IndexEntry]:
    def records() -> Iterator[Record]:
        for fh, jf in handles:
            with fh:
                yield from scan_file(fh, jf.path, quiet=True, limit=jf.size, chunk=RUN_CHUNK)

    try:
        yield from live_from(records(), s.acked, s.delivered, s.returns)
    finally:
        for fh, _ in handles:
            fh.close()
