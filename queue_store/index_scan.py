"""Reading a queue-index journal back: records in chunks, torn tails, corrupt records, and
the live entries of a journal streamed in sequence order in bounded memory.

A journal holds fixed 30-byte records (publish of a message in the shared store, deliver,
ack, return) and *embedded* publish records, which carry the message itself (RabbitMQ CQv2's
``queue_index_embed_msgs_below``)::

    u8 kind | u64 seq | u64 field | u64 expiry ms | u8 priority | u32 crc | payload (EMBED)

``field`` is the msg_id in the message store (PUBLISH), the return count (RETURN) or the
payload length (EMBED); the CRC-32 covers the 26 header bytes and the payload. A record that
does not check is skipped by searching forward for the next one that does (so one damaged
length field costs only its own record); unreadable bytes at the end (a torn write) are
truncated.

Replay (:func:`live_entries`) makes two passes over the files: the first collects the
sequence numbers of acks and delivers (8 bytes each, in arrays) and checks that publishes
come in sequence order (they do: a queue publishes in order and compaction keeps it); the
second streams the publishes that were not acked. Nothing per live message is kept, so a
journal of ten million messages replays in the memory of its acks.
"""

from __future__ import annotations

import logging
import zlib
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from struct import Struct
from typing import BinaryIO

log = logging.getLogger("amqpq.queue_index")

HEADER = Struct(">BQQQB")
CRC = Struct(">I")
RECORD_SIZE = HEADER.size + CRC.size  # 30 bytes
PUBLISH, DELIVER, ACK, RETURN, EMBED = 1, 2, 3, 4, 5
MAX_EMBED = 128 * 1024 * 1024  # bytes; a larger length field is damage, not a message
CHUNK = 4 * 1024 * 1024  # bytes read at a time

#: (kind, seq, field, expiry_ms, priority, payload or None)
Record = tuple[int, int, int, int, int, "bytes | None"]


@dataclass(slots=True)
class IndexEntry:
    """A live message recovered from the index: its store msg_id (0 when embedded), or its
    ``payload`` (routing info, properties, body; see :func:`msg_store.encode_payload`) when
    it was embedded in the journal."""

    seq: int
    msg_id: int
    delivered: bool = False
    expiry_ms: int = 0  # wall-clock ms since the epoch, 0 = none
    priority: int = 0
    returns: int = 0  # quorum queues: times given back to the queue (delivery count)
    payload: bytes | None = None


def _parse(buf: bytes, pos: int) -> int | Record | None:
    """The record at ``pos``: a Record, None (it does not check), or the number of bytes
    it needs from ``pos`` when ``buf`` ends before it."""
    if len(buf) - pos < RECORD_SIZE:
        return RECORD_SIZE
    kind, seq, field, expiry, priority = HEADER.unpack_from(buf, pos)
    if not PUBLISH <= kind <= EMBED:
        return None
    end = pos + RECORD_SIZE
    crc = zlib.crc32(buf[pos:pos + HEADER.size])
    payload = None
    if kind == EMBED:
        if field > MAX_EMBED:
            return None
        if len(buf) < end + field:
            return RECORD_SIZE + field
        payload = buf[end:end + field]
        crc = zlib.crc32(payload, crc)
    if crc != CRC.unpack_from(buf, pos + HEADER.size)[0]:
        return None
    return kind, seq, field, expiry, priority, payload


def record_size(record: Record) -> int:
    return RECORD_SIZE + (record[2] if record[0] == EMBED else 0)


def scan(path: Path, quiet: bool = False) -> Iterator[Record]:
    """The intact records of journal file ``path`` in file order (none if it is missing).
    Corrupt records are skipped and logged; unreadable bytes at the end are truncated."""
    try:
        fh = open(path, "r+b")
    except FileNotFoundError:
        return
    with fh:
        yield from scan_file(fh, path, quiet)


