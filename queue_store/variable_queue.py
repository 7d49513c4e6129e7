"""The variable queue: a queue's ready messages split between RAM and disk by a budget.

Theory of operation
-------------------
RabbitMQ's classic queue keeps each message in one of four states: **alpha** (index and body
in RAM), **beta** (index in RAM, body on disk), **gamma** (index in RAM and on disk, body on
disk) and **delta** (index and body on disk only). This module keeps them in three runs, in
publish order::

    head                                                                        tail
    [ q4: alpha / gamma objects ][ q3: beta, typed arrays ][ delta: paging file ]

* **q4** holds :class:`QueuedMessage` objects. Normally their bodies are in RAM (**alpha**).
  A persistent message whose body is in the message store (and its record in the queue
  index) may drop its body under memory pressure (**gamma**); gamma bodies are read back
  from the store ahead of need, ``read_batch`` at a time.
* **q3** (:class:`~queue_store.beta.BetaQueue`) holds **beta** messages: their index entries
  (seq, expiry, priority, flags, store msg_id, size, body location; 46 bytes, no object)
  in RAM, their bodies in a transient body file. Length, bytes, expiries and priorities
  are known without reading a body.
* **delta** is a per-queue paging file of whole records (sequence number, expiry,
  priority, flags, store msg_id, routing info, properties, body); nothing per message stays
  in RAM, only the region's count and byte total, so a backlog of millions costs no memory.

A persistent message on a durable queue is in its queue index (embedded, or by msg_id in
the message store) whatever its state here: this module only decides where the *ready copy*
lives; the paging and body files are transient and deleted at start.

Transitions (deterministic, driven by the budgets: ``ram_messages``/``ram_bytes`` for q4,
``beta_messages`` and ``BETA_FILE_LIMIT`` for q3; the broker's memory watermark switches
``ram_messages`` to ``PRESSURE_RAM_MESSAGES``)::

                 append, q4 under budget, nothing after it
    publish ──────────────────────────────────────────────────────▶ alpha (q4)
       │  append, q4 full, delta empty, q3 under budget               │  ▲
       ├──────────────────────────────────────────────▶ beta (q3) ◀───┤  │ refill: q4 below
       │  append otherwise (delta not empty, q3 full)   │  ▲          │  │ 1/4 of budget,
       └──────────────────────────────────────────────▶ delta ◀───────┤  │ read_batch from
                                                        │  │          │  │ q3, else delta
             pressure: q4's tail past the budget ───────┘  └──────────┘  │ (sequential)
             to delta if nothing follows q4, else to q3's head           │
             pressure: bodies of stored persistent messages dropped ──▶ gamma ──▶ alpha
                                                                   (read ahead at the head)

* append -> q4 while q4 is under budget and q3 and delta are empty; else -> q3 while delta is
  empty and q3 is under budget; else -> delta. So FIFO order holds: q4 < q3 < delta.
* refill (pop or peek with q4 at or below a quarter of its budget): a batch of
  ``read_batch`` from q3 (beta -> alpha, bodies read in contiguous runs), or, when q3 is
  empty, from delta (delta -> alpha, sequential reads).
* memory pressure: q4's alpha tail beyond ``PRESSURE_RAM_MESSAGES`` moves out (alpha ->
  delta when q3 and delta are empty, else alpha -> beta at q3's head), but only messages
  newer than any ever taken from the head, since a requeue may bring those back into q4;
  then alpha -> gamma for messages whose bodies are safe in the message store.
* requeue: requeued messages were taken from the head, so they are older than everything
  in q3 and delta and merge back into q4 by sequence number.
* clear (purge, delete): beta and delta messages come back without bodies (the caller only
  needs their index entries), one batch at a time.
* The body file is truncated whenever q3 drains, the paging file whenever delta drains.

:meth:`VariableQueue.state_counts` gives the messages and bytes in each state (the
management API's ``backing_queue_status`` and ``messages_ram``/``messages_paged_out``).

Source: RabbitMQ ``rabbit_variable_queue`` (module documentation of states and sub-queues).
"""

from __future__ import annotations

import heapq
import math
import os
import struct
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path

