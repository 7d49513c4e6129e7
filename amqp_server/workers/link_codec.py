"""The wire format of the worker links and the node links (sans-IO): records in, bytes out,
and back.

A link carries records between two worker processes of one broker, or a worker and its
supervisor (Unix sockets, :mod:`amqp_server.workers.links`), or two cluster nodes (TCP,
optionally TLS, :mod:`amqp_server.cluster.node_links`). Every record is
``length:u32 kind:u8 body`` (big-endian; ``length`` counts ``kind`` and ``body``). A sender appends records to an :class:`Outbox` during one
event-loop turn and writes ``Outbox.take()`` once (one syscall per turn and peer, however
many messages); a receiver feeds whatever bytes arrived to a :class:`RecordReader` and gets
whole records back (a link's first records, its hello, may be held to 4 KiB each:
``guarded``).

The hot records are packed by hand so that a message's AMQP property bytes and body cross
the link as they came from the client, never decoded or re-encoded:

=========  ===============================================================================
PUBLISH    pub_id:u32 want:u8 qkey_len:u16 exrk_len:u16 props_len:u32 body_len:u32,
           then qkey, exrk (Basic.Deliver's exchange + routing key, AMQP shortstrs), props,
           body. ``want`` 1: answer with a RESULT (publisher confirms, transactions).
DELIVER    cid:u32 did:u32 redelivered:u8 exrk_len:u16 props_len:u32 body_len:u32 + data;
           ``did`` 0: a no-ack delivery (nothing to settle).
SETTLE     outcome:u8 count:u32, then ``count`` did:u32 (Settlement: ack, requeue, reject).
CREDIT     cid:u32 n:u32: the consumer may take ``n`` more deliveries.
RESULTS    count:u32, then ``count`` (pub_id:u32 result:u8) (PublishResult bits).
REPL       a quorum queue replica's fetch, entries, divergence answer or snapshot
           (:mod:`amqp_server.cluster.replica_records`; cluster nodes only).
CONTROL    a tuple (the hello, consume, cancel, calls such as get and purge and their
           answers, topology records, stats, placement...) as tagged
           JSON (:mod:`amqp_server.workers.link_values`): rare records, never per message;
           reading one runs no code of the sender's choosing.
=========  ===============================================================================

Measured cost (``python -m benchmarks.link_micro``, this machine): a 200-byte publish costs
0.28 µs to encode and 0.95 µs to decode into a message; a delivery the same; acks by number
0.03 µs (batched). The whole one-worker path is ~4 µs per message. Shapes are tested in
``tests/test_worker_link.py``.

Source: RabbitMQ's inter-node distribution carries messages as opaque binaries between
``rabbit_channel`` and ``rabbit_amqqueue_process`` (``credit_flow`` for back-pressure).
"""

from __future__ import annotations

import functools
import struct
from typing import Any

from amqp_server.workers import link_values
from queue_store.message import Message

PUBLISH, DELIVER, SETTLE, CREDIT, RESULTS, REPL, CONTROL = 1, 2, 3, 4, 5, 6, 9

_HEAD = struct.Struct(">IB")
_PUBLISH = struct.Struct(">IBHHII")
_unpack_publish = _PUBLISH.unpack_from
_DELIVER = struct.Struct(">IIBHII")
_SETTLE = struct.Struct(">BI")
_CREDIT = struct.Struct(">II")
_COUNT = struct.Struct(">I")
_RESULT = struct.Struct(">IB")
MAX_RECORD = 1 << 30  # bytes: a longer length means a corrupt stream


class LinkError(Exception):
    """The byte stream of a link is not a sequence of records (the link must be closed)."""


