"""Parsing and validation of the sink's options, on the driver, before any task starts.

Spark hands a Python data source its options as strings with lower-cased keys
(``CaseInsensitiveDict``; https://spark.apache.org/docs/latest/api/python/tutorial/sql/
python_data_source.html). Every problem raises :class:`AmqpqOptionError` whose message names
the option as documented (camelCase) and says what is accepted.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote

from pyspark.sql import types as T

from spark_sink.tls import TlsSettings, TlsSettingsError
from spark_sink.uri import BrokerAddress, UriError, parse_uri_list

FORMATS = ("json", "csv", "avro")
EXCHANGE_TYPES = ("direct", "fanout", "topic", "headers")
ON_UNROUTABLE = ("fail", "drop")
DEDUP_HEADER = "x-deduplication-header"  # the deduplication plugin's per-message key header
DEDUP_OPTIONS = ("dedupCacheSize", "dedupCacheTtl", "managementUri")
DEFAULT_CONTENT_TYPE = {"json": "application/json", "csv": "text/csv", "avro": "avro/binary"}

# documented spelling of every option (Spark lower-cases the keys)
OPTION_NAMES = {
    name.lower(): name
    for name in (
        "uri", "exchange", "routingKey", "routingKeyColumn", "bodyColumn", "format",
        "headersColumns", "mandatory", "confirmBatchSize", "maxInFlight", "declareExchange",
        "timeout", "jobId", "summaryPath", "preflight", "api", "username", "password",
        "onUnroutable", "sslCacert", "sslCert", "sslKey", "sslVerify", "sslServerName",
        "path", "exactlyOnce", "dedupCacheSize", "dedupCacheTtl", "managementUri",
    )
}
# keys Spark itself may pass along (streaming checkpoints; "path", from save(path), is parsed)
SPARK_KEYS = {"checkpointlocation", "queryname"}

SHORTSTR_PROPERTIES = ("content_type", "content_encoding", "correlation_id", "reply_to",
                       "expiration", "message_id", "type", "user_id", "app_id")
OCTET_PROPERTIES = ("delivery_mode", "priority")
PROPERTIES = (*SHORTSTR_PROPERTIES, *OCTET_PROPERTIES, "timestamp")
_INTEGRAL = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
_ATOMIC = (T.StringType, T.BooleanType, *_INTEGRAL, T.FloatType, T.DoubleType, T.DecimalType,
           T.DateType, T.TimestampType, T.TimestampNTZType)


class AmqpqOptionError(ValueError):
    """A bad option value; the message names the option."""

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(f"amqpq sink: option '{option}' {problem}")
        self.option = option


class AmqpqSaveModeError(ValueError):
    """A save mode / output mode that publishing cannot honour."""


@dataclass(frozen=True)
class SinkConfig:
    """Validated options, picklable (sent to every task with the writer).

    Attributes:
        addresses: brokers in failover order.
        exchange: target exchange ("" = default exchange, routing key = queue name).
        routing_key / routing_key_column: constant routing key, or the column holding it.
        body_column: column sent as the body as is (binary or string), or None.
        format: body format when there is no body column: json, csv or avro.
        headers_columns: columns copied into the headers table (header name = column name).
        constant_headers: ``headers.<name>`` options (string values).
        properties: constant properties (name -> str or int), after defaults.
        property_columns: properties taken from a column (name -> column).
        message_id: "auto" (job-partition-row), "none", or "column".
        timestamp_now: set the timestamp property to the publish time (seconds).
        mandatory: publish with the mandatory bit, so the broker returns rows no queue took.
        on_unroutable: "fail" (a returned row fails the task) or "drop" (count it).
        confirm_batch_size: messages written per socket write / confirm poll.
        max_in_flight: most unconfirmed messages per task.
        declare_exchange: exchange type to declare (durable) on the driver, or None.
        timeout: seconds for connecting, and without confirm progress.
        job_id: first part of the automatic message ids ("" = the driver picks a random one
            per batch write; streaming uses the query id).
        summary_path: file the driver writes the JSON summary to, or None.
        preflight: connect (and check/declare the exchange) on the driver first.
        api: "arrow" (DataSourceArrowWriter) or "row" (DataSourceWriter, for comparison).
        tls: TLS settings for ``amqps://`` URIs.
        path: the ``save(path)`` argument as given (None without one).
        exactly_once: every row carries its deterministic id in ``x-deduplication-header``
            and the driver makes sure the target deduplicates (see spark_sink/exactly_once.py).
        dedup_cache_size: ``x-cache-size`` (messages) for a target the driver declares, or
            None (exchange: 1,000,000; queue: no limit, the keys of the messages it holds).
        dedup_cache_ttl: ``x-cache-ttl`` (ms) for a target the driver declares, or None
            (keys leave by size only / when their message leaves the queue).
        management_uri: management HTTP API the driver asks whether an existing target queue
            has ``x-message-deduplication`` (None: ``http://<first uri host>:15672``).
    """

    addresses: tuple[BrokerAddress, ...]
    exchange: str = ""
    routing_key: str = ""
    routing_key_column: str | None = None
    body_column: str | None = None
    format: str = "json"
    headers_columns: tuple[str, ...] = ()
    constant_headers: tuple[tuple[str, str], ...] = ()
    properties: dict[str, str | int] = field(default_factory=dict)
    property_columns: dict[str, str] = field(default_factory=dict)
    message_id: str = "auto"
    timestamp_now: bool = False
    mandatory: bool = True
    on_unroutable: str = "fail"
    confirm_batch_size: int = 1000
    max_in_flight: int = 20000
    declare_exchange: str | None = None
    timeout: float = 30.0
    job_id: str = ""
    summary_path: str | None = None
    preflight: bool = True
    api: str = "arrow"
    tls: TlsSettings = field(default_factory=TlsSettings)
    path: str | None = None
    exactly_once: bool = False
    dedup_cache_size: int | None = None
    dedup_cache_ttl: int | None = None
    management_uri: str | None = None

    def redacted_uris(self) -> str:
        """The broker list without passwords, for logs."""
        return ",".join(a.redacted() for a in self.addresses)


def parse_options(options: Mapping[str, str], schema: T.StructType | None = None) -> SinkConfig:
    """Validate ``options`` (and the columns they name against ``schema``) into a SinkConfig.

    Raises:
        AmqpqOptionError: the first bad option, by its documented name.
    """
    opts = {str(k).lower(): "" if v is None else str(v) for k, v in options.items()}
    for key in opts:
        if key in OPTION_NAMES or key in SPARK_KEYS or key.startswith(("properties.",
                                                                        "headers.")):
            continue
        raise AmqpqOptionError(key, f"is unknown (known: {', '.join(OPTION_NAMES.values())}, "
                                    "properties.<name>, properties.<name>.column, "
                                    "headers.<name>)")
    columns = _Columns(schema)

    if not opts.get("uri", "").strip():
        raise AmqpqOptionError("uri", "is required, e.g. amqp://guest:guest@127.0.0.1:5672/%2F")
    try:
        addresses = tuple(parse_uri_list(opts["uri"]))
    except UriError as exc:
        raise AmqpqOptionError("uri", f"is invalid: {exc}") from None
    # credentials as separate options: Spark redacts option values whose key matches
    # spark.redaction.regex ("password") in plans and logs, but not a password inside the URI
    if opts.get("username"):
        addresses = tuple(dataclasses.replace(a, username=opts["username"]) for a in addresses)
    if "password" in opts:
        addresses = tuple(dataclasses.replace(a, password=opts["password"]) for a in addresses)

    tls = _parse_tls(opts, addresses)
    exchange, routing_key = _target(opts)
    _check_shortstr("exchange", exchange)
    _check_shortstr("routingKey", routing_key)
    routing_key_column = opts.get("routingkeycolumn") or None
    if routing_key_column is not None:
        if "routingkey" in opts:
            raise AmqpqOptionError("routingKeyColumn", "and 'routingKey' are exclusive: give one")
        routing_key_column = columns.find("routingKeyColumn", routing_key_column, atomic=True)
    mandatory = _bool(opts, "mandatory", True)
    on_unroutable = opts.get("onunroutable", "fail").strip().lower() or "fail"
    if on_unroutable not in ON_UNROUTABLE:
        raise AmqpqOptionError("onUnroutable", f"must be fail or drop, got {on_unroutable!r}")
    if not mandatory and "onunroutable" in opts:
        raise AmqpqOptionError("onUnroutable", "needs mandatory=true (without it the broker "
                                               "drops unroutable rows without telling)")

    body_column = opts.get("bodycolumn") or None
    fmt = opts.get("format", "json").strip().lower() or "json"
    if fmt not in FORMATS:
        raise AmqpqOptionError("format", f"must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if body_column is not None:
        if "format" in opts:
            raise AmqpqOptionError("format", "does not apply with 'bodyColumn' (the column is "
                                             "sent as is): give one of them")
        body_column = columns.find("bodyColumn", body_column,
                                   types=(T.BinaryType, T.StringType), kind="binary or string")
    elif schema is not None:
        _check_format(fmt, schema)

    headers_columns = tuple(
        columns.find("headersColumns", c.strip())
        for c in opts.get("headerscolumns", "").split(",") if c.strip()
    )
    constant_headers = tuple(
        (k[len("headers."):], v) for k, v in opts.items() if k.startswith("headers.")
    )
    for name, _ in constant_headers:
        if not name:
            raise AmqpqOptionError("headers.<name>", "needs a header name after 'headers.'")

    properties, property_columns, message_id, timestamp_now = _parse_properties(opts, columns)
    if "content_type" not in properties and "content_type" not in property_columns \
            and body_column is None:
        properties["content_type"] = DEFAULT_CONTENT_TYPE[fmt]

    confirm_batch_size = _int(opts, "confirmBatchSize", 1000, 1, 1_000_000)
    max_in_flight = _int(opts, "maxInFlight", max(20000, confirm_batch_size), 1, 10_000_000)
    if max_in_flight < confirm_batch_size:
        raise AmqpqOptionError("maxInFlight", f"({max_in_flight}) must be at least "
                                              f"confirmBatchSize ({confirm_batch_size})")
    timeout = _float(opts, "timeout", 30.0)

    declare = opts.get("declareexchange", "").strip().lower() or None
    if declare is not None:
        if declare not in EXCHANGE_TYPES:
            raise AmqpqOptionError("declareExchange", f"must be an exchange type "
                                                      f"({', '.join(EXCHANGE_TYPES)}), got "
                                                      f"{declare!r}")
        if exchange == "" or exchange.startswith("amq."):
            raise AmqpqOptionError("declareExchange", f"cannot declare exchange {exchange!r} "
                                                      "(default and amq.* exchanges are "
                                                      "predeclared)")

    job_id = opts.get("jobid", "").strip()
    if len(job_id) > 200:
        raise AmqpqOptionError("jobId", "must be at most 200 characters")
    api = opts.get("api", "arrow").strip().lower()
    if api not in ("arrow", "row"):
        raise AmqpqOptionError("api", f"must be arrow or row, got {api!r}")

    exactly_once = _bool(opts, "exactlyOnce", False)
    dedup = _parse_dedup(opts, exactly_once, exchange, routing_key, routing_key_column,
                         declare, headers_columns, constant_headers)

    return SinkConfig(
        addresses=addresses,
        exchange=exchange,
        routing_key=routing_key,
        routing_key_column=routing_key_column,
        body_column=body_column,
        format=fmt,
        headers_columns=headers_columns,
        constant_headers=constant_headers,
        properties=properties,
        property_columns=property_columns,
        message_id=message_id,
        timestamp_now=timestamp_now,
        mandatory=mandatory,
        on_unroutable=on_unroutable,
        confirm_batch_size=confirm_batch_size,
        max_in_flight=max_in_flight,
        declare_exchange=declare,
        timeout=timeout,
        job_id=job_id,
        summary_path=opts.get("summarypath") or None,
        preflight=_bool(opts, "preflight", True),
        api=api,
        tls=tls,
        path=opts.get("path"),
        exactly_once=exactly_once,
        **dedup,
    )


def _parse_dedup(opts: Mapping[str, str], exactly_once: bool, exchange: str, routing_key: str,
                 routing_key_column: str | None, declare: str | None,
                 headers_columns: tuple[str, ...],
                 constant_headers: tuple[tuple[str, str], ...]) -> dict[str, int | str | None]:
    """``exactlyOnce``'s companion options, checked against the target and the headers."""
    if not exactly_once:
        for name in DEDUP_OPTIONS:
            if name.lower() in opts:
                raise AmqpqOptionError(name, "applies only with exactlyOnce=true")
        return {}
    if declare is not None:
        raise AmqpqOptionError("declareExchange", "does not apply with exactlyOnce=true (the "
                                                  "driver declares a missing exchange as "
                                                  "x-message-deduplication itself)")
    if exchange == "" and (routing_key_column is not None or not routing_key):
        raise AmqpqOptionError("exactlyOnce", "needs one target queue (save('queue')) or an "
                                              "x-message-deduplication exchange (save("
                                              "'exchange/')); rows routed by "
                                              "routingKeyColumn through the default exchange "
                                              "go to queues the driver cannot check")
    if exchange.startswith("amq."):
        raise AmqpqOptionError("exactlyOnce", f"needs an x-message-deduplication exchange; "
                                              f"{exchange!r} is predeclared and does not "
                                              "deduplicate")
    if DEDUP_HEADER in headers_columns or any(k == DEDUP_HEADER for k, _ in constant_headers):
        raise AmqpqOptionError("exactlyOnce", f"sets the header {DEDUP_HEADER!r} itself: "
                                              "remove it from headersColumns/headers.*")
    size = _int(opts, "dedupCacheSize", 0, 1, 1_000_000_000) or None
    ttl = _int(opts, "dedupCacheTtl", 0, 1, 2**32 - 1) or None
    management = opts.get("managementuri", "").strip().rstrip("/") or None
    if management is not None and not management.startswith(("http://", "https://")):
        raise AmqpqOptionError("managementUri", f"must be an http:// or https:// URL, got "
                                                f"{management!r}")
    return {"dedup_cache_size": size, "dedup_cache_ttl": ttl, "management_uri": management}


def _target(opts: Mapping[str, str]) -> tuple[str, str]:
    """Exchange and routing key from ``exchange``/``routingKey`` and the ``save(path)``
    argument: ``queue`` (default exchange, routing key = the queue), ``exchange/routingKey``
    or ``exchange/`` (routing key from the options); %-escapes are decoded in each part, so
    ``a%2Fb`` is the queue ``a/b``. A path that disagrees with an option is refused."""
    exchange = opts.get("exchange", "")
    routing_key = opts.get("routingkey", "")
    if "path" not in opts:
        return exchange, routing_key
    path = opts["path"]
    if "/" in path:
        raw_exchange, raw_key = path.split("/", 1)
        path_exchange, path_key = unquote(raw_exchange), unquote(raw_key)
        meaning = f"exchange {path_exchange!r}" + (
            f", routing key {path_key!r}" if path_key else "")
    else:
        path_exchange, path_key = "", unquote(path)
        meaning = f"queue {path_key!r} through the default exchange"
    if not path_exchange and not path_key:
        raise AmqpqOptionError("path", f"{path!r} names no queue or exchange (give save("
                                       "'queue'), save('exchange/routingKey') or "
                                       "save('exchange/'))")
    if "exchange" in opts and exchange != path_exchange:
        raise AmqpqOptionError("path", f"{path!r} means {meaning}, but option 'exchange' is "
                                       f"{exchange!r}: give one of them")
    if path_key:
        if "routingkey" in opts and routing_key != path_key:
            raise AmqpqOptionError("path", f"{path!r} means {meaning}, but option "
                                           f"'routingKey' is {routing_key!r}: give one of them")
        if opts.get("routingkeycolumn"):
            raise AmqpqOptionError("path", f"{path!r} means {meaning}, which conflicts with "
                                           "option 'routingKeyColumn' (use save('exchange/') "
                                           "to take the routing key from the column)")
        routing_key = path_key
    return path_exchange, routing_key


TLS_OPTIONS = ("sslCacert", "sslCert", "sslKey", "sslVerify", "sslServerName")


def _parse_tls(opts: Mapping[str, str], addresses: tuple[BrokerAddress, ...]) -> TlsSettings:
    given = [name for name in TLS_OPTIONS if name.lower() in opts]
    if not given:
        return TlsSettings()
    if not any(a.tls for a in addresses):
        raise AmqpqOptionError(given[0], "applies to amqps:// URIs only, and 'uri' has none")
    files: dict[str, str | None] = {}
    for name in ("sslCacert", "sslCert", "sslKey"):
        value = opts.get(name.lower(), "").strip() or None
        if value is not None and not os.path.isfile(value):
            raise AmqpqOptionError(name, f"file {value!r} does not exist (it must exist on the "
                                         "driver and on every executor)")
        files[name] = value
    if files["sslKey"] and not files["sslCert"]:
        raise AmqpqOptionError("sslKey", "needs 'sslCert' (the client certificate)")
    settings = TlsSettings(cacert=files["sslCacert"], cert=files["sslCert"],
                           key=files["sslKey"], verify=_bool(opts, "sslVerify", True),
                           server_name=opts.get("sslservername", "").strip() or None)
    try:
        settings.context()  # parse the files now, for a clear error before any task
    except TlsSettingsError as exc:
        raise AmqpqOptionError("sslCacert" if "CA file" in str(exc) else "sslCert",
                               str(exc)) from None
    return settings


def _parse_properties(
    opts: dict[str, str], columns: _Columns
) -> tuple[dict[str, str | int], dict[str, str], str, bool]:
    properties: dict[str, str | int] = {"delivery_mode": 2}
    property_columns: dict[str, str] = {}
    message_id = "auto"
    timestamp_now = False
    for key, raw in opts.items():
        if not key.startswith("properties."):
            continue
        name = key[len("properties."):]
        shown = f"properties.{name}"
        if name.endswith(".column"):
            prop = name[: -len(".column")]
            if prop not in PROPERTIES:
                raise AmqpqOptionError(shown, f"names no property (known: {', '.join(PROPERTIES)})")
            if prop in OCTET_PROPERTIES:
                col = columns.find(shown, raw, types=_INTEGRAL, kind="an integer")
            elif prop == "timestamp":
                col = columns.find(shown, raw, types=(T.TimestampType, T.TimestampNTZType,
                                                      *_INTEGRAL), kind="timestamp or integer")
            else:
                col = columns.find(shown, raw, atomic=True)
            property_columns[prop] = col
            properties.pop(prop, None)
            if prop == "message_id":
                message_id = "column"
            continue
        if name not in PROPERTIES:
            raise AmqpqOptionError(shown, f"names no property (known: {', '.join(PROPERTIES)})")
        value = raw.strip()
        if name == "delivery_mode":
            modes = {"1": 1, "2": 2, "transient": 1, "persistent": 2}
            if value.lower() not in modes:
                raise AmqpqOptionError(shown, f"must be persistent (2) or transient (1), "
                                              f"got {raw!r}")
            properties[name] = modes[value.lower()]
        elif name == "priority":
            properties[name] = _int({shown: value}, shown, 0, 0, 255)
        elif name == "expiration":
            if not value.isdigit():
                raise AmqpqOptionError(shown, f"must be a whole number of milliseconds, got "
                                              f"{raw!r}")
            properties[name] = value
        elif name == "message_id":
            if value.lower() not in ("auto", "none"):
                raise AmqpqOptionError(shown, "must be auto (job-partition-row) or none; use "
                                              "'properties.message_id.column' for a column")
            message_id = value.lower()
        elif name == "timestamp":
            if value.lower() not in ("now", "none"):
                raise AmqpqOptionError(shown, "must be now or none; use "
                                              "'properties.timestamp.column' for a column")
            timestamp_now = value.lower() == "now"
        else:
            _check_shortstr(shown, value)
            properties[name] = value
        if name in property_columns:
            raise AmqpqOptionError(shown, f"and 'properties.{name}.column' are exclusive")
    for name in property_columns:
        if name in properties and name != "delivery_mode":
            raise AmqpqOptionError(f"properties.{name}",
                                   f"and 'properties.{name}.column' are exclusive")
    return properties, property_columns, message_id, timestamp_now


class _Columns:
    """Column lookup against the DataFrame schema (exact name first, then case-insensitive)."""

    def __init__(self, schema: T.StructType | None) -> None:
        self.schema = schema

    def find(self, option: str, name: str, *, types: tuple[type, ...] | None = None,
             kind: str = "", atomic: bool = False) -> str:
        name = name.strip()
        if not name:
            raise AmqpqOptionError(option, "needs a column name")
        if self.schema is None:
            return name
        fields = self.schema.fields
        found = [f for f in fields if f.name == name] or \
            [f for f in fields if f.name.lower() == name.lower()]
        if len(found) != 1:
            problem = "matches several columns" if found else "is not a column"
            raise AmqpqOptionError(option, f"{name!r} {problem} (columns: "
                                           f"{', '.join(self.schema.fieldNames())})")
        f = found[0]
        if atomic and not isinstance(f.dataType, _ATOMIC):
            raise AmqpqOptionError(option, f"column {f.name!r} has type "
                                           f"{f.dataType.simpleString()}; it needs a "
                                           "string, number, boolean, date or timestamp")
        if types is not None and not isinstance(f.dataType, types):
            raise AmqpqOptionError(option, f"column {f.name!r} has type "
                                           f"{f.dataType.simpleString()}; it needs {kind}")
        return f.name


def _check_format(fmt: str, schema: T.StructType) -> None:
    if fmt == "csv":
        for f in schema.fields:
            if not isinstance(f.dataType, _ATOMIC):
                raise AmqpqOptionError("format", f"csv needs flat columns; column {f.name!r} "
                                                 f"is {f.dataType.simpleString()} (use json "
                                                 "or avro)")
    elif fmt == "avro":
        from spark_sink.avro_schema import AvroSchemaError, avro_schema

        try:
            avro_schema(schema)
        except AvroSchemaError as exc:
            raise AmqpqOptionError("format", f"avro: {exc}") from None


def _check_shortstr(option: str, value: str) -> None:
    if len(value.encode("utf-8")) > 255:
        raise AmqpqOptionError(option, "is longer than 255 bytes (an AMQP short string)")


def _int(opts: Mapping[str, str], option: str, default: int, low: int, high: int) -> int:
    raw = opts.get(option.lower(), opts.get(option))
    if raw is None or raw.strip() == "":
        return default
    if not re.fullmatch(r"[+-]?\d+", raw.strip()):
        raise AmqpqOptionError(option, f"must be an integer, got {raw!r}")
    value = int(raw)
    if not low <= value <= high:
        raise AmqpqOptionError(option, f"must be between {low} and {high}, got {value}")
    return value


def _float(opts: Mapping[str, str], option: str, default: float) -> float:
    raw = opts.get(option.lower())
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise AmqpqOptionError(option, f"must be a number of seconds, got {raw!r}") from None
    if not 0 < value <= 86400:
        raise AmqpqOptionError(option, f"must be between 0 and 86400 seconds, got {raw!r}")
    return value


def _bool(opts: Mapping[str, str], option: str, default: bool) -> bool:
    raw = opts.get(option.lower())
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in ("true", "yes", "1", "on"):
        return True
    if value in ("false", "no", "0", "off"):
        return False
    raise AmqpqOptionError(option, f"must be true or false, got {raw!r}")
