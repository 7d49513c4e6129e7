"""Field tables in method frames, checked before pamqp decodes them.

pamqp decodes nested tables and arrays recursively with no limit, so a frame of 128 KiB can
nest deep enough to exhaust Python's recursion limit. Before decoding a method that carries a
table (Connection.StartOk, Exchange.Declare/Bind/Unbind, Queue.Declare/Bind/Unbind,
Basic.Consume...), the fields before each table are skipped by their AMQP types and the table
is checked by :func:`queue_store.properties.check_table`, whose recursion stops at
``MAX_TABLE_DEPTH`` levels (the same limit as for the ``headers`` property).

Deliberate difference: RabbitMQ has no nesting limit. A deeper table is answered with 502
SYNTAX_ERROR, as any field that does not decode.

Source: AMQP 0-9-1 spec 4.2.5 (field types), 4.2.5.5 (field tables).
"""

from __future__ import annotations

import struct

from pamqp import commands

from queue_store.properties import check_table

_FIXED = {"octet": 1, "short": 2, "long": 4, "longlong": 8, "timestamp": 8}


def _layout(cls: type) -> tuple[str, ...]:
    return tuple(cls.amqp_type(name) for name in cls.__slots__  # type: ignore[attr-defined]
                 if not name.startswith("_"))


#: method class -> AMQP types of its fields, for the methods that carry a table
TABLE_METHODS: dict[type, tuple[str, ...]] = {
    cls: layout for cls in commands.INDEX_MAPPING.values()
    if "table" in (layout := _layout(cls))
}


def check_method_tables(cls: type, args: bytes) -> None:
    """Check every field table in the arguments of a ``cls`` method frame (the payload after
    the class and method ids).

    Raises:
        ValueError: a table is malformed or nested too deeply, or the fields before it do
            not fit (the caller answers 502 SYNTAX_ERROR).
    """
    layout = TABLE_METHODS.get(cls)
    if layout is None:
        return
    pos = 0
    bits = 0  # consecutive bits share an octet, 8 to an octet (spec 4.2.5.2)
    try:
        for kind in layout:
            if kind == "bit":
                if bits % 8 == 0:
                    pos += 1
                bits += 1
                continue
            bits = 0
            if kind == "table":
                pos = check_table(args, pos)
            elif kind == "shortstr":
                pos += 1 + args[pos]
            elif kind == "longstr":
                pos += 4 + struct.unpack_from(">I", args, pos)[0]
            else:
                pos += _FIXED[kind]
    except (struct.error, IndexError):
        raise ValueError("method arguments truncated") from None