class Outbox:
    """Records to one peer, collected during an event-loop turn.

    ``take()`` returns every byte appended since the last take (b"" when none) and
    clears the box.
    """

    __slots__ = ("_parts", "size")

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self.size = 0  # bytes waiting

    def __len__(self) -> int:
        return len(self._parts)

    def take(self) -> bytes:
        if not self._parts:
            return b""
        data = b"".join(self._parts)
        self._parts.clear()
        self.size = 0
        return data

    def _add(self, kind: int, *parts: bytes) -> None:
        n = 1 + sum(len(p) for p in parts)
        self._parts.append(_HEAD.pack(n, kind))
        self._parts.extend(parts)
        self.size += n + 4

    def publish(self, pub_id: int, want_result: bool, qkey: bytes, exrk: bytes,
                props: bytes, body: bytes) -> None:
        """A message for the queue ``qkey`` (:func:`queue_key`) on the peer."""
        head = _PUBLISH.pack(pub_id, want_result, len(qkey), len(exrk), len(props), len(body))
        n = 1 + len(head) + len(qkey) + len(exrk) + len(props) + len(body)
        self._parts += (_HEAD.pack(n, PUBLISH), head, qkey, exrk, props, body)
        self.size += n + 4

    def deliver(self, cid: int, did: int, redelivered: bool, exrk: bytes, props: bytes,
                body: bytes) -> None:
        """A delivery to consumer ``cid`` of the peer (``did`` 0: no ack expected)."""
        head = _DELIVER.pack(cid, did, redelivered, len(exrk), len(props), len(body))
        n = 1 + len(head) + len(exrk) + len(props) + len(body)
        self._parts += (_HEAD.pack(n, DELIVER), head, exrk, props, body)
        self.size += n + 4

    def settle(self, outcome: int, dids: list[int]) -> None:
        """Settle the peer's deliveries ``dids`` (their ``did`` numbers) with ``outcome``."""
        self._add(SETTLE, _SETTLE.pack(outcome, len(dids)),
                  struct.pack(f">{len(dids)}I", *dids))

    def credit(self, cid: int, n: int) -> None:
        self._add(CREDIT, _CREDIT.pack(cid, n))

    def results(self, results: list[tuple[int, int]]) -> None:
        """Answers to PUBLISH records with ``want`` set: (pub_id, PublishResult bits)."""
        self._add(RESULTS, _COUNT.pack(len(results)),
                  b"".join(_RESULT.pack(p, r) for p, r in results))

    def repl(self, body: bytes) -> None:
        """A quorum queue replica's record for the peer (its body:
        :func:`amqp_server.cluster.replica_records.encode`)."""
        self._add(REPL, body)

    def control(self, record: tuple[Any, ...]) -> None:
        self._add(CONTROL, link_values.encode(record))


def queue_key(vhost: str, name: str) -> bytes:
    """The bytes that name a queue on the link: ``vhost NUL name`` in UTF-8."""
    return f"{vhost}\x00{name}".encode()


@functools.lru_cache(maxsize=4096)
def split_queue_key(qkey: bytes) -> tuple[str, str]:
    """``(vhost, name)`` of a queue key (:func:`queue_key`); remembered for the 4,096 keys
    used last (every PUBLISH record names its queue). Raises UnicodeDecodeError for bytes
    that are not UTF-8."""
    vhost, _, name = qkey.decode().partition("\x00")
    return vhost, name


class RecordReader:
    """Reassembles records from the bytes of a link, whatever their cut.

    ``feed(data)`` returns ``[(kind, body)]`` (``body``: bytes) for every record completed
    by ``data``. A record that needs more reads waits in a bytearray that grows by what
    arrives (no copy of the whole buffer per read: a 32 MiB record read 64 KiB at a time is
    copied three times in all, not 512 times; 0.06 s of CPU instead of 1.4-6 s).

    Args:
        guarded: how many records, from the first, may be at most ``guard_limit`` bytes
            long: the hello records of a link, read before the peer is trusted, so a longer
            length prefix breaks the link after its 4-byte header, not after 1 GiB.
        guard_limit: bytes (length field) of a guarded record.

    Raises:
        LinkError: a record with length 0, longer than :data:`MAX_RECORD`, or a guarded one
            longer than ``guard_limit``.
    """

    __slots__ = ("_buf", "_need", "guarded", "guard_limit")

    def __init__(self, guarded: int = 0, guard_limit: int = MAX_RECORD) -> None:
        self._buf: bytes | bytearray = b""  # the start of an incomplete record
        self._need = 0  # bytes that record has in all (0: its header is incomplete)
        self.guarded = guarded
        self.guard_limit = guard_limit

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        if self._buf:
            if len(self._buf) + len(data) < self._need:  # still incomplete: grow, no parse
                if type(self._buf) is bytes:
                    self._buf = bytearray(self._buf)
                self._buf += data
                return []
            buf = bytes(self._buf) + data if type(self._buf) is bytearray else self._buf + data
        else:
            buf = data
        out: list[tuple[int, bytes]] = []
        pos, end = 0, len(buf)
        unpack = _HEAD.unpack_from
        guarded = self.guarded
        limit = self.guard_limit if guarded else MAX_RECORD
        while end - pos >= 5:
            n, kind = unpack(buf, pos)
            if n == 0 or n > limit:
                raise LinkError(f"record length {n} out of range (at most {limit})")
            if end - pos - 4 < n:
                break
            out.append((kind, buf[pos + 5:pos + 4 + n]))
            pos += 4 + n
            if guarded:
                guarded -= 1
                limit = self.guard_limit if guarded else MAX_RECORD
        self.guarded = guarded
        self._buf = buf[pos:] if pos < end else b""
        self._need = 4 + unpack(buf, pos)[0] if end - pos >= 5 else 0
        return out


