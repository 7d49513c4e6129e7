"""Batch and streaming writers: one confirmed publisher per Spark task.

``write()`` runs in a task on an executor (the writer object is pickled there, so connections
are opened inside ``write()``); ``commit()``/``abort()`` run on the driver with the commit
messages of all partitions, in partition order, ``None`` for a failed one.

Delivery is at-least-once: ``write()`` returns its commit message only after every row it sent
is confirmed by the broker; a nack, a returned mandatory message, a closed channel or
connection, or ``timeout`` seconds without confirm progress raise, and Spark retries the task
from its first row (``spark.task.maxFailures``). Retried rows carry the same automatic
``message_id`` (``<jobId>-<partition>-<row>``, streaming: ``<jobId>-<batchId>-<partition>-
<row>``) so consumers can drop duplicates.

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

from spark_sink.messages import MessageBuilder
from spark_sink.options import SinkConfig
from spark_sink.publisher import ConfirmPublisher

log = logging.getLogger("spark_sink")

QUERY_ID_KEY = "sql.streaming.queryId"  # Spark local properties set on streaming jobs
BATCH_ID_KEY = "streaming.sql.batchId"


@dataclass
class AmqpqCommitMessage(WriterCommitMessage):
    """What one partition published (returned by ``write()`` once all rows are confirmed).

    Attributes:
        partition: Spark partition id.
        rows: rows published and confirmed by the broker.
        attempt: Spark task attempt number (0 = first try).
        seconds: wall time of the partition's write (connect to last confirm).
        broker: the broker that took the rows (URI without password).
    """

    partition: int
    rows: int
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
        PublishError: a nack, return, closed channel/connection, or no confirm progress for
            ``config.timeout`` seconds; Spark then retries the task.
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
    publisher = ConfirmPublisher(
        config.addresses,
        timeout=config.timeout,
        max_in_flight=config.max_in_flight,
        client_name=f"spark amqpq sink {job} partition {partition}",
    )
    address = publisher.connect()
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
    return AmqpqCommitMessage(partition=partition, rows=rows, attempt=attempt,
                              seconds=round(time.monotonic() - started, 3),
                              broker=address.redacted())


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
    """The job summary written to ``summaryPath`` and logged by the driver."""
    parts = [m for m in messages if isinstance(m, AmqpqCommitMessage)]
    summary: dict[str, Any] = {
        "status": "committed" if ok else "aborted",
        "job_id": config.job_id,
        "rows": sum(m.rows for m in parts),
        "partitions": len(messages),
        "failed_partitions": sum(1 for m in messages if m is None),
        "exchange": config.exchange,
        "seconds": max((m.seconds for m in parts), default=0.0),
        "per_partition": [asdict(m) for m in parts],
    }
    if batch_id is not None:
        summary["batch_id"] = batch_id
    return summary


def report(config: SinkConfig, summary: dict[str, Any]) -> None:
    """Log the summary on the driver (stderr + ``spark_sink`` logger) and write summaryPath."""
    where = f" batch {summary['batch_id']}" if "batch_id" in summary else ""
    if summary["status"] == "committed":
        line = (f"amqpq sink: job {config.job_id or '(stream)'}{where} published "
                f"{summary['rows']} rows (all confirmed) from {summary['partitions']} "
                f"partitions to exchange {config.exchange!r}")
    else:
        line = (f"amqpq sink: job {config.job_id or '(stream)'}{where} ABORTED: "
                f"{summary['failed_partitions']} of {summary['partitions']} partitions failed; "
                f"{summary['rows']} rows of finished partitions were confirmed (a retry "
                "publishes them again: at-least-once)")
    log.info(line)
    print(line, file=sys.stderr, flush=True)
    if config.summary_path:
        write_summary(config.summary_path, summary, append="batch_id" in summary)


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
