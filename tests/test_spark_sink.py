"""Tests of the Spark sink (spark_sink/, pyspark_amqpq.py).

Two layers:

* unit tests (pyspark + pyarrow installed, no JVM): options, URIs, body encodings, frames,
  and the publisher against a real broker process;
* Spark tests: one session-scoped local SparkSession (``local[2, 2]``: two cores, one task
  retry) writing to an amqpq broker process started on a free port.

Skips cleanly: the whole module without pyspark/pyarrow (``pip install '.[spark]'``), the
Spark tests without a ``java`` (set JAVA_HOME or put Java 17 on PATH).
"""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import io
import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pyspark = pytest.importorskip("pyspark", reason="pyspark not installed (pip install '.[spark]')")
pa = pytest.importorskip("pyarrow", reason="pyarrow not installed (pip install '.[spark]')")
pika = pytest.importorskip("pika")

import fastavro  # noqa: E402  (the spark extra brings it)
from pamqp import frame as pamqp_frame  # noqa: E402
from pyspark.sql import types as T  # noqa: E402

import spark_sink  # noqa: E402
from spark_sink import encoding, frames  # noqa: E402
from spark_sink.avro_schema import avro_schema  # noqa: E402
from spark_sink.encoding import avro_fingerprint  # noqa: E402
from spark_sink.options import AmqpqOptionError, parse_options  # noqa: E402
from spark_sink.publisher import ConfirmPublisher, PublishError  # noqa: E402
from spark_sink.uri import UriError, parse_uri, parse_uri_list  # noqa: E402
from tests import spark_support  # noqa: E402
from tests.spark_support import BrokerProcess, _df, drain, free_port, start_broker  # noqa: E402

spark = spark_support.spark  # fixtures: the shared SparkSession, a broker for this module
amqpq_proc = spark_support.amqpq_proc

# ============================================================================= unit: options
SCHEMA = T.StructType([
    T.StructField("id", T.LongType()),
    T.StructField("Country", T.StringType()),
    T.StructField("payload", T.BinaryType()),
    T.StructField("tags", T.ArrayType(T.StringType())),
    T.StructField("prio", T.IntegerType()),
])
URI = "amqp://guest:guest@127.0.0.1:5672/%2F"


def test_options_defaults_and_column_lookup() -> None:
    c = parse_options({"uri": URI, "routingkeycolumn": "country", "headerscolumns": "id, prio"},
                      SCHEMA)
    assert c.routing_key_column == "Country"  # case-insensitive, schema spelling kept
    assert c.headers_columns == ("id", "prio")
    assert c.format == "json" and c.properties == {"delivery_mode": 2,
                                                   "content_type": "application/json"}
    assert c.message_id == "auto" and c.mandatory and c.on_unroutable == "fail"
    assert (c.confirm_batch_size, c.max_in_flight, c.timeout) == (1000, 20000, 30.0)
    assert [a.port for a in c.addresses] == [5672]


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"uri": ""}, "uri"),
        ({"uri": "http://x"}, "uri"),
        ({"uri": "amqps://h:0x"}, "uri"),
        ({"confirmbatchsize": "abc"}, "confirmBatchSize"),
        ({"confirmbatchsize": "0"}, "confirmBatchSize"),
        ({"maxinflight": "10", "confirmbatchsize": "100"}, "maxInFlight"),
        ({"timeout": "-1"}, "timeout"),
        ({"mandatory": "perhaps"}, "mandatory"),
        ({"format": "xml"}, "format"),
        ({"format": "csv"}, "format"),  # the array column cannot be CSV
        ({"bodycolumn": "tags"}, "bodyColumn"),
        ({"bodycolumn": "payload", "format": "json"}, "format"),
        ({"routingkeycolumn": "nope"}, "routingKeyColumn"),
        ({"routingkeycolumn": "tags"}, "routingKeyColumn"),
        ({"routingkeycolumn": "id", "routingkey": "x"}, "routingKeyColumn"),
        ({"headerscolumns": "id,zzz"}, "headersColumns"),
        ({"declareexchange": "fancy", "exchange": "e"}, "declareExchange"),
        ({"declareexchange": "direct"}, "declareExchange"),  # default exchange
        ({"properties.delivery_mode": "3"}, "properties.delivery_mode"),
        ({"properties.priority": "256"}, "properties.priority"),
        ({"properties.expiration": "1h"}, "properties.expiration"),
        ({"properties.colour": "red"}, "properties.colour"),
        ({"properties.message_id": "fixed"}, "properties.message_id"),
        ({"properties.priority.column": "Country"}, "properties.priority.column"),
        ({"routingkey": "k" * 256}, "routingKey"),
        ({"routingkeycolum": "id"}, "routingkeycolum"),  # typo: unknown option
        ({"api": "pandas"}, "api"),
        ({"onunroutable": "ignore"}, "onUnroutable"),
        ({"onunroutable": "drop", "mandatory": "false"}, "onUnroutable"),
        ({"path": "/"}, "path"),
        ({"path": "orders", "exchange": "events"}, "path"),
        ({"path": "orders", "routingkey": "other"}, "path"),
        ({"path": "events/FR", "routingkeycolumn": "country"}, "path"),
        ({"sslcacert": "/etc/hosts"}, "sslCacert"),  # amqp://, not amqps://
        ({"uri": "amqps://h", "sslcacert": "/no/such/ca.pem"}, "sslCacert"),
        ({"uri": "amqps://h", "sslcacert": __file__}, "sslCacert"),  # not PEM
        ({"uri": "amqps://h", "sslkey": __file__}, "sslKey"),  # key without certificate
        ({"uri": "amqps://h", "sslverify": "maybe"}, "sslVerify"),
    ],
)
def test_bad_options_name_the_option(options: dict[str, str], option: str) -> None:
    opts = {"uri": URI} | options
    with pytest.raises(AmqpqOptionError) as err:
        parse_options(opts, SCHEMA)
    assert err.value.option == option
    assert f"option '{option}'" in str(err.value)


