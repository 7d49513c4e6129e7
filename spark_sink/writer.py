"""Batch and streaming writers: one confirmed publisher per Spark task.

``write()`` runs in a task on an executor (the writer object is pickled there, so connections
are opened inside ``write()``); ``commit()``/``abort()`` run on the driver with the commit
messages of all partitions, in partition order, ``None`` for a failed one.

Delivery is at-least-once: ``write()`` returns its commit message only after every row it sent
is confirmed by the broker. A dropped connection is retried inside the task (each URI in turn,
with backoff, for up to ``timeout`` seconds) and the unconfirmed rows are republished
(:mod:`spark_sink.retry`); a nack, an unroutable row (unless ``onUnroutable=drop``, which counts
it), a closed channel, or a connection that cannot be re-established raise, and Spark retries
the task from its first row (``spark.task.maxFailures``). Republished rows carry the same
automatic ``message_id`` (``<jobId>-<partition>-<row>``, streaming: ``<jobId>-<batchId>-
<partition>-<row>``) so consumers can drop duplicates. With ``exactlyOnce`` the same id is
also the row's ``x-deduplication-header`` and the target drops the rows it has already taken
(:mod:`spark_sink.exactly_once`): each row lands once.

Source: PySpark Python Data Source API, https://spark.apache.org/docs/latest/api/python/
tutorial/sql/python_data_source.html and ``pyspark.sql.datasource`` (DataSourceArrowWriter,
DataSourceStreamArrowWriter, WriterCommitMessage).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import Row
from pyspark.sql import types as T
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    DataSourceWriter,
    WriterCommitMessage,
)

from spark_sink.frames import EncodeError
from spark_sink.messages import MessageBuilder
from spark_sink.options import AmqpqOptionError, AmqpqSaveModeError, SinkConfig
from spark_sink.publisher import PublishError
from spark_sink.retry import ReliablePublisher

log = logging.getLogger("spark_sink")

QUERY_ID_KEY = "sql.streaming.queryId"  # Spark local properties set on streaming jobs
BATCH_ID_KEY = "streaming.sql.batchId"
# errors whose message says it all: Spark shows them without the Python traceback
EXPECTED_ERRORS = (AmqpqOptionError, AmqpqSaveModeError, PublishError, EncodeError)


@contextmanager
def brief_errors() -> Iterator[None]:
    """Let our own errors reach the user as one line instead of the end of a traceback.

    PySpark formats a worker's exception without traceback when ``SPARK_HIDE_TRACEBACK`` is
    set at that moment (pyspark.util.handle_worker_exception); its planner and task workers
    exit right after reporting an exception (pyspark.sql.worker.utils.worker_run,
    pyspark.worker.main), so setting it there affects nothing else. Outside a Spark worker
    this does nothing.
    """
    try:
        yield
    except EXPECTED_ERRORS:
        if "pyspark.worker" in sys.modules or "pyspark.sql.worker.utils" in sys.modules:
            os.environ["SPARK_HIDE_TRACEBACK"] = "1"
        raise


@dataclass
class AmqpqCommitMessage(WriterCommitMessage):
    """What one partition published (returned by ``write()`` once all rows are confirmed).

    Attributes:
        partition: Spark partition id.
        rows: rows the broker confirmed and routed to a queue (``mandatory=false``: confirmed;
            whether a queue took them is unknown).
        published: rows of the partition handed to the broker (each counted once).
        unroutable: rows the broker returned as unroutable (``onUnroutable=drop``), None
            with ``mandatory=false`` (not detected).
        republished: rows written again after a reconnection (at-least-once duplicates).
        reconnects: connections re-established during the task.
        attempt: Spark task attempt number (0 = first try).
        seconds: wall time of the partition's write (connect to last confirm).
        broker: the broker that took the last rows (URI without password).
    """

    partition: int
    rows: int
    published: int = 0
    unroutable: int | None = 0
    republished: int = 0
    reconnects: int = 0
    attempt: int = 0
    seconds: float = 0.0
    broker: str = ""


# --------------------------------------------------------------------------- task side
def publish_partition(
    config: SinkConfig,
    schema: T.StructType,
    batches: Iterable[pa.RecordBatch],
    batch_id: int | None = None,
) -> AmqpqCommitMessage:
    """Publish every row of one partition with confirms; return only when all are confirmed.

    Args:
        config: validated options.
        schema: the DataFrame schema.
        batches: the partition's rows as Arrow record batches.
        batch_id: streaming micro-batch id (None for a batch write).

    Raises:
        PublishError: a nack, an unroutable row (``onUnroutable=fail``), a closed channel, a
            connection not re-established within ``config.timeout`` seconds, or no confirm
            progress for that long; Spark then retries the task.
        EncodeError: a value AMQP cannot carry (e.g. a routing key over 255 bytes).
    """
    ctx = TaskContext.get()
    partition = ctx.partitionId() if ctx is not None else 0
    attempt = ctx.attemptNumber() if ctx is not None else 0
    job = config.job_id
    if batch_id is None and ctx is not None and ctx.getLocalProperty(BATCH_ID_KEY) is not None:
        batch_id = int(ctx.getLocalProperty(BATCH_ID_KEY) or 0)
        job = job or (ctx.getLocalProperty(QUERY_ID_KEY) or "")
    scope = f"{job}-{partition}-" if batch_id is None else f"{job}-{batch_id}-{partition}-"
    started = time.monotonic()
    publisher = ReliablePublisher(
        config.addresses,
        timeout=config.timeout,
        max_in_flight=config.max_in_flight,
        client_name=f"spark amqpq sink {job} partition {partition}",
        tls=config.tls,
        on_unroutable=config.on_unroutable,
    )
    with brief_errors():
        publisher.connect()
        try:
            builder = MessageBuilder(config, schema, publisher.frame_max, scope)
            step = config.confirm_batch_size
            rows = 0
            for batch in batches:
                for frames, count in builder.chunks(batch, rows, step):
                    publisher.send(frames, count)
                    rows += count
            publisher.wait_for_confirms()
        finally:
            publisher.close()
    unroutable = publisher.unroutable if config.mandatory else None
    address = publisher.address
    return AmqpqCommitMessage(partition=partition, rows=rows - (unroutable or 0),
                              published=rows, unroutable=unroutable,
                              republished=publisher.republished,
                              reconnects=publisher.reconnects, attempt=attempt,
                              seconds=round(time.monotonic() - started, 3),
                              broker=address.redacted() if address else "")


def rows_to_batches(rows: Iterator[Row], schema: T.StructType, size: int) -> Iterator[pa.RecordBatch]:
    """Group Row objects into Arrow record batches of ``size`` rows (for the row writer)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    chunk: list[Row] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= size:
            yield _to_batch(chunk, schema, arrow_schema)
            chunk = []
    if chunk:
        yield _to_batch(chunk, schema, arrow_schema)


