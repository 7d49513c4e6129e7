"""One AMQP channel: method dispatch, publishing, consuming, acknowledgements.

Theory of operation
-------------------
The connection passes the channel's frames to its :class:`~amqp_server.assembler.CommandAssembler`
(``Channel.assembler``), which calls the channel back with whole commands only: a decoded
method (:meth:`Channel.handle_method`), a Basic.Ack (:meth:`Channel.ack`, hand-parsed), or a
Basic.Publish with its properties and body (:meth:`Channel.publish`). A publish is checked,
then routed by the vhost (:meth:`vhosts.vhost.VirtualHost.publish`) and appended to each
target queue; property bytes are never decoded on the way. Publishing, publisher confirms and
transactions are in :mod:`amqp_server.channel_publishing` (a base class of :class:`Channel`);
the exchange and queue classes' methods (declare, bind, purge, delete) are in
:mod:`amqp_server.topology_methods`.

Deliveries get channel-scoped delivery tags 1, 2, 3...; a delivery that needs an ack is kept in
``unacked`` (tag -> (queued message, queue, consumer)) until Basic.Ack/Reject/Nack, or until
the channel closes, when every unacked message goes back to its queue, flagged redelivered.

Every error is raised as an :class:`~amqp_common.errors.AMQPError`; the connection turns it
into Channel.Close (soft) or Connection.Close (hard). A channel closed by the broker ignores
every frame but Channel.Close/CloseOk until the client's CloseOk (spec 2.2.4).

Rules enforced (RabbitMQ's texts): unknown delivery tag -> 406; consumer tag reuse -> 530;
tx/confirm mode mix -> 406; ``immediate=true``, ``prefetch_size != 0``,
``channel.flow(active=false)`` and ``basic.recover(requeue=false)`` -> 540.

Source: AMQP 0-9-1 spec 1.5-1.10, RabbitMQ ``rabbit_channel``,
https://www.rabbitmq.com/docs/confirms and /docs/consumer-prefetch.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable
from functools import partial
from itertools import takewhile
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from pamqp import commands

from amqp_common import framing
from amqp_common.errors import (
    AccessRefused,
    ChannelError,
    CommandInvalid,
    NotAllowed,
    NotFound,
    NotImplemented_,
    PreconditionFailed,
    rs,
)
from amqp_server import topology_methods
from amqp_server.assembler import CommandAssembler
from amqp_server.channel_publishing import ChannelPublishing
from amqp_server.confirms import Confirms
from broker import direct_reply_to
from broker.message_stats import ChannelCounters
from queue_store.consumer import Consumer
from queue_store.message import Message
from queue_store.outcomes import PublishContext, Settlement
from queue_store.queue import Delivery, Queue, QueuedMessage
from queue_store.queue_args import validate_consumer_arguments
from queue_store.stream_queue import check_stream_consume
from vhosts.names import server_generated_name
from vhosts.permissions import Perm

ACK, REQUEUE, REJECT_MESSAGE = Settlement.ACK, Settlement.REQUEUE, Settlement.REJECT

if TYPE_CHECKING:
    from amqp_server.connection import Connection

SMALL_BODY = 4096 - framing.FRAME_OVERHEAD  # bytes: fits one frame at the smallest frame_max
OUTPUT_LIMIT = 1 << 20  # bytes of deliveries buffered per connection before dispatch pauses

Unacked = Delivery  # (message, queue, consumer or None for Basic.Get)
_ENTRY, _QUEUE = itemgetter(1), itemgetter(1)  # of a (tag, Unacked) pair, of an Unacked

# deliver's and deliver_many's packing of Basic.Deliver + content header + one body frame
# (the layout of framing.deliver_bytes): the method frame's head (type, channel, size, class
# and method ids), the delivery tag and redelivered bit, then the previous frame's end octet
# and the header frame's head and fields, then the end octet and the body frame's head
_METHOD_HEAD = struct.Struct(">BHII")
_TAG_BIT = struct.Struct(">Q?")
_HEADER_HEAD = struct.Struct(">BBHIHHQ")
_BODY_HEAD = struct.Struct(">BBHI")


class Channel(ChannelPublishing):
    """Channel ``number`` of ``connection`` (open on creation; publishing, confirms and
    transactions: :mod:`amqp_server.channel_publishing`)."""

    def __init__(self, connection: Connection, number: int) -> None:
        self.connection = connection
        self.number = number
        self.vhost = connection.vhost
        self.closing = False  # Channel.Close sent by the broker, awaiting CloseOk
        self.next_tag = 1
        self.unacked: dict[int, Unacked] = {}
        self.consumers: dict[str, Consumer] = {}
        self.prefetch_count = 0  # per-consumer, for consumers created from now on
        self.global_prefetch = 0  # whole channel (Basic.Qos global=true)
        self.confirms: Confirms | None = None
        self.tx: list[tuple[str, Any]] | None = None  # None: not transactional
        self.last_queue = ""
        self._tx_unsynced = False
        self._tx_waits: list[tuple[int, int]] = []  # publishes awaiting other workers
        # confirm mode: the sequence numbers that wait for the durability round numbered
        # _sync_round to start (one callback for them all; see _confirm_after_sync)
        self._sync_group: list[int] | None = None
        self._sync_round = -1
        # the same for a stream's publishes and the write round (see _confirm_after_write)
        self._write_group: list[int] | None = None
        self._write_round = -1
        self._workers = connection.broker.workers  # None with one worker
        # this channel's publishes, for queues that answer later (other workers, replicated)
        self._publish_context = None if self._workers is None else PublishContext(connection)
        # (first delivery tag, time) samples for the consumer timeout
        self._tag_marks: deque[tuple[int, float]] = deque([(1, connection.clock())])
        self._perm_version = -1
        self._write_cache: set[str] = set()
        self.reply_consumer_tag: str | None = None  # direct reply-to consumer
        self.reply_address: str | None = None
        self.assembler = CommandAssembler(self)  # frames -> whole commands
        self.counters = ChannelCounters()  # message_stats (deliver: see message_counts)
        connection.broker.message_totals.channels_opened += 1
        self._handlers: dict[type, Callable[[Any], None]] = {
            commands.Channel.Close: self._channel_close,
            commands.Channel.CloseOk: lambda m: None,  # no Close of ours pending: ignored
            commands.Channel.Open: self._second_open,
            commands.Channel.Flow: self._channel_flow,
            commands.Channel.FlowOk: lambda m: None,
            commands.Exchange.Declare: partial(topology_methods.exchange_declare, self),
            commands.Exchange.Delete: partial(topology_methods.exchange_delete, self),
            commands.Exchange.Bind: partial(topology_methods.exchange_bind, self),
            commands.Exchange.Unbind: partial(topology_methods.exchange_bind, self),
            commands.Queue.Declare: partial(topology_methods.queue_declare, self),
            commands.Queue.Bind: partial(topology_methods.queue_bind, self),
            commands.Queue.Unbind: partial(topology_methods.queue_bind, self),
            commands.Queue.Purge: partial(topology_methods.queue_purge, self),
            commands.Queue.Delete: partial(topology_methods.queue_delete, self),
            commands.Basic.Qos: self._basic_qos,
            commands.Basic.Consume: self._basic_consume,
            commands.Basic.Cancel: self._basic_cancel,
            commands.Basic.Get: self._basic_get,
            commands.Basic.Ack: lambda m: self.ack(m.delivery_tag, m.multiple),
            commands.Basic.Reject: lambda m: self._settle("reject", m.delivery_tag, False, m.requeue),
            commands.Basic.Nack: lambda m: self._settle("nack", m.delivery_tag, m.multiple, m.requeue),
            commands.Basic.Recover: self._basic_recover,
            commands.Basic.RecoverAsync: self._basic_recover,
            commands.Confirm.Select: self._confirm_select,
            commands.Tx.Select: self._tx_select,
            commands.Tx.Commit: self._tx_commit,
            commands.Tx.Rollback: self._tx_rollback,
        }

    # ---- waiting for a queue elsewhere (queue_store.queue_kind.Requester) -------------------

    def await_answer(self) -> None:
        """The connection reads no frame until :meth:`answered` (what the client sent after
        this method must see its effect)."""
        self.connection.suspend()

    def answered(self, run: Callable[[], None]) -> None:
        """Run ``run`` as the rest of this channel's method: its errors close the channel
        or connection as if raised while reading it; then the held frames are read."""
        self.connection.resume(self, run)

    # ---- output --------------------------------------------------------------------------

    def send(self, method: Any) -> None:
        self.connection.send_frame(framing.method_frame(self.number, method))

    # ---- input ---------------------------------------------------------------------------

    def handle_method(self, method: Any) -> None:
        """Dispatch one whole, decoded method (from :class:`CommandAssembler`).

        Raises:
            CommandInvalid (503): a method a client may not send on a channel (Connection.*,
                replies such as Queue.DeclareOk): RabbitMQ's "unimplemented method".
            AMQPError: whatever the method's handler raises.
        """
        handler = self._handlers.get(type(method))
        if handler is None:
            raise CommandInvalid("unimplemented method")
        handler(method)

    # ---- access control ------------------------------------------------------------------

    def check_permission(self, perm: Perm, kind: str, name: str) -> None:
        """Raises AccessRefused (403) unless the user has ``perm`` on the resource."""
        conn = self.connection
        conn.broker.permissions.check(conn.user or "", self.vhost.name, perm, kind, name)

    def check_topic_permission(self, perm: Perm, exchange: str, routing_key: str) -> None:
        """Raises AccessRefused (403) unless the user's topic permission on ``exchange``
        allows ``routing_key`` (topic exchanges only)."""
        conn = self.connection
        conn.broker.permissions.check_topic(conn.user or "", self.vhost.name, perm, exchange,
                                            routing_key)

    def queue_name(self, name: str) -> str:
        """``name``, or the channel's last declared queue for ``""`` (spec 1.7.2.3.2).

        Raises:
            NotFound (404): ``""`` and no queue declared on this channel yet.
        """
        if name:
            return name
        if not self.last_queue:
            raise NotFound("no previously declared queue")
        return self.last_queue

    def deliver_reply(self, msg: Message) -> None:
        """Deliver a direct reply-to reply to this channel's reply consumer (no-ack)."""
        tag_str = self.reply_consumer_tag
        if tag_str is None or self.closing:
            return
        tag = self.next_tag
        self.next_tag = tag + 1
        self.counters.deliver_no_ack += 1
        conn = self.connection
        out = framing.content_frames(self.number, msg.properties_raw, msg.body, conn.frame_max)
        out.insert(0, framing.deliver_frame(self.number, framing.encode_shortstr(tag_str), tag,
                                            False, msg.ex_rk_raw))
        conn.send_frames(out)

    def message_counts(self) -> dict[str, int]:
        """This channel's counts under RabbitMQ's ``message_stats`` names (messages; see
        :data:`broker.message_stats.COUNTERS`). Manual-ack deliveries are every delivery tag
        handed out that was not a no-ack delivery or a Basic.GetOk; acks are the rest of the
        ack-requiring ones once the outstanding and the negatively settled are taken away."""
        confirms, c = self.confirms, self.counters
        no_ack, get, get_no_ack = c.deliver_no_ack, c.get, c.get_no_ack
        # every ack-requiring hand-out is acked, nacked/rejected/requeued, outstanding, or
        # settled inside a transaction not yet committed
        in_tx = sum(len(arg[0]) for kind, arg in self.tx or () if kind != "publish")
        acked = self.next_tag - 1 - no_ack - get_no_ack - c.nacked - len(self.unacked) - in_tx
        return {
            "publish": c.publish,
            "confirm": 0 if confirms is None else confirms.confirmed,
            "received_confirm": 0 if confirms is None else confirms.sequence,
            "return_unroutable": c.returned, "drop_unroutable": c.dropped,
            "deliver": self.next_tag - 1 - no_ack - get - get_no_ack,
            "deliver_no_ack": no_ack, "get": get, "get_no_ack": get_no_ack,
            "get_empty": c.get_empty, "redeliver": c.redeliver, "ack": acked,
        }

    def ack_overdue(self, now: float, timeout: float) -> bool:
        """True when the oldest unacknowledged delivery is older than ``timeout`` seconds.

        Delivery times are sampled once per call (about once a second): each call records
        the next delivery tag with the time, so no clock is read per delivery.
        """
        marks = self._tag_marks
        marks.append((self.next_tag, now))
        if not self.unacked:
            marks.clear()
            marks.append((self.next_tag, now))
            return False
        oldest = next(iter(self.unacked))
        while len(marks) > 1 and marks[1][0] <= oldest:
            marks.popleft()
        return marks[0][0] <= oldest and now - marks[0][1] > timeout

    # ---- delivery (called by queues) -----------------------------------------------------

    def can_deliver(self) -> bool:
        if self.global_prefetch and len(self.unacked) >= self.global_prefetch:
            return False
        conn = self.connection
        return conn.writable and not self.closing and (
            len(conn.output) < OUTPUT_LIMIT or not conn.output_full())

    def deliver(self, consumer: Consumer, qm: QueuedMessage, queue: Queue) -> None:
        """Write Basic.Deliver + content for ``qm`` to ``consumer``."""
        tag = self.next_tag
        self.next_tag = tag + 1
        if consumer.no_ack:
            self.counters.deliver_no_ack += 1
        else:
            self.unacked[tag] = (qm, queue, consumer)
        redelivered = qm.redelivered
        if redelivered:
            self.counters.redeliver += 1
            queue.counters.redelivered += 1
        msg = qm.message
        body = msg.body
        size = len(body)
        if size <= SMALL_BODY:
            if size:  # Basic.Deliver, content header, one body frame (framing.deliver_bytes)
                number = self.number
                ctag = consumer.tag_raw
                ex_rk = msg.ex_rk_raw
                props = msg.properties_raw
                data = b"".join((
                    _METHOD_HEAD.pack(1, number, 13 + len(ctag) + len(ex_rk), 0x003C003C),
                    ctag, _TAG_BIT.pack(tag, redelivered), ex_rk,
                    _HEADER_HEAD.pack(0xCE, 2, number, 12 + len(props), 60, 0, size), props,
                    _BODY_HEAD.pack(0xCE, 3, number, size), body, b"\xce"))
            else:
                data = framing.deliver_bytes(self.number, consumer.tag_raw, tag, redelivered,
                                             msg.ex_rk_raw, msg.properties_raw, body, 0)
            out = self.connection.output
            if out:  # Connection.send_frame's common case, without the call
                out += data
            else:
                self.connection.send_frame(data)
            return
        conn = self.connection
        out = framing.content_frames(self.number, msg.properties_raw, msg.body, conn.frame_max)
        out.insert(
            0, framing.deliver_frame(self.number, consumer.tag_raw, tag, qm.redelivered,
                                     msg.ex_rk_raw)
        )
        conn.send_frames(out)

    def deliver_many(self, consumer: Consumer, queue: Queue,
                     take: Callable[[int], list[tuple[Any, bytes, bytes, bytes]]],
                     limit: int) -> int:
        """Deliver to ``consumer`` up to ``limit`` messages that ``take`` gives, as that many
        :meth:`deliver` calls would (same tags, frames and bookkeeping), packed in one loop
        and written at once: a stream's catch-up read (:meth:`StreamQueue.dispatch
        <queue_store.stream_queue.StreamQueue.dispatch>`) sends them from the stored
        bytes without a Message per delivery.

        Args:
            take: called once with how many the channel takes (``limit``, or fewer for the
                channel's own prefetch); gives at most that many ``(qm, exchange and routing
                key shortstrs, properties, body)`` (``qm`` is what the channel keeps until
                the ack: it has ``redelivered`` and ``message``).
            limit: at most this many (the caller's share and the consumer's prefetch).

        Returns:
            how many were delivered (the caller counts them in ``consumer.unacked``). The
            channel's own limits (global prefetch, closing, a full output buffer) are
            checked once, before the batch.
        """
        if not self.can_deliver():
            return 0
        if self.global_prefetch:
            limit = min(limit, self.global_prefetch - len(self.unacked))
        items = take(limit)
        if not items:
            return 0
        conn = self.connection
        number, ctag, no_ack = self.number, consumer.tag_raw, consumer.no_ack
        unacked = self.unacked
        tag = first = self.next_tag
        self.next_tag = first + len(items)
        parts: list[bytes] = []
        head_for, head = b"", b""  # the method frame's head for this exchange + routing key
        sizes, header_head, body_head = (-1, -1), b"", b""  # and for these properties + body
        for qm, ex_rk, props, body in items:
            if not no_ack:
                unacked[tag] = (qm, queue, consumer)
            redelivered = qm.redelivered
            if redelivered:
                self.counters.redeliver += 1
                queue.counters.redelivered += 1
            size = len(body)
            if size > SMALL_BODY or not size:
                parts.append(framing.deliver_frame(number, ctag, tag, redelivered, ex_rk))
                parts.extend(framing.content_frames(number, props, body, conn.frame_max))
                tag += 1
                continue
            if ex_rk != head_for:
                head_for = ex_rk
                head = _METHOD_HEAD.pack(framing.FRAME_METHOD, number,
                                         13 + len(ctag) + len(ex_rk), 0x003C003C) + ctag
            if size != sizes[1] or len(props) != sizes[0]:  # the frame heads of these sizes
                sizes = (len(props), size)
                header_head = _HEADER_HEAD.pack(framing.FRAME_END, framing.FRAME_HEADER,
                                                number, 12 + sizes[0], 60, 0, size)
                body_head = _BODY_HEAD.pack(framing.FRAME_END, framing.FRAME_BODY, number,
                                            size)
            parts += (head, _TAG_BIT.pack(tag, redelivered), ex_rk, header_head, props,
                      body_head, body, framing.FRAME_END_BYTE)
            tag += 1
        if no_ack:
            self.counters.deliver_no_ack += len(items)
        conn.send_frame(b"".join(parts))
        return len(items)

    def consumer_cancelled_by_broker(self, consumer: Consumer) -> None:
        """The queue went away: forget the consumer and tell the client (Basic.Cancel) when it
        announced the ``consumer_cancel_notify`` capability."""
        if self.consumers.pop(consumer.tag, None) is None:
            return
        if self.connection.client_capability("consumer_cancel_notify") and not self.closing:
            self.send(commands.Basic.Cancel(consumer_tag=consumer.tag, nowait=True))

    # ---- channel class -------------------------------------------------------------------

    def _channel_close(self, method: Any) -> None:
        self.release()
        self.send(commands.Channel.CloseOk())
        self.connection.forget_channel(self.number)

    def _second_open(self, method: Any) -> None:
        raise ChannelError("second 'channel.open' seen")

    def _channel_flow(self, method: Any) -> None:
        if not method.active:
            raise NotImplemented_("active=false")
        self.send(commands.Channel.FlowOk(active=True))

    # ---- basic class: consumers ----------------------------------------------------------

    def _basic_qos(self, m: Any) -> None:
        if m.prefetch_size:
            raise NotImplemented_(f"prefetch_size!=0 ({m.prefetch_size})")
        if m.global_:
            self.global_prefetch = m.prefetch_count
        else:
            self.prefetch_count = m.prefetch_count
        self.send(commands.Basic.QosOk())
        self._dispatch_consumers()

    def _basic_consume(self, m: Any) -> None:
        tag = m.consumer_tag or server_generated_name("amq.ctag-")
        if tag in self.consumers or tag == self.reply_consumer_tag:
            raise NotAllowed(f"attempt to reuse consumer tag '{tag}'")
        if m.queue == direct_reply_to.PSEUDO_QUEUE:
            direct_reply_to.check_reply_consumer(m.no_ack)
            if self.reply_consumer_tag is not None:
                raise PreconditionFailed("reply consumer already set")
            self.reply_consumer_tag = tag
            self.reply_address = self.connection.broker.reply_to.register(self)
            if not m.nowait:
                self.send(commands.Basic.ConsumeOk(consumer_tag=tag))
            return
        self.check_permission("read", "queue", self.queue_name(m.queue))
        q = self.vhost.queue(self.queue_name(m.queue), self.connection)
        if not q.global_qos and self.global_prefetch:  # RabbitMQ 3.x: a connection error
            raise NotImplemented_(
                f"{rs('queue', q.name, q.vhost_name)} does not support global qos")
        if q.consumer_count and (m.exclusive or q.has_exclusive_consumer()):
            raise AccessRefused(f"{rs('queue', q.name, q.vhost_name)} in exclusive use")
        arguments = m.arguments or {}
        if q.kind == "stream":
            check_stream_consume(q, m.no_ack, self.prefetch_count, self.global_prefetch,
                                 arguments)
        priority = validate_consumer_arguments(arguments, q.kind, rs("queue", q.name, q.vhost_name))
        consumer = Consumer(
            tag, framing.encode_shortstr(tag), self, q, m.no_ack, m.exclusive,
            self.prefetch_count, priority, arguments,
        )
        # a queue on another worker or node: its home decides exclusivity first
        q.request_consume(self, consumer, lambda: self._consume_ok(m, consumer))

    def _consume_ok(self, m: Any, consumer: Consumer) -> None:
        """The consumer is in: ConsumeOk unless nowait, then its first deliveries."""
        self.consumers[consumer.tag] = consumer
        if not m.nowait:
            self.send(commands.Basic.ConsumeOk(consumer_tag=consumer.tag))
        consumer.queue.add_consumer(consumer)

    def _basic_cancel(self, m: Any) -> None:
        if m.consumer_tag == self.reply_consumer_tag:
            self._drop_reply_consumer()
        consumer = self.consumers.pop(m.consumer_tag, None)
        if not m.nowait:
            self.send(commands.Basic.CancelOk(consumer_tag=m.consumer_tag))
        if consumer is not None:
            consumer.queue.remove_consumer(consumer)

    def _drop_reply_consumer(self) -> None:
        if self.reply_address is not None:
            self.connection.broker.reply_to.unregister(self.reply_address)
        self.reply_consumer_tag = None
        self.reply_address = None

    def _basic_get(self, m: Any) -> None:
        self.check_permission("read", "queue", self.queue_name(m.queue))
        q = self.vhost.queue(self.queue_name(m.queue), self.connection)
        q.request_get(self, m.no_ack, lambda qm, left: self._get_ok(q, m.no_ack, qm, left))

    def _get_ok(self, q: Queue, no_ack: bool, qm: QueuedMessage | None, count: int) -> None:
        """Basic.GetOk with ``qm`` (``count`` messages left), or Basic.GetEmpty."""
        if qm is None:
            self.counters.get_empty += 1
            self.send(commands.Basic.GetEmpty())
            return
        tag = self.next_tag
        self.next_tag = tag + 1
        if qm.redelivered:
            self.counters.redeliver += 1
            q.counters.redelivered += 1
        if not no_ack:
            self.counters.get += 1
            self.unacked[tag] = (qm, q, None)
        else:
            self.counters.get_no_ack += 1
        msg = qm.message
        conn = self.connection
        out = framing.content_frames(self.number, msg.properties_raw, msg.body, conn.frame_max)
        out.insert(0, framing.get_ok_frame(self.number, tag, qm.redelivered, msg.ex_rk_raw,
                                           count))
        conn.send_frames(out)

    # ---- basic class: acknowledgements ---------------------------------------------------

    def _take_unacked(self, tag: int, multiple: bool) -> list[tuple[int, Unacked]]:
        """Remove and return ``(delivery_tag, unacked)`` for the deliveries ``tag`` names (all
        up to it if ``multiple``; everything for tag 0 with multiple).

        Raises:
            PreconditionFailed (406): ``unknown delivery tag N``.
        """
        unacked = self.unacked
        if multiple:
            if tag == 0:
                taken = list(unacked.items())
                unacked.clear()
                return taken
            if tag not in unacked:
                raise PreconditionFailed(f"unknown delivery tag {tag}")
            # the tags up to ``tag`` (the dict is in tag order), taken in C loops: a
            # multiple ack of a stream's catch-up read covers hundreds
            keys = list(takewhile(tag.__ge__, unacked))
            return list(zip(keys, map(unacked.pop, keys), strict=True))
        entry = unacked.pop(tag, None)
        if entry is None:
            raise PreconditionFailed(f"unknown delivery tag {tag}")
        return [(tag, entry)]

    def ack(self, tag: int, multiple: bool) -> None:
        """Basic.Ack (spec 1.8.3.13). Raises PreconditionFailed (406) for an unknown tag."""
        if not multiple and self.tx is None:  # the common ack: one delivery, no transaction
            entry = self.unacked.pop(tag, None)
            if entry is None:
                raise PreconditionFailed(f"unknown delivery tag {tag}")
            entry[1].settle((entry,), ACK)
            if self.global_prefetch:
                self._dispatch_consumers()
            return
        taken = self._take_unacked(tag, multiple)
        if self.tx is not None:
            self.tx.append(("ack", (taken, None)))
            return
        self._apply_settle(list(map(_ENTRY, taken)), requeue=None)

    def _settle(self, kind: str, tag: int, multiple: bool, requeue: bool) -> None:
        taken = self._take_unacked(tag, multiple)
        for _, (_, q, _) in taken:
            if q.kind == "stream":  # RabbitMQ: a connection error
                raise NotImplemented_("basic.nack and basic.reject not supported by stream "
                                      f"queues {rs('queue', q.name, q.vhost_name)}")
        if self.tx is not None:
            self.tx.append((kind, (taken, requeue)))
            return
        self._apply_settle([entry for _, entry in taken], requeue=requeue)

    def _apply_settle(self, entries: list[Unacked], requeue: bool | None) -> None:
        """End taken deliveries through their queues' :meth:`~Queue.settle`: ack (requeue
        None), requeue (True) or reject (False)."""
        outcome = ACK if requeue is None else (REQUEUE if requeue else REJECT_MESSAGE)
        if requeue is not None:  # acks are derived (message_counts), not counted
            self.counters.nacked += len(entries)
        if len(entries) == 1:
            entries[0][1].settle(entries, outcome)
        elif len(queues := set(map(_QUEUE, entries))) == 1:  # one queue (found in C)
            queues.pop().settle(entries, outcome)
        else:
            by_queue: dict[Queue, list[Unacked]] = {}
            for entry in entries:
                by_queue.setdefault(entry[1], []).append(entry)
            for q, group in by_queue.items():
                q.settle(group, outcome)
        if self.global_prefetch:
            self._dispatch_consumers()

    def _dispatch_consumers(self) -> None:
        for queue in {c.queue for c in self.consumers.values()}:
            queue.dispatch()

    def _basic_recover(self, m: Any) -> None:
        if not m.requeue:
            raise NotImplemented_("requeue=false")
        entries = list(self.unacked.values())
        self.unacked.clear()
        self._apply_settle(entries, requeue=True)
        if isinstance(m, commands.Basic.Recover):
            self.send(commands.Basic.RecoverOk())

    # ---- teardown ------------------------------------------------------------------------

    def release(self) -> None:
        """Channel closing: cancel consumers, requeue unacked deliveries, drop tx state."""
        self.closing = True  # no more deliveries to this channel (can_deliver is False)
        if not self.counters.folded:  # release may run twice (error, then connection close)
            self.counters.folded = True
            self.connection.broker.message_totals.channel_closed(self.vhost.name,
                                                                 self.message_counts())
        self._drop_reply_consumer()
        # deliveries settled inside an uncommitted transaction are still unacked: requeue them
        pending = [item for kind, arg in (self.tx or []) if kind != "publish" for item in arg[0]]
        taken = sorted(list(self.unacked.items()) + pending, key=lambda kv: kv[0])
        entries = [entry for _, entry in taken]
        self.unacked.clear()
        self.tx = None if self.tx is None else []
        self.assembler.reset()
        # requeue before the consumers go: the next single active consumer must see the
        # requeued messages first, in their original order
        if entries:
            self._apply_settle(entries, requeue=True)
        consumers = list(self.consumers.values())
        self.consumers.clear()
        for consumer in consumers:
            consumer.queue.remove_consumer(consumer)
