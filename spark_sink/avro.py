"""Avro bodies: each row as an Avro *single-object encoding* (no extra dependency).

A body is ``C3 01`` + the 8-byte little-endian CRC-64-AVRO fingerprint of the schema's
Parsing Canonical Form + the row's Avro binary encoding, so a consumer can tell which schema
wrote it; :func:`avro_schema` gives the schema (the driver also logs it). Nullable columns are
unions ``["null", T]``; dates are ``int``/``date``, timestamps ``long``/``timestamp-micros``
(``local-timestamp-micros`` without time zone), decimals ``bytes``/``decimal``.

Sources: Apache Avro 1.11 specification, https://avro.apache.org/docs/1.11.1/specification/
(binary encoding, single-object encoding, parsing canonical form, schema fingerprints);
Spark data types, https://spark.apache.org/docs/latest/sql-ref-datatypes.html.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import re
import struct
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import types as T

RECORD_NAME = "Row"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_pack_f32 = struct.Struct("<f").pack
_pack_f64 = struct.Struct("<d").pack

Writer = Callable[[Any, bytearray], None]


class AvroSchemaError(ValueError):
    """A Spark type or column name that Avro cannot represent."""


# ------------------------------------------------------------------------------- schema
def avro_schema(schema: T.StructType) -> dict[str, Any]:
    """The Avro record schema (as a JSON-ready dict) used for rows of ``schema``."""
    return _record(schema, RECORD_NAME)


def _record(struct_type: T.StructType, name: str) -> dict[str, Any]:
    fields = []
    for f in struct_type.fields:
        if not _NAME.match(f.name):
            raise AvroSchemaError(f"column {f.name!r} is not a valid Avro name "
                                  "([A-Za-z_][A-Za-z0-9_]*); rename it")
        fields.append({"name": f.name, "type": _field_type(f.dataType, f.nullable,
                                                          f"{name}_{f.name}")})
    return {"type": "record", "name": name, "fields": fields}


def _field_type(t: T.DataType, nullable: bool, path: str) -> Any:
    inner = _type(t, path)
    return ["null", inner] if nullable else inner


def _type(t: T.DataType, path: str) -> Any:
    if isinstance(t, T.BooleanType):
        return "boolean"
    if isinstance(t, T.ByteType | T.ShortType | T.IntegerType):
        return "int"
    if isinstance(t, T.LongType):
        return "long"
    if isinstance(t, T.FloatType):
        return "float"
    if isinstance(t, T.DoubleType):
        return "double"
    if isinstance(t, T.StringType):
        return "string"
    if isinstance(t, T.BinaryType):
        return "bytes"
    if isinstance(t, T.DateType):
        return {"type": "int", "logicalType": "date"}
    if isinstance(t, T.TimestampType):
        return {"type": "long", "logicalType": "timestamp-micros"}
    if isinstance(t, T.TimestampNTZType):
        return {"type": "long", "logicalType": "local-timestamp-micros"}
    if isinstance(t, T.DecimalType):
        return {"type": "bytes", "logicalType": "decimal", "precision": t.precision,
                "scale": t.scale}
    if isinstance(t, T.ArrayType):
        return {"type": "array", "items": _field_type(t.elementType, t.containsNull, path)}
    if isinstance(t, T.MapType):
        if not isinstance(t.keyType, T.StringType):
            raise AvroSchemaError(f"{path}: Avro maps need string keys, got {t.keyType}")
        return {"type": "map", "values": _field_type(t.valueType, t.valueContainsNull, path)}
    if isinstance(t, T.StructType):
        return _record(t, path)
    raise AvroSchemaError(f"{path}: type {t.simpleString()} has no Avro mapping")


def canonical_form(schema: Any) -> str:
    """The schema's Parsing Canonical Form (spec: "Parsing Canonical Form for Schemas")."""
    if isinstance(schema, str):
        return json.dumps(schema)
    if isinstance(schema, list):
        return "[" + ",".join(canonical_form(s) for s in schema) + "]"
    kind = schema["type"]
    if kind == "record":
        fields = ",".join(
            '{"name":' + json.dumps(f["name"]) + ',"type":' + canonical_form(f["type"]) + "}"
            for f in schema["fields"]
        )
        return '{"name":' + json.dumps(schema["name"]) + ',"type":"record","fields":[' + \
            fields + "]}"
    if kind == "array":
        return '{"type":"array","items":' + canonical_form(schema["items"]) + "}"
    if kind == "map":
        return '{"type":"map","values":' + canonical_form(schema["values"]) + "}"
    return json.dumps(kind)  # primitive with a logicalType: attributes are stripped


def _crc64_table() -> list[int]:
    empty = 0xC15D213AA4D7A795
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (empty & -(fp & 1))
        table.append(fp)
    return table


_CRC_TABLE = _crc64_table()


def fingerprint(schema: Any) -> int:
    """CRC-64-AVRO (Rabin) fingerprint of the schema's canonical form."""
    fp = 0xC15D213AA4D7A795
    for byte in canonical_form(schema).encode("utf-8"):
        fp = (fp >> 8) ^ _CRC_TABLE[(fp ^ byte) & 0xFF]
    return fp


