"""Stream queues (``x-queue-type: stream``) over AMQP 0-9-1, as RabbitMQ defines them.

Theory of operation
-------------------
A stream is an append-only log (:class:`~queue_store.stream_log.StreamLog`): publishing
appends (the publisher's confirm follows the write of the chunk, as RabbitMQ's: no fsync
waited for; the log is fsynced in the broker's group commit, every tick at the latest), and
consuming never removes anything. Each consumer has its own **cursor**, the offset of the
next message it gets, set by the ``x-stream-offset`` consume argument: ``first``, ``last``
(the first offset of the newest chunk), ``next`` (default: only what comes after), a
number, a timestamp (seconds), or an interval (``30m``, ``1h``, ``7D``: that long ago).
Consumers must use manual acknowledgement and a prefetch count; an ack only frees a prefetch
slot (credit), so several consumers read the same messages independently. Each delivery
carries the ``x-stream-offset`` header (long); with the amqpq consume argument
``x-stream-timestamp-header: true`` also ``x-stream-timestamp`` (ms, the chunk's append
time). ``x-stream-filter`` (a value or a list) with ``x-stream-match-unfiltered`` delivers
only messages whose ``x-stream-filter-value`` header matches (exactly: RabbitMQ's Bloom
filter may let extra messages through; amqpq lets none through and skips none that match).

Readers at the head of the log are served from a tail cache of recent messages (no disk
read); readers behind read whole chunks from the segment files, ``READ_BYTES`` at a time, in
a worker thread (the event loop never waits for the disk), the next read starting while
``READ_AHEAD`` messages are still buffered. A consumer on an AMQP channel gets up to
``DISPATCH_BATCH`` deliveries at a time in one call (``Channel.deliver_many``), built from
the stored record bytes (no Message per delivery; the ``x-stream-offset`` header spliced
into parts cached per properties shape) and written to its socket at once.
Retention (``x-max-length-bytes``, ``x-max-age``, policy keys ``max-length-bytes``,
``max-age``) drops whole oldest segments, checked when a segment is full and every tick.

What RabbitMQ refuses is refused with its codes and texts: Basic.Get and Queue.Purge (540,
connection), automatic acknowledgement (540), consumers without a prefetch count (406),
Basic.Nack/Reject (540). A bad ``x-stream-offset`` closes the channel with 406 (RabbitMQ
3.10.8 fails with 541 INTERNAL_ERROR on the connection: a deliberate difference).

Source: https://www.rabbitmq.com/docs/streams (usage with AMQP 0-9-1);
RabbitMQ ``rabbit_stream_queue``; checked against RabbitMQ 3.10.8.
"""

from __future__ import annotations

import logging
import re
import shutil
import struct
import tempfile
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from functools import partial
from operator import itemgetter
from pathlib import Path
from typing import Any

from amqp_common.errors import NotImplemented_, PreconditionFailed, rs
from amqp_common.properties import Long, Timestamp, string_header, with_headers
from queue_store.backing import BackingQueue, MemoryBackingQueue, QueuedMessage
from queue_store.consumer import Consumer
from queue_store.durability import run_inline
from queue_store.message import FLAG_CONTENT_ENCODING, FLAG_CONTENT_TYPE, FLAG_HEADERS, Message
from queue_store.msg_store import decode_payload
from queue_store.outcomes import ACCEPTED_UNWRITTEN, PublishContext, Settlement
from queue_store.queue import Delivery, Queue
from queue_store.storage import name_id
from queue_store.stream_log import MAX_SEGMENT_BYTES, StreamLog

__all__ = ["StreamDelivery", "StreamQueue", "check_stream_consume", "parse_max_age",
           "record_head", "segment_bytes", "stamped_properties"]

log = logging.getLogger("amqpq.stream")