def test_path_names_queue_or_exchange_and_key() -> None:
    """save(path): 'queue' through the default exchange, 'exchange/key', 'exchange/'."""
    def target(**opts: str) -> tuple[str, str, str | None]:
        c = parse_options({"uri": URI, **opts}, SCHEMA)
        return c.exchange, c.routing_key, c.routing_key_column

    assert target(path="orders") == ("", "orders", None)
    assert target(path="a%2Fb") == ("", "a/b", None)  # a queue with '/' in its name
    assert target(path="events/FR.paris") == ("events", "FR.paris", None)
    assert target(path="events/", routingkey="DE") == ("events", "DE", None)
    assert target(path="events/", routingkeycolumn="country") == ("events", "", "Country")
    assert target(path="events/FR", exchange="events", routingkey="FR") == ("events", "FR",
                                                                             None)
    with pytest.raises(AmqpqOptionError, match=r"'orders' means queue 'orders' through the "
                                               r"default exchange, but option 'exchange'"):
        parse_options({"uri": URI, "path": "orders", "exchange": "events"}, SCHEMA)


def test_properties_constants_and_columns() -> None:
    c = parse_options({
        "uri": URI, "properties.delivery_mode": "transient", "properties.priority": "7",
        "properties.expiration": "60000", "properties.app_id": "spark",
        "properties.message_id.column": "id", "properties.timestamp": "now",
        "headers.source": "test", "bodycolumn": "payload",
    }, SCHEMA)
    assert c.properties == {"delivery_mode": 1, "priority": 7, "expiration": "60000",
                            "app_id": "spark"}  # no content_type default for a body column
    assert c.property_columns == {"message_id": "id"} and c.message_id == "column"
    assert c.timestamp_now and c.constant_headers == (("source", "test"),)


def test_credentials_options_override_the_uri() -> None:
    c = parse_options({"uri": "amqp://a:1,amqp://u:p@b:2", "username": "svc",
                       "password": "s3cret"}, SCHEMA)
    assert [(a.username, a.password) for a in c.addresses] == [("svc", "s3cret")] * 2
    assert "s3cret" not in c.redacted_uris()


