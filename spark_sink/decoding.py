"""Message bodies back into rows: the inverse of :mod:`spark_sink.encoding`, for the source.

``format`` ``json`` (one object per body: Spark's ``to_json`` forms, as the sink writes them:
dates ``yyyy-MM-dd``, timestamps ISO 8601, binary base64, "NaN"/"Infinity"), ``csv`` (one
RFC 4180 record, no header; an empty field is null) or ``avro`` (single-object encoding:
``C3 01``, the schema's 8-byte fingerprint, the record; a body written with another schema is
refused), decoded into the fields of a given Spark schema (missing JSON fields are null).

Source: the sink's encoders (spark_sink/encoding.py); Apache Avro 1.11 specification,
"Single object encoding"; fastavro's schemaless_reader.
"""

from __future__ import annotations

import base64
import csv
import datetime as dt
import decimal
import io
import json
import math
from collections.abc import Callable
from typing import Any

from pyspark.sql import types as T

__all__ = ["DecodeError", "body_decoder"]

FORMATS = ("json", "csv", "avro")
_SPECIAL = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class DecodeError(ValueError):
    """A body that does not decode into the schema (the message says why)."""


def body_decoder(fmt: str, schema: T.StructType) -> Callable[[bytes], tuple[Any, ...]]:
    """A function from a body to a tuple of ``schema``'s fields.

    Raises:
        ValueError: ``fmt`` is not json, csv or avro; (from the function) DecodeError.
    """
    fields = schema.fields
    if fmt == "json":
        def from_json(body: bytes) -> tuple[Any, ...]:
            try:
                obj = json.loads(body)
            except ValueError as exc:
                raise DecodeError(f"body is not JSON: {exc}") from None
            if not isinstance(obj, dict):
                raise DecodeError("JSON body is not an object")
            return tuple(_json_value(obj.get(f.name), f.dataType) for f in fields)
        return from_json
    if fmt == "csv":
        def from_csv(body: bytes) -> tuple[Any, ...]:
            record = next(csv.reader(io.StringIO(body.decode("utf-8"))), [])
            if len(record) != len(fields):
                raise DecodeError(f"CSV record has {len(record)} fields, the schema "
                                  f"{len(fields)}")
            return tuple(None if text == "" else _text_value(text, f.dataType)
                         for text, f in zip(record, fields, strict=True))
        return from_csv
    if fmt == "avro":
        return _avro_decoder(schema)
    raise ValueError(f"format {fmt!r} is not one of {', '.join(FORMATS)}")


def _json_value(v: Any, t: T.DataType) -> Any:
    if v is None:
        return None
    if isinstance(t, T.StringType):
        return v if isinstance(v, str) else json.dumps(v)
    if isinstance(t, (T.LongType, T.IntegerType, T.ShortType, T.ByteType)):
        return int(v)
    if isinstance(t, (T.DoubleType, T.FloatType)):
        return _SPECIAL[v] if isinstance(v, str) else float(v)
    if isinstance(t, T.BooleanType):
        return bool(v)
    if isinstance(t, T.DecimalType):
        return decimal.Decimal(str(v))
    if isinstance(t, (T.DateType, T.TimestampType, T.TimestampNTZType, T.BinaryType)):
        return _text_value(str(v), t)
    if isinstance(t, T.ArrayType):
        return [_json_value(x, t.elementType) for x in v]
    if isinstance(t, T.MapType):
        return {_text_value(str(k), t.keyType): _json_value(x, t.valueType)
                for k, x in v.items()}
    if isinstance(t, T.StructType):
        return tuple(_json_value(v.get(f.name), f.dataType) for f in t.fields)
    raise DecodeError(f"type {t.simpleString()} is not decoded")


def _text_value(text: str, t: T.DataType) -> Any:
    """A value from its text (CSV fields, JSON strings, map keys)."""
    try:
        if isinstance(t, T.StringType):
            return text
        if isinstance(t, (T.LongType, T.IntegerType, T.ShortType, T.ByteType)):
            return int(text)
        if isinstance(t, (T.DoubleType, T.FloatType)):
            return _SPECIAL[text] if text in _SPECIAL else float(text)
        if isinstance(t, T.BooleanType):
            return text.strip().lower() == "true"
        if isinstance(t, T.DecimalType):
            return decimal.Decimal(text)
        if isinstance(t, T.DateType):
            return dt.date.fromisoformat(text)
        if isinstance(t, (T.TimestampType, T.TimestampNTZType)):
            stamp = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace(" ", "T"))
            if isinstance(t, T.TimestampType) and stamp.tzinfo is None:
                stamp = stamp.replace(tzinfo=dt.UTC)
            return stamp
        if isinstance(t, T.BinaryType):
            return base64.b64decode(text)
    except (ValueError, decimal.InvalidOperation) as exc:
        raise DecodeError(f"{text!r} is not a {t.simpleString()}: {exc}") from None
    raise DecodeError(f"type {t.simpleString()} is not decoded from text")


def _avro_decoder(schema: T.StructType) -> Callable[[bytes], tuple[Any, ...]]:
    import fastavro

    from spark_sink.avro_schema import avro_schema
    from spark_sink.encoding import avro_fingerprint

    parsed = fastavro.parse_schema(avro_schema(schema))
    header = b"\xc3\x01" + avro_fingerprint(parsed).to_bytes(8, "little")
    fields = schema.fields

    def from_avro(body: bytes) -> tuple[Any, ...]:
        if body[:10] != header:
            raise DecodeError("body is not Avro written with this schema (its single-object "
                              "header differs)")
        record = fastavro.schemaless_reader(io.BytesIO(body[10:]), parsed, parsed)
        return tuple(_avro_value(record.get(f.name), f.dataType) for f in fields)
    return from_avro


def _avro_value(v: Any, t: T.DataType) -> Any:
    if v is None:
        return None
    if isinstance(t, T.StructType):
        return tuple(_avro_value(v.get(f.name), f.dataType) for f in t.fields)
    if isinstance(t, T.ArrayType):
        return [_avro_value(x, t.elementType) for x in v]
    if isinstance(t, T.MapType):
        return {k: _avro_value(x, t.valueType) for k, x in v.items()}
    if isinstance(t, T.TimestampType) and isinstance(v, dt.datetime) and v.tzinfo is None:
        return v.replace(tzinfo=dt.UTC)
    return v
