"""Spark sink for amqpq (and any AMQP 0-9-1 broker): DataFrame rows as messages.

Batch::

    df.write.format("amqpq") \\
        .option("uri", "amqp://guest:guest@127.0.0.1:5672/%2F") \\
        .option("exchange", "events").option("routingKeyColumn", "country") \\
        .mode("append").save()
    df.write.format("amqpq").option("uri", uri).mode("append").save("orders")  # queue orders

The ``save(path)`` argument names the target: ``"orders"`` = the queue ``orders`` through the
default exchange; ``"events/FR"`` = exchange ``events``, routing key ``FR``; ``"events/"`` =
exchange ``events``, routing key from ``routingKey``/``routingKeyColumn``. %-escapes are
decoded in each part (``"a%2Fb"`` is the queue ``a/b``). A path that disagrees with the
``exchange``/``routingKey``/``routingKeyColumn`` options is refused; one that names nothing
(``"/"``) too.

Streaming: ``df.writeStream.format("amqpq").option(...).option("checkpointLocation", d).start()``.

Registration: installing the package (``pip install .[spark]`` or ``pip install -e .[spark]``,
any ``editable_mode``) ships the top-level module ``pyspark_amqpq``, which Spark finds at
session start by listing sys.path (no call needed; see pyspark_amqpq.py); otherwise (e.g.
``DATA_SOURCE_NOT_FOUND`` when running from a source tree) call :func:`register` once.

Options (keys are case-insensitive; values are strings):

=========================== ==============================================================
uri                         required; ``amqp://user:pass@host:port/vhost`` or ``amqps://``
                            (TLS, port 5671), several comma-separated for failover (tried
                            in order per task and after a dropped connection).
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
mandatory                   publish with the mandatory flag (default ``true``) so the broker
                            returns rows no queue takes (312 NO_ROUTE); ``false``: it drops
                            them silently and the sink cannot tell (the summary says so)
onUnroutable                ``fail`` (default): an unroutable row fails the task, naming the
                            exchange and routing key; ``drop``: it is counted as
                            ``unroutable`` in the summary and the job goes on
sslCacert                   amqps: CA file (PEM) that signed the broker's certificate
                            (default: the system's CAs)
sslCert, sslKey             amqps: client certificate and key (PEM) for brokers that ask
sslVerify                   amqps: check the broker's certificate and host name (true)
sslServerName               amqps: name to check and send as SNI (default: the URI's host)
confirmBatchSize            messages per socket write / confirm poll (default 1000)
maxInFlight                 most unconfirmed messages per task (default 20000)
declareExchange             ``direct``/``fanout``/``topic``/``headers``: declare the
                            (durable) exchange on the driver first
timeout                     seconds to connect, without confirm progress, and to get a new
                            connection after one drops (default 30)
jobId                       first part of the row ids (default: random per batch write,
                            drawn on the driver before any task; the query id for
                            streaming)
exactlyOnce                 ``true``: each row lands once in spite of task retries and
                            streaming restarts (see "Exactly once" below; default false)
dedupCacheSize              exactlyOnce: ``x-cache-size`` (messages) of a target the driver
                            declares (exchange: 1000000; queue: none, i.e. every message it
                            holds)
dedupCacheTtl               exactlyOnce: ``x-cache-ttl`` (ms) of a target the driver
                            declares (default none: ids leave by size only)
managementUri               exactlyOnce with an existing target queue: the management API
                            that tells its arguments (``http://<uri host>:15672``)
summaryPath                 file the driver writes the JSON summary to (streaming: one line
                            per micro-batch)
preflight                   ``false`` skips the driver's connect + exchange/queue check
                            (with exactlyOnce also the declare/check of the deduplicating
                            target: the rows still carry their ids)
api                         ``arrow`` (default) or ``row`` (Row-based writer; slower)
=========================== ==============================================================

Guarantee: at-least-once. A task returns only when the broker confirmed every row it sent.
When its connection drops (a broker restart, a connection closed by an operator), the task
reconnects, trying each URI in turn with backoff (0.1 s doubling to 2 s) for up to ``timeout``
seconds, and republishes every row not yet confirmed: rows whose confirm was lost with the
connection arrive twice. A nack, an unroutable row (``onUnroutable=fail``), a closed channel,
no new connection within ``timeout``, or ``timeout`` seconds without confirm progress fail the
task and Spark retries it from its first row (local mode retries only with
``local[N, maxFailures]``). Each row carries ``message_id`` =
``<jobId>-<partition>-<row>`` (streaming ``<queryId>-<batchId>-<partition>-<row>``), the same
on a retry as long as the partition's row order is deterministic, so consumers can drop
duplicates. Save mode: ``append`` only; ``overwrite`` is refused (publishing cannot replace
queued messages), and Spark itself refuses ``errorifexists``/``ignore``.

Exactly once (``exactlyOnce=true``): every row carries an id that is the same each time Spark
runs its partition again, ``<jobId>-<partition>-<row>`` (streaming ``<queryId>-<batchId>-
<partition>-<row>``, where the query id comes from the checkpoint; ``jobId`` replaces the
query id when given; ``<row>`` counts from 0 in the partition), in the
``x-deduplication-header`` header and as ``message_id`` (unless ``properties.message_id`` says
otherwise), and the target drops an id it has seen. The driver, before any task, declares a
missing target exchange as ``x-message-deduplication`` (durable; ``x-cache-size``
``dedupCacheSize``, ``x-cache-ttl`` ``dedupCacheTtl``, ``x-cache-persistence: disk``) or a
missing target queue with ``x-message-deduplication: true``, and refuses with one line an
existing exchange of another type or a queue without that argument (asked of the management
API). It covers task retries, speculative tasks, recomputed stages and a streaming query
restarted from its checkpoint, provided a partition's rows come in the same order each time
(as from files, ``range`` or a sorted DataFrame). The window: a replay is dropped only while
its id is remembered: an exchange remembers the last ``x-cache-size`` ids for ``x-cache-ttl``
ms whether or not they were consumed; a queue remembers the ids of the messages it still holds,
so a row a consumer already acked comes again if its partition is replayed (consumers reading
while the job runs: use an exchange target). A new batch job draws a new ``jobId``: running the
same job again publishes every row again unless it sets the same ``jobId`` (and then rows with
the same ids are dropped even if their contents changed). See :mod:`spark_sink.exactly_once`.

Counts: each commit message carries the partition's counts; the driver prints one line,
``amqpq sink: job …: N rows published, C confirmed, U unroutable`` (plus reconnects and
republished rows when there were any) and, with ``summaryPath``, writes them as JSON;
:func:`write` does that for you and returns the summary.

Errors: a bad option fails the job on the driver before any task starts; its message names the
option on its first line (``... AmqpqOptionError: amqpq sink: option 'timeout' must be a
number of seconds, got 'x'``), as do a task's publishing errors.
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
            ``exchange="events"``, ``routingKeyColumn="country"``; ``path="orders"`` is the
            same as ``save("orders")``.

    Returns:
        ``{"published": n, "confirmed": n, "unroutable": n or None, "republished": n,
        "reconnects": n, "rows": confirmed, "partitions": n, "per_partition": [...],
        "job_id": ..., "status": "committed", ...}`` as written to ``summaryPath``
        (see :func:`spark_sink.writer.summarize`).

    Raises:
        AmqpqOptionError: a bad option, raised here before Spark runs anything.
        Exception: whatever Spark raises when the job fails (its message ends with the
            task's error).
    """
    from spark_sink.options import parse_options

    texts = {key: str(value).lower() if isinstance(value, bool) else str(value)
             for key, value in options.items()}
    parse_options(texts, df.schema)  # a bad option: one clear error here, not a Spark trace
    fd, path = tempfile.mkstemp(prefix="amqpq-summary-", suffix=".json")
    os.close(fd)
    try:
        writer = df.write.format("amqpq").mode("append")
        for key, value in texts.items():
            writer = writer.option(key, value)
        writer.option("summaryPath", path).save()
        with open(path, encoding="utf-8") as fh:
            summary: dict[str, Any] = json.load(fh)
        return summary
    finally:
        os.unlink(path)