def test_uri_parsing_and_failover_list() -> None:
    a = parse_uri("amqp://u%40x:p%3Aw@broker.example:5673/my%2Fvhost?heartbeat=10")
    assert (a.username, a.password, a.host, a.port, a.vhost, a.heartbeat) == (
        "u@x", "p:w", "broker.example", 5673, "my/vhost", 10)
    assert parse_uri("amqp://h").vhost == "/" and parse_uri("amqp://h/%2F").vhost == "/"
    assert parse_uri("amqp://h/").vhost == "/"  # like pika
    assert "p:w" not in a.redacted() and "secret" not in str(_err(lambda: parse_uri(
        "amqp://u:secret@h/?bogus=1")))
    assert [x.port for x in parse_uri_list("amqp://a:1, amqp://b:2")] == [1, 2]
    with pytest.raises(UriError):
        parse_uri("amqp://h/a/b")
    tls = parse_uri("amqps://u:p@h/%2F")
    assert (tls.tls, tls.port, tls.redacted()) == (True, 5671, "amqps://u@h:5671/%2F")
    assert not parse_uri("amqp://h").tls


def _err(fn: Any) -> BaseException:
    try:
        fn()
    except BaseException as exc:  # noqa: BLE001
        return exc
    raise AssertionError("no exception")


# ============================================================================ unit: encoding
def test_json_bodies_match_spark_conventions() -> None:
    batch = pa.record_batch({
        "i": pa.array([1, None]),
        "s": pa.array(['a"b\\\n', "é"]),
        "f": pa.array([0.1, float("nan")]),
        "f32": pa.array([0.1, 1.0], pa.float32()),
        "d": pa.array([decimal.Decimal("12345678901234567.89"), None], pa.decimal128(20, 2)),
        "t": pa.array([dt.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=dt.UTC)] * 2,
                      pa.timestamp("us", tz="UTC")),
        "day": pa.array([dt.date(2024, 2, 29)] * 2),
        "b": pa.array([b"\x00\xff", None]),
        "st": pa.array([{"x": 1, "m": [("k", 2.5)]}, None],
                       pa.struct([("x", pa.int64()), ("m", pa.map_(pa.string(), pa.float64()))])),
        "l": pa.array([[1, None], []]),
    })
    rows = [json.loads(b) for b in encoding.json_bodies(batch)]
    assert rows[0] == {"i": 1, "s": 'a"b\\\n', "f": 0.1, "f32": 0.1,
                       "d": 12345678901234567.89, "t": "2024-01-02T03:04:05.000006Z",
                       "day": "2024-02-29", "b": "AP8=", "st": {"x": 1, "m": {"k": 2.5}},
                       "l": [1, None]}
    assert rows[1]["i"] is None and rows[1]["f"] == "NaN" and rows[1]["st"] is None
    assert b'"d":12345678901234567.89' in encoding.json_bodies(batch)[0]  # exact decimal
    assert list(json.loads(encoding.json_bodies(batch)[0])) == batch.schema.names  # order


def test_csv_bodies_quote_and_keep_newlines() -> None:
    batch = pa.record_batch({"i": pa.array([1, 2, None]),
                             "s": pa.array(['a,"b', "line\nbreak", None])})
    bodies = encoding.csv_bodies(batch)
    rows = [next(csv.reader(io.StringIO(b.decode()))) for b in bodies]
    assert rows == [["1", 'a,"b'], ["2", "line\nbreak"], ["", ""]]


def test_frames_decode_with_pamqp() -> None:
    enc = frames.PublishEncoder("ex", True, frame_max=4096)
    hdr = frames.header_tables(
        frames.shortstr("src", "") + frames.table_value("spark"),
        [frames.table_entries("n", pa.array([1, None])),
         frames.table_entries("s", pa.array(["x", "y"]))], 2)
    flags, props = frames.property_lists({
        "content_type": frames.encode_property("content_type", "application/json"),
        "headers": hdr,
        "delivery_mode": b"\x02",
        "message_id": frames.shortstrs(["m1", None], "id"),
    }, 2)
    out = bytearray()
    enc.encode(out, [b"small", b"x" * 10000], [frames.shortstr("k1", ""),
                                               frames.shortstr("k2", "")], flags, props)
    data, decoded = bytes(out), []
    while data:
        used, channel, value = pamqp_frame.unmarshal(data)
        assert channel == 1
        decoded.append(value)
        data = data[used:]
    names = [type(v).__name__ for v in decoded]
    assert names == ["Publish", "ContentHeader", "ContentBody",
                     "Publish", "ContentHeader", "ContentBody", "ContentBody", "ContentBody"]
    assert decoded[0].exchange == "ex" and decoded[0].routing_key == "k1" and decoded[0].mandatory
    p0, p1 = decoded[1].properties, decoded[4].properties
    assert (p0.content_type, p0.delivery_mode, p0.message_id) == ("application/json", 2, "m1")
    assert p0.headers == {"src": "spark", "n": 1, "s": "x"}
    assert p1.message_id is None and p1.headers == {"src": "spark", "n": None, "s": "y"}
    assert decoded[4].body_size == 10000
    assert b"".join(v.value for v in decoded[5:]) == b"x" * 10000


