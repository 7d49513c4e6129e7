"""Example: a CSV file through Spark into a queue, then a pika consumer counts the messages.

    python spark_sink/examples/csv_to_queue.py \\
        --uri amqp://guest:guest@127.0.0.1:5672/%2F --queue orders [--csv orders.csv]

Without ``--csv`` it first writes a sample ``orders.csv`` (1,000 rows) to a temporary folder.
It declares the queue ``--queue`` (durable) and purges it, reads the CSV with Spark
(header + schema inference), publishes every row as a JSON message to that queue with
``df.write.format("amqpq")`` (``path`` = the queue; message_id = the ``order_id`` column,
``country`` copied into the headers, publisher confirms), prints the published / confirmed /
unroutable counts and rows per second, then consumes the queue with pika and prints the count.
Needs ``pip install '.[spark]'`` (pyspark, pyarrow, pika) and Java 17.
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import sys
import tempfile
import time
from typing import TYPE_CHECKING, Any

import pika

import spark_sink

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

COUNTRIES = ("FR", "DE", "US", "JP", "BR")


def make_sample_csv(path: str, rows: int = 1000, seed: int = 7) -> str:
    """Write ``rows`` sample orders (order_id, country, amount, customer) to ``path``."""
    rng = random.Random(seed)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(["order_id", "country", "amount", "customer"])
        for i in range(1, rows + 1):
            out.writerow([i, rng.choice(COUNTRIES), f"{rng.uniform(1, 500):.2f}",
                          f"customer, \"{rng.randint(1, 99)}\""])
    return path


def prepare_queue(uri: str, queue: str) -> None:
    """Declare ``queue`` (durable) and purge it, so the count is this run's."""
    with pika.BlockingConnection(pika.URLParameters(_first(uri))) as conn:
        channel = conn.channel()
        channel.queue_declare(queue, durable=True)
        channel.queue_purge(queue)


def publish_csv(spark: SparkSession, csv_path: str, uri: str, queue: str) -> dict[str, Any]:
    """Read ``csv_path`` with Spark and publish each row as JSON to ``queue``; return the
    sink's summary (``confirmed`` = rows the broker confirmed and queued, ``published``,
    ``unroutable``, ``seconds``: see :func:`spark_sink.write`)."""
    df = spark.read.option("header", True).option("inferSchema", True).csv(csv_path)
    return spark_sink.write(
        df,
        uri=uri,
        path=queue,  # same as save(queue): the queue, through the default exchange
        headersColumns="country",
        **{"properties.message_id.column": "order_id"},
    )


def count_messages(uri: str, queue: str, expected: int | None = None,
                   idle_seconds: float = 2.0) -> int:
    """Consume (and ack) ``queue`` with pika until it stays empty ``idle_seconds`` or
    ``expected`` messages arrived; return how many were consumed."""
    count = 0
    with pika.BlockingConnection(pika.URLParameters(_first(uri))) as conn:
        channel = conn.channel()
        channel.basic_qos(prefetch_count=1000)
        for method, _props, _body in channel.consume(queue, inactivity_timeout=idle_seconds):
            if method is None:
                break
            count += 1
            if count % 500 == 0 or count == expected:
                channel.basic_ack(method.delivery_tag, multiple=True)
            if expected is not None and count >= expected:
                break
        channel.cancel()
    return count


def describe(summary: dict[str, Any], elapsed: float, source: str) -> str:
    """One line: the sink's counts and rows per second, for the whole job (``elapsed``
    seconds, Spark included) and for publishing alone (the slowest partition)."""
    published = summary["published"]
    return (f"spark: {published} rows from {source} published, {summary['confirmed']} "
            f"confirmed, {summary['unroutable']} unroutable, in {elapsed:.1f} s "
            f"({published / max(elapsed, 1e-3):,.0f} rows/s; publishing alone "
            f"{published / max(summary['seconds'], 1e-3):,.0f} rows/s)")


def _first(uri: str) -> str:
    return uri.split(",")[0].strip()


def main(argv: list[str] | None = None) -> int:
    """Command line entry: returns 0 when every CSV row was consumed from the queue."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uri", default="amqp://guest:guest@127.0.0.1:5672/%2F")
    parser.add_argument("--queue", default="orders")
    parser.add_argument("--csv", help="CSV file with a header (default: a generated sample)")
    parser.add_argument("--rows", type=int, default=1000, help="rows of the generated sample")
    args = parser.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    csv_path = args.csv or make_sample_csv(os.path.join(tempfile.mkdtemp(), "orders.csv"),
                                           args.rows)
    prepare_queue(args.uri, args.queue)
    spark = (SparkSession.builder.master("local[2]").appName("amqpq csv_to_queue")
             .config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark_sink.register(spark)  # not needed once the package is installed; harmless
    try:
        started = time.monotonic()
        summary = publish_csv(spark, csv_path, args.uri, args.queue)
        elapsed = time.monotonic() - started
    finally:
        spark.stop()
    print(describe(summary, elapsed, csv_path))
    consumed = count_messages(args.uri, args.queue, expected=summary["confirmed"])
    print(f"pika consumer: {consumed} messages in queue {args.queue!r}")
    return 0 if consumed == summary["confirmed"] == summary["published"] else 1


if __name__ == "__main__":
    sys.exit(main())
