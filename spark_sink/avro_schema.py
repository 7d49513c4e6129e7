"""The Avro schema of a DataFrame's rows (``format=avro``): our Spark -> Avro type mapping.

One record named ``Row`` with a field per column, in column order; nested structs are records
named after their path (``Row_address``, ``Row_address_geo``). Nullable columns, array items
and map values are unions ``["null", T]``. Byte/short/int are ``int``; dates ``int``/``date``
(days since 1970-01-01); timestamps ``long``/``timestamp-micros`` (``local-timestamp-micros``
for ``TIMESTAMP_NTZ``); decimals ``bytes``/``decimal`` with Spark's precision and scale; maps
need string keys. Encoding the rows with this schema is fastavro's job
(:class:`spark_sink.encoding.AvroEncoder`).

Errors: :class:`AvroSchemaError` names the column or nested path Avro cannot represent.

Sources: Apache Avro 1.11 specification, https://avro.apache.org/docs/1.11.1/specification/
(names, logical types); Spark data types,
https://spark.apache.org/docs/latest/sql-ref-datatypes.html.
"""

from __future__ import annotations

import re
from typing import Any

from pyspark.sql import types as T

RECORD_NAME = "Row"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


# Atomic Spark types and their Avro types (logical types on int/long), first match wins.
_ATOMIC: tuple[tuple[Any, str | dict[str, str]], ...] = (
    (T.BooleanType, "boolean"),
    (T.ByteType | T.ShortType | T.IntegerType, "int"),
    (T.LongType, "long"),
    (T.FloatType, "float"),
    (T.DoubleType, "double"),
    (T.StringType, "string"),
    (T.BinaryType, "bytes"),
    (T.DateType, {"type": "int", "logicalType": "date"}),
    (T.TimestampType, {"type": "long", "logicalType": "timestamp-micros"}),
    (T.TimestampNTZType, {"type": "long", "logicalType": "local-timestamp-micros"}),
)


class AvroSchemaError(ValueError):
    """A Spark type or column name that Avro cannot represent."""


def avro_schema(schema: T.StructType) -> dict[str, Any]:
    """The Avro record schema (a JSON-ready dict) used for rows of ``schema``.

    Raises:
        AvroSchemaError: a column name that is not an Avro name, a map with non-string keys,
            or a type without a mapping (intervals, variants, ...).
    """
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
    for spark_type, avro in _ATOMIC:
        if isinstance(t, spark_type):
            return dict(avro) if isinstance(avro, dict) else avro
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
