"""Reading streams into Spark: ``spark.read.format("amqpq")`` (batch) and
``spark.readStream.format("amqpq")`` (micro-batches, :class:`AmqpqMicroBatchReader`).

The driver resolves what to read through the broker's management HTTP API: the partitions
of a super stream (the bindings of its exchange, in ``x-stream-partition-order``) or the one
stream, and each one's first and last offset (amqpq's queue fields ``first_offset`` /
``last_offset``). Each stream's offset range is split into input partitions of at most
``maxOffsetsPerPartition`` offsets, read concurrently by Spark tasks. A task is an AMQP
consumer (pika) with ``x-stream-offset`` at its range's start, manual acks and a prefetch,
that stops at the range's end.

Options: ``uri`` (amqp://, required), ``stream`` or ``superStream`` (one of them),
``startingOffsets`` (``first`` default, ``last``, an offset, or JSON ``{"stream-0": 5}`` per
partition as Spark's Kafka source), ``endingOffsets`` (``last`` default: up to the last
offset when the job is planned; or an offset, exclusive, or JSON per partition),
``startingTimestamp`` (ms since the epoch: from the first chunk appended at or after it; one
task per stream), ``managementUri`` (default ``http://<uri host>:15672``, the uri's
credentials), ``maxOffsetsPerPartition`` (default 100,000), ``timeout`` (seconds a task
waits for the next message before it gives up on the rest of its range, default 30),
``format`` (``json``, ``csv``, ``avro``: bodies as the sink writes them, decoded into the
schema given with ``spark.read.schema(...)``; the rows then have that schema only).

Columns: ``stream``, ``offset`` (long), ``timestamp`` (when its chunk was appended; null
from a broker without amqpq's ``x-stream-timestamp-header``), ``exchange``, ``routing_key``,
``properties`` (struct of the AMQP basic properties), ``headers`` (map of string to string;
values as text), ``body`` (binary).

Source: PySpark Python Data Source API; https://www.rabbitmq.com/docs/streams (AMQP 0-9-1
stream consumers); Spark's Kafka source for the offset options.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql import types as T
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from spark_sink.decoding import FORMATS, body_decoder
from spark_sink.options import AmqpqOptionError as _SinkOptionError
from spark_sink.uri import BrokerAddress, UriError, parse_uri
from spark_sink.writer import brief_errors

PROPERTY_FIELDS = [
    ("content_type", T.StringType()), ("content_encoding", T.StringType()),
    ("delivery_mode", T.IntegerType()), ("priority", T.IntegerType()),
    ("correlation_id", T.StringType()), ("reply_to", T.StringType()),
    ("expiration", T.StringType()), ("message_id", T.StringType()),
    ("timestamp", T.TimestampType()), ("type", T.StringType()),
    ("user_id", T.StringType()), ("app_id", T.StringType()),
]
SCHEMA = T.StructType([
    T.StructField("stream", T.StringType(), False),
    T.StructField("offset", T.LongType(), False),
    T.StructField("timestamp", T.TimestampType(), True),
    T.StructField("exchange", T.StringType(), True),
    T.StructField("routing_key", T.StringType(), True),
    T.StructField("properties", T.StructType(
        [T.StructField(n, t, True) for n, t in PROPERTY_FIELDS]), True),
    T.StructField("headers", T.MapType(T.StringType(), T.StringType()), True),
    T.StructField("body", T.BinaryType(), True),
])
_OWN_HEADERS = ("x-stream-offset", "x-stream-timestamp")
_MAX_DATETIME_SECONDS = 253_402_300_799  # 9999-12-31T23:59:59Z, datetime's last second
#: Spark passes options case-insensitively (lower-cased keys)
_OPTION_NAMES = ("uri", "stream", "superStream", "startingOffsets", "endingOffsets",
                 "startingTimestamp", "managementUri", "maxOffsetsPerPartition", "timeout",
                 "format")


class AmqpqOptionError(_SinkOptionError):
    """A bad read option; the message names it (``amqpq source: option 'x' ...``)."""

    def __init__(self, option: str, problem: str) -> None:
        ValueError.__init__(self, f"amqpq source: option '{option}' {problem}")
        self.option = option


@dataclass(frozen=True)
class StreamRange(InputPartition):  # type: ignore[misc]
    """Offsets ``start`` (inclusive) to ``end`` (exclusive; None: read until ``timeout``)
    of ``stream``; ``start`` may be a timestamp spec (``{"timestamp": ms}``)."""

    stream: str
    start: Any
    end: int | None


@dataclass(frozen=True)
class SourceConfig:
    address: BrokerAddress
    api: str
    streams: list[str]
    starting: Any
    ending: Any
    starting_timestamp: int | None
    max_per_partition: int
    timeout: float
    fmt: str | None = None  # decode bodies (json, csv, avro) into ``schema``
    schema: T.StructType | None = None


def parse_source_options(options: dict[str, str], schema: T.StructType | None = None
                         ) -> SourceConfig:
    """The reader's options (see the module docstring); ``schema``: the one the user gave
    (``spark.read.schema(...)``), that ``format`` decodes bodies into.

    Raises:
        AmqpqOptionError: a missing or bad option, named.
    """
    given = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
    options = {name: given[name.lower()] for name in _OPTION_NAMES if name.lower() in given}
    unknown = sorted(set(given) - {n.lower() for n in _OPTION_NAMES})
    if unknown:
        raise AmqpqOptionError(unknown[0], f"is not a read option (known: "
                                           f"{', '.join(_OPTION_NAMES)})")
    uri = options.get("uri")
    if not uri:
        raise AmqpqOptionError("uri", "is required (amqp://user:pass@host:5672/vhost)")
    try:
        address = parse_uri(uri)
    except UriError as exc:
        raise AmqpqOptionError("uri", str(exc)) from None
    stream, sup = options.get("stream"), options.get("superStream")
    if bool(stream) == bool(sup):
        raise AmqpqOptionError("stream", "give exactly one of 'stream' and 'superStream'")
    api = options.get("managementUri") or f"http://{address.host}:15672"

    def number(key: str, default: str, low: float) -> float:
        try:
            value = float(options.get(key, default))
        except ValueError:
            raise AmqpqOptionError(key, f"{options[key]!r} is not a number") from None
        if value < low:
            raise AmqpqOptionError(key, f"must be at least {low:g}")
        return value

    ts = options.get("startingTimestamp")
    starting = _offset_spec(options.get("startingOffsets", "first"), "startingOffsets",
                            ("first", "last"))
    ending = _offset_spec(options.get("endingOffsets", "last"), "endingOffsets",
                          ("last", "latest"))
    starting_ts = int(number("startingTimestamp", "0", 0)) if ts is not None else None
    per_partition = int(number("maxOffsetsPerPartition", "100000", 1))
    timeout = number("timeout", "30", 0.1)
    fmt = options.get("format", "").strip().lower() or None
    if fmt is not None and fmt not in FORMATS:
        raise AmqpqOptionError("format", f"{fmt!r} is not one of {', '.join(FORMATS)}")
    given_schema = schema if schema is not None and schema != SCHEMA else None
    if fmt is not None and given_schema is None:
        raise AmqpqOptionError("format", "needs the schema of the rows in the bodies: "
                                         "spark.read.schema(...).format('amqpq')")
    if fmt is None and given_schema is not None:
        raise AmqpqOptionError("format", "is required with a schema (json, csv or avro: how "
                                         "to decode the bodies into it)")
    config = SourceConfig(address, api.rstrip("/"), [stream] if stream else [], starting,
                          ending, starting_ts, per_partition, timeout, fmt, given_schema)
    if sup:  # the partitions are asked of the broker with the settings above
        config = dataclasses.replace(config, streams=_partitions(config, sup))
    return config


def _offset_spec(value: str, key: str, words: tuple[str, ...]) -> Any:
    text = value.strip()
    if text in words:
        return text
    if text.lstrip("-").isdigit():
        if int(text) < 0:
            raise AmqpqOptionError(key, f"{text} is negative")
        return int(text)
    try:
        parsed = json.loads(text)
    except ValueError:
        raise AmqpqOptionError(key, f"{value!r} is not {', '.join(words)}, an offset or a "
                                    "JSON object of offsets per stream") from None
    if not isinstance(parsed, dict) or not all(
            isinstance(v, int) or v in words for v in parsed.values()):
        raise AmqpqOptionError(key, f"{value!r}: expected {{\"stream\": offset, ...}}")
    return parsed


def _get(config: SourceConfig, path: str) -> Any:
    a = config.address
    auth = base64.b64encode(f"{a.username}:{a.password}".encode()).decode()
    req = urllib.request.Request(config.api + path, headers={"Authorization": "Basic " + auth})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.load(resp)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise AmqpqOptionError("stream", f"{path.rsplit('/', 1)[-1]} not found in vhost "
                                             f"{a.vhost!r}") from None
        raise AmqpqOptionError("managementUri", f"{config.api}: HTTP {exc.code}") from None
    except OSError as exc:
        raise AmqpqOptionError("managementUri", f"{config.api} not reachable: {exc}") from None


def _vhost(config: SourceConfig) -> str:
    return urllib.parse.quote(config.address.vhost, safe="")


def _partitions(config: SourceConfig, name: str) -> list[str]:
    """The super stream's partitions, in ``x-stream-partition-order``."""
    quoted = urllib.parse.quote(name, safe="")
    bindings = _get(config, f"/api/exchanges/{_vhost(config)}/{quoted}/bindings/source")
    parts = sorted((int((b.get("arguments") or {}).get("x-stream-partition-order", 0)),
                    b["destination"]) for b in bindings if b.get("destination_type") == "queue")
    if not parts:
        raise AmqpqOptionError("superStream", f"{name!r} has no partitions")
    return [d for _, d in parts]


