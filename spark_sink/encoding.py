"""Message bodies from Arrow record batches: JSON, CSV, a body column, or Avro.

Everything that can be done column-wise is done in Arrow compute kernels; Python touches each
row once, to get its ``bytes``.

JSON follows Spark's ``to_json``: one object per row with the columns in schema order, dates as
``yyyy-MM-dd``, timestamps as ISO 8601 in UTC (``2024-01-02T03:04:05.000006Z``), decimals as
JSON numbers, binary as base64, NaN/Infinity as the strings "NaN"/"Infinity"/"-Infinity"
(Jackson's default). Unlike ``to_json``, null fields are kept as ``null``.

Avro bodies are single-object encodings written by fastavro (:class:`AvroEncoder`) with the
schema :func:`spark_sink.avro_schema.avro_schema` maps the DataFrame's types to.

Sources: Apache Arrow compute functions, https://arrow.apache.org/docs/python/api/compute.html;
Spark JSON options, https://spark.apache.org/docs/latest/sql-data-sources-json.html;
RFC 4180 (CSV); Apache Avro 1.11 specification,
https://avro.apache.org/docs/1.11.1/specification/.
"""

from __future__ import annotations

import base64
import csv
import datetime as dt
import decimal
import io
import math
from collections.abc import Callable
from json.encoder import encode_basestring  # C-accelerated
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
from fastavro.schema import fingerprint, to_parsing_canonical_form
from pyspark.sql import types as T

from spark_sink.avro_schema import avro_schema

_NEEDS_ESCAPE = r'[\x00-\x1f"\\]'
_NON_FINITE = {"nan": '"NaN"', "inf": '"Infinity"', "-inf": '"-Infinity"'}

BodyEncoder = Callable[[pa.RecordBatch], list[bytes]]


# ---------------------------------------------------------------------------------------- JSON
def json_fragments(col: pa.Array) -> pa.Array:
    """One JSON text per value of ``col`` (a string array, ``null`` for nulls)."""
    t = col.type
    if pa.types.is_dictionary(t):
        return json_fragments(col.dictionary_decode())
    if pa.types.is_null(t):
        return pa.array(["null"] * len(col), pa.string())
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        col = col.cast(pa.string())
        if not pc.any(pc.match_substring_regex(col, _NEEDS_ESCAPE)).as_py():
            out = pc.binary_join_element_wise('"', col, '"', "")
        else:
            out = pa.array([None if v is None else encode_basestring(v) for v in col.to_pylist()],
                           pa.string())
    elif pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_decimal(t):
        out = pc.cast(col, pa.string())
    elif pa.types.is_floating(t):
        if pa.types.is_float64(t):
            out = pa.array([None if v is None else float.__repr__(v) for v in col.to_pylist()],
                           pa.string())
        else:  # float32: Arrow prints the shortest text that reads back as the same float32
            out = pc.cast(col, pa.string())
            out = pa.array([None if v is None else (v if _has_point(v) else v + ".0")
                            for v in out.to_pylist()], pa.string())
        if not pc.all(pc.fill_null(pc.is_finite(col), True)).as_py():
            out = pa.array([None if v is None else _NON_FINITE.get(v, v)
                            for v in out.to_pylist()], pa.string())
    elif pa.types.is_date(t):
        out = pc.binary_join_element_wise('"', pc.cast(col, pa.string()), '"', "")
    elif pa.types.is_timestamp(t):
        utc = col.cast(pa.timestamp("us", "UTC" if t.tz else None))
        text = pc.replace_substring(pc.cast(utc, pa.string()),
                                    " ", "T", max_replacements=1)
        out = pc.binary_join_element_wise('"', text, '"', "")
    else:
        out = pa.array([None if v is None else json_text(v, t) for v in col.to_pylist()],
                       pa.string())
    if out.null_count:
        out = pc.fill_null(out, "null")
    return out


def _has_point(text: str) -> bool:
    return "." in text or "e" in text or "n" in text  # 1.5, 1e+20, nan/inf


