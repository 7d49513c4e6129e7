"""The ``amqpq`` PySpark data source: writes (batch and streaming) and reads streams (batch).

``writer()``/``streamWriter()`` run on the driver: they validate every option against the
DataFrame schema, refuse save modes that have no AMQP meaning, and (``preflight``, default
on) connect once to check the exchange exists or declare it (``declareExchange``) and, for a
target queue through the default exchange (``save("orders")``), that the queue exists, so a
bad job fails before any task starts; with ``exactlyOnce`` it declares or checks a
deduplicating target instead (:mod:`spark_sink.exactly_once`). A batch write's ``jobId`` (the
first part of every row id) is fixed here, on the driver, so a retried task reuses it. Their errors reach the user as one line
(``[PYTHON_DATA_SOURCE_ERROR] Failed to initialize Python data source writer:
spark_sink.options.AmqpqOptionError: amqpq sink: option 'x' ...``), without a traceback.

Source: PySpark Python Data Source API (``pyspark.sql.datasource.DataSource``),
https://spark.apache.org/docs/latest/api/python/tutorial/sql/python_data_source.html.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import uuid

from pyspark.sql import types as T
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)

from spark_sink.options import AmqpqOptionError, AmqpqSaveModeError, SinkConfig, parse_options
from spark_sink.publisher import ConfirmPublisher, PublishError
from spark_sink.source import SCHEMA as SOURCE_SCHEMA
from spark_sink.source import AmqpqMicroBatchReader, AmqpqStreamReader, parse_source_options
from spark_sink.writer import (
    AmqpqArrowWriter,
    AmqpqRowWriter,
    AmqpqStreamRowWriter,
    AmqpqStreamWriter,
    brief_errors,
)

log = logging.getLogger("spark_sink")


OVERWRITE_REFUSED = (
    "amqpq sink: save mode 'overwrite' (streaming: output mode 'complete') is not supported: "
    "publishing cannot replace messages already in queues. Use .mode('append') "
    "(streaming: outputMode('append')). Spark itself refuses 'errorifexists' and 'ignore' "
    "(and the streaming output mode 'update') for Python data sources."
)


class AmqpqDataSource(DataSource):
    """``df.write.format("amqpq")`` / ``df.writeStream.format("amqpq")``: rows as messages.

    Options are documented in ``spark_sink/__init__.py`` and the README.
    """

    @classmethod
    def name(cls) -> str:
        """The format name: ``amqpq``."""
        return "amqpq"

    def schema(self) -> T.StructType:
        """What ``spark.read.format("amqpq")`` gives (spark_sink/source.py)."""
        return SOURCE_SCHEMA

    def reader(self, schema: T.StructType) -> DataSourceReader:
        """Driver: validate the read options; the reader plans the offset ranges."""
        with brief_errors():
            return AmqpqStreamReader(parse_source_options(dict(self.options), schema))

    def streamReader(self, schema: T.StructType) -> DataSourceStreamReader:  # noqa: N802
        """Driver: validate the read options; micro-batches follow the streams' offsets."""
        with brief_errors():
            return AmqpqMicroBatchReader(parse_source_options(dict(self.options), schema))

    def writer(self, schema: T.StructType, overwrite: bool) -> DataSourceWriter:
        """Driver: validate and return the batch writer (pickled to every task)."""
        with brief_errors():
            config = self._config(schema, overwrite)
        if not config.job_id:
            config = dataclasses.replace(config, job_id=uuid.uuid4().hex[:12])
        if config.api == "row":
            return AmqpqRowWriter(config, schema)
        return AmqpqArrowWriter(config, schema)

    def streamWriter(self, schema: T.StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802
        """Driver: validate and return the micro-batch writer (recreated per micro-batch)."""
        with brief_errors():
            config = self._config(schema, overwrite)
        if config.api == "row":
            return AmqpqStreamRowWriter(config, schema)
        return AmqpqStreamWriter(config, schema)

    def _config(self, schema: T.StructType, overwrite: bool) -> SinkConfig:
        if overwrite:
            raise AmqpqSaveModeError(OVERWRITE_REFUSED)
        opts = dict(self.options)
        config = parse_options(opts, schema)
        if config.format == "avro" and config.body_column is None:
            from spark_sink.avro_schema import avro_schema
            from spark_sink.encoding import avro_fingerprint

            avro = avro_schema(schema)
            log.info("amqpq sink: Avro schema (fingerprint %016x): %s", avro_fingerprint(avro),
                     json.dumps(avro))
        if config.preflight:
            preflight(config)
        return config


def preflight(config: SinkConfig) -> None:
    """Driver: connect once; declare the exchange (``declareExchange``) or check it exists;
    check the target queue exists when rows go to one queue through the default exchange and
    unroutable rows fail the job.

    Raises:
        AmqpqOptionError: no broker reachable ('uri'), the exchange is missing ('exchange'),
            or the target queue is missing ('path' or 'routingKey'); with ``exactlyOnce``,
            the target does not deduplicate and cannot be declared so ('exactlyOnce'; see
            :func:`spark_sink.exactly_once.prepare_target`).
    """
    if config.exactly_once:
        from spark_sink.exactly_once import prepare_target

        log.info("amqpq sink: exactlyOnce: %s", prepare_target(config))
        return
    publisher = ConfirmPublisher(config.addresses, timeout=min(config.timeout, 10.0),
                                 tls=config.tls)
    try:
        try:
            publisher.connect()
        except PublishError as exc:
            raise AmqpqOptionError("uri", f"reaches no broker: {exc}") from None
        try:
            if config.declare_exchange:
                publisher.declare_exchange(config.exchange, config.declare_exchange)
            elif config.exchange:
                publisher.declare_exchange(config.exchange, "direct", passive=True)
        except PublishError as exc:
            vhost = publisher.address.vhost if publisher.address else "?"
            if config.declare_exchange:
                raise AmqpqOptionError("declareExchange", f"failed for exchange "
                                                          f"{config.exchange!r}: {exc}") from None
            raise AmqpqOptionError("exchange", f"{config.exchange!r} is not usable in vhost "
                                               f"{vhost!r}: {exc} (declare it first, or set "
                                               "declareExchange=<type>)") from None
        if (config.exchange == "" and config.routing_key and config.routing_key_column is None
                and config.mandatory and config.on_unroutable == "fail"):
            try:
                publisher.check_queue(config.routing_key)
            except PublishError as exc:
                if "404" not in str(exc):  # e.g. no permission to look: the tasks will tell
                    log.info("amqpq sink: could not check queue %r: %s", config.routing_key, exc)
                    return
                vhost = publisher.address.vhost if publisher.address else "?"
                option = "path" if config.path is not None else "routingKey"
                raise AmqpqOptionError(option, f"targets queue {config.routing_key!r}, which "
                                               f"does not exist in vhost {vhost!r} ({exc}); "
                                               "declare it first") from None
    finally:
        publisher.close()
