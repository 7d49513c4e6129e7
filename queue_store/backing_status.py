"""A queue's memory and paging figures in the shapes of RabbitMQ's management API.

:func:`memory_fields` gives the queue object's ``messages_ram``, ``messages_ready_ram``,
``messages_unacknowledged_ram``, ``messages_paged_out``, ``message_bytes_ram``,
``message_bytes_paged_out``, ``messages_persistent`` and ``backing_queue_status`` (RabbitMQ
3.10's classic-queue shape: ``mode``, ``version``, ``q1``..``q4``, ``delta``, ``len``,
``target_ram_count``, ``next_seq_id``, ``next_deliver_seq_id``, ``avg_ingress_rate``,
``avg_egress_rate``, ``avg_ack_ingress_rate``, ``avg_ack_egress_rate``), plus the
count of ready messages in each state, ``messages_alpha``, ``messages_beta``,
``messages_gamma``, ``messages_delta`` (an amqpq addition; RabbitMQ has no such fields).

Mapping to :mod:`queue_store.variable_queue`: ``q4`` is the RAM run (alpha and gamma
objects), ``q3`` the beta run, ``delta`` the paging file (``["delta", "undefined", count,
transient count, "undefined"]``: the paging file keeps no start/end seq ids in RAM); ``q1``
and ``q2`` are always 0 (this queue has no run after delta). Unacknowledged messages are
always in RAM here. ``messages_persistent`` counts the queue index's live messages (ready and
unacknowledged persistent messages of a durable queue; 0 otherwise, as in RabbitMQ).
``avg_ack_ingress_rate`` is the rate of deliveries needing an ack (settled ones plus those
outstanding), ``avg_ack_egress_rate`` the rate they are settled (acked, requeued or
rejected), per second over the management API's sampling window; ``next_deliver_seq_id`` is
the seq of the message at the head (``next_seq_id`` when it is empty or its head is only on
disk). Deliberately left out: ``message_bytes_persistent`` (the queue index keeps no byte
total).

Source: RabbitMQ ``rabbit_variable_queue:info/2`` and ``rabbit_amqqueue`` info items;
https://www.rabbitmq.com/docs/management (queue object); checked against RabbitMQ 3.10.8's
``GET /api/queues/%2F/<name>``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from queue_store.backing import STATES

if TYPE_CHECKING:
    from queue_store.queue import Queue

#: counter name and value -> its rate per second (the management API's rate sampler)
RateOf = Callable[[str, int], float]


def _next_deliver_seq_id(q: Queue) -> int:
    """The seq of the message the queue delivers next (its head), or ``next_seq_id`` when it
    is empty or its head is only on disk (not read for a stats call)."""
    head_seq = getattr(q.ready, "head_seq", None)
    seq = head_seq() if head_seq is not None else None
    return seq if seq is not None else q.next_seq_id


def memory_fields(q: Queue, unacked: int, unacked_bytes: int,
                  rate: RateOf | None = None) -> dict[str, Any]:
    """The queue object's memory/paging fields (see the module docstring).

    Args:
        q: the queue.
        unacked, unacked_bytes: its outstanding deliveries (messages, body bytes).
        rate: rate of a named counter (``"ingress"``: messages published to the queue,
            ``"egress"``: messages delivered); None gives 0.0.
    """
    state_counts = getattr(q.ready, "state_counts", None)
    if state_counts is not None:
        counts = state_counts()
    else:  # a backing queue that does not page (or does not say): all counted as alpha
        counts = {"alpha": len(q.ready), "beta": 0, "gamma": 0, "delta": 0,
                  "alpha_bytes": int(q.ready.bytes), "beta_bytes": 0, "gamma_bytes": 0,
                  "delta_bytes": 0}
    ready = sum(counts[s] for s in STATES)
    paged = counts["beta"] + counts["gamma"] + counts["delta"]
    paged_bytes = counts["beta_bytes"] + counts["gamma_bytes"] + counts["delta_bytes"]
    target = counts.get("target_ram_count")
    c = q.counters
    settled = c.acked + c.requeued + c.rejected  # deliveries that needed an ack, settled
    index = q.index
    status = {
        "mode": "default", "version": 2,
        "q1": 0, "q2": 0, "q3": counts["beta"], "q4": counts.get("q4", counts["alpha"]),
        "delta": ["delta", "undefined", counts["delta"], counts.get("delta_transient", 0),
                  "undefined"],
        "len": ready, "target_ram_count": "infinity" if target is None else target,
        "next_seq_id": q.next_seq_id,
        "next_deliver_seq_id": _next_deliver_seq_id(q),
        "avg_ingress_rate": rate("ingress", q.published) if rate is not None else 0.0,
        "avg_egress_rate": rate("egress", q.delivered) if rate is not None else 0.0,
        "avg_ack_ingress_rate": rate("ack_ingress", settled + q.unacked_count)
        if rate is not None else 0.0,
        "avg_ack_egress_rate": rate("ack_egress", settled) if rate is not None else 0.0,
    }
    return {
        "messages_ram": counts["alpha"] + unacked, "messages_ready_ram": counts["alpha"],
        "messages_unacknowledged_ram": unacked, "messages_paged_out": paged,
        "message_bytes_ram": counts["alpha_bytes"] + unacked_bytes,
        "message_bytes_paged_out": paged_bytes,
        "messages_persistent": index.live if index is not None else 0,
        **{f"messages_{s}": counts[s] for s in STATES},
        "backing_queue_status": status,
    }
