"""The broker's message and churn counters, as RabbitMQ's management ``message_stats`` and
its ``rabbitmq_prometheus`` plugin report them.

Counting is cheap and local: each channel keeps plain ints (``Channel.message_counts()``
gives them under RabbitMQ's ``message_stats`` names), each queue and exchange keeps its own,
and a channel that closes adds its counts to :class:`MessageTotals` once, so the node's
totals (open channels + closed ones) never go down. Nothing here runs per message.

Counter names (``COUNTERS``), all message counts:
``publish`` (received from publishers), ``confirm`` (confirmed to publishers),
``received_confirm`` (received on a confirm-mode channel), ``return_unroutable``,
``drop_unroutable``, ``deliver`` (Basic.Deliver, manual ack), ``deliver_no_ack``
(Basic.Deliver, auto ack), ``get`` (Basic.GetOk, manual ack), ``get_no_ack``, ``get_empty``
(Basic.GetEmpty answers), ``redeliver`` (deliveries flagged redelivered), ``ack``
(acknowledged by consumers).

Source: https://www.rabbitmq.com/docs/management (message_stats),
https://www.rabbitmq.com/docs/prometheus, ``rabbit_global_counters.erl`` (3.13).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

COUNTERS: tuple[str, ...] = (
    "publish", "confirm", "received_confirm", "return_unroutable", "drop_unroutable",
    "deliver", "deliver_no_ack", "get", "get_no_ack", "get_empty", "redeliver", "ack",
)


class ChannelCounters:
    """One channel's counts (messages), in one slotted object so that the channel's own
    attributes stay few (CPython keeps attribute access fast only up to 30 per class).

    Attributes:
        publish, returned, dropped: Basic.Publish received; of which returned (mandatory)
            or dropped as unroutable.
        deliver_no_ack: Basic.Deliver without acknowledgement (direct reply-to included).
        get, get_no_ack, get_empty: Basic.GetOk (manual / automatic ack), GetEmpty.
        redeliver: deliveries and GetOks flagged redelivered.
        nacked: deliveries settled other than by an ack (nack, reject, requeue, recover,
            channel closed); acks are derived from it, so the ack path adds nothing.
        folded: the counts were added to :class:`MessageTotals` (the channel closed).
    """

    __slots__ = ("publish", "returned", "dropped", "deliver_no_ack", "get", "get_no_ack",
                 "get_empty", "redeliver", "nacked", "folded")

    def __init__(self) -> None:
        self.publish = self.returned = self.dropped = self.deliver_no_ack = 0
        self.get = self.get_no_ack = self.get_empty = self.redeliver = self.nacked = 0
        self.folded = False


def add_counts(into: Counter[str], counts: Mapping[str, int]) -> Counter[str]:
    """Add ``counts`` to ``into`` (in place) and return it."""
    for key, value in counts.items():
        into[key] += value
    return into


def deliver_get(counts: Mapping[str, int]) -> int:
    """RabbitMQ's ``deliver_get``: every message handed out (deliver, deliver_no_ack, get,
    get_no_ack)."""
    return (counts.get("deliver", 0) + counts.get("deliver_no_ack", 0)
            + counts.get("get", 0) + counts.get("get_no_ack", 0))


class MessageTotals:
    """Counts of channels that are closed, per vhost name, and the node's churn counters.

    Attributes:
        closed: vhost name -> counts of its closed channels (kept when the vhost is deleted,
            so the node's totals stay monotonic).
        connections_opened, connections_closed, channels_opened, channels_closed: churn
            (RabbitMQ's ``connection_churn_metrics``).
        octets: vhost name -> ``[recv_oct, send_oct]`` of its closed connections (bytes;
            a vhost's ``recv_oct``/``send_oct`` add its open ones).
    """

    def __init__(self) -> None:
        self.closed: dict[str, Counter[str]] = {}
        self.connections_opened = 0
        self.connections_closed = 0
        self.channels_opened = 0
        self.channels_closed = 0
        self.deleted_vhosts: Counter[str] = Counter()  # counts and queue churn of those gone
        self.octets: dict[str, list[int]] = {}

    def connection_closed(self, vhost: str, recv_oct: int, send_oct: int) -> None:
        """A connection closed (call once per connection); ``vhost``: the one it had opened
        ("" before Connection.Open), with the bytes it read and wrote."""
        self.connections_closed += 1
        if vhost:
            total = self.octets.setdefault(vhost, [0, 0])
            total[0] += recv_oct
            total[1] += send_oct

    def channel_closed(self, vhost: str, counts: Mapping[str, int]) -> None:
        """A channel of ``vhost`` closed with ``counts`` (call once per channel)."""
        self.channels_closed += 1
        bucket = self.closed.get(vhost)
        if bucket is None:
            bucket = self.closed[vhost] = Counter()
        add_counts(bucket, counts)

    def vhost_deleted(self, name: str, queues_declared: int, queues_created: int,
                      queues_deleted: int) -> None:
        """Vhost ``name`` is gone: its counts stay in the node's totals (a vhost made again
        under that name starts from zero, as in RabbitMQ)."""
        add_counts(self.deleted_vhosts, self.closed.pop(name, {}))
        self.octets.pop(name, None)
        add_counts(self.deleted_vhosts, {"queues_declared": queues_declared,
                                         "queues_created": queues_created,
                                         "queues_deleted": queues_deleted})

    def vhost_totals(self, vhost: str, open_counts: Iterable[Mapping[str, int]]
                     ) -> Counter[str]:
        """Counts of ``vhost``: its closed channels plus ``open_counts`` (its open ones)."""
        out: Counter[str] = Counter(self.closed.get(vhost, {}))
        for counts in open_counts:
            add_counts(out, counts)
        return out

    def node_totals(self, open_counts: Iterable[Mapping[str, int]]) -> Counter[str]:
        """Counts of the node: every closed channel plus ``open_counts``."""
        out: Counter[str] = Counter(
            {k: v for k, v in self.deleted_vhosts.items() if not k.startswith("queues_")})
        for bucket in self.closed.values():
            add_counts(out, bucket)
        for counts in open_counts:
            add_counts(out, counts)
        return out