def json_text(value: Any, t: pa.DataType) -> str:
    """One value from ``Array.to_pylist()`` of Arrow type ``t`` as JSON text (nested types
    included; same conventions as :func:`json_fragments`)."""
    if value is None:
        return "null"
    if pa.types.is_struct(t):
        return "{" + ",".join(
            encode_basestring(f.name) + ":" + json_text(value.get(f.name), f.type) for f in t
        ) + "}"
    if pa.types.is_map(t):
        return "{" + ",".join(
            encode_basestring(str(k)) + ":" + json_text(v, t.item_type) for k, v in value
        ) + "}"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return "[" + ",".join(json_text(v, t.value_type) for v in value) + "]"
    if pa.types.is_dictionary(t):
        return json_text(value, t.value_type)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return float.__repr__(value) if math.isfinite(value) else _NON_FINITE[repr(value)]
    if isinstance(value, str):
        return encode_basestring(value)
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dt.datetime):
        return '"' + iso_timestamp(value) + '"'
    if isinstance(value, dt.date):
        return '"' + value.isoformat() + '"'
    if isinstance(value, bytes | bytearray):
        return '"' + base64.b64encode(value).decode("ascii") + '"'
    return encode_basestring(str(value))


def iso_timestamp(value: dt.datetime) -> str:
    """ISO 8601 with microseconds; aware values in UTC with a ``Z``."""
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value.isoformat(timespec="microseconds") + "Z"
    return value.isoformat(timespec="microseconds")


def json_bodies(batch: pa.RecordBatch) -> list[bytes]:
    """Each row of ``batch`` as one UTF-8 JSON object (column order = schema order)."""
    if batch.num_rows == 0:
        return []
    if batch.num_columns == 0:
        return [b"{}"] * batch.num_rows
    args: list[Any] = []
    for i, name in enumerate(batch.schema.names):
        key = encode_basestring(name)
        args.append(("{" if i == 0 else ",") + key + ":")
        args.append(json_fragments(batch.column(i)))
    args.append("}")
    joined = pc.binary_join_element_wise(*args, "")
    return joined.cast(pa.binary()).to_pylist()


# ----------------------------------------------------------------------------------------- CSV
def csv_bodies(batch: pa.RecordBatch) -> list[bytes]:
    """Each row as one RFC 4180 CSV record without header or line break (nulls are empty)."""
    if batch.num_rows == 0:
        return []
    multiline = False
    for col in batch.columns:
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            if pc.any(pc.match_substring_regex(col, r"[\r\n]")).as_py():
                multiline = True
                break
    if not multiline:
        out = io.BytesIO()
        pacsv.write_csv(batch, out, pacsv.WriteOptions(include_header=False))
        lines = out.getvalue().split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        if len(lines) == batch.num_rows:
            return lines
    return _csv_bodies_slow(batch)


def _csv_bodies_slow(batch: pa.RecordBatch) -> list[bytes]:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\r\n", quoting=csv.QUOTE_MINIMAL)
    bodies: list[bytes] = []
    for row in zip(*(_csv_values(c) for c in batch.columns), strict=True):
        buf.seek(0)
        buf.truncate()
        writer.writerow(row)
        bodies.append(buf.getvalue()[:-2].encode())
    return bodies


def _csv_values(col: pa.Array) -> list[Any]:
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        return col.to_pylist()
    return pc.cast(col, pa.string()).to_pylist()  # same text as Arrow's CSV writer


# ---------------------------------------------------------------------------------------- Avro
def avro_fingerprint(schema: Any) -> int:
    """The CRC-64-AVRO (Rabin) fingerprint of ``schema``'s Parsing Canonical Form, as an int.

    ``schema`` is an Avro schema as JSON-ready data (parsed by fastavro or not); e.g.
    ``"int"`` -> ``0x7275D51A3F395C8F``. fastavro gives the fingerprint as the hex of its
    8 little-endian bytes (Java's order, the one single-object headers carry).
    """
    canonical = to_parsing_canonical_form(fastavro.parse_schema(schema))
    return int.from_bytes(bytes.fromhex(fingerprint(canonical, "CRC-64-AVRO")), "little")