def test_confirm_tracking_out_of_order() -> None:
    p = ConfirmPublisher([parse_uri("amqp://h")])
    p.published = 6
    for tag, multiple in [(2, False), (3, False), (1, False), (6, False), (5, True)]:
        p._on_ack(tag, multiple)
    assert p.confirmed == 6 and p.in_flight == 0


# =================================================================== unit: publisher + broker
def test_publisher_nack_return_and_failover(amqpq_proc: BrokerProcess) -> None:
    ch = amqpq_proc.channel()
    ch.queue_declare("pub-full", arguments={"x-max-length": 2, "x-overflow": "reject-publish"})
    dead = parse_uri(f"amqp://127.0.0.1:{free_port()}/")
    live = parse_uri(amqpq_proc.uri)
    body = frames.PublishEncoder("", False, 131072)

    p = ConfirmPublisher([dead, live], timeout=5)
    assert p.connect() == live  # first address refused: failover to the second
    out = bytearray()
    flags, props = frames.property_lists({}, 5)
    body.encode(out, [b"m"] * 5, frames.shortstr("pub-full", ""), flags, props)
    with pytest.raises(PublishError, match="nacked"):
        p.send(out, 5)  # may already see the nack
        p.wait_for_confirms()
    p.close()

    p = ConfirmPublisher([live], timeout=5)
    p.connect()
    out = bytearray()
    mandatory = frames.PublishEncoder("amq.direct", True, p.frame_max)
    flags, props = frames.property_lists({}, 1)
    mandatory.encode(out, [b"m"], frames.shortstr("nobody-bound", ""), flags, props)
    with pytest.raises(PublishError, match="unroutable"):
        p.send(out, 1)
        p.wait_for_confirms()
    p.close()

    with pytest.raises(PublishError, match="could not connect"):
        ConfirmPublisher([dead], timeout=2).connect()
    ch.queue_delete("pub-full")


# ===================================================================================== Spark
def test_spark_rows_arrive_once_routed_by_column(spark: Any, amqpq_proc: BrokerProcess) -> None:
    """Automatic registration (no register call), routing by column, counts, message ids."""
    ch = amqpq_proc.channel()
    ch.exchange_declare("sink-events", "direct", durable=True)
    for c in ("FR", "DE", "US"):
        ch.queue_declare(f"sink-{c}")
        ch.queue_bind(f"sink-{c}", "sink-events", c)
    summary = spark_sink.write(
        _df(spark, 3000, partitions=3), uri=amqpq_proc.uri, exchange="sink-events",
        routingKeyColumn="country", jobId="job1")
    assert summary["status"] == "committed" and summary["rows"] == 3000
    assert summary["partitions"] == 3 and sum(p["rows"] for p in summary["per_partition"]) == 3000

    seen: dict[int, str] = {}
    ids = set()
    for c in ("FR", "DE", "US"):
        for props, body in drain(amqpq_proc.port, f"sink-{c}", 1000):
            row = json.loads(body)
            assert row["country"] == c and row["amount"] == row["id"] * 0.5
            assert row["id"] not in seen
            seen[row["id"]] = c
            assert props.content_type == "application/json" and props.delivery_mode == 2
            assert re.fullmatch(r"job1-[0-2]-\d+", props.message_id)
            ids.add(props.message_id)
    assert sorted(seen) == list(range(3000)) and len(ids) == 3000