def scan_file(fh: BinaryIO, path: Path, quiet: bool = False, limit: int = -1, start: int = 0,
              chunk: int = CHUNK) -> Iterator[Record]:
    """:func:`scan` over an open file from its current position, which is file offset
    ``start``; ``limit`` >= 0: read up to that file offset and truncate nothing (a journal
    still being appended to); ``chunk``: bytes per read (what a paused reader holds)."""
    buf, pos, base, eof = b"", 0, start, False  # base: file offset of buf[0]
    bad = -1  # offset in buf where unreadable bytes began, -1: none
    while True:
        parsed = _parse(buf, pos)
        if isinstance(parsed, int):  # needs more bytes
            if not eof:
                keep = bad if bad >= 0 else pos
                want = max(chunk, parsed)
                if limit >= 0:
                    want = min(want, limit - base - len(buf))
                more = fh.read(want) if want > 0 else b""
                eof = not more
                buf, base = buf[keep:] + more, base + keep
                pos -= keep
                if bad >= 0:
                    bad = 0
                continue
            if len(buf) - pos < RECORD_SIZE:
                if pos < len(buf) or bad >= 0:  # nothing readable after: a torn tail
                    start = bad if bad >= 0 else pos
                    if not quiet:
                        log.error("queue index %s: torn or corrupt tail at offset %d "
                                  "(%d bytes) truncated", path, base + start,
                                  len(buf) - start)
                    if limit < 0:
                        fh.truncate(base + start)
                return
            parsed = None  # a length field running past the end: damage or torn
        if parsed is None:
            if bad < 0:
                bad = pos
            pos += 1  # search forward for the next record that checks
            continue
        if bad >= 0:
            if not quiet:
                log.error("queue index %s: corrupt record at offset %d (%d bytes) skipped",
                          path, base + bad, pos - bad)
            bad = -1
        yield parsed
        pos += record_size(parsed)


def segment_numbers(path: Path) -> list[int]:
    """The numbers N of the rotated segments ``path.N``, ascending."""
    prefix = path.name + "."
    return sorted(int(p.name[len(prefix):]) for p in path.parent.glob(prefix + "*")
                  if p.name[len(prefix):].isdigit())


def journal_files(path: Path) -> list[Path]:
    """The rotated segments, oldest first, then the current journal."""
    return [path.with_name(f"{path.name}.{n}") for n in segment_numbers(path)] + [path]


def live_entries(path: Path) -> Iterator[IndexEntry]:
    """The live (published, not acked) entries of journal ``path`` and its rotated segments,
    in sequence order, streamed (see the module docstring)."""
    files = journal_files(path)
    acks, delivers = array("Q"), array("Q")
    returns: dict[int, int] = {}
    last, ordered = 0, True
    for file in files:
        for kind, seq, field, _, _, _ in scan(file):
            if kind == ACK:
                acks.append(seq)
            elif kind == DELIVER:
                delivers.append(seq)
            elif kind == RETURN:
                returns[seq] = field
            else:
                ordered = ordered and seq > last
                last = seq
    if not ordered:  # not written by a queue (hand-made journal): sort in RAM
        yield from _replay_in_ram(files)
        return
    acked = array("Q", sorted(acks))
    delivered = array("Q", sorted(delivers))
    del acks, delivers
    yield from live_from(chain.from_iterable(scan(f, quiet=True) for f in files), acked,
                         delivered, returns)


def live_from(records: Iterable[Record], acked: Sequence[int], delivered: Sequence[int],
              returns: dict[int, int]) -> Iterator[IndexEntry]:
    """The live entries among ``records`` (in sequence order): publishes whose seq is not in
    ``acked`` (sorted), flagged delivered when in ``delivered`` (sorted)."""
    ai = di = 0
    for kind, seq, field, expiry, priority, payload in records:
        if kind != PUBLISH and kind != EMBED:
            continue
        while ai < len(acked) and acked[ai] < seq:
            ai += 1
        if ai < len(acked) and acked[ai] == seq:
            continue
        while di < len(delivered) and delivered[di] < seq:
            di += 1
        was_delivered = di < len(delivered) and delivered[di] == seq
        yield IndexEntry(seq, 0 if kind == EMBED else field, was_delivered, expiry,
                         priority, returns.get(seq, 0), payload)


def _replay_in_ram(files: list[Path]) -> Iterator[IndexEntry]:
    entries: dict[int, IndexEntry] = {}
    for file in files:
        for kind, seq, field, expiry, priority, payload in scan(file, quiet=True):
            if kind == PUBLISH or kind == EMBED:
                entries[seq] = IndexEntry(seq, 0 if kind == EMBED else field, False, expiry,
                                          priority, 0, payload)
            elif kind == DELIVER and seq in entries:
                entries[seq].delivered = True
            elif kind == RETURN and seq in entries:
                entries[seq].returns = field
            elif kind == ACK:
                entries.pop(seq, None)
    for seq in sorted(entries):
        yield entries[seq]
