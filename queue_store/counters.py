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
        got, got_no_ack: Basic.GetOk with manual / automatic acknowledgement.
        get_empty: Basic.Get answered GetEmpty.
        redelivered: deliveries and GetOks flagged redelivered (counted by the channel).
        acked, requeued, rejected: outstanding deliveries settled each way.

    Deliveries to consumers are not counted by kind (nothing is added on the no-ack
    path): every delivery needing an ack is settled one of the three ways or still
    outstanding, so :meth:`manual_deliveries` derives them.
    """

    __slots__ = ("got", "got_no_ack", "get_empty", "redelivered", "acked", "requeued",
                 "rejected")

    def __init__(self) -> None:
        self.got = self.got_no_ack = self.get_empty = self.redelivered = 0
        self.acked = self.requeued = self.rejected = 0

    def manual_deliveries(self, unacked_count: int) -> int:
        """Basic.Deliver that needed an ack (messages): every settled or outstanding
        ack-requiring hand-out (``unacked_count``: the queue's outstanding ones) but the
        Basic.GetOks."""
        return self.acked + self.requeued + self.rejected + unacked_count - self.got