def test_spark_headers_properties_and_body_column(spark: Any,
                                                  amqpq_proc: BrokerProcess) -> None:
    """Explicit registration; bodyColumn, headers, constant and per-row properties."""
    from pyspark.sql import functions as F

    from spark_sink.datasource import AmqpqDataSource

    spark.dataSource.register(AmqpqDataSource)
    ch = amqpq_proc.channel()
    ch.queue_declare("sink-props", arguments={"x-max-priority": 10})
    df = spark.range(50, numPartitions=2).select(
        F.concat(F.lit("payload-"), F.col("id").cast("string")).cast("binary").alias("body"),
        F.col("id"),
        F.concat(F.lit("order-"), F.col("id").cast("string")).alias("order_id"),
        F.when(F.col("id") % 2 == 0, "acme").otherwise(None).alias("tenant"),
        (F.col("id") % 10).cast("int").alias("prio"),
        F.lit(dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=dt.UTC)).alias("created"),
    )
    (df.write.format("amqpq").option("uri", amqpq_proc.uri).option("routingKey", "sink-props")
     .option("bodyColumn", "body").option("headersColumns", "tenant,id,created")
     .option("headers.source", "spark-test").option("mandatory", "true")
     .option("properties.content_type", "text/plain")
     .option("properties.delivery_mode", "transient")
     .option("properties.expiration", "600000").option("properties.app_id", "tests")
     .option("properties.priority.column", "prio")
     .option("properties.message_id.column", "order_id")
     .option("properties.correlation_id.column", "tenant")
     .option("properties.timestamp.column", "created")
     .mode("append").save())
    got = drain(amqpq_proc.port, "sink-props", 50)
    assert len(got) == 50
    by_id = {int(body.split(b"-")[1]): (props, body) for props, body in got}
    assert sorted(by_id) == list(range(50))
    props, body = by_id[4]
    assert body == b"payload-4"
    assert (props.content_type, props.delivery_mode, props.expiration, props.app_id) == (
        "text/plain", 1, "600000", "tests")
    assert (props.priority, props.message_id, props.correlation_id) == (4, "order-4", "acme")
    assert props.timestamp == int(dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=dt.UTC).timestamp())
    assert props.headers["source"] == "spark-test" and props.headers["tenant"] == "acme"
    assert props.headers["id"] == 4
    assert by_id[5][0].headers["tenant"] is None and by_id[5][0].correlation_id is None


def test_spark_formats_csv_avro_and_row_api(spark: Any, amqpq_proc: BrokerProcess) -> None:
    """csv and avro bodies; the Row-based writer produces the same JSON as the Arrow one."""
    from pyspark.sql import functions as F

    ch = amqpq_proc.channel()
    for q in ("sink-csv", "sink-avro", "sink-row", "sink-arrow"):
        ch.queue_declare(q)
    df = _df(spark, 20).withColumn("d", F.col("amount").cast("decimal(10,2)")).withColumn(
        "s", F.struct(F.col("id").alias("x"), F.array(F.lit("a")).alias("tags"))).withColumn(
        "t", F.lit(dt.datetime(2024, 1, 1, tzinfo=dt.UTC)))
    base = df.write.format("amqpq").option("uri", amqpq_proc.uri).mode("append")
    base.option("routingKey", "sink-row").option("api", "row").save()
    base.option("routingKey", "sink-arrow").save()
    flat = df.select("id", "country", "amount")
    flat.write.format("amqpq").option("uri", amqpq_proc.uri).option("routingKey", "sink-csv") \
        .option("format", "csv").mode("append").save()
    flat.write.format("amqpq").option("uri", amqpq_proc.uri).option("routingKey", "sink-avro") \
        .option("format", "avro").mode("append").save()

    rows = sorted((json.loads(b) for _, b in drain(amqpq_proc.port, "sink-row", 20)),
                  key=lambda r: r["id"])
    arrow_rows = sorted((json.loads(b) for _, b in drain(amqpq_proc.port, "sink-arrow", 20)),
                        key=lambda r: r["id"])
    assert rows == arrow_rows and rows[3] == {
        "id": 3, "country": "FR", "amount": 1.5, "d": 1.5, "s": {"x": 3, "tags": ["a"]},
        "t": "2024-01-01T00:00:00.000000Z"}
    csv_rows = sorted(next(csv.reader([b.decode()])) for _, b in
                      drain(amqpq_proc.port, "sink-csv", 20))
    assert ["3", "FR", "1.5"] in csv_rows and len(csv_rows) == 20
    avro_msgs = drain(amqpq_proc.port, "sink-avro", 20)
    avro = avro_schema(flat.schema)
    header = b"\xc3\x01" + avro_fingerprint(avro).to_bytes(8, "little")
    assert all(p.content_type == "avro/binary" and b[:10] == header for p, b in avro_msgs)
    parsed = fastavro.parse_schema(avro)
    avro_rows = sorted((fastavro.schemaless_reader(io.BytesIO(b[10:]), parsed)
                        for _, b in avro_msgs), key=lambda r: r["id"])
    assert avro_rows[3] == {"id": 3, "country": "FR", "amount": 1.5}
    assert [r["id"] for r in avro_rows] == list(range(20))


