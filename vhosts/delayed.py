"""Delayed delivery for ``x-delayed-message`` exchanges: holding, timing and re-publishing.

Theory of operation
-------------------
Each ``x-delayed-message`` exchange gets one :class:`DelayedMessages` (``exchange.delayed``)
when it is declared. :meth:`VirtualHost.publish <vhosts.vhost.VirtualHost.publish>` hands it
every message published to the exchange whose ``x-delay`` header is > 0
(:func:`exchanges.delayed.delay_ms`); :meth:`DelayedMessages.hold`:

1. with ``mandatory``, routes the message *now* (the exchange's bindings as they are): no
   queue reached means it is returned (312 NO_ROUTE) and not held (the plugin cannot report
   unroutable messages);
2. appends it to the exchange's :class:`~queue_store.delayed_log.DelayedLog` (segment files
   under ``<vhost>/delayed/<exchange-id>/``) and records (due, seq, location, size) in the
   :class:`~queue_store.delay_index.DelayIndex`. Due time = wall clock + x-delay, in ms, so
   it keeps its meaning across a restart;
3. answers ``ROUTED | NEEDS_SYNC`` for a persistent message on a durable exchange: the
   publisher's confirm waits for the group-commit fsync of its record.

One broker timer (:class:`~amqp_common.timers.Timers`, the loop's single armed timer) is
armed for the earliest due time. When it fires, everything due is taken in (due, publish
sequence) order, up to :data:`BATCH` per turn, read back from disk, its ``x-delay`` header set
to minus the delay (as the plugin does) and published to the exchange through the vhost's
one publish pipeline: routed by the bindings as they are *then*, exchange-to-exchange
bindings and alternate exchanges included. Its record is then tombstoned.

Deleting the exchange drops what it holds. Recovery (:func:`recover_delayed`) replays the
logs of durable exchanges (persistent messages only) and removes the folders of exchanges
that no longer exist.

Source: https://github.com/rabbitmq/rabbitmq-delayed-message-exchange (README: routing at
due time, ``x-delay`` swapped to its negative on delivery).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from amqp_common.properties import with_header
from amqp_common.timers import TimerHandle
from exchanges.delayed import delay_ms
from queue_store.delay_index import DelayIndex
from queue_store.delayed_log import DelayedLog, MemoryLog
from queue_store.message import FLAG_HEADERS, Message
from queue_store.outcomes import NEEDS_SYNC, ROUTED, UNROUTABLE
from queue_store.storage import name_id

if TYPE_CHECKING:
    from exchanges.exchange import Exchange
    from vhosts.vhost import VirtualHost

log = logging.getLogger("amqpq.delayed")

BATCH = 2000  # messages re-published per timer turn (the loop serves sockets in between)
DELAYED_DIR = "delayed"


def message_delay(message: Message) -> int:
    """The message's ``x-delay`` in ms (0: none); headers are decoded only when present."""
    if not message.flags & FLAG_HEADERS:
        return 0
    try:
        return delay_ms(message.headers)
    except ValueError:  # properties that do not decode: routed as is
        return 0


