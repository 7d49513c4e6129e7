"""Avro bodies of the Spark sink (``format=avro``): pinned bytes, fastavro round trips and
the Spark -> Avro schema mapping.

``GOLDEN`` holds the single-object-encoded bodies the sink wrote for ``ROWS`` with its
hand-written encoder, before fastavro took over (commits c402c1c and 4a50dfc pinned them).
They are unchanged but for one byte: the hand-written encoder rounded decimals of more than
28 digits (``Decimal.scaleb`` in the default context), so ``-99...9`` (38 nines) went out as
``-10**38``; the last byte of that value is now ``01`` instead of ``00``.

fastavro is required (the ``spark`` extra brings it): it is the encoder under test and the
independent decoder of what the sink writes.

Sources: Apache Avro 1.11 specification, https://avro.apache.org/docs/1.11.1/specification/
(single-object encoding, parsing canonical form, fingerprints, decimal).
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import math
import struct
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark not installed (pip install '.[spark]')")
pa = pytest.importorskip("pyarrow", reason="pyarrow not installed (pip install '.[spark]')")

import fastavro  # noqa: E402  (no skip: the spark extra brings it)
from fastavro.schema import to_parsing_canonical_form  # noqa: E402
from pyspark.sql import types as T  # noqa: E402
from pyspark.sql.pandas.types import to_arrow_schema  # noqa: E402

from spark_sink.avro_schema import avro_schema  # noqa: E402
from spark_sink.encoding import AvroEncoder, avro_fingerprint  # noqa: E402
from spark_sink.options import AmqpqOptionError, parse_options  # noqa: E402

D = decimal.Decimal

# Every Spark type the sink maps, nullable and not, nested two levels.
SCHEMA = T.StructType([
    T.StructField("flag", T.BooleanType()),
    T.StructField("tiny", T.ByteType(), False),
    T.StructField("small", T.ShortType()),
    T.StructField("n", T.IntegerType()),
    T.StructField("id", T.LongType(), False),
    T.StructField("f32", T.FloatType()),
    T.StructField("f64", T.DoubleType()),
    T.StructField("s", T.StringType()),
    T.StructField("raw", T.BinaryType()),
    T.StructField("day", T.DateType()),
    T.StructField("ts", T.TimestampType()),
    T.StructField("ntz", T.TimestampNTZType()),
    T.StructField("price", T.DecimalType(10, 2)),
    T.StructField("big", T.DecimalType(38, 0)),
    T.StructField("nums", T.ArrayType(T.IntegerType(), True)),
    T.StructField("attrs", T.MapType(T.StringType(), T.DoubleType(), True)),
    T.StructField("st", T.StructType([
        T.StructField("x", T.LongType()),
        T.StructField("tags", T.ArrayType(T.StringType(), False), False),
        T.StructField("inner", T.StructType([T.StructField("y", T.DoubleType())])),
        T.StructField("on", T.DateType()),
        T.StructField("at", T.TimestampType()),
        T.StructField("local", T.TimestampNTZType()),
        T.StructField("amt", T.DecimalType(5, 1)),
        T.StructField("kv", T.MapType(T.StringType(), T.LongType(), False)),
    ])),
    T.StructField("ledger", T.ArrayType(T.MapType(T.StringType(), T.DecimalType(4, 2)))),
])

# Typical values; all nulls; extremes (pre-1970 dates/timestamps, -2**63, NaN/-inf, empty
# string/bytes/array/map, decimals whose unscaled value is -2**7 and -2**15 -- the minimal
# two's complement is one byte shorter than a naive sign-bit count); long/multi-byte lengths;
# dates, timestamps, decimals and maps also nested in a struct and in an array.
ROWS: list[dict[str, Any]] = [
    {"flag": True, "tiny": 7, "small": -300, "n": 123456, "id": 1 << 40, "f32": 0.1,
     "f64": 2.5, "s": "zoé ☃", "raw": b"\x00\xff", "day": dt.date(2024, 2, 29),
     "ts": dt.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=dt.UTC),
     "ntz": dt.datetime(2024, 1, 2, 3, 4, 5, 6), "price": D("1234.56"), "big": D("128"),
     "nums": [1, None, -1], "attrs": {"a": 1.5, "b": None},
     "st": {"x": 3, "tags": ["p", "q"], "inner": {"y": -0.0}, "on": dt.date(1900, 1, 1),
            "at": dt.datetime(1960, 6, 1, 0, 0, 0, 1, tzinfo=dt.UTC),
            "local": dt.datetime(2038, 1, 19, 3, 14, 8), "amt": D("-12.8"),
            "kv": {"k": -1, "l": 1 << 62}},
     "ledger": [{"eur": D("-0.01"), "usd": None}, {}, None]},
    {"flag": None, "tiny": -128, "small": None, "n": None, "id": 0, "f32": None, "f64": None,
     "s": None, "raw": None, "day": None, "ts": None, "ntz": None, "price": None, "big": None,
     "nums": None, "attrs": None, "st": None, "ledger": None},
    {"flag": False, "tiny": 127, "small": 32767, "n": -(1 << 31), "id": -(1 << 63),
     "f32": float("nan"), "f64": float("-inf"), "s": "", "raw": b"",
     "day": dt.date(1969, 12, 31),
     "ts": dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC),
     "ntz": dt.datetime(1, 1, 1), "price": D("-1.28"), "big": D("-32768"),
     "nums": [], "attrs": {}, "st": {"x": None, "tags": [], "inner": None, "on": None, "at": None, "local": None,
            "amt": None, "kv": {}},
     "ledger": []},
    {"flag": True, "tiny": 0, "small": 0, "n": 0, "id": (1 << 63) - 1, "f32": 3.0e38,
     "f64": 1e-300, "s": "x" * 70, "raw": bytes(range(130)), "day": dt.date(9999, 12, 31),
     "ts": dt.datetime(2262, 4, 11, tzinfo=dt.UTC), "ntz": dt.datetime(1970, 1, 1),
     "price": D("0.00"), "big": D("-" + "9" * 38), "nums": [None],
     "attrs": {"ключ": float("nan")}, "st": {"x": -1, "tags": ["é"], "inner": {"y": None}, "on": dt.date(1970, 1, 1),
            "at": dt.datetime(1970, 1, 1, tzinfo=dt.UTC), "local": dt.datetime(1969, 12, 31),
            "amt": D("9999.9"), "kv": {"z": 0}},
     "ledger": [{"x": D("99.99")}]},
]

# The bodies the hand-written encoder produced for ROWS (C3 01, fingerprint, row), but
# for the exact 38-digit decimal (see the module docstring).
GOLDEN_FINGERPRINT = 0x7BF464BB043803FD
GOLDEN_CANONICAL = (
    '{"name":"Row","type":"record","fields":[{"name":"flag","type":["null","boolean"]},'
    '{"name":"tiny","type":"int"},{"name":"small","type":["null","int"]},'
    '{"name":"n","type":["null","int"]},{"name":"id","type":"long"},'
    '{"name":"f32","type":["null","float"]},{"name":"f64","type":["null","double"]},'
    '{"name":"s","type":["null","string"]},{"name":"raw","type":["null","bytes"]},'
    '{"name":"day","type":["null","int"]},{"name":"ts","type":["null","long"]},'
    '{"name":"ntz","type":["null","long"]},{"name":"price","type":["null","bytes"]},'
    '{"name":"big","type":["null","bytes"]},'
    '{"name":"nums","type":["null",{"type":"array","items":["null","int"]}]},'
    '{"name":"attrs","type":["null",{"type":"map","values":["null","double"]}]},'
    '{"name":"st","type":["null",{"name":"Row_st","type":"record","fields":['
    '{"name":"x","type":["null","long"]},'
    '{"name":"tags","type":{"type":"array","items":"string"}},'
    '{"name":"inner","type":["null",{"name":"Row_st_inner","type":"record","fields":['
    '{"name":"y","type":["null","double"]}]}]},'
    '{"name":"on","type":["null","int"]},{"name":"at","type":["null","long"]},'
    '{"name":"local","type":["null","long"]},{"name":"amt","type":["null","bytes"]},'
    '{"name":"kv","type":["null",{"type":"map","values":"long"}]}]}]},'
    '{"name":"ledger","type":["null",{"type":"array","items":["null",'
    '{"type":"map","values":["null","bytes"]}]}]}]}'
)
GOLDEN = [
    bytes.fromhex(
        "c301fd033804bb64f47b02010e02d7040280890f80808080804002cdcccc3d02000000000000044002107a6f"
        "c3a920e29883020400ff028cb502028ccdee84b8fb8606028ccdee84b8fb8606020601e24002040080020602"
        "02000201000204026102000000000000f83f026200000202060402700271000202000000000000008002bd8f"
        "0302fdffdea683c78901028080808080c8d0070202800204026b01026c808080808080808080010002060204"
        "066575720202ff06757364000002000000"
    ),
    bytes.fromhex(
        "c301fd033804bb64f47b00ff0100000000000000000000000000000000"
    ),
    bytes.fromhex(
        "c301fd033804bb64f47b0200fe0102feff0302ffffffff0fffffffffffffffffff01020000c07f0200000000"
        "0000f0ff020002000201020102ffffddf2dfffdfdc0102028002048000020002000200000000000000020002"
        "00"
    ),
    bytes.fromhex(
        "c301fd033804bb64f47b02010002000200feffffffffffffffff0102e6b1617f0259f3f8c21f6ea501028c01"
        "7878787878787878787878787878787878787878787878787878787878787878787878787878787878787878"
        "7878787878787878787878787878787878787878787878787878028402000102030405060708090a0b0c0d0e"
        "0f101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f303132333435363738393a"
        "3b3c3d3e3f404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f60616263646566"
        "6768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f808102c082e602028080c5d8f6a1e220020002"
        "02000220b4c4b357a5793b85f675ddc00000000102020000020210d0bad0bbd18ed18702000000000000f87f"
        "000202010204c3a90002000200020002ffffbadd8305020601869f0202027a00000202020202780204270f00"
        "00"
    ),
]


def _batch() -> pa.RecordBatch:
    """ROWS as Spark hands them to the writer: an Arrow batch of the session-zone schema."""
    return pa.RecordBatch.from_pylist(ROWS, schema=to_arrow_schema(SCHEMA, timezone="UTC"))


def test_avro_bodies_are_the_pinned_bytes() -> None:
    bodies = AvroEncoder(SCHEMA).bodies(_batch())
    assert [b.hex() for b in bodies] == [g.hex() for g in GOLDEN]


def test_avro_header_is_magic_and_little_endian_fingerprint() -> None:
    enc = AvroEncoder(SCHEMA)
    assert enc.fingerprint == GOLDEN_FINGERPRINT == avro_fingerprint(avro_schema(SCHEMA))
    assert enc.header == b"\xc3\x01" + GOLDEN_FINGERPRINT.to_bytes(8, "little")
    assert all(g[:10] == enc.header for g in GOLDEN)
    assert avro_fingerprint("int") == 0x7275D51A3F395C8F  # Java's SchemaNormalization value


def test_avro_canonical_form_strips_logical_types() -> None:
    canonical = to_parsing_canonical_form(fastavro.parse_schema(avro_schema(SCHEMA)))
    assert canonical == GOLDEN_CANONICAL


def _float32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def _comparable(v: Any) -> Any:
    """NaN as a string (NaN != NaN), recursively."""
    if isinstance(v, float) and math.isnan(v):
        return "NaN"
    if isinstance(v, dict):
        return {k: _comparable(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_comparable(x) for x in v]
    return v


def test_avro_bodies_decode_with_fastavro_to_the_rows() -> None:
    enc = AvroEncoder(SCHEMA)
    parsed = fastavro.parse_schema(enc.schema)
    decoded = []
    for body in enc.bodies(_batch()):
        assert body[:10] == enc.header
        buf = io.BytesIO(body[10:])
        decoded.append(fastavro.schemaless_reader(buf, parsed))
        assert buf.read() == b""  # nothing after the record
    expected = [{**row, "f32": None if row["f32"] is None else _float32(row["f32"])}
                for row in ROWS]
    assert _comparable(decoded) == _comparable(expected)
    assert decoded[3]["big"] == D("-" + "9" * 38)  # exact, not rounded to 28 digits


def test_avro_decimals_are_minimal_twos_complement() -> None:
    schema = T.StructType([T.StructField("d", T.DecimalType(6, 0), False)])
    values = [D(0), D(127), D(128), D(-1), D(-128), D(-129), D(-32768), D(-32769)]
    batch = pa.RecordBatch.from_pylist([{"d": v} for v in values],
                                       schema=to_arrow_schema(schema))
    payloads = [b[11:] for b in AvroEncoder(schema).bodies(batch)]  # after the length byte
    assert [p.hex() for p in payloads] == [
        "00", "7f", "0080", "ff", "80", "ff7f", "8000", "ff7fff"]


def test_avro_empty_batch_and_no_columns() -> None:
    enc = AvroEncoder(SCHEMA)
    assert enc.bodies(_batch().slice(0, 0)) == []
    empty = T.StructType([])
    batch = pa.RecordBatch.from_pydict({}, schema=to_arrow_schema(empty)).slice(0, 0)
    assert AvroEncoder(empty).bodies(batch) == []
    three = pa.RecordBatch.from_struct_array(pa.array([{}, {}, {}], pa.struct([])))
    enc = AvroEncoder(empty)
    assert enc.bodies(three) == [enc.header] * 3  # an empty record encodes as no bytes


@pytest.mark.parametrize(("field", "problem"), [
    (T.StructField("bad-name", T.LongType()), "'bad-name' is not a valid Avro name"),
    (T.StructField("m", T.MapType(T.LongType(), T.StringType())),
     "Row_m: Avro maps need string keys"),
    (T.StructField("i", T.DayTimeIntervalType()), "has no Avro mapping"),
])
def test_avro_unmappable_schema_is_an_option_error(field: T.StructField, problem: str) -> None:
    schema = T.StructType([field])
    with pytest.raises(AmqpqOptionError, match="option 'format' avro: .*" + problem):
        parse_options({"uri": "amqp://127.0.0.1/", "routingKey": "q", "format": "avro"},
                      schema)