def test_spark_bad_options_fail_before_any_task(spark: Any, amqpq_proc: BrokerProcess) -> None:
    ch = amqpq_proc.channel()
    ch.queue_declare("sink-never")
    df = _df(spark, 10)
    cases = [
        ({"confirmBatchSize": "lots"}, "append", "option 'confirmBatchSize'"),
        ({"routingKeyColumn": "colour"}, "append", "option 'routingKeyColumn'"),
        ({"exchange": "no-such-exchange"}, "append", "option 'exchange'"),
        ({"uri": f"amqp://127.0.0.1:{free_port()}/"}, "append", "option 'uri'"),
        ({}, "overwrite", "save mode 'overwrite'"),
    ]
    for options, mode, message in cases:
        writer = df.write.format("amqpq").option("uri", amqpq_proc.uri) \
            .option("routingKey", "sink-never").mode(mode)
        for k, v in options.items():
            writer = writer.option(k, v)
        started = time.monotonic()
        with pytest.raises(Exception) as err:
            writer.save()
        assert message in str(err.value), str(err.value)[:2000]
        assert time.monotonic() - started < 15
    with pytest.raises(Exception, match="(?i)mode|support"):  # Spark refuses it itself
        df.write.format("amqpq").option("uri", amqpq_proc.uri).mode("errorifexists").save()
    assert ch.queue_declare("sink-never", passive=True).method.message_count == 0


def test_spark_unroutable_and_nacked_rows_fail_the_job(spark: Any,
                                                       amqpq_proc: BrokerProcess) -> None:
    ch = amqpq_proc.channel()
    ch.exchange_declare("sink-unbound", "direct")
    ch.queue_declare("sink-small", arguments={"x-max-length": 5, "x-overflow": "reject-publish"})
    df = _df(spark, 100)
    with pytest.raises(Exception, match="unroutable"):
        df.write.format("amqpq").option("uri", amqpq_proc.uri).option("exchange", "sink-unbound") \
            .option("routingKey", "nobody").option("mandatory", "true").mode("append").save()
    with pytest.raises(Exception, match="nacked"):
        df.write.format("amqpq").option("uri", amqpq_proc.uri).option("routingKey", "sink-small") \
            .mode("append").save()


def test_spark_failover_to_the_next_uri(spark: Any, amqpq_proc: BrokerProcess) -> None:
    ch = amqpq_proc.channel()
    ch.queue_declare("sink-failover")
    uri = f"amqp://guest:guest@127.0.0.1:{free_port()}/%2F, {amqpq_proc.uri}"
    summary = spark_sink.write(_df(spark, 500), uri=uri, routingKey="sink-failover")
    assert summary["rows"] == 500
    assert {p["broker"] for p in summary["per_partition"]} == {
        parse_uri(amqpq_proc.uri).redacted()}
    assert len(drain(amqpq_proc.port, "sink-failover", 500)) == 500