def _bounds(config: SourceConfig, stream: str) -> tuple[int | None, int | None]:
    """The stream's first and last offset now (None, None: empty)."""
    q = _get(config, f"/api/queues/{_vhost(config)}/{urllib.parse.quote(stream, safe='')}")
    if q.get("type") != "stream":
        raise AmqpqOptionError("stream", f"{stream!r} is not a stream (type {q.get('type')!r})")
    return q.get("first_offset"), q.get("last_offset")


def _split(config: SourceConfig, stream: str, start: int, end: int) -> list[StreamRange]:
    return [StreamRange(stream, lo, min(end, lo + config.max_per_partition))
            for lo in range(start, end, config.max_per_partition)]


def plan(config: SourceConfig) -> list[StreamRange]:
    """The input partitions: each stream's range, split into pieces."""
    out: list[StreamRange] = []
    for stream in config.streams:
        first, last = _bounds(config, stream)
        if config.starting_timestamp is not None:
            out.append(StreamRange(stream, {"timestamp": config.starting_timestamp},
                                   None if last is None else last + 1))
            continue
        if first is None or last is None:
            continue  # empty
        start = _pick(config.starting, stream, {"first": first, "last": last}, first)
        end = _pick(config.ending, stream, {"last": last + 1, "latest": last + 1}, last + 1)
        out += _split(config, stream, max(start, first), min(end, last + 1))
    return out


