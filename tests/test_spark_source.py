"""``spark.read.format("amqpq")``: streams and super streams into DataFrames (offset ranges
split into tasks, starting/ending offsets, the columns), and a round trip: rows written by
the sink into a super stream read back the same. Unit tests of the option parsing need no
Spark."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest

pyspark = pytest.importorskip("pyspark", reason="pyspark not installed (pip install '.[spark]')")
pika = pytest.importorskip("pika")

from spark_sink.source import AmqpqOptionError, parse_source_options  # noqa: E402
from tests import spark_support  # noqa: E402
from tests.spark_support import BrokerProcess  # noqa: E402

spark = spark_support.spark


broker = spark_support.broker  # fixture: one broker with its management API


def options(b: BrokerProcess, **more: str) -> dict[str, str]:
    return {"uri": b.uri, "managementUri": f"http://127.0.0.1:{b.management_port}", **more}


def publish(b: BrokerProcess, stream: str, n: int, start: int = 0) -> None:
    ch = b.channel()
    ch.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    ch.confirm_delivery()
    for i in range(start, start + n):
        ch.basic_publish("", stream, f"m{i}".encode(), pika.BasicProperties(
            content_type="text/plain", message_id=f"id-{i}", headers={"n": i}))
    ch.connection.close()


@pytest.mark.parametrize("given,option", [
    ({}, "uri"), ({"uri": "amqp://h", "stream": "a", "superStream": "b"}, "stream"),
    ({"uri": "amqp://h", "stream": "a", "startingOffsets": "soon"}, "startingOffsets"),
    ({"uri": "amqp://h", "stream": "a", "endingOffsets": "-3"}, "endingOffsets"),
    ({"uri": "amqp://h", "stream": "a", "maxOffsetsPerPartition": "0"},
     "maxOffsetsPerPartition"),
])
def test_bad_options_name_the_option(given: dict[str, str], option: str) -> None:
    with pytest.raises(AmqpqOptionError) as info:
        parse_source_options(given)
    assert info.value.option == option and str(info.value).startswith("amqpq source: option")


def test_a_stream_read_in_ranges(spark: Any, broker: BrokerProcess) -> None:
    name = f"s-{uuid.uuid4().hex[:8]}"
    before = time.time()
    publish(broker, name, 30)
    df = (spark.read.format("amqpq").options(**options(broker, stream=name))
          .option("maxOffsetsPerPartition", "7").load())
    assert df.rdd.getNumPartitions() == 5
    rows = sorted(df.collect(), key=lambda r: r.offset)
    assert [(r.stream, r.offset, r.body) for r in rows] == [
        (name, i, f"m{i}".encode()) for i in range(30)]
    r = rows[3]
    assert (r.exchange, r.routing_key, r.headers) == ("", name, {"n": "3"})
    assert (r.properties.content_type, r.properties.message_id) == ("text/plain", "id-3")
    assert r.timestamp is not None and r.timestamp.timestamp() >= before - 1
    part = (spark.read.format("amqpq").options(**options(broker, stream=name))
            .option("startingOffsets", "10").option("endingOffsets", "20").load())
    assert sorted(r.offset for r in part.collect()) == list(range(10, 20))


def test_unknown_stream_fails_in_one_line(spark: Any, broker: BrokerProcess) -> None:
    with pytest.raises(Exception) as info:
        spark.read.format("amqpq").options(**options(broker, stream="nope")).load().collect()
    assert "amqpq source: option 'stream' nope not found" in str(info.value)


def test_super_stream_round_trip_through_the_sink(spark: Any, broker: BrokerProcess) -> None:
    name = f"ss-{uuid.uuid4().hex[:8]}"
    ch = broker.channel()
    ch.exchange_declare(name, "direct", durable=True, arguments={"x-super-stream": True})
    for order, key in enumerate(["eu", "us"]):
        ch.queue_declare(f"{name}-{key}", durable=True, arguments={"x-queue-type": "stream"})
        ch.queue_bind(f"{name}-{key}", name, key,
                      arguments={"x-stream-partition-order": order})
    ch.connection.close()
    rows = [(i, "eu" if i % 3 else "us", f"order {i}") for i in range(12)]
    written = spark.createDataFrame(rows, "id long, region string, item string")
    (written.write.format("amqpq").option("uri", broker.uri).option("exchange", name)
     .option("routingKeyColumn", "region").option("format", "json").mode("append").save())
    back = (spark.read.format("amqpq").options(**options(broker, superStream=name)).load())
    got = back.collect()
    assert {r.stream for r in got} == {f"{name}-eu", f"{name}-us"}
    decoded = sorted((d["id"], d["region"], d["item"])
                     for d in (json.loads(r.body) for r in got))
    assert decoded == rows
    per = {f"{name}-eu": 8, f"{name}-us": 4}
    assert all(sum(1 for r in got if r.stream == s) == n for s, n in per.items())


def test_streaming_query_restarts_from_its_checkpoint(spark: Any, broker: BrokerProcess,
                                                      tmp_path: Any) -> None:
    """readStream: what arrives is read once; a query restarted from its checkpoint goes on
    without gaps or repeats."""
    name = f"live-{uuid.uuid4().hex[:8]}"
    publish(broker, name, 20)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")

    def run_once() -> None:
        stream = (spark.readStream.format("amqpq").options(**options(broker, stream=name))
                  .load().select("offset", "body"))
        query = (stream.writeStream.format("parquet").option("path", out)
                 .option("checkpointLocation", ckpt).trigger(availableNow=True).start())
        query.awaitTermination(120)

    run_once()
    publish(broker, name, 10, start=20)
    run_once()
    got = sorted((r.offset, r.body) for r in spark.read.parquet(out).collect())
    assert got == [(i, f"m{i}".encode()) for i in range(30)]


@pytest.mark.parametrize("fmt", ["json", "csv", "avro"])
def test_bodies_decoded_back_into_the_written_rows(spark: Any, broker: BrokerProcess,
                                                   fmt: str) -> None:
    """Spark -> amqpq -> Spark: what the sink wrote in ``format`` reads back as the same rows."""
    import datetime as dt
    import decimal

    name = f"rt-{fmt}-{uuid.uuid4().hex[:6]}"
    ch = broker.channel()
    ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    ch.connection.close()
    ddl = "id long, item string, price decimal(10,2), ok boolean, day date, at timestamp"
    rows = [(i, None if i == 3 else f"item, \"{i}\"", decimal.Decimal(f"{i}.25"), i % 2 == 0,
             dt.date(2026, 1, 1 + i), dt.datetime(2026, 1, 2, 3, 4, 5, i * 1000))
            for i in range(6)]
    df = spark.createDataFrame(rows, ddl)
    (df.write.format("amqpq").option("uri", broker.uri).option("format", fmt)
     .mode("append").save(name))
    back = (spark.read.format("amqpq").schema(df.schema).options(**options(broker, stream=name))
            .option("format", fmt).load())
    assert back.schema == df.schema
    assert sorted(back.collect()) == sorted(df.collect())


def test_format_needs_a_schema_and_a_schema_a_format(spark: Any, broker: BrokerProcess) -> None:
    name = f"nf-{uuid.uuid4().hex[:6]}"
    publish(broker, name, 1)
    with pytest.raises(Exception) as info:
        (spark.read.format("amqpq").options(**options(broker, stream=name))
         .option("format", "json").load().collect())
    assert "option 'format' needs the schema" in str(info.value)
    with pytest.raises(Exception) as info:
        (spark.read.format("amqpq").schema("id long").options(**options(broker, stream=name))
         .load().collect())
    assert "option 'format' is required with a schema" in str(info.value)
