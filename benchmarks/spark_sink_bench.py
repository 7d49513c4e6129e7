"""Spark sink throughput: confirmed rows/s into amqpq, next to pika and the reference RabbitMQ.

Usage (on demand, several minutes; needs ``pip install '.[spark]'`` and Java 17):

    python benchmarks/spark_sink_bench.py [--rows 1000000] [--rabbit-uri amqp://...|none]

Data: ``--rows`` rows of 3 columns (id bigint, country string, amount double), generated and
cached in Spark before timing. Every method publishes each row as a persistent JSON message
with a message_id to a (non-durable) queue via the default exchange, with publisher confirms,
and the queue's message count is checked after each run. Methods, per broker:

* ``spark sink (arrow)``: ``df.write.format("amqpq")`` (local[2], DataSourceArrowWriter);
* ``spark sink (row)``: same with ``api=row`` (DataSourceWriter fed Row objects);
* ``pika window``: one Python process, pika SelectConnection, 5,000-message confirm window;
* ``pika blocking``: pika BlockingConnection, wait for each confirm (on --blocking-rows rows).

Also, without any broker: ``encode only (arrow|row)`` runs the same writers up to the encoded
AMQP frames and drops them, to compare the two PySpark writer APIs where the broker is not
the bottleneck.

amqpq is started as a fresh process on a free port; the reference RabbitMQ is the one
``make reference-rabbitmq`` (tools/reference-rabbitmq) runs on 127.0.0.1:5672 (skipped when
unreachable). Targets checked at the end: spark sink into amqpq >= 30,000 rows/s, and not
slower than the pika window publisher in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pika

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # run as a script: benchmarks/ is on sys.path, not the root
    sys.path.insert(0, str(REPO_ROOT))

from tests.support.broker_process import BrokerProcess, BrokerStartError  # noqa: E402

QUEUE = "spark-sink-bench"
TARGET_ROWS_PER_S = 30_000


# ------------------------------------------------------------------------------ brokers
def start_amqpq() -> BrokerProcess:
    """A fresh amqpq broker (management API on too) on a free port, with a temporary data dir."""
    try:
        return BrokerProcess(management=True).start()
    except BrokerStartError as exc:
        raise SystemExit(f"amqpq did not start: {exc}") from None


def reachable(uri: str) -> bool:
    params = pika.URLParameters(uri)
    try:
        with socket.create_connection((params.host, params.port), timeout=2):
            return True
    except OSError:
        return False


def reset_queue(uri: str) -> None:
    with pika.BlockingConnection(pika.URLParameters(uri)) as conn:
        ch = conn.channel()
        ch.queue_declare(QUEUE)
        ch.queue_purge(QUEUE)


def queue_count(uri: str) -> int:
    with pika.BlockingConnection(pika.URLParameters(uri)) as conn:
        return int(conn.channel().queue_declare(QUEUE, passive=True).method.message_count)


def delete_queue(uri: str) -> None:
    with pika.BlockingConnection(pika.URLParameters(uri)) as conn:
        conn.channel().queue_delete(QUEUE)


# ------------------------------------------------------------------------ pika baselines
def json_bodies(rows: list[tuple[int, str, float]]) -> Any:
    for i, country, amount in rows:
        yield json.dumps({"id": i, "country": country, "amount": amount}).encode()


def pika_window(uri: str, rows: list[tuple[int, str, float]], window: int = 5000) -> None:
    """pika SelectConnection with a confirm window of ``window`` messages."""
    n = len(rows)
    bodies = json_bodies(rows)
    state = {"sent": 0, "confirmed": 0, "error": None}
    singles: set[int] = set()
    props_base = {"content_type": "application/json", "delivery_mode": 2}

    def on_open(conn: pika.SelectConnection) -> None:
        conn.channel(on_open_callback=on_channel)

    def on_channel(ch: Any) -> None:
        ch.confirm_delivery(lambda frame: on_confirm(ch, frame),
                            callback=lambda _frame: pump(ch))

    def on_confirm(ch: Any, frame: Any) -> None:
        method = frame.method
        if isinstance(method, pika.spec.Basic.Nack):
            state["error"] = f"nack {method.delivery_tag}"
            ch.connection.close()
            return
        tag = method.delivery_tag
        if method.multiple:
            state["confirmed"] = max(state["confirmed"], tag)  # type: ignore[type-var]
        else:
            singles.add(tag)
        while state["confirmed"] + 1 in singles:  # type: ignore[operator]
            state["confirmed"] += 1  # type: ignore[operator]
            singles.discard(state["confirmed"])  # type: ignore[arg-type]
        if state["confirmed"] >= n:  # type: ignore[operator]
            ch.connection.close()
        else:
            pump(ch)

    def pump(ch: Any) -> None:
        while state["sent"] < n and state["sent"] - state["confirmed"] < window:  # type: ignore[operator]
            sent = state["sent"]
            ch.basic_publish("", QUEUE, next(bodies), pika.BasicProperties(
                message_id=f"pika-{sent}", **props_base))
            state["sent"] = sent + 1  # type: ignore[operator]

    conn = pika.SelectConnection(pika.URLParameters(uri), on_open_callback=on_open,
                                 on_close_callback=lambda c, reason: c.ioloop.stop())
    conn.ioloop.start()
    if state["error"] or state["confirmed"] < n:  # type: ignore[operator]
        raise RuntimeError(f"pika window publisher: {state}")


def pika_blocking(uri: str, rows: list[tuple[int, str, float]]) -> None:
    """pika BlockingConnection in confirm mode: each publish waits for its confirm."""
    with pika.BlockingConnection(pika.URLParameters(uri)) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        for n, body in enumerate(json_bodies(rows)):
            ch.basic_publish("", QUEUE, body, pika.BasicProperties(
                content_type="application/json", delivery_mode=2, message_id=f"pika-{n}"))


# -------------------------------------------------------------------------- encode only
def encode_only_source() -> type:
    """A data source running the sink's writers up to the encoded frames (no socket)."""
    from pyspark import TaskContext
    from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceWriter

    from spark_sink.datasource import AmqpqDataSource
    from spark_sink.messages import MessageBuilder
    from spark_sink.options import parse_options
    from spark_sink.writer import AmqpqCommitMessage, rows_to_batches

    def encode(config: Any, schema: Any, batches: Any) -> AmqpqCommitMessage:
        ctx = TaskContext.get()
        builder = MessageBuilder(config, schema, 131072, "bench-")
        rows = 0
        for batch in batches:
            for _frames, count in builder.chunks(batch, rows, config.confirm_batch_size):
                rows += count
        return AmqpqCommitMessage(partition=ctx.partitionId() if ctx else 0, rows=rows)

    class ArrowEncodeOnly(DataSourceArrowWriter):
        def __init__(self, config: Any, schema: Any) -> None:
            self.config, self.schema = config, schema

        def write(self, iterator: Any) -> AmqpqCommitMessage:
            return encode(self.config, self.schema, iterator)

    class RowEncodeOnly(DataSourceWriter):
        def __init__(self, config: Any, schema: Any) -> None:
            self.config, self.schema = config, schema

        def write(self, iterator: Any) -> AmqpqCommitMessage:
            batches = rows_to_batches(iterator, self.schema, self.config.confirm_batch_size)
            return encode(self.config, self.schema, batches)

    class EncodeOnlySource(AmqpqDataSource):
        @classmethod
        def name(cls) -> str:
            return "amqpq_encode_only"

        def writer(self, schema: Any, overwrite: bool) -> Any:
            config = parse_options({**self.options, "preflight": "false"}, schema)
            cls = RowEncodeOnly if config.api == "row" else ArrowEncodeOnly
            return cls(config, schema)

    return EncodeOnlySource


