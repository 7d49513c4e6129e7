"""Per-queue message counts for the management API's ``message_stats`` (beyond
``Queue.published``/``Queue.delivered``), in one slotted object so that a queue's own
attributes stay few (CPython shares instance-dict keys, and keeps attribute access fast, only
up to 30 attributes per class).

Source: https://www.rabbitmq.com/docs/management (queue ``message_stats``).
"""

from __future__ import annotations


class QueueCounters:
    """Messages (counts since the queue was created).

    Attributes:
        delivered_no_ack: Basic.Deliver to no-ack consumers.
        got, got_no_ack: Basic.GetOk with manual / automatic acknowledgement.
        get_empty: Basic.Get answered GetEmpty.
        redelivered: deliveries and GetOks flagged redelivered (counted by the channel).
        acked: deliveries acknowledged.
    """

    __slots__ = ("delivered_no_ack", "got", "got_no_ack", "get_empty", "redelivered", "acked")

    def __init__(self) -> None:
        self.delivered_no_ack = self.got = self.got_no_ack = self.get_empty = 0
        self.redelivered = self.acked = 0