TAIL_CACHE = 10_000  # newest messages kept decoded in RAM for readers at the head
READ_BYTES = 256 * 1024  # bytes of chunks a reader behind reads at a time
READ_AHEAD = 500  # messages left in a reader's buffer when the next read starts
#: deliveries per consumer per dispatch call (then the loop takes a turn); at 16 a catch-up
#: read paid a socket write and a zero-delay timer per 16 deliveries (a sixth of its CPU);
#: 256 batched (Channel.deliver_many) take about as long as 128 one by one did (~1.3 ms)
DISPATCH_BATCH = 256
_CONSUMER = itemgetter(2)  # of a Delivery
_AGE = re.compile(r"^(\d+)([YMDhms])$")
_AGE_MS = {"Y": 365 * 86_400_000, "M": 30 * 86_400_000, "D": 86_400_000, "h": 3_600_000,
           "m": 60_000, "s": 1_000}


def parse_max_age(value: Any) -> int | None:
    """``x-max-age`` / ``max-age`` (``7D``, ``12h``, ``30m``, ``10s``, ``1Y``, ``2M``) in ms;
    None when it is not one."""
    text = value.decode() if isinstance(value, bytes) else value
    m = _AGE.match(text) if isinstance(text, str) else None
    return int(m.group(1)) * _AGE_MS[m.group(2)] if m else None


def segment_bytes(value: Any) -> int:
    """``x-stream-max-segment-size-bytes`` (bytes; the default when absent or not > 0)."""
    return value if isinstance(value, int) and value > 0 else MAX_SEGMENT_BYTES


class _Reader:
    """A consumer's cursor and filter."""

    __slots__ = ("offset", "filters", "unfiltered", "timestamps", "buffered", "reading",
                 "gone")

    def __init__(self, offset: int, filters: set[bytes] | None, unfiltered: bool,
                 timestamps: bool) -> None:
        self.offset = offset
        self.filters = filters
        self.unfiltered = unfiltered
        self.timestamps = timestamps
        self.buffered: deque[tuple[int, int, bytes]] = deque()  # read from disk, not sent
        self.reading = False  # a read of old chunks is under way off the event loop
        self.gone = False  # its consumer was cancelled


def check_stream_consume(queue: Queue, no_ack: bool, prefetch: int, global_prefetch: int,
                         arguments: dict[str, Any]) -> None:
    """Basic.Consume on a stream, before Consume-Ok (RabbitMQ's checks and texts).

    Raises:
        NotImplemented_ (540): automatic acknowledgement.
        PreconditionFailed (406): no prefetch count; a bad ``x-stream-offset`` or
            ``x-stream-filter``.
    """
    what = rs("queue", queue.name, queue.vhost_name)
    if no_ack:
        raise NotImplemented_(f"automatic acknowledgement not supported by stream queues {what}")
    if not prefetch:
        raise PreconditionFailed(f"consumer prefetch count is not set for '{what}'")
    _start_offset(arguments.get("x-stream-offset", "next"), None, what)
    _filters(arguments, what)


def _start_offset(spec: Any, log: StreamLog | None, what: str, now_ms: int = 0) -> int:
    """The offset ``x-stream-offset`` names (``log`` None: only check it; ``now_ms``: wall
    clock ms, the reference of an interval such as ``"1h"``)."""
    if isinstance(spec, bytes):
        spec = spec.decode("utf-8", "replace")
    if isinstance(spec, bool):
        raise PreconditionFailed(f"invalid x-stream-offset {spec!r} for {what}")
    if isinstance(spec, Timestamp):  # an AMQP timestamp past datetime's range
        return log.offset_at(min(int(spec) * 1000, 2**63 - 1)) if log is not None else 0
    if isinstance(spec, int):
        if spec < 0:
            raise PreconditionFailed(f"invalid x-stream-offset {spec} for {what}")
        if log is None:
            return 0
        return min(max(spec, log.first_offset), log.next_offset)
    if hasattr(spec, "timestamp"):  # an AMQP timestamp: a datetime
        return log.offset_at(int(spec.timestamp() * 1000)) if log is not None else 0
    if isinstance(spec, str):
        if spec in ("first", "last", "next"):
            if log is None:
                return 0
            return {"first": log.first_offset, "last": log.last_chunk_offset(),
                    "next": log.next_offset}[spec]
        age = parse_max_age(spec)
        if age is not None:
            return log.offset_at(now_ms - age) if log is not None else 0
    raise PreconditionFailed(f"invalid x-stream-offset {spec!r} for {what}")