class AvroEncoder:
    """Encodes Arrow record batches with the columns of ``schema`` as Avro single-object bodies.

    A body is ``C3 01`` + the 8-byte little-endian CRC-64-AVRO fingerprint of the schema
    (:attr:`header`) + the row in Avro binary encoding (fastavro's ``schemaless_writer``), so
    a consumer can tell which schema wrote it; :attr:`schema` is that schema
    (:func:`spark_sink.avro_schema.avro_schema`).

    Before fastavro sees a row: top-level dates and timestamps become the days/microseconds
    Avro stores (Arrow casts), maps become dicts, and decimals become their minimal
    big-endian two's-complement unscaled bytes (as Java's Avro and Spark's own Avro writer;
    fastavro adds a byte when the unscaled value is -2**(8k-1)). Nested dates and
    timestamps are fastavro's (Arrow gives timestamps with their zone, so the result does
    not depend on the process's zone).

    Args:
        schema: the DataFrame's Spark schema.

    Raises:
        AvroSchemaError: ``schema`` has no Avro mapping (checked by the driver beforehand).

    Sources: Avro 1.11 specification, "Single object encoding",
    https://avro.apache.org/docs/1.11.1/specification/#single-object-encoding; fastavro,
    https://fastavro.readthedocs.io/en/latest/writer.html#fastavro._write_py.schemaless_writer.
    """

    def __init__(self, schema: T.StructType) -> None:
        self.schema = avro_schema(schema)
        self._parsed = fastavro.parse_schema(self.schema)
        self.fingerprint = avro_fingerprint(self._parsed)
        self.header = b"\xc3\x01" + self.fingerprint.to_bytes(8, "little")
        self._names = schema.fieldNames()
        self._prepare = [_avro_value(f.dataType) for f in schema.fields]

    def bodies(self, batch: pa.RecordBatch) -> list[bytes]:
        """One single-object-encoded body per row of ``batch``."""
        if batch.num_rows == 0:
            return []
        columns = []
        for i, prepare in enumerate(self._prepare):
            values = _avro_column(batch.column(i))
            if prepare is not None:
                values = [None if v is None else prepare(v) for v in values]
            columns.append(values)
        out = io.BytesIO()
        header, parsed, names, write = self.header, self._parsed, self._names, \
            fastavro.schemaless_writer
        ends = []
        rows = zip(*columns, strict=True) if columns else [()] * batch.num_rows
        for row in rows:
            out.write(header)
            write(out, parsed, dict(zip(names, row, strict=True)), disable_tuple_notation=True)
            ends.append(out.tell())
        data = out.getbuffer()
        starts = [0, *ends[:-1]]
        return [bytes(data[s:e]) for s, e in zip(starts, ends, strict=True)]


def _avro_column(col: pa.Array) -> list[Any]:
    """A column's values, dates and timestamps as the integers Avro stores (Arrow casts)."""
    t = col.type
    if pa.types.is_date32(t):
        return col.cast(pa.int32()).to_pylist()
    if pa.types.is_timestamp(t):
        return pc.cast(col.cast(pa.timestamp("us", t.tz)), pa.int64()).to_pylist()
    return col.to_pylist()


def _avro_value(t: T.DataType) -> Callable[[Any], Any] | None:
    """What makes a non-null Python value of Spark type ``t`` (as Arrow's ``to_pylist`` gives
    it) fastavro's input, or None when it already is."""
    if isinstance(t, T.DecimalType):
        scale = t.scale
        return lambda v: _unscaled_bytes(v, scale)
    if isinstance(t, T.MapType):  # Arrow: a list of (key, value) pairs
        value = _avro_value(t.valueType)
        if value is None:
            return dict
        return lambda pairs: {k: None if v is None else value(v) for k, v in pairs}
    if isinstance(t, T.ArrayType):
        item = _avro_value(t.elementType)
        if item is None:
            return None
        return lambda items: [None if v is None else item(v) for v in items]
    if isinstance(t, T.StructType):  # Arrow: a dict; changed in place
        fields = [(f.name, p) for f in t.fields if (p := _avro_value(f.dataType)) is not None]
        if not fields:
            return None

        def record(row: dict[str, Any]) -> dict[str, Any]:
            for name, prepare in fields:
                if row[name] is not None:
                    row[name] = prepare(row[name])
            return row
        return record
    return None


_EXACT = decimal.Context(prec=80)  # Spark decimals have at most 38 digits


def _unscaled_bytes(value: decimal.Decimal, scale: int) -> bytes:
    """``value * 10**scale`` as minimal big-endian two's complement (Avro ``decimal``)."""
    unscaled = int(value.scaleb(scale, _EXACT))
    size = (unscaled + (unscaled < 0)).bit_length() // 8 + 1
    return unscaled.to_bytes(size, "big", signed=True)


# ------------------------------------------------------------------------------- body column
def column_bodies(col: pa.Array) -> list[bytes]:
    """A binary or string column's values as bodies (null becomes an empty body)."""
    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    if col.null_count:
        col = pc.fill_null(col.cast(pa.binary()), b"")
    return col.cast(pa.binary()).to_pylist()


def string_values(col: pa.Array) -> list[str | None]:
    """Any atomic column's values as text (Arrow's cast; timestamps in ISO 8601 UTC)."""
    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        return col.to_pylist()
    if pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type):
        return [None if v is None else v.decode("utf-8", "replace") for v in col.to_pylist()]
    if pa.types.is_timestamp(col.type):
        return [None if v is None else iso_timestamp(v) for v in col.to_pylist()]
    return pc.cast(col, pa.string()).to_pylist()
