"""Spark sink for amqpq (and any AMQP 0-9-1 broker): DataFrame rows as messages.

Batch::

    df.write.format("amqpq") \\
        .option("uri", "amqp://guest:guest@127.0.0.1:5672/%2F") \\
        .option("exchange", "events").option("routingKeyColumn", "country") \\
        .mode("append").save()

Streaming: ``df.writeStream.format("amqpq").option(...).option("checkpointLocation", d).start()``.

Registration: installing the package (``pip install .[spark]``) ships the top-level module
``pyspark_amqpq``, which Spark finds at session start (no call needed); otherwise call
``spark.dataSource.register(AmqpqDataSource)`` once (or :func:`register`).

Options (keys are case-insensitive; values are strings):

=========================== ==============================================================
uri                         required; ``amqp://user:pass@host:port/vhost``, several
                            comma-separated for failover (tried in order per task).
                            Query: ``heartbeat`` (s, default off), ``connection_timeout`` (s)
username, password          credentials overriding the URI's (Spark redacts option values
                            whose key matches ``spark.redaction.regex`` in plans and logs,
                            so this keeps the password out of them)
exchange                    target exchange (default ``""``: the default exchange, the
                            routing key is the queue name)
routingKey                  constant routing key (default ``""``)
routingKeyColumn            column holding each row's routing key (null -> ``""``)
bodyColumn                  binary/string column sent as the body as is (other columns can
                            still feed routing/headers/properties)
format                      body when there is no bodyColumn: ``json`` (default; the whole
                            row as one JSON object), ``csv`` (one RFC 4180 record, no
                            header), ``avro`` (Avro single-object encoding)
headersColumns              comma-separated columns copied into the headers table
headers.<name>              a constant string header
properties.<name>           a constant property: content_type (default per format),
                            content_encoding, delivery_mode (``persistent``/2 default,
                            ``transient``/1), priority (0-255), expiration (ms),
                            correlation_id, reply_to, type, user_id, app_id;
                            message_id = ``auto`` (default) | ``none``;
                            timestamp = ``now`` | ``none`` (default)
properties.<name>.column    the property from a column, e.g.
                            ``properties.message_id.column = order_id`` (null: unset)
mandatory                   ``true``: an unroutable row fails the task (default false)
confirmBatchSize            messages per socket write / confirm poll (default 1000)
maxInFlight                 most unconfirmed messages per task (default 20000)
declareExchange             ``direct``/``fanout``/``topic``/``headers``: declare the
                            (durable) exchange on the driver first
timeout                     seconds to connect, and without confirm progress (default 30)
jobId                       first part of the automatic message ids (default: random per
                            batch write; the query id for streaming)
summaryPath                 file the driver writes the JSON summary to (streaming: one line
                            per micro-batch)
preflight                   ``false`` skips the driver's connect + exchange check
api                         ``arrow`` (default) or ``row`` (Row-based writer; slower)
=========================== ==============================================================

Guarantee: at-least-once. A task returns only when the broker confirmed every row it sent;
a nack, a return (mandatory), a closed channel/connection or ``timeout`` seconds without
confirm progress fail the task and Spark retries it from its first row (local mode retries
only with ``local[N, maxFailures]``). Each row carries ``message_id`` =
``<jobId>-<partition>-<row>`` (streaming ``<queryId>-<batchId>-<partition>-<row>``), the same
on a retry as long as the partition's row order is deterministic, so consumers can drop
duplicates. Save mode: ``append`` only; ``overwrite`` is refused (publishing cannot replace
queued messages), and Spark itself refuses ``errorifexists``/``ignore``.

Counts: each commit message carries the partition's confirmed row count; the driver prints
``amqpq sink: job … published N rows`` and, with ``summaryPath``, writes them as JSON;
:func:`write` does that for you and returns the summary.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["register", "write", "AmqpqDataSource"]


def __getattr__(name: str) -> Any:
    if name == "AmqpqDataSource":  # lazy: importing spark_sink does not import pyspark
        from spark_sink.datasource import AmqpqDataSource

        return AmqpqDataSource
    raise AttributeError(name)


def register(spark: SparkSession) -> None:
    """Register the ``amqpq`` format with ``spark`` (same as
    ``spark.dataSource.register(AmqpqDataSource)``; needed only when the package is not
    installed, e.g. when running from a source checkout)."""
    from spark_sink.datasource import AmqpqDataSource

    spark.dataSource.register(AmqpqDataSource)


def write(df: DataFrame, **options: str | int | float | bool) -> dict[str, Any]:
    """Publish ``df`` in append mode and return the driver's summary.

    Args:
        df: the rows to publish.
        **options: sink options (see the module docstring), e.g. ``uri=...``,
            ``exchange="events"``, ``routingKeyColumn="country"``.

    Returns:
        ``{"rows": confirmed rows, "partitions": n, "per_partition": [...], "job_id": ...,
        "status": "committed", ...}`` as written to ``summaryPath``.
    """
    fd, path = tempfile.mkstemp(prefix="amqpq-summary-", suffix=".json")
    os.close(fd)
    try:
        writer = df.write.format("amqpq").mode("append")
        for key, value in options.items():
            writer = writer.option(key, str(value).lower() if isinstance(value, bool) else
                                   str(value))
        writer.option("summaryPath", path).save()
        with open(path, encoding="utf-8") as fh:
            summary: dict[str, Any] = json.load(fh)
        return summary
    finally:
        os.unlink(path)
