"""Field tables in method frames, checked before pamqp decodes them.

pamqp decodes nested tables and arrays recursively with no limit, so a frame of 128 KiB can
nest deep enough to exhaust Python's recursion limit. Before decoding a method that carries a
table (Connection.StartOk, Exchange.Declare/Bind/Unbind, Queue.Declare/Bind/Unbind,
Basic.Consume...), the fields before each table are skipped by their AMQP types and the table
is checked by :func:`amqp_common.properties.check_table`, whose recursion stops at
``MAX_TABLE_DEPTH`` levels (the same limit as for the ``headers`` property).

Deliberate difference: RabbitMQ has no nesting limit. A deeper table is answered with 502
SYNTAX_ERROR, as any field that does not decode.

pamqp decodes numbers without their wire type, but RabbitMQ names it in 406 texts
(``{unacceptable_type,byte}``, ``the value '5' of type 'short'``): :func:`with_wire_types`
gives the numbers of a method's ``arguments`` table a subclass of int/float that carries
RabbitMQ's name for the type they were sent as (``amqp_type``).

Source: AMQP 0-9-1 spec 4.2.5 (field types), 4.2.5.5 (field tables).
"""

from __future__ import annotations

import struct
from typing import Any

from pamqp import commands

from amqp_common.properties import Long, Timestamp, check_table, split_table

_FIXED = {"octet": 1, "short": 2, "long": 4, "longlong": 8, "timestamp": 8}


def _number_type(base: type, name: str) -> type:
    def reduce(self: Any) -> tuple[Any, ...]:  # pickled across worker links, type kept
        return wire_number, (name, base(self))

    return type(f"Wire_{name}", (base,), {"__slots__": (), "amqp_type": name,
                                          "__reduce__": reduce})


def wire_number(amqp_type: str, value: float) -> Any:
    """The number ``value`` as sent with field type ``amqp_type`` (unpickling)."""
    cls = next(c for c in WIRE_NUMBER_TYPES.values()
               if getattr(c, "amqp_type", None) == amqp_type)
    return cls(value)


#: field type tag -> number subclass named as RabbitMQ's rabbit_binary_parser names the type
WIRE_NUMBER_TYPES: dict[str, type] = {
    "b": _number_type(int, "byte"), "B": _number_type(int, "unsignedbyte"),
    "s": _number_type(int, "short"), "u": _number_type(int, "unsignedshort"),
    "I": _number_type(int, "signedint"), "i": _number_type(int, "unsignedint"),
    "l": Long, "L": Long, "f": _number_type(float, "float"),
    "T": Timestamp,  # only past datetime's range (below it pamqp's decoding is a datetime)
}


def _layout(cls: type) -> tuple[tuple[str, str], ...]:
    return tuple((name, cls.amqp_type(name)) for name in cls.__slots__  # type: ignore[attr-defined]
                 if not name.startswith("_"))


#: method class -> (name, AMQP type) of its fields, for the methods that carry a table
TABLE_METHODS: dict[type, tuple[tuple[str, str], ...]] = {
    cls: layout for cls, layout in ((c, _layout(c)) for c in commands.INDEX_MAPPING.values())
    if any(kind == "table" for _, kind in layout)
}


def check_method_tables(cls: type, args: bytes) -> list[tuple[str, int]]:
    """Check every field table in the arguments of a ``cls`` method frame (the payload after
    the class and method ids). Returns ``[(field name, offset in args)]`` of the tables.

    Raises:
        ValueError: a table is malformed or nested too deeply, or the fields before it do
            not fit (the caller answers 502 SYNTAX_ERROR).
    """
    layout = TABLE_METHODS.get(cls)
    if layout is None:
        return []
    tables = []
    pos = 0
    bits = 0  # consecutive bits share an octet, 8 to an octet (spec 4.2.5.2)
    try:
        for name, kind in layout:
            if kind == "bit":
                if bits % 8 == 0:
                    pos += 1
                bits += 1
                continue
            bits = 0
            if kind == "table":
                tables.append((name, pos))
                pos = check_table(args, pos)
            elif kind == "shortstr":
                pos += 1 + args[pos]
            elif kind == "longstr":
                pos += 4 + struct.unpack_from(">I", args, pos)[0]
            else:
                pos += _FIXED[kind]
    except (struct.error, IndexError):
        raise ValueError("method arguments truncated") from None
    return tables


def with_wire_types(values: dict[str, Any], raw_table: bytes) -> dict[str, Any]:
    """``values`` (pamqp's decoding of ``raw_table``, a checked table with its u32 size) with
    each top-level number replaced by a :data:`WIRE_NUMBER_TYPES` instance of equal value."""
    out = dict(values)
    for key, raw in split_table(raw_table):
        wire = WIRE_NUMBER_TYPES.get(chr(raw[0]))
        value = out.get(key)
        if wire is not None and isinstance(value, int | float) and not isinstance(value, bool):
            out[key] = wire(value)
    return out