def test_spark_broker_lost_mid_write_fails_the_job(spark: Any, tmp_path: Path) -> None:
    """Kill -9 the broker while tasks publish: each task tries to reconnect for ``timeout``
    seconds, then the job fails (no silent loss) saying so."""
    victim = start_broker()
    try:
        ch = victim.channel()
        ch.queue_declare("sink-victim")
        summary_file = tmp_path / "summary.json"
        killed = threading.Event()

        def killer() -> None:  # the write runs in the main thread (Spark looks up the
            deadline = time.monotonic() + 60  # format through the thread's active session)
            while time.monotonic() < deadline:
                if ch.queue_declare("sink-victim", passive=True).method.message_count >= 1000:
                    victim.kill()
                    killed.set()
                    return
                time.sleep(0.02)

        thread = threading.Thread(target=killer, daemon=True)
        thread.start()
        started = time.monotonic()
        with pytest.raises(Exception) as err:
            _df(spark, 1_000_000).write.format("amqpq").option("uri", victim.uri) \
                .option("routingKey", "sink-victim").option("timeout", "2") \
                .option("summaryPath", str(summary_file)).mode("append").save()
        assert killed.is_set(), "the write failed before the broker was killed"
        text = str(err.value)
        assert "within timeout=2 s" in text and "could not connect" in text, text[:3000]
        assert time.monotonic() - started < 60
        assert not summary_file.exists() or json.loads(summary_file.read_text())[
            "status"] == "aborted"
    finally:
        victim.close()


def test_spark_streaming_rate_source_delivers_every_batch(spark: Any,
                                                          amqpq_proc: BrokerProcess,
                                                          tmp_path: Path) -> None:
    ch = amqpq_proc.channel()
    ch.queue_declare("sink-stream")
    summary_file = tmp_path / "stream.jsonl"
    query = (
        spark.readStream.format("rate").option("rowsPerSecond", 300).option("numPartitions", 2)
        .load()
        .writeStream.format("amqpq").option("uri", amqpq_proc.uri)
        .option("routingKey", "sink-stream").option("summaryPath", str(summary_file))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="500 milliseconds").start()
    )
    try:
        deadline = time.monotonic() + 45
        committed: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            if summary_file.exists():
                lines = [json.loads(x) for x in summary_file.read_text().splitlines()]
                committed = [x for x in lines if x["status"] == "committed" and x["rows"]]
            if len(committed) >= 3:
                break
            assert query.exception() is None
            time.sleep(0.2)
    finally:
        query.stop()
    assert len(committed) >= 3, "fewer than 3 non-empty micro-batches in 45 s"
    lines = [json.loads(x) for x in summary_file.read_text().splitlines()]
    committed = [x for x in lines if x["status"] == "committed"]
    expected = sum(x["rows"] for x in committed)
    got = drain(amqpq_proc.port, "sink-stream", 10**9, timeout=20)
    by_batch: dict[int, list[int]] = {}
    for props, body in got:
        m = re.fullmatch(r"[0-9a-f-]{36}-(\d+)-(\d+)-(\d+)", props.message_id)
        assert m, props.message_id
        by_batch.setdefault(int(m.group(1)), []).append(json.loads(body)["value"])
    for x in committed:  # every committed micro-batch arrived whole, exactly once
        values = by_batch.get(x["batch_id"], [])
        assert len(values) == x["rows"] == len(set(values))
    values = sorted(v for x in committed for v in by_batch.get(x["batch_id"], []))
    assert values == list(range(len(values))) and len(values) == expected


def test_example_csv_to_queue(spark: Any, amqpq_proc: BrokerProcess, tmp_path: Path) -> None:
    from spark_sink.examples import csv_to_queue

    path = csv_to_queue.make_sample_csv(str(tmp_path / "orders.csv"), rows=300)
    csv_to_queue.prepare_queue(amqpq_proc.uri, "sink-orders")
    started = time.monotonic()
    summary = csv_to_queue.publish_csv(spark, path, amqpq_proc.uri, "sink-orders")
    assert (summary["published"], summary["confirmed"], summary["unroutable"]) == (300, 300, 0)
    line = csv_to_queue.describe(summary, time.monotonic() - started, path)
    assert re.search(r"300 rows from .* published, 300 confirmed, 0 unroutable, in [\d.]+ s "
                     r"\([\d,]+ rows/s; publishing alone [\d,]+ rows/s\)", line), line
    assert csv_to_queue.count_messages(amqpq_proc.uri, "sink-orders", expected=300,
                                       idle_seconds=1.0) == 300