def _pick(spec: Any, stream: str, words: dict[str, int], default: int) -> int:
    if isinstance(spec, dict):
        spec = spec.get(stream, default)
    if isinstance(spec, str):
        return words[spec]
    return int(spec)


class AmqpqStreamReader(DataSourceReader):  # type: ignore[misc]
    """Batch reader (pickled to the tasks)."""

    def __init__(self, config: SourceConfig) -> None:
        self.config = config

    def partitions(self) -> list[StreamRange]:
        with brief_errors():
            return plan(self.config) or [StreamRange("", 0, 0)]

    def read(self, partition: StreamRange) -> Iterator[tuple[Any, ...]]:
        """Task: the rows of one range, in offset order."""
        if partition.end is not None and (
                not isinstance(partition.start, dict) and partition.start >= partition.end):
            return
        yield from read_range(self.config, partition)


class AmqpqMicroBatchReader(DataSourceStreamReader):  # type: ignore[misc]
    """``spark.readStream.format("amqpq")``: the source offset is ``{stream: next offset to
    read}``; each micro-batch reads up to what the streams hold when it is planned, so a
    query restarted from its checkpoint goes on where it stopped, without gaps or repeats
    (``startingOffsets`` applies to a new query only)."""

    def __init__(self, config: SourceConfig) -> None:
        self.config = config

    def initialOffset(self) -> dict[str, int]:  # noqa: N802 (PySpark's name)
        with brief_errors():
            out = {}
            for stream in self.config.streams:
                first, last = _bounds(self.config, stream)
                if first is None or last is None:
                    out[stream] = 0
                    continue
                out[stream] = max(first, _pick(self.config.starting, stream,
                                               {"first": first, "last": last}, first))
            return out

    def latestOffset(self, start: dict[str, int] | None = None,  # noqa: N802
                     limit: Any = None) -> dict[str, int]:
        with brief_errors():
            out = {}
            for stream in self.config.streams:
                _, last = _bounds(self.config, stream)
                previous = (start or {}).get(stream, 0)
                out[stream] = previous if last is None else max(previous, last + 1)
            return out

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[StreamRange]:
        ranges = []
        for stream in self.config.streams:
            ranges += _split(self.config, stream, start.get(stream, 0), end.get(stream, 0))
        return ranges or [StreamRange("", 0, 0)]

    def read(self, partition: StreamRange) -> Iterator[tuple[Any, ...]]:
        if partition.stream and partition.start < (partition.end or 0):
            yield from read_range(self.config, partition)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to do: stream messages stay (retention removes them)."""


def read_range(config: SourceConfig, part: StreamRange) -> Iterator[tuple[Any, ...]]:
    """Task: a stream consumer from the range's start; rows until its end (or until no
    message comes for ``timeout`` seconds)."""
    import time
    from collections import deque

    import pika

    a = config.address
    params = pika.ConnectionParameters(a.host, a.port, a.vhost,
                                       pika.PlainCredentials(a.username, a.password))
    conn = pika.BlockingConnection(params)
    inbox: deque[tuple[Any, Any, bytes]] = deque()
    decode = body_decoder(config.fmt, config.schema) if config.fmt and config.schema else None
    # pika rejects what it buffered for a consumer when the connection closes, and a stream
    # refuses rejects (540): acks are given so that the broker never sends past the range
    # (delivered <= acked + prefetch <= the range's size)
    size = None if part.end is None or isinstance(part.start, dict) else part.end - part.start
    prefetch = 1000 if size is None else max(1, min(1000, size))
    may_ack = None if size is None else size - prefetch
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=prefetch)
        start = part.start
        if isinstance(start, dict):
            start = dt.datetime.fromtimestamp(start["timestamp"] / 1000, dt.UTC)
        ch.basic_consume(part.stream, lambda _c, m, p, b: inbox.append((m, p, b)),
                         arguments={"x-stream-offset": start,
                                    "x-stream-timestamp-header": True})
        seen = acked = 0
        idle_since = time.monotonic()
        while True:
            if not inbox:
                if time.monotonic() - idle_since > config.timeout:
                    return  # nothing more (the range's end was removed by retention?)
                conn.process_data_events(0.1)
                continue
            idle_since = time.monotonic()
            method, props, body = inbox.popleft()
            headers = dict(props.headers or {})
            offset = int(headers.get("x-stream-offset", -1))
            seen += 1
            if seen - acked >= 500 and (may_ack is None or seen <= may_ack):
                ch.basic_ack(method.delivery_tag, multiple=True)
                acked = seen
            if part.end is not None and offset >= part.end:
                return
            yield (_row(part.stream, offset, method, props, headers, body) if decode is None
                   else decode(body))
            if part.end is not None and offset == part.end - 1:
                return
    finally:
        if conn.is_open:
            try:
                conn.close()
            except pika.exceptions.AMQPError:  # a reject of a message past the range: the
                pass                           # broker closed the connection; rows are out


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _row(stream: str, offset: int, method: Any, props: Any, headers: dict[str, Any],
         body: bytes) -> tuple[Any, ...]:
    ts = headers.get("x-stream-timestamp")
    when = dt.datetime.fromtimestamp(int(ts) / 1000, dt.UTC) if ts is not None else None
    stamp = props.timestamp
    properties = (
        props.content_type, props.content_encoding, props.delivery_mode, props.priority,
        props.correlation_id, props.reply_to, props.expiration, props.message_id,
        # a u64 past 9999-12-31 (RabbitMQ passes any through) fits no TimestampType value: null
        dt.datetime.fromtimestamp(stamp, dt.UTC) if stamp is not None
        and stamp <= _MAX_DATETIME_SECONDS else None,
        props.type, props.user_id, props.app_id)
    return (stream, offset, when, method.exchange, method.routing_key, properties,
            {k: _text(v) for k, v in headers.items() if k not in _OWN_HEADERS}, body)