class DelayedMessages:
    """The messages one ``x-delayed-message`` exchange holds (see the module docstring).

    Args:
        vhost: the exchange's vhost (its publish pipeline, timers and storage).
        exchange: the exchange.
    """

    def __init__(self, vhost: VirtualHost, exchange: Exchange) -> None:
        self.vhost = vhost
        self.exchange = exchange
        #: wall-clock ms now, on the broker's (maybe fake) clock
        self.wall_ms: Callable[[], int] = vhost.timers.wall_ms
        storage = vhost.storage
        self.log: DelayedLog | MemoryLog
        if storage is None:
            self.log = MemoryLog()
        else:
            self.log = DelayedLog(storage.directory / DELAYED_DIR / name_id(exchange.name),
                                  durable=exchange.durable)
        self.index = DelayIndex()
        self.next_seq = 1
        self.delivered = 0  # messages re-published at their due time (stats)
        self._timer: TimerHandle | None = None
        self._timer_due: int | None = None
        self._gone = False

    def __len__(self) -> int:
        """Messages held (management's ``messages_delayed``)."""
        return len(self.index)

    # ---- publish side --------------------------------------------------------------------

    def hold(self, message: Message, delay: int, mandatory: bool) -> int:
        """Hold ``message`` for ``delay`` ms (> 0). Returns publish-outcome bits:
        ``UNROUTABLE`` (mandatory and no route now: not held), ``ROUTED``, or
        ``ROUTED | NEEDS_SYNC`` (persistent on a durable exchange: confirm after fsync)."""
        if mandatory and not self.vhost.route(self.exchange, message.routing_key, message):
            self.exchange.unroutable += 1
            return UNROUTABLE
        due = self.wall_ms() + delay
        persistent = self.log.durable and message.persistent
        seq = self.next_seq
        self.next_seq = seq + 1
        loc, size = self.log.append(seq, due, delay, persistent, message)
        self.index.add(due, seq, loc, size)
        storage = self.vhost.storage
        result = ROUTED
        if storage is not None:
            storage.durability.index_dirty(self.log)  # type: ignore[arg-type]
            if persistent:
                result |= NEEDS_SYNC
        self._arm()
        return result

    # ---- timer side ----------------------------------------------------------------------

    def _arm(self) -> None:
        due = self.index.next_due()
        if due is None or self._gone:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = self._timer_due = None
            return
        if self._timer is not None:
            if self._timer_due is not None and self._timer_due <= due:
                return
            self._timer.cancel()
        self._timer_due = due
        self._timer = self.vhost.timers.call_later(
            max(0.0, (due - self.wall_ms()) / 1000), self._fire)

    def _fire(self) -> None:
        self._timer = self._timer_due = None
        if self._gone:
            return
        try:
            self.deliver_due(self.wall_ms())
        except Exception:  # never let one bad record stop the broker's timers
            log.exception("delayed exchange %r: delivery failed", self.exchange.name)
        self._arm()

    def deliver_due(self, now: int) -> int:
        """Publish up to :data:`BATCH` messages due at or before ``now`` (wall ms); returns
        how many were taken. More due ones are left for the next turn."""
        entries = self.index.pop_due(now, BATCH)
        publish, exchange, read, done = self.vhost.publish, self.exchange, self.log.read, \
            self.log.done
        for _due, _seq, loc, size in entries:
            try:
                message, delay = read(loc, size)
            except (OSError, ValueError) as exc:
                log.error("delayed exchange %r: message lost, record unreadable: %s",
                          exchange.name, exc)
                done(loc)
                continue
            done(loc)
            self.delivered += 1
            exchange.published -= 1  # counted once, when it was published (publish_in)
            publish(exchange, released(message, delay), released=True)  # routed now
        if entries and self.vhost.storage is not None:
            self.vhost.storage.durability.index_dirty(self.log)  # type: ignore[arg-type]
        if len(entries) == BATCH:  # more may be due: come back after the loop's I/O
            self.vhost.timers.call_later(0, self._fire_more)
        return len(entries)

    def _fire_more(self) -> None:
        if self._timer is None and not self._gone:
            self._fire()

    # ---- management ----------------------------------------------------------------------

    def listing(self, offset: int, limit: int) -> list[tuple[str, int, Message]]:
        """Held messages in due order from position ``offset``: (id, due wall ms,
        message), at most ``limit``. The id is ``"<due>-<seq>"`` (see :meth:`cancel`)."""
        out = []
        for due, seq, loc, size in self.index.entries(offset):
            if len(out) >= limit:
                break
            try:
                message, _delay = self.log.read(loc, size)
            except (OSError, ValueError):
                continue
            out.append((f"{due}-{seq}", due, message))
        return out

    def cancel(self, message_id: str) -> bool:
        """Drop the held message ``message_id`` (from :meth:`listing`); False when there is
        none (malformed id, delivered already, or cancelled)."""
        due_text, _, seq_text = message_id.partition("-")
        if not (due_text.isdigit() and seq_text.isdigit()):
            return False
        entry = self.index.remove(int(due_text), int(seq_text))
        if entry is None:
            return False
        self.log.done(entry[2])
        if self.vhost.storage is not None:
            self.vhost.storage.durability.index_dirty(self.log)  # type: ignore[arg-type]
        self._arm()
        return True

    # ---- lifecycle -----------------------------------------------------------------------

    def recover(self) -> int:
        """Reload what a durable exchange held before a restart; returns how many."""
        if not isinstance(self.log, DelayedLog):
            return 0
        found, top = self.log.recover(self.index.add)
        self.next_seq = max(self.next_seq, top + 1)
        self._arm()
        return found

    def destroy(self) -> None:
        """The exchange was deleted: drop everything it holds (files after any fsync in
        flight)."""
        self._gone = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.index.clear()
        self.log.retire()
        storage = self.vhost.storage
        if storage is None:
            self.log.destroy()
            return
        durability = storage.durability
        durability.forget_index(self.log)  # type: ignore[arg-type]
        if durability.syncing:
            durability.after_sync(self.log.destroy)
        else:
            self.log.destroy()


def released(message: Message, delay: int) -> Message:
    """``message`` as delivered at its due time: ``x-delay`` set to minus ``delay`` (the
    plugin's ``swap_delay_header/1``), so it is not delayed again (byte-level: the
    properties are not decoded)."""
    try:
        raw = with_header(message.properties_raw, "x-delay", -delay)
    except ValueError:
        return message
    return Message(message.exchange, message.routing_key, message.ex_rk_raw, raw, message.body)


def attach(vhost: VirtualHost, exchange: Exchange) -> None:
    """Give a newly declared ``x-delayed-message`` exchange its holder (no-op for others)."""
    if getattr(exchange.router, "is_delayed", False):
        exchange.delayed = DelayedMessages(vhost, exchange)


def recover_delayed(vhost: VirtualHost) -> int:
    """Reload the durable delayed exchanges' held messages and remove the folders of
    exchanges that are gone (non-durable ones, deleted ones). Returns messages recovered."""
    found = 0
    keep: set[str] = set()
    for x in vhost.exchanges.values():
        holder: Any = x.delayed
        if holder is not None:
            found += holder.recover()
            if isinstance(holder.log, DelayedLog):
                keep.add(holder.log.directory.name)
    storage = vhost.storage
    if storage is not None:
        folder = storage.directory / DELAYED_DIR
        if folder.is_dir():
            for child in folder.iterdir():
                if child.name not in keep:
                    shutil.rmtree(child, ignore_errors=True)
    return found