from queue_store.backing import QueuedMessage
from queue_store.beta import BetaQueue
from queue_store.disk_writes import WriteErrors, write_buffer
from queue_store.journal_recovery import JournalRun
from queue_store.msg_store import MessageStore, decode_payload, encode_payload

# payload len, seq, expires_at (NaN none), priority, flags, msg_id, returns
_rec = struct.Struct(">IQdBBQI")
F_REDELIVERED, F_INDEXED, F_LOGGED = 1, 2, 4
RAM_MESSAGES = 200_000
RAM_BYTES = 64 * 1024 * 1024
READ_BATCH = 2_000
PRESSURE_RAM_MESSAGES = 2_000  # q4 budget while memory is past the paging threshold
READ_CHUNK = 128 * 1024  # bytes per read from the paging file (held per draining queue)
WRITE_CHUNK = 32 * 1024  # bytes of paged-out records buffered before a write (per queue)
BETA_MESSAGES = 1_000_000  # q3's budget of index entries in RAM (46 bytes each)
BETA_FILE_LIMIT = 256 * 1024 * 1024  # bytes: q3 takes no more appends past this body file


def _encode(qm: QueuedMessage) -> bytes:
    payload = encode_payload(qm.message)
    flags = ((F_REDELIVERED if qm.redelivered else 0) | (F_INDEXED if qm.indexed else 0)
             | (F_LOGGED if qm.delivery_logged else 0))
    expires = qm.expires_at if qm.expires_at is not None else math.nan
    return _rec.pack(len(payload), qm.seq, expires, qm.priority, flags, qm.msg_id,
                     qm.returns) + payload