def single_object_header(schema: Any) -> bytes:
    """``C3 01`` + fingerprint (little-endian): the prefix of every body."""
    return b"\xc3\x01" + struct.pack("<Q", fingerprint(schema))


# ----------------------------------------------------------------------------- encoding
def _long(n: int, out: bytearray) -> None:
    n = (n << 1) ^ (n >> 63)
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _writer(t: T.DataType, nullable: bool) -> Writer:
    w = _plain_writer(t)
    if not nullable:
        return w

    def nullable_writer(v: Any, out: bytearray) -> None:
        if v is None:
            out.append(0)
        else:
            out.append(2)
            w(v, out)

    return nullable_writer


def _plain_writer(t: T.DataType) -> Writer:
    if isinstance(t, T.BooleanType):
        return lambda v, out: out.append(1 if v else 0)
    if isinstance(t, T.ByteType | T.ShortType | T.IntegerType | T.LongType):
        return _long
    if isinstance(t, T.FloatType):
        return lambda v, out: out.extend(_pack_f32(v))
    if isinstance(t, T.DoubleType):
        return lambda v, out: out.extend(_pack_f64(v))
    if isinstance(t, T.StringType):
        def string(v: str, out: bytearray) -> None:
            data = v.encode("utf-8")
            _long(len(data), out)
            out += data
        return string
    if isinstance(t, T.BinaryType):
        def raw(v: bytes, out: bytearray) -> None:
            _long(len(v), out)
            out += v
        return raw
    if isinstance(t, T.DateType):
        def date(v: Any, out: bytearray) -> None:
            _long(v if isinstance(v, int) else (v - dt.date(1970, 1, 1)).days, out)
        return date
    if isinstance(t, T.TimestampType | T.TimestampNTZType):
        def micros(v: Any, out: bytearray) -> None:
            if not isinstance(v, int):
                base = _EPOCH_UTC if v.tzinfo is not None else _EPOCH
                delta = v - base
                v = (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
            _long(v, out)
        return micros
    if isinstance(t, T.DecimalType):
        scale = t.scale

        def dec(v: decimal.Decimal, out: bytearray) -> None:
            unscaled = int(v.scaleb(scale))
            size = (unscaled + (unscaled < 0)).bit_length() // 8 + 1
            data = unscaled.to_bytes(size, "big", signed=True)
            _long(len(data), out)
            out += data
        return dec
    if isinstance(t, T.ArrayType):
        item = _writer(t.elementType, t.containsNull)

        def array(v: list[Any], out: bytearray) -> None:
            if v:
                _long(len(v), out)
                for x in v:
                    item(x, out)
            out.append(0)
        return array
    if isinstance(t, T.MapType):
        value_w = _writer(t.valueType, t.valueContainsNull)
        key_w = _plain_writer(T.StringType())

        def mapping(v: Any, out: bytearray) -> None:
            pairs = list(v.items()) if isinstance(v, dict) else v
            if pairs:
                _long(len(pairs), out)
                for k, x in pairs:
                    key_w(k, out)
                    value_w(x, out)
            out.append(0)
        return mapping
    if isinstance(t, T.StructType):
        names = t.fieldNames()
        writers = [_writer(f.dataType, f.nullable) for f in t.fields]

        def record(v: Any, out: bytearray) -> None:
            for name, w in zip(names, writers, strict=True):
                w(v.get(name) if isinstance(v, dict) else v[name], out)
        return record
    raise AvroSchemaError(f"type {t.simpleString()} has no Avro mapping")


class AvroEncoder:
    """Encodes Arrow record batches with the columns of ``schema`` into single-object bodies.

    Args:
        schema: the DataFrame's Spark schema (validated by :func:`avro_schema`).
    """

    def __init__(self, schema: T.StructType) -> None:
        self.schema = avro_schema(schema)
        self.prefix = single_object_header(self.schema)
        self._writers = [_writer(f.dataType, f.nullable) for f in schema.fields]

    def bodies(self, batch: pa.RecordBatch) -> list[bytes]:
        """One single-object-encoded body per row of ``batch``."""
        cols = [_plain_values(batch.column(i)) for i in range(batch.num_columns)]
        writers = self._writers
        prefix = self.prefix
        out: list[bytes] = []
        for row in zip(*cols, strict=True):
            buf = bytearray(prefix)
            for w, v in zip(writers, row, strict=True):
                w(v, buf)
            out.append(bytes(buf))
        return out


def _plain_values(col: pa.Array) -> list[Any]:
    """Column values with dates/timestamps as the integers Avro stores (fast casts)."""
    t = col.type
    if pa.types.is_date32(t):
        return col.cast(pa.int32()).to_pylist()
    if pa.types.is_timestamp(t):
        return pc.cast(col.cast(pa.timestamp("us", t.tz)), pa.int64()).to_pylist()
    return col.to_pylist()
