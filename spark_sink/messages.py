"""From Arrow record batches to encoded AMQP messages, following a :class:`SinkConfig`."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import types as T

from spark_sink import frames
from spark_sink.encoding import (
    AvroEncoder,
    column_bodies,
    csv_bodies,
    json_bodies,
    string_values,
)
from spark_sink.options import DEDUP_HEADER, OCTET_PROPERTIES, SinkConfig


class MessageBuilder:
    """Encodes record batches of one partition into Basic.Publish frames.

    Args:
        config: the validated options.
        schema: the DataFrame's Spark schema (for Avro).
        frame_max: the connection's negotiated frame_max (bytes).
        id_prefix: a row's id is ``f"{id_prefix}{row_index}"``: its automatic message_id
            and, with ``exactlyOnce``, its ``x-deduplication-header`` (a long string).
    """

    def __init__(self, config: SinkConfig, schema: T.StructType, frame_max: int,
                 id_prefix: str) -> None:
        self.config = config
        self.encoder = frames.PublishEncoder(config.exchange, config.mandatory, frame_max)
        self.id_prefix = id_prefix.encode("utf-8")
        self._dedup_key = frames.shortstr(DEDUP_HEADER, "header name") + b"S"
        self._constant_rk = frames.shortstr(config.routing_key, "routingKey")
        self._const_props = {name: frames.encode_property(name, value)
                             for name, value in config.properties.items()}
        self._const_headers = b"".join(
            frames.shortstr(k, "header name") + frames.table_value(v)
            for k, v in config.constant_headers
        )
        self._bodies: Callable[[pa.RecordBatch], list[bytes]]
        if config.body_column is not None:
            column = config.body_column
            self._bodies = lambda batch: column_bodies(batch.column(column))
        elif config.format == "csv":
            self._bodies = csv_bodies
        elif config.format == "avro":
            self._bodies = AvroEncoder(schema).bodies
        else:
            self._bodies = json_bodies

    def encode(self, batch: pa.RecordBatch, first_row: int, out: bytearray) -> None:
        """Append the frames of every row of ``batch`` (row numbers from ``first_row``)."""
        for chunk, _ in self.chunks(batch, first_row, max(batch.num_rows, 1)):
            out += chunk

    def chunks(self, batch: pa.RecordBatch, first_row: int,
               size: int) -> Iterator[tuple[bytearray, int]]:
        """Encode ``batch`` column-wise in one go, then yield ``(frames, messages)`` for
        every ``size`` rows (row numbers, for message ids, start at ``first_row``)."""
        n = batch.num_rows
        if n == 0:
            return
        config = self.config
        bodies = self._bodies(batch)
        if config.routing_key_column is None:
            routing_keys: bytes | Sequence[bytes] = self._constant_rk
        else:
            keys = string_values(batch.column(config.routing_key_column))
            routing_keys = [b"\x00" if k is None else k
                            for k in frames.shortstrs(keys, "routing key")]
        values: dict[str, frames.PropertyValue] = dict(self._const_props)
        prefix = self.id_prefix
        plen = len(prefix)
        digits: list[bytes] = []
        if config.message_id == "auto" or config.exactly_once:
            digits = [str(i).encode() for i in range(first_row, first_row + n)]
        if config.message_id == "auto":
            values["message_id"] = [bytes((plen + len(d),)) + prefix + d for d in digits]
        if config.timestamp_now:
            values["timestamp"] = frames.encode_property("timestamp", int(time.time()))
        for name, column in config.property_columns.items():
            values[name] = _property_column(name, batch.column(column))
        if config.headers_columns or self._const_headers or config.exactly_once:
            entries = [frames.table_entries(c, batch.column(c)) for c in config.headers_columns]
            if config.exactly_once:  # the row's id as the deduplication key (long string)
                key = self._dedup_key
                entries.append([key + (plen + len(d)).to_bytes(4, "big") + prefix + d
                                for d in digits])
            values["headers"] = frames.header_tables(self._const_headers, entries, n)
        flags, props = frames.property_lists(values, n)
        for start in range(0, n, size):
            end = min(start + size, n)
            out = bytearray()
            keys_part = routing_keys if isinstance(routing_keys, bytes) \
                else routing_keys[start:end]
            self.encoder.encode(out, bodies[start:end], keys_part, flags[start:end],
                                props[start:end])
            yield out, end - start


def _property_column(name: str, col: pa.Array) -> list[bytes | None]:
    """Per-row encoded values of one property taken from a column (null = property unset)."""
    if name in OCTET_PROPERTIES:
        values = col.to_pylist()
        bad = [v for v in values if v is not None and not 0 <= v <= 255]
        if bad:
            raise frames.EncodeError(f"property {name} must be 0..255, got {bad[0]}")
        return [None if v is None else bytes((v,)) for v in values]
    if name == "timestamp":
        if pa.types.is_timestamp(col.type):
            seconds = pc.cast(col.cast(pa.timestamp("us", col.type.tz)), pa.int64()).to_pylist()
            seconds = [None if v is None else v // 1_000_000 for v in seconds]
        else:
            seconds = col.to_pylist()
        if any(v is not None and v < 0 for v in seconds):
            raise frames.EncodeError("property timestamp must not be before 1970")
        return [None if v is None else frames.encode_property("timestamp", v) for v in seconds]
    return frames.shortstrs(string_values(col), f"property {name}")