def _filters(arguments: dict[str, Any], what: str) -> set[bytes] | None:
    value = arguments.get("x-stream-filter")
    if value is None:
        return None
    values = value if isinstance(value, list) else [value]
    out = set()
    for v in values:
        if not isinstance(v, str | bytes):
            raise PreconditionFailed(f"invalid x-stream-filter {value!r} for {what}")
        out.add(v.encode() if isinstance(v, str) else v)
    return out


def record_head(raw: bytes, ex_rk: bytes) -> bytes:
    """A stream record without its body, for properties ``raw`` and exchange + routing key
    shortstrs ``ex_rk``: u16 filter value length + filter value + the message payload's
    head (:func:`~queue_store.msg_store.encode_payload`'s layout: u16 + exchange and routing
    key shortstrs, u32 + properties; the body follows)."""
    fv = b""
    if b"x-stream-filter-value" in raw:  # a byte search first: most messages have none
        try:
            value = string_header(raw, int.from_bytes(raw[:2], "big"),
                                  b"x-stream-filter-value")
        except (IndexError, KeyError, ValueError):  # not expected: checked at publish
            value = None
        if isinstance(value, str):
            fv = value.encode("utf-8", "surrogateescape")
    return b"".join((_U16.pack(len(fv)), fv, _U16.pack(len(ex_rk)), ex_rk,
                     _U32.pack(len(raw)), raw))


def _machine_wall_ms() -> int:
    return time.time_ns() // 1_000_000


_OFFSET_KEY = b"\x0fx-stream-offset" + b"l"  # shortstr name + Long's type tag
_TIMESTAMP_KEY = b"\x12x-stream-timestamp" + b"l"
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")


def stamped_properties(raw: bytes, offset: int, timestamp_ms: int | None) -> bytes:
    """``raw`` (content properties, checked at publish) with the headers ``x-stream-offset``
    (Long ``offset``) and, when ``timestamp_ms`` is not None, ``x-stream-timestamp`` (Long
    ms) set: the same bytes as :func:`~amqp_common.properties.with_headers` gives (other
    properties and header entries copied byte for byte, the new entries last), spliced in
    without decoding the properties. A message whose headers already mention an
    ``x-stream-`` name takes ``with_headers`` (the entry is replaced there).

    Raises:
        ValueError: malformed properties (only on the ``with_headers`` path).
    """
    parts = _splice_parts(raw, timestamp_ms is not None)
    if parts is not None:
        if timestamp_ms is None:
            return b"".join((parts[0], _I64.pack(offset), parts[1]))
        return b"".join((parts[0], _I64.pack(offset), _TIMESTAMP_KEY, _I64.pack(timestamp_ms),
                         parts[1]))
    headers: dict[str, Any] = {"x-stream-offset": Long(offset)}
    if timestamp_ms is not None:
        headers["x-stream-timestamp"] = Long(timestamp_ms)
    return with_headers(raw, headers)


def _splice_parts(raw: bytes, timestamps: bool) -> tuple[bytes, bytes] | None:
    """``raw`` with the stamped headers' room made: ``(before, after)`` such that the
    stamped properties are ``before + offset (8 bytes) + after`` (with ``timestamps``,
    ``after`` starts where the ``x-stream-timestamp`` entry goes:
    :func:`stamped_properties`); None when the splice does not apply (``with_headers``)."""
    extra = len(_OFFSET_KEY) + 8 + (len(_TIMESTAMP_KEY) + 8 if timestamps else 0)
    flags = raw[0] << 8 | raw[1] if len(raw) > 1 else 0
    if flags & 1:  # more than one property-flags word (Basic has 14 properties)
        return None
    pos = 2
    if flags & FLAG_CONTENT_TYPE:
        pos += 1 + raw[pos]
    if flags & FLAG_CONTENT_ENCODING:
        pos += 1 + raw[pos]
    if not flags & FLAG_HEADERS:
        return (b"".join(((flags | FLAG_HEADERS).to_bytes(2, "big"), raw[2:pos],
                          _U32.pack(extra), _OFFSET_KEY)), raw[pos:])
    (size,) = _U32.unpack_from(raw, pos)
    end = pos + 4 + size
    if b"x-stream-" in raw[pos + 4:end]:
        return None
    return (b"".join((raw[:pos], _U32.pack(size + extra), raw[pos + 4:end], _OFFSET_KEY)),
            raw[end:])


