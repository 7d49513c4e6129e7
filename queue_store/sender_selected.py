"""Sender-selected distribution: the ``CC`` and ``BCC`` headers add routing keys.

A message whose headers hold ``CC`` and/or ``BCC`` (arrays of strings) is routed with its
routing key and with each of those keys; the union of the queues reached gets one copy. The
``BCC`` header is removed before the message is stored or delivered.

Source: https://www.rabbitmq.com/docs/sender-selected
"""

from __future__ import annotations

from amqp_common.properties import join_properties, join_table, split_properties, split_table
from queue_store.message import FLAG_HEADERS, Message


def extra_routing_keys(message: Message) -> list[str]:
    """The routing keys from ``CC`` and ``BCC`` (empty for most messages, without decoding
    their properties: a byte search rules them out first)."""
    if not message.flags & FLAG_HEADERS:
        return []
    raw = message.properties_raw
    if b"\x02CC" not in raw and b"\x03BCC" not in raw:
        return []
    headers = message.headers or {}
    keys: list[str] = []
    for name in ("CC", "BCC"):
        value = headers.get(name)
        if isinstance(value, list):
            # longstrs are bytes: keep non-UTF-8 ones reversible rather than fail
            keys.extend(v.decode("utf-8", "surrogateescape") if isinstance(v, bytes) else str(v)
                        for v in value)
    return keys


def without_bcc(message: Message) -> Message:
    """``message`` without its ``BCC`` header (byte-level edit; the same object if none)."""
    if b"\x03BCC" not in message.properties_raw or "BCC" not in (message.headers or {}):
        return message
    fields = split_properties(message.properties_raw)
    entries = [(k, v) for k, v in split_table(fields["headers"]) if k != "BCC"]
    fields["headers"] = join_table(entries)
    return Message(message.exchange, message.routing_key, message.ex_rk_raw,
                   join_properties(fields), message.body)