def _to_batch(rows: list[Row], schema: T.StructType, arrow_schema: pa.Schema) -> pa.RecordBatch:
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema.fields]
    arrays = []
    for values, f, af in zip(columns, schema.fields, arrow_schema, strict=True):
        if isinstance(f.dataType, T.TimestampType):  # PySpark gives naive local times
            values = tuple(None if v is None else v.astimezone(dt.UTC) for v in values)
        elif isinstance(f.dataType, T.StructType):
            values = tuple(None if v is None else v.asDict(recursive=True) for v in values)
        elif isinstance(f.dataType, T.MapType):
            values = tuple(None if v is None else list(v.items()) for v in values)
        arrays.append(pa.array(values, af.type))
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)


# ------------------------------------------------------------------------- driver side
def summarize(config: SinkConfig, messages: list[WriterCommitMessage | None],
              batch_id: int | None = None, ok: bool = True) -> dict[str, Any]:
    """The job summary written to ``summaryPath`` and logged by the driver.

    Returns:
        ``{"status": "committed"|"aborted", "published": rows handed to the broker,
        "confirmed": rows confirmed and routed to a queue, "unroutable": rows returned as
        unroutable (None with mandatory=false: not detected), "republished": rows sent again
        after reconnections, "reconnects": n, "rows": same as confirmed, "partitions": n,
        "failed_partitions": n, "exchange", "routing_key", "seconds": slowest partition,
        "per_partition": [commit messages as dicts], "batch_id" (streaming)}``.
    """
    parts = [m for m in messages if isinstance(m, AmqpqCommitMessage)]
    confirmed = sum(m.rows for m in parts)
    summary: dict[str, Any] = {
        "status": "committed" if ok else "aborted",
        "job_id": config.job_id,
        "published": sum(m.published for m in parts),
        "confirmed": confirmed,
        "unroutable": sum(m.unroutable or 0 for m in parts) if config.mandatory else None,
        "republished": sum(m.republished for m in parts),
        "reconnects": sum(m.reconnects for m in parts),
        "rows": confirmed,
        "partitions": len(messages),
        "failed_partitions": sum(1 for m in messages if m is None),
        "exchange": config.exchange,
        "routing_key": config.routing_key if config.routing_key_column is None
        else f"<column {config.routing_key_column}>",
        "seconds": max((m.seconds for m in parts), default=0.0),
        "per_partition": [asdict(m) for m in parts],
    }
    if batch_id is not None:
        summary["batch_id"] = batch_id
    return summary