class StreamDelivery(tuple):  # type: ignore[type-arg]
    """A delivered stream record as its channel keeps it until the ack: ``(offset,
    timestamp ms, record)`` (a tuple: made by the thousand), with what a channel reads of a
    :class:`~queue_store.backing.QueuedMessage` (``redelivered``, ``message``)."""

    __slots__ = ()
    redelivered = False

    @property
    def message(self) -> Message:
        """The message as published (decoded on demand; without the stamped headers)."""
        record: bytes = self[2]
        return decode_payload(record[2 + (record[0] << 8 | record[1]):])


class StreamQueue(Queue):
    """A stream queue (see the module docstring); takes :class:`~queue_store.queue.Queue`'s
    arguments. Its log lives under the vhost's ``streams/`` folder (a temporary folder
    when the broker keeps nothing on disk)."""

    uses_index = False

    def __init__(self, name: str, vhost_name: str, *, stream_log: StreamLog | None = None,
                 **kwargs: Any) -> None:
        super().__init__(name, vhost_name, **kwargs)
        segment = self.arguments.get("x-stream-max-segment-size-bytes")
        self._owned: Path | None = None
        if stream_log is not None:  # a replica's (amqp_server.cluster.stream_group)
            self.log = stream_log
        elif self.storage is not None:
            self.log = StreamLog(self.storage.directory / "streams" / name_id(name),
                                 segment_bytes(segment))
        else:
            self._owned = Path(tempfile.mkdtemp(prefix="amqpq-stream-"))
            self.log = StreamLog(self._owned, segment_bytes(segment))
        self._readers: dict[Consumer, _Reader] = {}
        self._tail: deque[tuple[int, int, bytes]] = deque(maxlen=TAIL_CACHE)
        self._more_pending = False  # a zero-delay dispatch is scheduled
        #: the last delivery's exchange + routing key shortstrs and their decoded names
        self._names: tuple[bytes, str, str] = (b"", "", "")
        #: the last delivery's record head (up to its body), timestamps wanted, exchange +
        #: routing key, raw properties, their splice parts, the head's length
        self._stamp: tuple[bytes, bool, bytes, bytes, tuple[bytes, bytes] | None, int] = (
            b"", False, b"", b"", None, 0)
        self._chunk_ms = 0  # wall-clock ms of the chunk being built (its first append)
        #: the last publish's properties, exchange + routing key, and its record's head
        self._head: tuple[bytes, bytes, bytes] = (b"", b"", record_head(b"", b""))
        #: wall-clock ms now: the vhost's timers (a queue outside any vhost: the machine's)
        self._wall_ms: Callable[[], int] = (
            self.vhost.timers.wall_ms if self.vhost is not None else _machine_wall_ms)

    def _ready_queue(self) -> BackingQueue:
        return MemoryBackingQueue()  # stays empty: nothing is ready in a stream (no paging file)

    # ---- publishing ----------------------------------------------------------------------

    def publish(self, message: Message) -> int:
        """Append ``message``; confirmed once its chunk is written at the end of the batch
        (``ACCEPTED_UNWRITTEN``: RabbitMQ's streams confirm after the write and leave the
        fsync to the operating system; amqpq fsyncs the log in the next group commit, at
        the latest on the next tick)."""
        log = self.log
        if not log.pending:  # a chunk starts: its time (each record's), the log to write
            self._chunk_ms = self._wall_ms()
            if self.storage is not None:
                self.storage.durability.index_dirty(log)  # type: ignore[arg-type]
        now_ms = self._chunk_ms
        record = self.record_of(message)
        offset = log.append(record, now_ms)
        self._tail.append((offset, now_ms, record))
        self.published += 1
        if self._readers and not self._dispatching:
            self.dispatch()
        return ACCEPTED_UNWRITTEN

    def publish_for(self, message: Message, context: PublishContext) -> int:
        """:meth:`publish` (a stream answers every publisher once the chunk is written)."""
        return self.publish(message)

    def record_of(self, message: Message) -> bytes:
        """The log record of ``message`` (:func:`record_head` + body)."""
        head = self._head
        raw, ex_rk = message.properties_raw, message.ex_rk_raw
        if head[0] != raw or head[1] != ex_rk:  # a stream's messages mostly share them
            head = self._head = (raw, ex_rk, record_head(raw, ex_rk))
        return head[2] + message.body

    def cache_tail(self, offset: int, timestamp_ms: int, record: bytes) -> None:
        """``record`` was written at ``offset`` (the next one): readers at the head take it
        from RAM (a replicated stream's log is written by its replica)."""
        tail = self._tail
        if tail and tail[-1][0] + 1 != offset:
            tail.clear()
        tail.append((offset, timestamp_ms, record))

    def forget_tail(self) -> None:
        """The log was cut or started over (a replica): the RAM tail no longer holds."""
        self._tail.clear()

    # ---- consumers -----------------------------------------------------------------------

    def add_consumer(self, consumer: Consumer) -> None:
        """Subscribe ``consumer`` at its ``x-stream-offset`` (checked by
        :func:`check_stream_consume` before Consume-Ok)."""
        what = rs("queue", self.name, self.vhost_name)
        args = consumer.arguments
        self._readers[consumer] = _Reader(
            _start_offset(args.get("x-stream-offset", "next"), self.log, what,
                          self._wall_ms()),
            _filters(args, what), bool(args.get("x-stream-match-unfiltered", False)),
            bool(args.get("x-stream-timestamp-header", False)))
        self._consumer_order.append(consumer)
        self._had_consumer = True
        self.dispatch()

    def remove_consumer(self, consumer: Consumer) -> None:
        reader = self._readers.pop(consumer, None)
        if reader is None:
            return
        reader.gone = True
        self._consumer_order.remove(consumer)

    def dispatch(self) -> None:
        """Give every consumer what its cursor and prefetch allow, at most ``DISPATCH_BATCH``
        each per call: a reader catching up with a long log takes turns with the rest of
        the event loop (the rest of its share follows from a zero-delay timer), so live
        readers and publishers are not held up behind thousands of its deliveries. A
        consumer's channel with ``deliver_many`` (the AMQP channel) gets them as one batch
        (one call, one output write); others (another worker's link) one by one."""
        if self._dispatching or self.deleted:
            return
        self._dispatching = True
        more = False
        try:
            for consumer, reader in list(self._readers.items()):
                many = getattr(consumer.channel, "deliver_many", None)
                if many is not None:
                    limit = DISPATCH_BATCH
                    if consumer.prefetch:
                        limit = min(limit, consumer.prefetch - consumer.unacked)
                    if limit <= 0:
                        continue
                    n = many(consumer, self, partial(self._take_many, reader), limit)
                    consumer.unacked += n
                    self.unacked_count += n
                    self.delivered += n
                    more = more or n == DISPATCH_BATCH
                    continue
                budget = DISPATCH_BATCH
                while consumer.can_take():
                    if not budget:
                        more = True
                        break
                    one = self._take_many(reader, 1)
                    if not one:
                        break
                    self._deliver(consumer, *one[0])
                    budget -= 1
        finally:
            self._dispatching = False
        if more and self.vhost is not None and not self._more_pending:
            self._more_pending = True
            self.vhost.timers.call_later(0.0, self._dispatch_more)

    def _dispatch_more(self) -> None:
        self._more_pending = False
        self.dispatch()

    def _next(self, reader: _Reader) -> tuple[int, int, bytes] | None:
        """The next record for ``reader`` that passes its filter (None: none yet: at the
        head, or a read of old chunks is under way)."""
        while True:
            if reader.buffered:
                item = reader.buffered.popleft()
                if len(reader.buffered) < READ_AHEAD and not reader.reading:
                    after = reader.buffered[-1] if reader.buffered else item
                    self._read_ahead(reader, after[0] + 1)
            else:
                tail = self._tail
                if reader.offset >= self.readable_end():
                    return None
                if tail and reader.offset >= tail[0][0]:
                    item = tail[reader.offset - tail[0][0]]
                else:
                    if reader.reading:
                        return None
                    if reader.offset < self.log.first_offset:  # retention passed it
                        reader.offset = self.log.first_offset
                    self._read_ahead(reader, reader.offset)
                    if reader.buffered:  # read at once (no worker threads: tests, tools)
                        continue
                    return None
            reader.offset = item[0] + 1
            if reader.filters is None or self._matches(reader, item[2]):
                return item

    def readable_end(self) -> int:
        """Consumers read offsets below this (every record appended here; a replicated
        stream: its committed ones)."""
        return self.log.next_offset

    def _read_ahead(self, reader: _Reader, offset: int) -> None:
        """Read the chunks from ``offset`` on in a worker thread (the event loop never waits
        for the disk); ``reader``'s consumer gets them when they are in."""
        tail = self._tail
        end = min(self.log.written_next, self.readable_end())
        if offset >= end or (tail and offset >= tail[0][0]):
            return  # nothing old left to read: the tail cache serves the rest
        reader.reading = True
        got: list[tuple[int, int, bytes]] = []

        def work() -> None:
            got.extend(item for item in self.log.read(offset, READ_BYTES) if item[0] < end)

        def done(error: OSError | None) -> None:
            reader.reading = False
            if error is not None:
                log.warning("%s: reading offset %d failed (retried): %s",
                            rs("queue", self.name, self.vhost_name), offset, error)
            if reader.gone or self.deleted:
                return
            expected = reader.buffered[-1][0] + 1 if reader.buffered else reader.offset
            if got and got[0][0] < expected:  # the read began in a chunk partly taken
                got[:] = [item for item in got if item[0] >= expected]
            reader.buffered.extend(got)
            if not self._dispatching:
                self.dispatch()

        runner = self.storage.durability.runner if self.storage is not None else run_inline
        runner(work, done)

    @staticmethod
    def _matches(reader: _Reader, record: bytes) -> bool:
        n = int.from_bytes(record[:2], "big")
        if not n:
            return reader.unfiltered
        return record[2:2 + n] in reader.filters  # type: ignore[operator]

    def _take_many(self, reader: _Reader, k: int
                   ) -> list[tuple[StreamDelivery, bytes, bytes, bytes]]:
        """The next ``k`` deliveries for ``reader`` at most (fewer: no more yet), each
        ``(delivery, exchange and routing key shortstrs, properties stamped with the offset
        (and timestamp), body)``. A record's payload (u16 + exchange and routing key
        shortstrs, u32 + properties, body) is read in place: no Message is decoded only to
        be re-made; records already read ahead are taken without :meth:`_next`'s checks
        (the next read ahead, if due, starts after the batch)."""
        out: list[tuple[StreamDelivery, bytes, bytes, bytes]] = []
        buffered = reader.buffered
        timestamps = reader.timestamps
        stamp = self._stamp
        pack = _I64.pack
        last = None  # the last record taken from the buffer here
        for _ in range(k):
            if buffered and reader.filters is None:
                item = last = buffered.popleft()
                reader.offset = item[0] + 1
            else:
                item = self._next(reader)
                if item is None:
                    break
            record = item[2]
            head = stamp[0]
            if stamp[1] is timestamps and head and record.startswith(head):
                body = record[stamp[5]:]  # the last record's head: messages mostly share it
            else:
                pos = 2 + (record[0] << 8 | record[1])  # past the filter value
                n = record[pos] << 8 | record[pos + 1]
                ex_rk = record[pos + 2:pos + 2 + n]
                pos += 2 + n
                (plen,) = _U32.unpack_from(record, pos)
                pos += 4
                end = pos + plen
                raw = record[pos:end]
                stamp = self._stamp = (record[:end], timestamps, ex_rk, raw,
                                       _splice_parts(raw, timestamps), end)
                body = record[end:]
            ex_rk, parts = stamp[2], stamp[4]
            if parts is None:
                props = stamped_properties(stamp[3], item[0], item[1] if timestamps else None)
            elif timestamps:
                props = b"".join((parts[0], pack(item[0]), _TIMESTAMP_KEY, pack(item[1]),
                                  parts[1]))
            else:
                props = b"".join((parts[0], pack(item[0]), parts[1]))
            out.append((StreamDelivery(item), ex_rk, props, body))
        if last is not None and len(buffered) < READ_AHEAD and not reader.reading:
            self._read_ahead(reader, (buffered[-1] if buffered else last)[0] + 1)
        return out

    def _deliver(self, consumer: Consumer, delivery: StreamDelivery, ex_rk: bytes,
                 props: bytes, body: bytes) -> None:
        """One delivery (as :meth:`_take_many` gives it) to a channel without
        ``deliver_many``."""
        names = self._names
        if names[0] != ex_rk:  # a stream's messages mostly share exchange and routing key
            ex_len = ex_rk[0]
            names = self._names = (ex_rk, ex_rk[1:1 + ex_len].decode("utf-8"),
                                   ex_rk[2 + ex_len:].decode("utf-8"))
        stamped = Message(names[1], names[2], ex_rk, props, body)
        consumer.unacked += 1
        self.unacked_count += 1
        self.delivered += 1
        consumer.channel.deliver(consumer, QueuedMessage(delivery[0], stamped), self)

    def settle(self, deliveries: Sequence[Delivery], outcome: Settlement) -> None:
        """An ack (or a return when the channel closes) only frees prefetch credit: stream
        messages stay."""
        self.unacked_count -= len(deliveries)
        if outcome == Settlement.ACK:
            self.counters.acked += len(deliveries)
        else:
            self.counters.requeued += len(deliveries)
        for consumer, n in Counter(map(_CONSUMER, deliveries)).items():  # counted in C
            if consumer is not None:
                consumer.unacked -= n
        self.dispatch()

    # ---- refused -------------------------------------------------------------------------

    def get(self, no_ack: bool = False) -> QueuedMessage | None:
        """Raises NotImplemented_ (540): RabbitMQ's streams have no Basic.Get."""
        raise NotImplemented_(f"basic.get not supported by stream queues "
                              f"{rs('queue', self.name, self.vhost_name)}")

    def purge(self) -> int:
        """Raises NotImplemented_ (540): streams are not purged (retention removes data)."""
        raise NotImplemented_(f"queue.purge not supported by stream queues "
                              f"{rs('queue', self.name, self.vhost_name)}")

    # ---- figures and life cycle ----------------------------------------------------------

    @property
    def message_count(self) -> int:
        """0: a stream has no *ready* messages (RabbitMQ's Declare-Ok and Delete-Ok say 0);
        :attr:`log_count` is what it holds."""
        return 0

    @property
    def log_count(self) -> int:
        """Messages in the log (first to last offset)."""
        return self.log.next_offset - self.log.first_offset

    def tick(self) -> None:
        """Once a second (the broker's tick): retention, and readers that caught up with
        what was written since are served."""
        s = self.settings
        age = parse_max_age(s.max_age) if s.max_age else None
        if s.max_length_bytes is not None or age is not None:
            self.log.apply_retention(s.max_length_bytes, age, self._wall_ms())
        if self._readers:
            self.dispatch()

    def mark_deleted(self) -> list[Consumer]:
        consumers = list(self._readers)
        self._readers.clear()
        self._consumer_order.clear()
        self.deleted = True
        if self.storage is not None:
            self.storage.durability.forget_index(self.log)  # type: ignore[arg-type]
        self.log.close(delete=True)
        if self._owned is not None:
            shutil.rmtree(self._owned, ignore_errors=True)
        return consumers

    def stream_fields(self) -> dict[str, Any]:
        """The HTTP API's stream figures: ``messages`` (and ``messages_ready``) in the log,
        ``message_bytes`` of its segments, and amqpq's ``first_offset``, ``last_offset``
        (null when empty) and ``segments``."""
        log = self.log
        empty = log.next_offset == log.first_offset
        return {"messages": self.log_count, "messages_ready": self.log_count,
                "message_bytes": log.bytes,
                "first_offset": None if empty else log.first_offset,
                "last_offset": None if empty else log.next_offset - 1,
                "segments": len(log.segments)}