def _cut(body: bytes, pos: int, lengths: tuple[int, ...]) -> list[bytes]:
    """The consecutive fields of ``lengths`` bytes each, from ``pos`` on."""
    out = []
    for n in lengths:
        out.append(body[pos:pos + n])
        pos += n
    return out


def read_publish(body: bytes) -> tuple[int, bool, bytes, bytes, bytes, bytes]:
    """PUBLISH body -> (pub_id, want_result, qkey, exrk, props, message body)."""
    pub_id, want, *lengths = _PUBLISH.unpack_from(body)
    qkey, exrk, props, payload = _cut(body, _PUBLISH.size, tuple(lengths))
    return pub_id, bool(want), qkey, exrk, props, payload


class PublishReader:
    """Reads PUBLISH records into messages (:func:`read_publish` + :func:`message_from` in
    one pass). A publisher mostly repeats one exchange, routing key and set of properties:
    when a record's exchange + routing key bytes, or its property bytes, are those of the
    record before, the strings and bytes objects decoded then are taken again (one
    comparison instead of slicing and decoding them; the same values either way)."""

    __slots__ = ("_exrk", "_names", "_props", "_flags")

    def __init__(self) -> None:
        self._exrk = b"\x00\x00"  # the last exchange + routing key bytes, their strings
        self._names = ("", "")
        self._props = b""  # the last property bytes, and their flags word
        self._flags = 0

    def read(self, body: bytes) -> tuple[int, bool, bytes, Message]:
        """PUBLISH body -> (pub_id, want_result, qkey, message)."""
        pub_id, want, qlen, elen, plen, blen = _unpack_publish(body)
        pos = 17 + qlen  # 17: _PUBLISH.size
        qkey = body[17:pos]
        exrk = self._exrk
        if elen == len(exrk) and body.startswith(exrk, pos):
            exchange, rk = self._names
        else:
            exrk = self._exrk = body[pos:pos + elen]
            n = exrk[0]
            exchange = exrk[1:1 + n].decode("utf-8", "surrogateescape")
            rk = exrk[2 + n:].decode("utf-8", "surrogateescape")
            self._names = (exchange, rk)
        pos += elen
        props = self._props
        if plen == len(props) and body.startswith(props, pos):
            flags = self._flags
        else:
            props = self._props = body[pos:pos + plen]
            flags = self._flags = (props[0] << 8 | props[1]) if plen > 1 else 0
        pos += plen
        return pub_id, want != 0, qkey, Message(exchange, rk, exrk, props,
                                                body[pos:pos + blen], flags)


def read_deliver(body: bytes) -> tuple[int, int, bool, bytes, bytes, bytes]:
    """DELIVER body -> (cid, did, redelivered, exrk, props, message body)."""
    cid, did, redelivered, *lengths = _DELIVER.unpack_from(body)
    exrk, props, payload = _cut(body, _DELIVER.size, tuple(lengths))
    return cid, did, bool(redelivered), exrk, props, payload


def read_settle(body: bytes) -> tuple[int, tuple[int, ...]]:
    """SETTLE body -> (outcome, dids)."""
    outcome, count = _SETTLE.unpack_from(body)
    return outcome, struct.unpack_from(f">{count}I", body, _SETTLE.size)


def read_credit(body: bytes) -> tuple[int, int]:
    cid, n = _CREDIT.unpack_from(body)
    return cid, n


def read_results(body: bytes) -> list[tuple[int, int]]:
    (count,) = _COUNT.unpack_from(body)
    return [_RESULT.unpack_from(body, 4 + 5 * i) for i in range(count)]


def read_control(body: bytes) -> tuple[Any, ...]:
    """CONTROL body -> the record. Raises LinkError when it is not one."""
    try:
        record = link_values.decode(body)
    except ValueError as exc:
        raise LinkError(f"not a control record: {exc}") from None
    if not record:
        raise LinkError("empty control record")
    return record


def message_from(exrk: bytes, props: bytes, body: bytes) -> Message:
    """A :class:`Message` from link bytes (``exrk``: exchange and routing key shortstrs)."""
    n = exrk[0]
    exchange = exrk[1:1 + n].decode("utf-8", "surrogateescape")
    rk = exrk[2 + n:].decode("utf-8", "surrogateescape")
    return Message(exchange, rk, exrk, props, body)


def control_body(rec: tuple[Any, ...]) -> bytes:
    """A control record's body again (to keep it while its queue is unknown here)."""
    return link_values.encode(rec)