# ----------------------------------------------------------------------------- running
def timed(label: str, broker: str, uri: str, rows: int, fn: Callable[[], Any],
          results: list[dict[str, Any]]) -> None:
    reset_queue(uri)
    started = time.perf_counter()
    fn()
    seconds = time.perf_counter() - started
    count = queue_count(uri)
    status = "ok" if count == rows else f"QUEUE HAS {count}"
    results.append({"broker": broker, "method": label, "rows": rows, "seconds": seconds,
                    "rows_per_s": rows / seconds, "status": status})
    print(f"  {broker:9} {label:20} {rows:>9,} rows {seconds:7.1f} s "
          f"{rows / seconds:>9,.0f} rows/s  {status}", flush=True)
    reset_queue(uri)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; exit 1 when a target is missed."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--blocking-rows", type=int, default=20_000,
                    help="rows for the (slow) pika blocking baseline")
    ap.add_argument("--rabbit-uri", default="amqp://guest:guest@127.0.0.1:5672/%2F",
                    help="reference RabbitMQ ('none' to skip)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    paths = [str(REPO_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import spark_sink

    amqpq = start_amqpq()
    amqpq_uri = amqpq.url
    brokers = [("amqpq", amqpq_uri)]
    if args.rabbit_uri != "none":
        if reachable(args.rabbit_uri):
            brokers.append(("rabbitmq", args.rabbit_uri))
        else:
            print(f"reference RabbitMQ not reachable at {args.rabbit_uri}: skipped")
    results: list[dict[str, Any]] = []
    try:
        spark = (SparkSession.builder.master(args.master).appName("amqpq sink bench")
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.driver.host", "127.0.0.1")
                 .config("spark.driver.bindAddress", "127.0.0.1")
                 .config("spark.driver.memory", "4g").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        spark_sink.register(spark)
        country = F.element_at(F.array(*(F.lit(c) for c in ("FR", "DE", "US", "JP"))),
                               (F.col("id") % 4 + 1).cast("int"))
        df = spark.range(args.rows, numPartitions=2).select(
            "id", country.alias("country"), (F.col("id") * 0.25).alias("amount")).cache()
        df.count()
        py_rows = [(i, ("FR", "DE", "US", "JP")[i % 4], i * 0.25) for i in range(args.rows)]
        print(f"{args.rows:,} rows x 3 columns as JSON, publisher confirms, {args.master}")

        def sink(uri: str, api: str) -> Callable[[], Any]:
            return lambda: spark_sink.write(df, uri=uri, routingKey=QUEUE, api=api)

        spark.dataSource.register(encode_only_source())
        for api in ("arrow", "row"):
            for data in (df.limit(20_000), df):  # warm-up, then timed
                started = time.perf_counter()
                data.write.format("amqpq_encode_only").option("uri", amqpq_uri) \
                    .option("routingKey", QUEUE).option("api", api).mode("append").save()
                seconds = time.perf_counter() - started
            results.append({"broker": "-", "method": f"encode only ({api})", "rows": args.rows,
                            "seconds": seconds, "rows_per_s": args.rows / seconds,
                            "status": "ok"})
            print(f"  {'-':9} {'encode only (' + api + ')':20} {args.rows:>9,} rows "
                  f"{seconds:7.1f} s {args.rows / seconds:>9,.0f} rows/s", flush=True)
        for name, uri in brokers:
            reset_queue(uri)
            spark_sink.write(df.limit(20_000), uri=uri, routingKey=QUEUE)  # warm-up
            timed("spark sink (arrow)", name, uri, args.rows, sink(uri, "arrow"), results)
            timed("spark sink (row)", name, uri, args.rows, sink(uri, "row"), results)
            timed("pika window 5000", name, uri, args.rows,
                  lambda uri=uri: pika_window(uri, py_rows), results)
            timed("pika blocking", name, uri, args.blocking_rows,
                  lambda uri=uri: pika_blocking(uri, py_rows[: args.blocking_rows]), results)
            delete_queue(uri)
        spark.stop()
    finally:
        amqpq.close()

    def rate(broker: str, method: str) -> float:  # noqa: E306
        return next((r["rows_per_s"] for r in results
                     if r["broker"] == broker and r["method"] == method), 0.0)

    ours, pika_rate = rate("amqpq", "spark sink (arrow)"), rate("amqpq", "pika window 5000")
    ok = ours >= TARGET_ROWS_PER_S and ours >= pika_rate and all(
        r["status"] == "ok" for r in results)
    print(f"target: spark sink into amqpq {ours:,.0f} rows/s >= {TARGET_ROWS_PER_S:,} and >= "
          f"pika {pika_rate:,.0f} rows/s: {'PASS' if ok else 'FAIL'}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
