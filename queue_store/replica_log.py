"""A quorum queue replica's log: the operations that make the queue, on disk and on the wire.

Every replica of a replicated quorum queue (the leader and its followers,
:mod:`amqp_server.cluster.quorum_group`) keeps the same log: a message entered (``ENQ``),
messages left for good (``ACK``: acked, dead-lettered, expired, dropped, purged), a message
went back with one more return (``RET``: quorum queues count deliveries,
``x-delivery-limit``). Each operation is one *entry* of the replication log
(:class:`~amqp_server.cluster.replication.Replica`), which counts them from offset 0: the
operation at offset ``o`` has *log sequence number* (LSN) ``o + 1``, so :attr:`ReplicaLog.lsn`
is the replica's log end. Each entry carries the *leader epoch* that appended it (Kafka's
leader epochs: a follower cuts a divergent tail of an older epoch, :meth:`truncate`).

The bytes the leader appends to its own file are the bytes its followers get and append
to theirs: one encoding, no re-encoding on either side. A record is a length, a CRC-32, a
kind and a body (their layouts: :mod:`queue_store.replica_log_records`): ``ENQ`` (a message
entered), ``ACK``, ``RET``, ``BASE`` (a snapshot's first record), ``EPOCH`` (the entries
that follow were appended in that leader epoch), ``POINT`` (the snapshot point moved).

ENQ, ACK and RET are entries (the payload of a replication entry is the record's bytes,
header included); BASE, EPOCH and POINT are not. A file is an optional *snapshot section* (BASE,
then an ENQ per live message), then the *tail*: EPOCH markers and entries. A torn tail (a
crash mid-write) is cut at the last whole record when the file is opened.

*Snapshots*: the replication log drops committed entries below a *snapshot point*
(:meth:`mark`): the file's bytes up to that point (:meth:`snapshot_bytes`) replay to the
state there, and are what a follower that fetches below it installs (:meth:`install`). The
file itself is rewritten as BASE + live messages only when every entry is written,
committed and fsynced and dead records outweigh live ones: written aside
(:meth:`ReplicaLog.begin_compaction`, a job that can run in another thread), then put in
place with what was appended meanwhile (:meth:`ReplicaLog.finish_compaction`).

Memory: a replica keeps no message in RAM. Per live message it keeps its offset, the
position of its ENQ record in the file and the record's length (20 bytes, in typed arrays,
no object: :mod:`queue_store.replica_slots`), and a returns count where it is not 0; a
message is read back from the file when needed (:meth:`ReplicaLog.messages`,
:meth:`ReplicaLog.message`: a new leader's queue, a compaction, an install). Opening a
file reads it a bounded chunk at a time (:func:`~queue_store.replica_log_records.scan_file`),
and only the entries after the last POINT record are handed to the replication log
(:meth:`tail`). Entries the file holds can be read back from an offset
(:meth:`ReplicaLog.read_entries`: a follower that fetches below what its leader keeps in
RAM), found through a sparse index (:mod:`queue_store.replica_log_index`).

The records are made and read by :mod:`queue_store.replica_log_records`, the file read and
written by position by :mod:`queue_store.replica_log_file`.

Source: Kafka's replication design (log offsets, leader epochs and truncation: KIP-101,
KIP-279, the leader-epoch checkpoint); RabbitMQ quorum queue semantics
(https://www.rabbitmq.com/docs/quorum-queues).
"""

from __future__ import annotations

import errno
import os
import struct
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from queue_store import replica_log_file as log_file
from queue_store.replica_log_index import EntryIndex
from queue_store.replica_log_records import (
    ACK,
    BASE,
    BASE_BODY,
    COUNT,
    ENQ,
    ENQ_HEAD,
    ENTRY_KINDS,
    EPOCH,
    EPOCH_BODY,
    POINT,
    POINT_BODY,
    RET,
    RET_BODY,
    Compaction,
    ReplicaLogError,
    check_entry,
    make_enq,
    make_record,
    parse_enq,
    scan_file,
    write_all,
)
from queue_store.replica_slots import UNWRITTEN as _UNWRITTEN
from queue_store.replica_slots import MessageSlots

__all__ = ["LogEntry", "Message", "ReplicaLog", "ReplicaLogError", "check_entry"]