class VariableQueue:
    """A FIFO of ready messages with a RAM head (alpha) and an on-disk tail (delta).

    Args:
        path: the paging file (created on first page-out, truncated when drained).
        ram_messages, ram_bytes: q4's budget (messages, body bytes).
        read_batch: messages read back per refill.
        store: the message store gamma bodies are read back from.
        errors: told when the paging file cannot be written (disk full): the unwritten
            records then stay in RAM, in order, and are retried.
        beta_messages: q3's budget (index entries kept in RAM for beta messages); 0: no
            beta, messages past q4's budget go straight to delta.
    """

    def __init__(self, path: Path, ram_messages: int = RAM_MESSAGES, ram_bytes: int = RAM_BYTES,
                 read_batch: int = READ_BATCH, store: MessageStore | None = None,
                 errors: WriteErrors | None = None, beta_messages: int = BETA_MESSAGES) -> None:
        self.path = Path(path)
        self.ram_messages = self._base_ram_messages = ram_messages
        self.ram_bytes = ram_bytes
        self.read_batch = read_batch
        self.store = store  # where gamma messages' bodies are read back from
        self.errors = errors
        self.beta_messages = beta_messages
        self.q4: deque[QueuedMessage] = deque()
        self.q4_bytes = 0
        self.q3 = BetaQueue(self.path.with_suffix(".beta"), errors)
        self.q3_count = 0  # len(q3), kept as an int for the hot path
        # highest seq ever taken from the head: a requeue brings back nothing newer, so
        # only messages newer than this may leave q4 for q3 or delta (order)
        self.max_out_seq = 0
        self._pressure = False
        self.gamma_count = 0  # q4 entries whose body is only on disk
        self.gamma_bytes = 0
        self.delta_count = 0
        self.delta_bytes = 0  # body bytes of paged messages
        self.delta_transient = 0  # of which not in the queue index (RabbitMQ's delta tuple)
        self._fd = -1
        self._write_buf = bytearray()
        self._read_pos = 0  # file offset of the next byte to read
        self._read_buf = b""  # bytes read but not yet decoded, from _read_off on
        self._read_off = 0
        self._file_size = 0
        self.paged_out = 0  # messages ever paged out (stats)
        # recovery: live records still in the queue index journal, delta's head
        self.run: JournalRun | None = None

    # ---- BackingQueue interface ----------------------------------------------------------

    @property
    def bytes(self) -> int:
        return self.q4_bytes + self.gamma_bytes + self.q3.bytes + self.delta_bytes

    def __len__(self) -> int:
        return len(self.q4) + self.q3_count + self.delta_count

    def __iter__(self) -> Iterator[QueuedMessage]:
        return iter(list(self.q4))  # the RAM head only: iterating delta would read it all

    def append(self, qm: QueuedMessage) -> None:
        size = len(qm.message.body)
        if self.delta_count or self.q3_count or len(self.q4) >= self.ram_messages or (
                self.q4_bytes + size > self.ram_bytes and self.q4):
            if (not self.delta_count and self.q3_count < self.beta_messages
                    and self.q3.file_size < BETA_FILE_LIMIT):
                self.q3.append(qm)  # alpha -> beta
                self.q3_count += 1
            else:
                self._page_out(qm)  # alpha -> delta
            return
        self.q4.append(qm)
        self.q4_bytes += size

    def popleft(self) -> QueuedMessage | None:
        if len(self.q4) <= self.ram_messages // 4 and (self.q3_count or self.delta_count):
            self._refill()
        if not self.q4:
            return None
        if self.gamma_count and self.q4[0].message is None:
            self._load_ahead()
        qm = self.q4.popleft()
        self.q4_bytes -= len(qm.message.body)
        if qm.seq > self.max_out_seq:
            self.max_out_seq = qm.seq
        return qm

    def _refill(self) -> None:
        """Read a batch into q4 from what follows it: q3 (beta -> alpha) first, else delta
        (delta -> alpha)."""
        if self.q3_count:
            for qm in self.q3.take(self.read_batch):
                self.q4.append(qm)
                self.q4_bytes += qm.size
            self.q3_count = len(self.q3)
        elif self.delta_count:
            self._page_in()

    def peek(self) -> QueuedMessage | None:
        if not self.q4 and (self.q3_count or self.delta_count):
            self._refill()
        if not self.q4:
            return None
        if self.gamma_count and self.q4[0].message is None:
            self._load_ahead()
        return self.q4[0]

    def head_seq(self) -> int | None:
        """The seq of the next message to deliver, known without reading the disk (None:
        only delta holds messages, or none)."""
        if self.q4:
            return self.q4[0].seq
        return self.q3.head_seq if self.q3_count else None

    def _load_ahead(self) -> None:
        """gamma -> alpha: read the bodies of up to ``read_batch`` head entries back."""
        assert self.store is not None
        loaded = 0
        for qm in self.q4:
            if loaded >= self.read_batch or not self.gamma_count:
                break
            if qm.message is None:
                qm.message = self.store.read(qm.msg_id)
                self.gamma_count -= 1
                self.gamma_bytes -= qm.size
                self.q4_bytes += qm.size
                loaded += 1

    def _drop_bodies(self) -> int:
        """alpha -> gamma: forget the RAM bodies of messages that are safe on disk (in the
        message store and the queue index); returns how many."""
        if self.store is None:
            return 0
        dropped = 0
        for qm in self.q4:
            message = qm.message
            if message is not None and qm.indexed and qm.msg_id:
                qm.size = len(message.body)
                qm.message = None  # type: ignore[assignment]
                self.q4_bytes -= qm.size
                self.gamma_bytes += qm.size
                dropped += 1
        self.gamma_count += dropped
        return dropped

    def requeue(self, qms: list[QueuedMessage]) -> None:
        """Merge ``qms`` (sorted by seq, all taken from the head: older than q3 and delta)
        back into q4 by sequence."""
        if not qms:
            return
        self.q4_bytes += sum(len(qm.message.body) for qm in qms)
        if not self.q4 or qms[-1].seq < self.q4[0].seq:
            self.q4.extendleft(reversed(qms))
        else:
            self.q4 = deque(heapq.merge(qms, self.q4))

    def clear(self) -> Iterable[QueuedMessage]:
        """Empty the queue; yields every message, head first, for the caller to forget
        (consume it at once). Beta and delta messages come without their bodies
        (``message`` None): forgetting needs only their index entries, so purging a deep
        backlog reads no bodies and holds one batch in RAM at a time."""
        head = list(self.q4)
        self.q4.clear()
        self.q4_bytes = self.gamma_bytes = self.gamma_count = 0
        return self._cleared(head)

    def _cleared(self, head: list[QueuedMessage]) -> Iterator[QueuedMessage]:
        yield from head
        while self.q3_count:
            batch = self.q3.take(self.read_batch, bodies=False)
            self.q3_count = len(self.q3)
            yield from batch
        while self.delta_count:
            self._page_in(bodies=False)
            batch = list(self.q4)
            self.q4.clear()
            self.q4_bytes = 0
            yield from batch
        self._reset_file()

    # ---- paging --------------------------------------------------------------------------

    def _page_out(self, qm: QueuedMessage) -> None:
        if self._fd < 0:
            try:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            except OSError as exc:  # disk full: delta is empty, so RAM keeps the order
                if self.errors is not None:
                    self.errors.update(self, exc)
                self.q4.append(qm)
                self.q4_bytes += len(qm.message.body)
                return
            self._read_pos = self._file_size = 0
        self._write_buf += _encode(qm)
        self.delta_count += 1
        if not qm.indexed:
            self.delta_transient += 1
        self.delta_bytes += len(qm.message.body)
        self.paged_out += 1
        if len(self._write_buf) >= WRITE_CHUNK:
            self.flush()

    def flush(self) -> OSError | None:
        """Write paged-out records to the paging file. Returns the error when not all could
        be written (disk full): the rest stays in RAM, still in order, for a retry."""
        if not self._write_buf or self._fd < 0:
            if self.errors is not None:
                self.errors.clear(self)
            return None
        before = len(self._write_buf)
        error = write_buffer(self._fd, self._write_buf, self._file_size)
        self._file_size += before - len(self._write_buf)
        if self.errors is not None:
            self.errors.update(self, error)
        return error

    def attach_run(self, run: JournalRun) -> None:
        """Recovery: ``run`` (the live records of the queue index journal) becomes delta's
        head, behind what q4 holds (q3 and the paging file must be empty), and q4 is filled
        from it up to its budget."""
        assert not self.q3_count and not self.delta_count
        if not run.count:
            run.close()
            return
        self.run = run
        self.delta_count = run.count
        self.delta_bytes = run.bytes
        while (self.run is not None and len(self.q4) < self.ram_messages
               and self.q4_bytes < self.ram_bytes):
            # the head into alpha now, the rest when needed
            self._run_in(True, min(self.read_batch, self.ram_messages - len(self.q4)))

    def _run_in(self, bodies: bool, n: int = 0) -> None:
        """Read up to ``n`` (default ``read_batch``) messages from the recovered journal
        run into q4."""
        run = self.run
        assert run is not None
        count, nbytes = run.count, run.bytes
        for qm in run.take(n or self.read_batch, bodies):
            self.q4.append(qm)
            if bodies:
                self.q4_bytes += len(qm.message.body)
        self.delta_count -= count - run.count
        self.delta_bytes -= nbytes - run.bytes
        if not run.count:
            self._drop_run()
            if not self.delta_count:
                self._reset_file()

    def _drop_run(self) -> None:
        """Close the recovered journal run (read to its end, or the queue emptied/closed)."""
        if self.run is not None:
            self.run.close()
            self.run = None

    def _page_in(self, bodies: bool = True) -> None:
        """Read up to ``read_batch`` messages from delta into q4 (``bodies`` False: index
        entries only, ``message`` None, for :meth:`clear`)."""
        if self.run is not None:
            self._run_in(bodies)
            return
        self.flush()
        loaded = 0
        buf, off = self._read_buf, self._read_off
        while loaded < self.read_batch and self.delta_count:
            have = len(buf) - off
            if have < _rec.size or have < _rec.size + _rec.unpack_from(buf, off)[0]:
                chunk = os.pread(self._fd, READ_CHUNK, self._read_pos)
                if not chunk and self._write_buf:
                    # the file is read to its end and the rest could not be written: take
                    # it from RAM (the file keeps a hole there, never read)
                    chunk = bytes(self._write_buf)
                    self._write_buf.clear()
                    self._file_size += len(chunk)
                    if self.errors is not None:
                        self.errors.clear(self)
                if not chunk:
                    raise OSError(f"paging file {self.path} ended with "
                                  f"{self.delta_count} messages unread")
                self._read_pos += len(chunk)
                buf, off = buf[off:] + chunk, 0
                continue
            length, seq, expires, priority, flags, msg_id, returns = _rec.unpack_from(buf, off)
            start = off + _rec.size
            off = start + length
            if bodies:
                message = decode_payload(buf[start:off])
                message.store_id = msg_id
                size = len(message.body)
            else:
                message, size = None, 0
            qm = QueuedMessage(seq, message, bool(flags & F_REDELIVERED),  # type: ignore[arg-type]
                               None if math.isnan(expires) else expires, priority)
            qm.msg_id = msg_id
            qm.indexed = bool(flags & F_INDEXED)
            qm.delivery_logged = bool(flags & F_LOGGED)
            qm.returns = returns
            self.q4.append(qm)
            self.q4_bytes += size
            self.delta_count -= 1
            self.delta_bytes -= size
            if not flags & F_INDEXED:
                self.delta_transient -= 1
            loaded += 1
        self._read_buf, self._read_off = buf, off
        if not self.delta_count:
            self._reset_file()

    def _reset_file(self) -> None:
        """Delta is empty: drop the paging file's contents."""
        self._drop_run()
        self.delta_count = self.delta_transient = 0
        self.delta_bytes = 0
        self._write_buf.clear()
        if self.errors is not None:
            self.errors.clear(self)
        self._read_buf = b""
        self._read_off = self._read_pos = self._file_size = 0
        if self._fd >= 0:
            os.ftruncate(self._fd, 0)

    def set_memory_pressure(self, on: bool) -> None:
        """Memory past the paging threshold: a small RAM budget, and q4's alpha tail beyond
        it moved out now: to delta when nothing follows q4 (alpha -> delta), else to the
        head of q3 (alpha -> beta; order forbids putting it after delta); then the bodies
        of q4's messages that are safe in the message store are dropped (alpha -> gamma)."""
        self._pressure = on
        self.ram_messages = PRESSURE_RAM_MESSAGES if on else self._base_ram_messages
        if on:
            self._shrink(self.ram_messages, to_beta=False)
            self._drop_bodies()

    def set_budget(self, ram_messages: int, ram_bytes: int, beta_messages: int) -> None:
        """A new share of the broker-wide budget (:class:`queue_store.ram_budget.RamBudget`):
        q4's and q3's budgets; when q4 holds more than twice its new budget, its alpha tail
        moves to q3 (or delta) now. A queue configured delta-only (both budgets 0, e.g. a
        message-group spill queue) keeps its configuration."""
        if not self._base_ram_messages and not self.beta_messages:
            return
        self._base_ram_messages = ram_messages
        self.ram_bytes = ram_bytes
        self.beta_messages = beta_messages
        if not self._pressure:
            self.ram_messages = ram_messages
        if len(self.q4) > 2 * self.ram_messages:
            self._shrink(self.ram_messages, to_beta=True)

    def _shrink(self, keep: int, to_beta: bool) -> None:
        """Move q4's alpha tail beyond ``keep`` messages out: only messages newer than any
        taken from the head (a requeue brings those back into q4), to q3's head when
        something follows q4 or ``to_beta`` and q3 has room, else to delta."""
        tail = []
        while (len(self.q4) > keep and self.q4[-1].message is not None
               and self.q4[-1].seq > self.max_out_seq):
            tail.append(self.q4.pop())
        tail.reverse()
        self.q4_bytes -= sum(len(qm.message.body) for qm in tail)
        if not self.delta_count and not (
                self.q3_count or (to_beta and self.q3_count + len(tail) <= self.beta_messages)):
            for qm in tail:
                self._page_out(qm)
            self.flush()
        else:
            self.q3.prepend(tail)
            self.q3_count = len(self.q3)

    def state_counts(self) -> dict[str, int]:
        """Messages and body bytes in each state (RabbitMQ's alpha, beta, gamma, delta)."""
        return {"alpha": len(self.q4) - self.gamma_count, "beta": self.q3_count,
                "gamma": self.gamma_count, "delta": self.delta_count,
                "alpha_bytes": self.q4_bytes, "beta_bytes": self.q3.bytes,
                "gamma_bytes": self.gamma_bytes, "delta_bytes": self.delta_bytes,
                "q4": len(self.q4), "delta_transient": self.delta_transient,
                "target_ram_count": self.ram_messages}

    def close(self, delete: bool = True) -> None:
        """Release the paging file (deleted by default: its contents are transient)."""
        if self.errors is not None:
            self.errors.clear(self)
        self.q3.close(delete)
        self._drop_run()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if delete:
            self.path.unlink(missing_ok=True)
