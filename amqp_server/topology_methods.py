"""The exchange and queue classes of a channel: Exchange.Declare/Delete/Bind/Unbind and
Queue.Declare/Bind/Unbind/Purge/Delete.

Each handler takes the :class:`~amqp_server.channel.Channel` and the decoded method, checks the
user's permissions (RabbitMQ's ``rabbit_channel`` order and texts: 403 ACCESS_REFUSED), asks
the channel's vhost (:class:`~vhosts.vhost.VirtualHost`, which raises 404/405/406 with
RabbitMQ's texts) and answers the ``...Ok`` unless ``nowait``. An empty queue name means the
channel's last declared queue (:meth:`~amqp_server.channel.Channel.queue_name`). None of this
is on the publish/deliver/ack path; :meth:`Channel.handle_method
<amqp_server.channel.Channel.handle_method>` dispatches here.

Source: AMQP 0-9-1 spec 1.6, 1.7; RabbitMQ ``rabbit_channel``; https://www.rabbitmq.com/docs/e2e.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pamqp import commands

from amqp_common import framing
from amqp_server.workers import ops
from broker import direct_reply_to
from broker import topology_records as tr
from vhosts.names import check_server_named_allowed, server_generated_name

if TYPE_CHECKING:
    from amqp_server.channel import Channel


# ---- exchange class ------------------------------------------------------------------------------


def exchange_declare(ch: Channel, m: Any) -> None:
    """Exchange.Declare: configure permission (and read/write for an ``alternate-exchange``
    argument), then :meth:`~vhosts.vhost.VirtualHost.declare_exchange`; DeclareOk unless
    nowait.

    Raises:
        AccessRefused (403), NotFound (404), PreconditionFailed (406), CommandInvalid (503):
            from the permission check and the vhost.
    """
    if not m.passive:
        ch.check_permission("configure", "exchange", m.exchange)
        ae = (m.arguments or {}).get("alternate-exchange")
        if isinstance(ae, str):
            ch.check_permission("read", "exchange", m.exchange)
            ch.check_permission("write", "exchange", ae)
    if m.passive:
        def passive() -> None:
            ch.vhost.declare_exchange(m.exchange, m.exchange_type, True)
            _answer(ch, m, commands.Exchange.DeclareOk)

        ops.caught_up(ch, m.exchange not in ch.vhost.exchanges, passive)
        return
    ops.run(ch, tr.ExchangeDeclare(ch.vhost.name, m.exchange, m.exchange_type, m.durable,
                                   m.auto_delete, m.internal, m.arguments or {}),
            lambda _: _answer(ch, m, commands.Exchange.DeclareOk))


def _answer(ch: Channel, m: Any, ok: Any) -> None:
    """Send ``ok()`` unless the method said nowait."""
    if not m.nowait:
        ch.send(ok())


def exchange_delete(ch: Channel, m: Any) -> None:
    """Exchange.Delete: configure permission, then the vhost; DeleteOk unless nowait.

    Raises:
        AccessRefused (403), PreconditionFailed (406): from the check and the vhost.
    """
    ch.check_permission("configure", "exchange", m.exchange)
    ops.run(ch, tr.ExchangeDelete(ch.vhost.name, m.exchange, m.if_unused),
            lambda _: _answer(ch, m, commands.Exchange.DeleteOk))


def exchange_bind(ch: Channel, m: Any) -> None:
    """Exchange.Bind and Exchange.Unbind (RabbitMQ's e2e extension)."""
    ch.check_permission("write", "exchange", m.destination)
    ch.check_permission("read", "exchange", m.source)
    bind = isinstance(m, commands.Exchange.Bind)
    ops.run(ch, (tr.Bind if bind else tr.Unbind)(ch.vhost.name, "exchange", m.destination,
                                                 m.source, m.routing_key, m.arguments, None),
            lambda _: _answer(ch, m, commands.Exchange.BindOk if bind
                              else commands.Exchange.UnbindOk))


# ---- queue class ---------------------------------------------------------------------------------


def queue_declare(ch: Channel, m: Any) -> None:
    """Queue.Declare: the direct reply-to pseudo-queue (passive), a server-generated name for
    ``""``, configure permission (and read/write for ``x-dead-letter-exchange``), then
    :meth:`~vhosts.vhost.VirtualHost.declare_queue`; DeclareOk (message and consumer counts)
    unless nowait. A new exclusive queue is recorded on the connection.

    Raises:
        AccessRefused (403), NotFound (404), ResourceLocked (405), PreconditionFailed (406):
            from the permission check and the vhost.
    """
    conn = ch.connection
    if m.queue == direct_reply_to.PSEUDO_QUEUE and m.passive:
        consumers = 1 if ch.reply_consumer_tag is not None else 0
        conn.send_frame(framing.declare_ok_frame(ch.number, m.queue, 0, consumers))
        return
    name = m.queue if (m.queue or not m.passive) else ch.queue_name(m.queue)
    server_named = not name
    if server_named:
        check_server_named_allowed(m.arguments or {})
        name = server_generated_name("amq.gen-")
    if not m.passive:
        ch.check_permission("configure", "queue", name)
        dlx = (m.arguments or {}).get("x-dead-letter-exchange")
        if isinstance(dlx, str):
            ch.check_permission("read", "queue", name)
            ch.check_permission("write", "exchange", dlx)
    if m.passive:
        ops.caught_up(ch, name not in ch.vhost.queues, lambda: _declared(
            ch, m, ch.vhost.declare_queue(name, True, connection=conn), False))
        return
    is_new = name not in ch.vhost.queues
    workers = conn.broker.workers
    home = workers.declare_home(ch.vhost, name, m.arguments or {}) \
        if workers is not None and is_new else workers.index if workers is not None else 0
    if workers is not None and is_new:  # placed by its first use: workers/placement.py
        home = workers.first_use_home(home, m.durable, m.exclusive, m.arguments or {})
    ops.run(ch, tr.QueueDeclare(ch.vhost.name, name, m.durable, m.exclusive, m.auto_delete,
                                m.arguments or {}, ops.owner_ref(ch), server_named, home),
            lambda q: _declared(ch, m, q, is_new))


def _declared(ch: Channel, m: Any, q: Any, is_new: bool) -> None:
    """Queue.Declare applied: record a new exclusive queue, answer DeclareOk."""
    conn = ch.connection
    if is_new and q.exclusive and q.exclusive_owner is conn:
        conn.exclusive_queues.append(q)
    ch.last_queue = q.name
    if m.nowait:
        return
    # hand-packed: pamqp refuses queue names outside a narrow character set
    q.request_counts(ch, lambda messages, consumers: conn.send_frame(
        framing.declare_ok_frame(ch.number, q.name, messages, consumers)))


def check_bind(ch: Channel, queue: str, exchange: str, routing_key: str) -> None:
    """Queue.Bind/Unbind permissions: write on the queue, read on the exchange, and topic
    read permission for a topic exchange. Raises AccessRefused (403)."""
    ch.check_permission("write", "queue", queue)
    ch.check_permission("read", "exchange", exchange)
    x = ch.vhost.exchanges.get(exchange)
    if x is not None and x.type_name == "topic":
        ch.check_topic_permission("read", exchange, routing_key)


def queue_bind(ch: Channel, m: Any) -> None:
    """Queue.Bind and Queue.Unbind (Unbind has no nowait: always answered)."""
    name = ch.queue_name(m.queue)
    rk = m.routing_key if (m.routing_key or m.queue) else name
    check_bind(ch, name, m.exchange, rk)
    bind = isinstance(m, commands.Queue.Bind)

    def answer(_: Any) -> None:
        if not bind:
            ch.send(commands.Queue.UnbindOk())
        elif not m.nowait:
            ch.send(commands.Queue.BindOk())

    ops.run(ch, (tr.Bind if bind else tr.Unbind)(ch.vhost.name, "queue", name, m.exchange, rk,
                                                 m.arguments, ops.owner_ref(ch)), answer)


def queue_purge(ch: Channel, m: Any) -> None:
    """Queue.Purge: read permission, then drop the ready messages; PurgeOk (the count)
    unless nowait. Raises AccessRefused (403), NotFound (404), ResourceLocked (405)."""
    ch.check_permission("read", "queue", ch.queue_name(m.queue))
    q = ch.vhost.queue(ch.queue_name(m.queue), ch.connection)

    def answer(count: int) -> None:
        if not m.nowait:
            ch.send(commands.Queue.PurgeOk(message_count=count))

    q.request_purge(ch, answer)


def queue_delete(ch: Channel, m: Any) -> None:
    """Queue.Delete: configure permission, then the vhost; DeleteOk (ready messages
    dropped) unless nowait.

    Raises:
        AccessRefused (403), ResourceLocked (405), PreconditionFailed (406): in use / not
            empty.
    """
    ch.check_permission("configure", "queue", ch.queue_name(m.queue))
    ops.run(ch, tr.QueueDelete(ch.vhost.name, ch.queue_name(m.queue), m.if_unused,
                               m.if_empty, ops.owner_ref(ch)),
            lambda count: _answer(ch, m, lambda: commands.Queue.DeleteOk(message_count=count)))