# bytes of log before compaction is considered: a replica's file stays under this or 4x its
# live bytes, and draining a smaller queue rewrites nothing
COMPACT_MIN = 64 * 1024 * 1024

#: a live message read back: (exrk, props, body, returns)
Message = tuple[bytes, bytes, bytes, int]
#: a replication entry: (leader epoch, the operation's record bytes)
LogEntry = tuple[int, bytes]


class ReplicaLog:
    """One replica's log file and the state it makes (see the module docstring).

    Args:
        path: the file (created when missing; replayed when there).

    Attributes:
        count: live messages.
        lsn: LSN of the last operation applied (the replication log's end).
        written: LSN of the last entry written to the file (below ``lsn`` while the leader's
            new operations wait for their Write).
        next_offset: the message offset the next ENQ gets.
        start, start_epoch: the snapshot point (LSN and epoch of its last entry): the
            replication log holds the entries after it (:meth:`tail`).
        last_epoch: epoch of the last entry written.
        size: bytes in the file.
        live_bytes: bytes of the live messages' ENQ records.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = -1
        self.generation = 0  # the file was read, rewritten or cut this many times
        self._job: Compaction | None = None  # a compaction under way
        self._load()

    def _reset(self) -> None:
        self._slots = MessageSlots()  # the live messages' places in the file
        self.lsn = self.written = self.start = 0
        self.start_epoch = self.last_epoch = 0
        self.next_offset = 1
        self.size = 0
        self._snap_pos = 0  # file bytes that replay to the snapshot point
        self._tail: list[LogEntry] = []
        # (LSN, file position, epoch) after each write since the snapshot point: where mark()
        # may put the next one
        self._marks: deque[tuple[int, int, int]] = deque()
        self._marker_due = True  # the next entry written needs an EPOCH record first
        # the entries the file holds (after its snapshot section): from LSN disk_start, the
        # one before it of epoch disk_start_epoch; every INDEX_EVERY-th entry's (LSN before
        # it, position, epoch); (epoch, LSN before its first entry) of each epoch
        self.disk_start = self.disk_start_epoch = 0
        self._index = EntryIndex()

    def _load(self, end: int | None = None) -> None:
        """Replay the file (up to ``end``: the rest is cut; default all of it), cut a torn
        tail, keep the file open for appends. Reads :data:`~queue_store.replica_log_records.READ_CHUNK` at a time."""
        self._reset()
        self.generation += 1
        if self._fd < 0:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        fd = self._fd
        if end is None:
            end = os.fstat(fd).st_size
        good, in_section, epoch, marked = 0, False, 0, False
        tail, ends = self._tail, []  # the entries after the snapshot point; their ends
        for kind, record, pos in scan_file(fd, end):
            good = pos + len(record)
            if kind == BASE:
                self._apply_base(record)
                in_section, epoch, marked = True, self.start_epoch, False
                tail.clear()
                ends.clear()
                self._index = EntryIndex()
            elif kind == EPOCH:
                (epoch,) = EPOCH_BODY.unpack_from(record, 9)
                marked = True
                if in_section:
                    in_section = False
                    self.start, self._snap_pos = self.lsn, pos
                    self.disk_start, self.disk_start_epoch = self.lsn, self.start_epoch
            elif kind == POINT:
                lsn, point_epoch = POINT_BODY.unpack_from(record, 9)
                drop = lsn - self.start
                if not in_section and 0 < drop <= len(tail):
                    self.start, self.start_epoch = lsn, point_epoch
                    self._snap_pos = ends[drop - 1]
                    del tail[:drop], ends[:drop]
            elif kind in ENTRY_KINDS:
                if not in_section:
                    self._indexed(self.lsn, pos, epoch)
                    tail.append((epoch, record))
                    ends.append(good)
                self._apply(kind, record, pos)
        if in_section:  # a snapshot section alone
            self.start, self._snap_pos = self.lsn, good
            self.disk_start, self.disk_start_epoch = self.lsn, self.start_epoch
        self.written = self.lsn
        self.last_epoch = tail[-1][0] if tail else self.start_epoch
        self._marker_due = not marked
        if self.lsn > self.start:
            self._marks.append((self.lsn, good, self.last_epoch))
        os.ftruncate(fd, good)  # a torn tail is cut
        os.lseek(fd, good, os.SEEK_SET)
        self.size = good

    def tail(self) -> list[LogEntry]:
        """The entries after the snapshot point as read at open (for the replication log;
        handed over once: the log keeps no copy)."""
        tail, self._tail = self._tail, []
        return tail

    # ---- the live messages -----------------------------------------------------------------

    @property
    def count(self) -> int:
        """Live messages."""
        return self._slots.count

    @property
    def live_bytes(self) -> int:
        """Bytes of the live messages' ENQ records."""
        return self._slots.live_bytes

    def offsets(self) -> list[int]:
        """The live messages' offsets, in order."""
        return self._slots.offsets()

    def message(self, offset: int) -> Message | None:
        """The live message at ``offset`` read back from the file (None: not here, or not
        written yet)."""
        place = self._slots.place(offset)
        if place is None:
            return None
        return self._message(offset, os.pread(self._fd, place[1], place[0]))

    def messages(self) -> Iterator[tuple[int, Message]]:
        """``(offset, message)`` of every live message, in offset order, read back from the
        file in runs of up to :data:`~queue_store.replica_log_records.READ_CHUNK` bytes (a
        message not written yet, a leader's before its Write, is skipped)."""
        for offset, record in self._slots.records(self._fd):
            yield offset, self._message(offset, record)

    def _message(self, offset: int, record: bytes | memoryview) -> Message:
        _, _, exrk, props, body = parse_enq(record)
        return exrk, props, body, self._slots.returns(offset)

    # ---- the leader's operations: applied now, written by write() ------------------------

    def enq(self, exrk: bytes, props: bytes, body: bytes, returns: int = 0
            ) -> tuple[int, bytes]:
        """A message enters: ``(its offset, the entry's payload)``."""
        offset = self.next_offset
        record = make_enq(offset, returns, exrk, props, body)
        self._slots.add(offset, _UNWRITTEN, len(record), returns)  # _apply's ENQ, unparsed
        self.next_offset = offset + 1
        self.lsn += 1
        return offset, record

    def ack(self, offsets: Iterable[int]) -> bytes | None:
        """Messages leave for good: the entry's payload (None: none of them is here)."""
        offsets = [o for o in offsets if o in self._slots]
        if not offsets:
            return None
        record = make_record(ACK, COUNT.pack(len(offsets)), struct.pack(f">{len(offsets)}Q",
                                                                     *offsets))
        self._apply(ACK, record, _UNWRITTEN)
        return record

    def ret(self, offset: int, returns: int) -> bytes | None:
        """A message went back to the queue, ``returns`` times so far: the payload (None:
        the message is not here)."""
        if offset not in self._slots:
            return None
        record = make_record(RET, RET_BODY.pack(offset, returns))
        self._apply(RET, record, _UNWRITTEN)
        return record

    # ---- the replication log's actions ---------------------------------------------------

    def write(self, first: int, entries: Sequence[LogEntry]) -> None:
        """Append ``entries`` (``(epoch, payload)``; the replication log's Write) at offset
        ``first``, the file's end: the leader's own operations (applied already) or a
        follower's from its leader (applied now; each payload checked by
        :func:`check_entry` when it arrived). Not fsynced (:meth:`sync`).

        Raises:
            ReplicaLogError: ``first`` is not the file's end.
        """
        if first != self.written:
            raise ReplicaLogError(f"write at {first}, the log ends at {self.written}")
        parts: list[bytes] = []
        pos = self.size
        index = self._index
        due = index.due  # the entry index takes a point every INDEX_EVERY entries
        written, unapplied = self.written, self.lsn  # below ``unapplied``: the leader's own
        placed_offsets: list[int] = []  # the leader's ENQ records: their offsets, positions
        placed_at: list[int] = []
        enq_offsets: list[int] = []  # a follower's ENQ records not applied yet
        enq_at: list[int] = []
        enq_lens: list[int] = []
        for epoch, payload in entries:
            if epoch != self.last_epoch or self._marker_due:
                marker = make_record(EPOCH, EPOCH_BODY.pack(epoch))
                parts.append(marker)
                pos += len(marker)
                self.last_epoch, self._marker_due = epoch, False
                index.add(written, pos, epoch)  # a new epoch begins here
                due = index.due
            elif written >= due:
                index.add(written, pos, epoch)
                due = index.due
            if written >= unapplied:  # a follower's (checked on arrival): apply it
                kind = payload[8]
                head = ENQ_HEAD.unpack_from(payload, 9) if kind == ENQ else None
                if head is not None and not head[1]:
                    # _apply's ENQ (no returns), the slots added together below
                    enq_offsets.append(head[0])
                    enq_at.append(pos)
                    enq_lens.append(len(payload))
                else:  # in order: the ENQ records before it first
                    self._add_enqs(enq_offsets, enq_at, enq_lens)
                    self._apply(kind, payload, pos)
            elif payload[8] == ENQ:  # the leader's message: now its record has a place
                placed_offsets.append(ENQ_HEAD.unpack_from(payload, 9)[0])
                placed_at.append(pos)
            written += 1
            parts.append(payload)
            pos += len(payload)
        self.written = written
        self._add_enqs(enq_offsets, enq_at, enq_lens)
        self._slots.placed_many(placed_offsets, placed_at)
        self._write(b"".join(parts))
        self._marks.append((self.written, self.size, self.last_epoch))

    def _add_enqs(self, offsets: list[int], positions: list[int], lengths: list[int]) -> None:
        """Apply a follower's ENQ records without returns (their offsets, positions and
        lengths, emptied): :meth:`_apply` of each, their slots added at once."""
        if offsets:
            self._slots.add_many(offsets, positions, lengths)
            if offsets[-1] >= self.next_offset:
                self.next_offset = offsets[-1] + 1
            self.lsn += len(offsets)
            offsets.clear()
            positions.clear()
            lengths.clear()

    def _indexed(self, lsn: int, pos: int, epoch: int) -> None:
        """The entry after LSN ``lsn`` is at ``pos`` in the file, of ``epoch``."""
        self._index.add(lsn, pos, epoch)

    def epoch_at(self, lsn: int) -> int | None:
        """Epoch of the entry at LSN ``lsn`` (offset ``lsn - 1``) as the file holds it; that
        of the snapshot section's last entry at :attr:`disk_start` (0 for an empty log);
        None when the file does not hold it (before :attr:`disk_start`, after
        :attr:`written`)."""
        if lsn == self.disk_start:
            return self.disk_start_epoch
        if not self.disk_start < lsn <= self.written:
            return None
        return self._index.epoch_of(lsn)

    def read_entries(self, first: int, count: int, end: int) -> list[LogEntry]:
        """Up to ``count`` entries ``(epoch, payload)`` from offset ``first``, below offset
        ``end`` and :attr:`written`, read from the file (a follower that fetches below the
        entries its leader keeps in RAM); empty when the file does not hold ``first``.
        Blocking (a read of about ``count`` entries)."""
        end = min(end, self.written)
        if not self.disk_start <= first < end or not self._index:
            return []
        return log_file.read_entries_at(self._fd, self.size, self._index.locate(first), first,
                                        count, end)

    def discard_unwritten(self) -> None:
        """Forget operations applied but never written (the leader stepped down before
        its Write): the state is replayed from the file."""
        if self.lsn != self.written:
            self._reload(self.size)

    def truncate(self, offset: int) -> None:
        """Cut the log to ``offset`` entries (a divergent tail of an older epoch): the file
        is cut after that entry and the state replayed from it (rare: after a failover).
        Below the snapshot point (the snapshot itself is not the leader's) the log starts
        over empty."""
        if offset >= self.written:
            return
        if offset < self.start:
            os.ftruncate(self._fd, 0)
            self._load(0)
            return
        cut = log_file.cut_position(self._fd, self.size, offset)
        os.ftruncate(self._fd, cut)
        self._reload(cut)

    def _reload(self, end: int) -> None:
        """:meth:`_load` up to ``end`` keeping the snapshot point (never above what is
        cut)."""
        point = (self.start, self._snap_pos, self.start_epoch)
        self._load(end)
        self._tail = []
        if point[0] > self.start:
            self.start, self._snap_pos, self.start_epoch = point
            self._marks = deque(m for m in self._marks if m[0] > self.start)

    def mark(self, upto: int) -> int:
        """Make the snapshot point the last write boundary at or below LSN ``upto`` (the
        entries up to it committed and fsynced); its LSN (:attr:`start` when there is none
        above it). A POINT record notes it in the file, so a restart starts there too (the
        entries before it are not read into RAM again)."""
        marks = self._marks
        best = None
        while marks and marks[0][0] <= upto:
            best = marks.popleft()
        if best is not None and best[0] > self.start:
            self.start, self._snap_pos, self.start_epoch = best
            self._write(make_record(POINT, POINT_BODY.pack(self.start, self.start_epoch)))
        return self.start

    @property
    def snapshot_size(self) -> int:
        """Bytes of the file up to the snapshot point (:meth:`read_snapshot`)."""
        return self._snap_pos

    def snapshot_bytes(self) -> bytes:
        """The file's bytes up to the snapshot point: they replay to the state there (what a
        follower that fetches below it installs). Reads the file (blocking)."""
        return self.read_snapshot(0, self._snap_pos)

    def read_snapshot(self, pos: int, n: int) -> bytes:
        """Bytes ``[pos, pos + n)`` of the file: of the snapshot up to a snapshot point while
        :attr:`generation` is the same (the file is appended to only until then)."""
        return os.pread(self._fd, n, pos) if n > 0 else b""

    def install(self, offset: int, last_epoch: int, snapshot: bytes | Path) -> None:
        """Replace the log by a leader's ``snapshot`` (its bytes, :meth:`snapshot_bytes`, or
        a file holding them, consumed) standing at LSN ``offset`` with last epoch
        ``last_epoch``: written as BASE + live messages to a new file, fsynced and renamed
        over the old one.

        Raises:
            ReplicaLogError: the snapshot is damaged or does not replay to ``offset``.
        """
        if isinstance(snapshot, Path):
            incoming = snapshot
        else:
            incoming = self.path.with_name(self.path.name + ".in")
            log_file.write_checked(incoming, snapshot)
        probe = ReplicaLog(incoming)
        try:
            if probe.lsn != offset:
                raise ReplicaLogError(f"a snapshot of LSN {probe.lsn} said to stand at "
                                      f"{offset}")
            probe.start_epoch = last_epoch
            probe.compact_into(self.path.with_name(self.path.name + ".new"))
        finally:
            probe.remove()
        self._replaced()

    def compact(self) -> bool:
        """:meth:`begin_compaction`, its job run here, :meth:`finish_compaction`: True when
        the file was rewritten (the snapshot point moved to the log's end first: the caller
        knows every entry is committed and fsynced). Blocking."""
        if self.written == self.lsn and self.needs_compaction():
            self.mark(self.lsn)
        job = self.begin_compaction()
        if job is None:
            return False
        job.run()
        return self.finish_compaction(job)

    def begin_compaction(self) -> Compaction | None:
        """When dead records outweigh live ones, every operation is written and the snapshot
        point is at the log's end (the caller knows every entry is committed and fsynced):
        the job that rewrites the file as BASE + the live messages as they are now (same
        LSN). Its :meth:`~queue_store.replica_log_records.Compaction.run` reads this file
        through a descriptor of its own and may run in another thread while this log goes
        on; then :meth:`finish_compaction`. None: nothing to do (or a job under way)."""
        if self._job is not None or self.written != self.lsn or self.start != self.lsn \
                or not self.needs_compaction():
            return None
        self._job = Compaction(
            os.dup(self._fd), self.path.with_name(self.path.name + ".compact"), self.lsn,
            self.count, self.next_offset, self.last_epoch, self.size, self.generation,
            *self._slots.freeze())
        return self._job

    def finish_compaction(self, job: Compaction) -> bool:
        """Put ``job``'s file in place of this log's (on the event loop, after its run): the
        records written since it began are copied after it (behind an EPOCH record) and
        fsynced, the file renamed over this one, and the positions moved (the messages
        that left meanwhile stay gone). False (the file dropped) when the job failed or this
        log was cut, replaced or closed meanwhile."""
        if job is not self._job:
            return False
        self._job = None
        if job.error is not None or not job.section or self._fd < 0 \
                or job.generation != self.generation:  # failed, or the log changed under it
            job.close()
            self._slots.thaw()
            job.dest.unlink(missing_ok=True)
            return False
        marker = make_record(EPOCH, EPOCH_BODY.pack(job.epoch))
        try:
            tail = os.pread(self._fd, self.size - job.size, job.size) \
                if self.size > job.size else b""
            log_file.append_synced(job.dest, marker + tail)
            os.replace(job.dest, self.path)
        except OSError:
            self._slots.thaw()
            job.dest.unlink(missing_ok=True)
            raise
        os.close(self._fd)
        self._fd = os.open(self.path, os.O_RDWR)
        size = job.section + len(marker) + len(tail)
        os.lseek(self._fd, size, os.SEEK_SET)
        self._moved(job, job.section + len(marker) - job.size, size)
        return True

    def _moved(self, job: Compaction, shift: int, size: int) -> None:
        """The state after :meth:`finish_compaction`: the frozen slots at their new
        positions, those added since shifted by ``shift``, the entry index, epochs,
        snapshot point and write marks of the records after the section."""
        self._slots.moved(job.offsets, job.new_pos, job.lens, shift)
        self._index.moved(job.lsn, job.section, job.epoch, shift, self.written > job.lsn)
        self.disk_start, self.disk_start_epoch = job.lsn, job.epoch
        self._snap_pos = job.section if self.start == job.lsn else self._snap_pos + shift
        self._marks = deque((lsn, p + shift, e) for lsn, p, e in self._marks if p >= job.size)
        self.size = size
        self.generation += 1

    def needs_compaction(self) -> bool:
        """Dead records outweigh live messages (and the file is past :data:`COMPACT_MIN`)."""
        return self.size > COMPACT_MIN and self.size > 4 * (self.live_bytes + 64 * self.count)

    def compact_into(self, dest: Path) -> None:
        """Write this log's state as a file of its own at ``dest``: BASE (LSN before the
        live messages, next offset, :attr:`start_epoch`), then an ENQ record per live
        message (its record as stored, or made again with its returns), fsynced. Streams:
        :data:`~queue_store.replica_log_records.READ_CHUNK` at a time
        (:func:`~queue_store.replica_log_file.write_section`)."""
        log_file.write_section(dest, self.lsn - self.count, self.next_offset,
                               self.start_epoch, self.messages())

    def _replaced(self) -> None:
        """The file at ``path.new`` replaces this log's file; the state is read from it."""
        os.replace(self.path.with_name(self.path.name + ".new"), self.path)
        self.close()
        self._load()

    # ---- state ---------------------------------------------------------------------------

    def _apply_base(self, record: bytes) -> None:
        self._slots = MessageSlots()
        self.lsn, self.next_offset = BASE_BODY.unpack_from(record, 9)
        body_len = len(record) - 9
        self.start_epoch = (EPOCH_BODY.unpack_from(record, 9 + BASE_BODY.size)[0]
                            if body_len >= BASE_BODY.size + 4 else 0)

    def _apply(self, kind: int, record: bytes, pos: int) -> None:
        """Apply an entry's ``record``, at ``pos`` in the file (or :data:`_UNWRITTEN`)."""
        if kind == ENQ:
            offset, returns = ENQ_HEAD.unpack_from(record, 9)[:2]
            self._slots.add(offset, pos, len(record), returns)
            if offset >= self.next_offset:
                self.next_offset = offset + 1
        elif kind == ACK:
            (count,) = COUNT.unpack_from(record, 9)
            for offset in struct.unpack_from(f">{count}Q", record, 13):
                self._slots.remove(offset)
        elif kind == RET:
            offset, returns = RET_BODY.unpack_from(record, 9)
            self._slots.set_returns(offset, returns)
        else:
            return
        self.lsn += 1

    # ---- the file ------------------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        write_all(self._fd, data)
        self.size += len(data)

    def sync(self) -> None:
        """fsync the file (blocking: run it off the event loop). A file replaced by a
        snapshot meanwhile (closed: EBADF) needs none: :meth:`install` fsynced its own; nor
        does a closed log."""
        fd = self._fd
        if fd < 0:  # closed meanwhile (the queue was deleted)
            return
        try:
            os.fsync(fd)
        except OSError as exc:
            if exc.errno != errno.EBADF:
                raise

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def remove(self) -> None:
        """Close and delete the file (the queue was deleted)."""
        self.close()
        self.path.unlink(missing_ok=True)