def report(config: SinkConfig, summary: dict[str, Any]) -> None:
    """Log the summary on the driver (stderr + ``spark_sink`` logger) and write summaryPath."""
    line = summary_line(config, summary)
    log.info(line)
    print(line, file=sys.stderr, flush=True)
    if config.summary_path:
        write_summary(config.summary_path, summary, append="batch_id" in summary)


def summary_line(config: SinkConfig, summary: dict[str, Any]) -> str:
    """The one line the driver prints for a summary (never "all confirmed" for rows that no
    queue took, or when that is unknown)."""
    job = f"job {config.job_id or '(stream)'}" + (
        f" batch {summary['batch_id']}" if "batch_id" in summary else "")
    unroutable = summary["unroutable"]
    if unroutable is None:
        routed = "unroutable rows not detected (mandatory=false)"
    elif unroutable:
        routed = f"{unroutable} unroutable (no queue took them; onUnroutable=drop)"
    else:
        routed = "0 unroutable"
    counts = f"{summary['published']} rows published, {summary['confirmed']} confirmed, {routed}"
    if summary["reconnects"]:
        outcome = ("dropped by the target's deduplication: exactlyOnce" if config.exactly_once
                   else "at-least-once: duplicates possible")
        counts += (f"; {summary['reconnects']} reconnects, {summary['republished']} rows "
                   f"republished ({outcome})")
    target = f"exchange {config.exchange!r}" if config.exchange else "the default exchange"
    if summary["status"] == "committed":
        return (f"amqpq sink: {job}: {counts}, from {summary['partitions']} partitions to "
                f"{target}")
    return (f"amqpq sink: {job} ABORTED: {summary['failed_partitions']} of "
            f"{summary['partitions']} partitions failed; finished partitions: {counts} (a retry "
            "publishes them again: " + ("the target drops the rows it has seen: exactlyOnce)"
                                        if config.exactly_once else "at-least-once)"))


def write_summary(path: str, summary: dict[str, Any], append: bool = False) -> None:
    """Write (batch: replace atomically; streaming: append one line) the JSON summary."""
    text = json.dumps(summary, sort_keys=True)
    if append:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(text + "\n")
        return
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".amqpq-summary-")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text + "\n")
    os.replace(tmp, path)


# ---------------------------------------------------------------------------- writers
class _Publishing:
    """What every amqpq writer holds and how it publishes a partition (in a Spark task)."""

    def __init__(self, config: SinkConfig, schema: T.StructType) -> None:
        self.config = config
        self.schema = schema

    def _publish_batches(self, batches: Iterator[pa.RecordBatch]) -> AmqpqCommitMessage:
        """Publish one partition (see :func:`publish_partition`)."""
        return publish_partition(self.config, self.schema, batches)

    def _publish_rows(self, rows: Iterator[Row]) -> AmqpqCommitMessage:
        """Publish one partition from rows (grouped into Arrow batches first)."""
        return self._publish_batches(
            rows_to_batches(rows, self.schema, self.config.confirm_batch_size))


class _BatchCommit(_Publishing):
    """Driver side of a batch write: log the total and write the summary."""

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Driver: log the total and write the summary."""
        report(self.config, summarize(self.config, messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Driver: the job failed; log what was confirmed before it did."""
        report(self.config, summarize(self.config, messages, ok=False))


class _StreamCommit(_Publishing):
    """Driver side of a micro-batch: log its total and append it to summaryPath."""

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Driver: log the micro-batch total and append it to summaryPath."""
        report(self.config, summarize(self.config, messages, batch_id=batchId))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Driver: the micro-batch failed."""
        report(self.config, summarize(self.config, messages, batch_id=batchId, ok=False))


class AmqpqArrowWriter(_BatchCommit, DataSourceArrowWriter):
    """Batch writer fed with Arrow record batches (the default, ``api=arrow``)."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> AmqpqCommitMessage:
        """Publish one partition (runs in a Spark task; see :func:`publish_partition`)."""
        return self._publish_batches(iterator)


class AmqpqRowWriter(_BatchCommit, DataSourceWriter):
    """Batch writer fed with Row objects (``api=row``; slower, kept for comparison)."""

    def write(self, iterator: Iterator[Row]) -> AmqpqCommitMessage:
        """Publish one partition from rows."""
        return self._publish_rows(iterator)


class AmqpqStreamWriter(_StreamCommit, DataSourceStreamArrowWriter):
    """Streaming writer (a new one per micro-batch); same guarantees per micro-batch."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> AmqpqCommitMessage:
        """Publish one partition of a micro-batch (runs in a Spark task)."""
        return self._publish_batches(iterator)


class AmqpqStreamRowWriter(_StreamCommit, DataSourceStreamWriter):
    """Streaming writer fed with Row objects (``api=row``)."""

    def write(self, iterator: Iterator[Row]) -> AmqpqCommitMessage:
        """Publish one partition of a micro-batch from rows."""
        return self._publish_rows(iterator)
