"""Dead lettering: the message a queue republishes to its dead-letter exchange.

A dead-lettered message keeps its body and properties, loses ``expiration`` (kept as
``original-expiration`` in its x-death entry) and gets RabbitMQ's headers:

* ``x-death``: an array of tables, newest first, one per (queue, reason) with ``count``,
  ``reason`` (``rejected``, ``expired``, ``maxlen``), ``queue``, ``time``, ``exchange``,
  ``routing-keys``; a repeat (queue, reason) increments ``count`` and moves to the front;
* ``x-first-death-queue``/``-reason``/``-exchange`` (set once) and
  ``x-last-death-queue``/``-reason``/``-exchange`` (3.13).

Cycles (a message dead-lettered back to a queue it already died in) are broken as RabbitMQ
breaks them: the message is dropped for such a queue unless a ``rejected`` death is in its
history (a client decided, so it is not an automatic loop).

Source: https://www.rabbitmq.com/docs/dlx; RabbitMQ ``rabbit_dead_letter.erl``.
"""

from __future__ import annotations

import datetime
from typing import Any

from amqp_common.properties import (
    Long,
    encode_value,
    join_properties,
    join_table,
    split_properties,
    split_table,
)
from queue_store.message import Message


def _routing_keys(message: Message) -> list[str]:
    keys = [message.routing_key]
    headers = message.headers or {}
    for name in ("CC", "BCC"):
        extra = headers.get(name)
        if isinstance(extra, list):
            keys.extend(k.decode("utf-8", "surrogateescape") if isinstance(k, bytes) else str(k)
                        for k in extra)
    return keys


def dead_letter_message(
    message: Message, reason: str, queue: str, dlx: str, dlrk: str | None,
    now: datetime.datetime | int | None = None,
) -> tuple[Message, list[str]]:
    """The copy of ``message`` to publish to exchange ``dlx`` and the routing keys to route it
    with (``[dlrk]`` when set, else the original routing key and CC headers).

    Only the death headers and ``expiration`` change; every other property and header entry
    is copied byte for byte (see :mod:`amqp_common.properties`).

    Args:
        reason: ``"rejected"``, ``"expired"`` or ``"maxlen"``.
        queue: the name of the queue the message died in.
        now: the death's ``time``: a datetime, or wall-clock ms since the epoch (the
            vhost's timers); None: the machine's clock now. Whole seconds, UTC.
    """
    fields = split_properties(message.properties_raw)
    headers = message.headers or {}
    if isinstance(now, int):
        now = datetime.datetime.fromtimestamp(now // 1000, datetime.UTC)
    now = now or datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    keys = [dlrk] if dlrk is not None else _routing_keys(message)
    deaths = [dict(d) for d in headers.get("x-death") or [] if isinstance(d, dict)]
    for i, death in enumerate(deaths):
        if _text(death.get("queue")) == queue and _text(death.get("reason")) == reason:
            entry = deaths.pop(i)  # a repeat: count + 1, moved to the front, first time kept
            entry["count"] = int(entry.get("count") or 0) + 1
            break
    else:
        entry = {
            "count": 1,
            "reason": reason,
            "queue": queue,
            "time": now,
            "exchange": message.exchange,
            "routing-keys": _routing_keys(message),
        }
        if message.expiration is not None:
            entry["original-expiration"] = message.expiration
    deaths.insert(0, entry)
    for death in deaths:
        death["count"] = Long(int(death.get("count") or 0))
    new: dict[str, Any] = {"x-death": deaths}
    for field, value in (("reason", reason), ("queue", queue), ("exchange", message.exchange)):
        if f"x-first-death-{field}" not in headers:
            new[f"x-first-death-{field}"] = value
        new[f"x-last-death-{field}"] = value
    kept = [(k, v) for k, v in split_table(fields["headers"])
            if k not in new] if "headers" in fields else []
    fields["headers"] = join_table(kept + [(k, encode_value(v)) for k, v in new.items()])
    fields.pop("expiration", None)
    out = Message.create(dlx, keys[0], join_properties(fields), message.body)
    return out, keys


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def is_cycle(message: Message, target_queue: str) -> bool:
    """True when dead-lettering ``message`` into ``target_queue`` closes an automatic cycle
    (the queue is in its x-death history and no death there was ``rejected``)."""
    for death in (message.headers or {}).get("x-death") or []:
        if not isinstance(death, dict):
            continue
        if _text(death.get("reason")) == "rejected":
            return False
        if _text(death.get("queue")) == target_queue:
            return True
    return False
