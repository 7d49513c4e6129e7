"""Publishing on a channel: Basic.Publish checked and routed, Basic.Return, publisher
confirms and transactions (:class:`ChannelPublishing`, a part of
:class:`~amqp_server.channel.Channel`).

A whole Basic.Publish (from the :class:`~amqp_server.assembler.CommandAssembler`) is checked
(write and topic permissions, internal exchanges, ``user_id``, ``expiration``), then routed by
the vhost (:meth:`vhosts.vhost.VirtualHost.publish`) or, in a transaction, kept for
Tx.Commit. An unroutable mandatory message comes back as Basic.Return 312 NO_ROUTE. A reply
to a direct reply-to address goes straight to the replying channel (on this worker or
another). In confirm mode each publish gets the next sequence number, confirmed once its
queues have it (after the fsync for persistent messages, after the answer of queues on other
workers) or nacked when a queue refused it; confirms are sent coalesced by
:meth:`ChannelPublishing.flush_confirms`. Tx.Commit routes the transaction's publishes, then
applies its acks/rejects, and answers CommitOk once the publishes are on disk; Tx.Rollback
makes the deliveries settled in the transaction unacked again.

Rules enforced (RabbitMQ's texts): ``immediate=true`` -> 540; a ``user_id`` other than the
connection's user or a bad ``expiration`` -> 406; tx/confirm mode mix -> 406; Tx.Commit or
Tx.Rollback outside tx mode -> 406.

Source: AMQP 0-9-1 spec 1.8.3.7 (publish), 1.9 (tx); RabbitMQ ``rabbit_channel``,
https://www.rabbitmq.com/docs/confirms, /docs/validated-user-id, /docs/direct-reply-to.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from pamqp import commands

from amqp_common import framing
from amqp_common.errors import NotImplemented_, PreconditionFailed
from amqp_server.assembler import PublishNames
from amqp_server.confirms import Confirms
from broker import direct_reply_to
from exchanges.exchange import Exchange
from queue_store.message import FLAG_EXPIRATION, FLAG_REPLY_TO, FLAG_USER_ID, Message
from queue_store.outcomes import NEEDS_SYNC, NEEDS_WRITE, REJECTED, REMOTE
from queue_store.sender_selected import without_bcc

__all__ = ["ChannelPublishing"]

# the properties a publish checks (_checked_properties), as one mask
_CHECKED_FLAGS = FLAG_USER_ID | FLAG_EXPIRATION | FLAG_REPLY_TO
# a result that waits for answers only (REMOTE without a local fsync, write or refusal)
_WAITS_ONLY = REMOTE | NEEDS_SYNC | NEEDS_WRITE | REJECTED


class ChannelPublishing:
    """The publishing, confirm and transaction methods of
    :class:`~amqp_server.channel.Channel` (a base class of it, not used alone): they read
    the channel's ``connection``, ``number``, ``vhost``, ``_publish_context``, ``_workers``,
    ``reply_address``, ``closing``, read and change its ``confirms``, ``tx``, ``unacked``,
    ``counters``, ``_tx_unsynced``, ``_tx_waits``, ``_perm_version``, ``_write_cache``,
    ``_sync_group``/``_sync_round``, ``_write_group``/``_write_round`` and
    call its ``send``, ``check_permission``, ``check_topic_permission`` and
    ``_apply_settle``."""

    # ---- publishing ----------------------------------------------------------------------

    def _check_write(self, exchange: str) -> None:
        """Write permission on ``exchange`` (403 AccessRefused when missing), remembered
        in ``_write_cache`` until the permission store's version changes."""
        store = self.connection.broker.permissions
        if self._perm_version != store.version:
            self._perm_version = store.version
            self._write_cache = set()
        if exchange not in self._write_cache:
            self.check_permission("write", "exchange", exchange)
            self._write_cache.add(exchange)

    def publish(self, names: PublishNames, bits: int, properties_raw: bytes, body: bytes,
                flags: int) -> None:
        """A whole Basic.Publish command: checked, then routed (or kept for Tx.Commit).

        Args:
            names: ``(exchange, routing_key, both as received)``
                (:func:`amqp_common.framing.publish_names`).
            bits: Basic.Publish's flags: mandatory 1, immediate 2.
            properties_raw, body: the content, as received; ``flags`` the first word of
                ``properties_raw`` (which properties are present).

        Raises:
            NotImplemented_ (540): immediate=true (RabbitMQ 3.x).
            AccessRefused (403): no write permission, an internal exchange, topic permission.
            NotFound (404): no such exchange.
            PreconditionFailed (406): user_id not the connection's user, a bad expiration.
        """
        exchange, rk, ex_rk_raw = names
        conn = self.connection
        if not conn.has_published:
            conn.first_publish()
        if bits & 2:
            raise NotImplemented_("immediate=true")
        if (exchange not in self._write_cache
                or self._perm_version != conn.broker.permissions.version):
            self._check_write(exchange)
        if exchange:
            x = self.vhost.exchange(exchange)
            if x.internal:
                raise x.internal_error(self.vhost.name)
            if x.type_name == "topic":
                self.check_topic_permission("write", exchange, rk)
        else:
            x = None
        msg = Message(exchange, rk, ex_rk_raw, properties_raw, body, flags)
        if flags & _CHECKED_FLAGS:
            msg = self._checked_properties(msg)
        if self.tx is not None:
            self.tx.append(("publish", (x, msg, bits & 1 == 1)))
        elif (self.confirms is None and self._publish_context is None
                and (x is not None or rk[:1] != "a" or not rk.startswith(direct_reply_to.PREFIX))):
            # _route without a confirm or an answer from another worker to wait for (one
            # call fewer per message): only an unroutable message needs more
            self.counters.publish += 1
            if not self.vhost.publish(x, msg, mandatory=bits & 1 == 1):
                self._unroutable(msg, bits & 1 == 1)
        else:
            self._route(x, msg, bits & 1 == 1)

    def _checked_properties(self, msg: Message) -> Message:
        """``user_id`` and ``expiration`` checked; a ``reply_to`` of the direct reply-to
        pseudo queue rewritten to this channel's reply address.

        Raises:
            PreconditionFailed (406): user_id not the connection's user, a bad expiration.
        """
        if msg.flags & FLAG_USER_ID and msg.user_id != self.connection.user:
            # https://www.rabbitmq.com/docs/validated-user-id
            raise PreconditionFailed(f"user_id property set to '{msg.user_id}' but "
                                     f"authenticated user was '{self.connection.user}'")
        if msg.flags & (FLAG_EXPIRATION | FLAG_REPLY_TO):
            if msg.expiration is not None:
                try:
                    msg.expiration_ms()
                except ValueError as exc:
                    raise PreconditionFailed(
                        f"invalid expiration '{msg.expiration}': {exc}") from None
            if msg.reply_to == direct_reply_to.PSEUDO_QUEUE:
                msg = direct_reply_to.rewrite_reply_to(msg, self.reply_address)
        return msg

    def _route(self, x: Exchange | None, msg: Message, mandatory: bool) -> None:
        """Publish through the vhost's one pipeline, then answer the publisher: a mandatory
        return when unroutable, a confirm (after the fsync for NEEDS_SYNC) or a nack."""
        rk = msg.routing_key
        if x is None and rk[:1] == "a" and rk.startswith(direct_reply_to.PREFIX):
            self._publish_reply(msg, mandatory)
            return
        self.counters.publish += 1
        context = self._publish_context  # None with one process: nothing would read it
        if context is None:
            result = self.vhost.publish(x, msg, mandatory=mandatory)
            waits = None
        else:  # queues on other workers answer it in confirm or tx mode (want_results)
            result = self.vhost.publish(x, msg, mandatory=mandatory, context=context)
            waits = context.waits  # (home, pub_id) of each answer (REMOTE in result)
            if waits:
                if result & _WAITS_ONLY == REMOTE and self.confirms is not None:
                    # only answers to wait for (a replicated queue's commit, a home's
                    # RESULTS): one ConfirmWait, no closures; the list is read at once
                    self._workers.await_confirm(waits, self, self.confirms.next_seq(True))
                    waits.clear()
                    self.connection.confirms_dirty.add(self)
                    return  # routed (REMOTE): no return to make
                context.waits = []
        if not result:
            self._unroutable(msg, mandatory)
        confirms = self.confirms
        if confirms is not None:
            if result & REJECTED:
                confirms.reject(confirms.next_seq(pending=True))
            elif result & NEEDS_WRITE and not result & (REMOTE | NEEDS_SYNC):
                self._confirm_after_write(confirms.next_seq(pending=True))
            elif result & (REMOTE | NEEDS_WRITE):
                seq = confirms.next_seq(pending=True)
                self._after_sync(lambda: confirms.confirm(seq), lambda: confirms.reject(seq),
                                 result, waits)
            elif result & NEEDS_SYNC:
                self._confirm_after_sync(confirms.next_seq(pending=True))
            else:
                confirms.next_seq()
            self.connection.confirms_dirty.add(self)
        elif self.tx is not None:
            if result & (NEEDS_SYNC | NEEDS_WRITE):
                self._tx_unsynced = True
            if waits:
                self._tx_waits.extend(waits)

    def _confirm_after_sync(self, seq: int) -> None:
        """Confirm ``seq`` once what was written so far is fsynced, nack it when that fsync
        fails: with the other sequence numbers of this channel that wait for the same
        durability round, under one callback (not a callback per publish)."""
        durability = self.connection.broker.durability
        group = self._sync_group
        if group is not None and durability.rounds == self._sync_round:
            group.append(seq)  # that round has not started: it covers this write too
            return
        group = self._sync_group = [seq]
        self._sync_round = durability.rounds
        confirms = self.confirms
        assert confirms is not None
        self._after_sync(partial(confirms.confirm_many, group),
                         partial(confirms.reject_many, group))
        if durability.rounds != self._sync_round:  # a round started at once and took it
            self._sync_group = None

    def _confirm_after_write(self, seq: int) -> None:
        """Confirm ``seq`` (a stream's publish) once the batch is written: with the other
        sequence numbers of this channel written in the same round, under one callback
        (not three closures per publish)."""
        durability = self.connection.broker.durability
        group = self._write_group
        if group is not None and durability.write_rounds == self._write_round:
            group.append(seq)  # that round has not run: it covers this write too
            return
        group = self._write_group = [seq]
        self._write_round = durability.write_rounds
        confirms = self.confirms
        assert confirms is not None
        self._after_sync(partial(confirms.confirm_many, group), None, NEEDS_WRITE)

    def settle_confirm(self, seq: int, ok: bool) -> None:
        """The answers publish ``seq`` waited for are in (:meth:`RemoteClient.await_confirm
        <amqp_server.workers.remote_client.RemoteClient.await_confirm>`): confirmed
        (``ok``) or nacked, sent with the batch's confirms."""
        confirms = self.confirms
        assert confirms is not None
        if ok:
            confirms.confirm(seq)
        else:
            confirms.reject(seq)
        if not self.closing:
            self.connection.confirms_dirty.add(self)
            self._workers.dirty_connections.add(self.connection)

    def _unroutable(self, msg: Message, mandatory: bool) -> None:
        """No queue took ``msg``: returned (mandatory) or dropped, and counted."""
        if mandatory:
            self.counters.returned += 1
            self._return_unroutable(without_bcc(msg))
        else:
            self.counters.dropped += 1

    def _return_unroutable(self, msg: Message) -> None:
        """Basic.Return 312 NO_ROUTE with the message (mandatory, no queue reached)."""
        conn = self.connection
        conn.send_frame(framing.return_frame(self.number, 312, "NO_ROUTE", msg.ex_rk_raw))
        conn.send_frames(
            framing.content_frames(self.number, msg.properties_raw, msg.body, conn.frame_max))

    def _after_sync(self, callback: Callable[[], None],
                    on_error: Callable[[], None] | None = None, result: int = NEEDS_SYNC,
                    waits: list[tuple[int, int]] | None = None) -> None:
        """Run ``callback`` once what was written so far is fsynced (``on_error`` instead
        when that fsync fails) and, with ``waits`` (publishes to queues on other workers),
        once their homes accepted them (``on_error`` when one refused); then flush
        confirms. ``result`` without NEEDS_SYNC: nothing local to wait for."""
        conn = self.connection
        workers = self._workers

        def settled(action: Callable[[], None]) -> Callable[[], None]:
            def run() -> None:
                action()
                if not self.closing:
                    conn.confirms_dirty.add(self)
                    if workers is not None:
                        workers.dirty_connections.add(conn)
            return run

        ok = settled(callback)
        err = None if on_error is None else settled(on_error)
        if waits:
            local_ok = ok

            def ok() -> None:
                workers.after_results(waits, local_ok, err or local_ok)

        if result & NEEDS_SYNC:
            conn.broker.durability.after_sync(ok, err)
        elif result & NEEDS_WRITE:  # a stream's: once the batch is written (no fsync)
            conn.broker.durability.after_write(ok)
        else:
            ok()

    def _publish_reply(self, msg: Message, mandatory: bool) -> None:
        """A reply to a direct reply-to address: straight to that channel's consumer."""
        self.counters.publish += 1
        registry = self.connection.broker.reply_to
        target = registry.lookup(msg.routing_key)
        worker = registry.worker_of(msg.routing_key) if self._workers is not None else None
        if target is not None:
            target.deliver_reply(msg)
        elif worker is not None and worker != self._workers.index:
            self._workers.forward_reply(worker, msg)  # that worker's channel, if still there
        elif mandatory:
            self.counters.returned += 1
            self._return_unroutable(msg)
        else:
            self.counters.dropped += 1
        if self.confirms is not None:
            self.confirms.next_seq()
            self.connection.confirms_dirty.add(self)

    def flush_confirms(self) -> None:
        """Send the Basic.Ack/Nack that confirms settled since the last flush (coalesced)."""
        if self.confirms is None or self.closing:
            return
        for tag, multiple, ack in self.confirms.drain():
            if ack:
                self.send(commands.Basic.Ack(delivery_tag=tag, multiple=multiple))
            else:
                self.send(commands.Basic.Nack(delivery_tag=tag, multiple=multiple, requeue=True))

    # ---- confirms and transactions -------------------------------------------------------

    def _confirm_select(self, m: Any) -> None:
        if self.tx is not None:
            raise PreconditionFailed("cannot switch from tx to confirm mode")
        if self.confirms is None:
            self.confirms = Confirms()
            self._want_results()
        if not m.nowait:
            self.send(commands.Confirm.SelectOk())

    def _tx_select(self, m: Any) -> None:
        if self.confirms is not None:
            raise PreconditionFailed("cannot switch from confirm to tx mode")
        if self.tx is None:
            self.tx = []
            self._want_results()
        self.send(commands.Tx.SelectOk())

    def _want_results(self) -> None:
        """Confirm or tx mode (for good): queues on other workers answer every publish."""
        if self._publish_context is not None:
            self._publish_context.want_results = True

    def _tx_commit(self, m: Any) -> None:
        if self.tx is None:
            raise PreconditionFailed("channel is not transactional")
        ops, self.tx = self.tx, []
        # publishes first, then acks/rejects, as RabbitMQ's tx.commit does
        for kind, arg in ops:
            if kind == "publish":
                self._route(*arg)
        for kind, arg in ops:
            if kind != "publish":
                taken, requeue = arg
                self._apply_settle([entry for _, entry in taken], requeue=requeue)
        if self._tx_unsynced or self._tx_waits:
            # persistent publishes: CommitOk only once they are on disk (RabbitMQ), and
            # publishes to other workers' queues once their homes have them
            unsynced, self._tx_unsynced = self._tx_unsynced, False
            waits, self._tx_waits = self._tx_waits, []
            self._after_sync(lambda: self.send(commands.Tx.CommitOk()), None,
                             NEEDS_SYNC if unsynced else 0, waits)
        else:
            self.send(commands.Tx.CommitOk())

    def _tx_rollback(self, m: Any) -> None:
        if self.tx is None:
            raise PreconditionFailed("channel is not transactional")
        ops, self.tx = self.tx, []
        # acks/rejects inside the transaction are undone: those deliveries are unacked again
        restored = [item for kind, arg in ops if kind != "publish" for item in arg[0]]
        if restored:
            merged = sorted(list(self.unacked.items()) + restored, key=lambda kv: kv[0])
            self.unacked = dict(merged)
        self.send(commands.Tx.RollbackOk())
