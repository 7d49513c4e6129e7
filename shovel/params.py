"""A dynamic shovel's runtime parameter (component ``shovel``): validated as RabbitMQ's
``rabbit_shovel_parameters`` does, with its error texts, and turned into a :class:`ShovelSpec`.

The value is a JSON object with RabbitMQ's keys (``src-uri``, ``src-queue`` or
``src-exchange`` + ``src-exchange-key``, ``src-prefetch-count``, ``src-delete-after``,
``dest-uri``, ``dest-queue`` or ``dest-exchange`` + ``dest-exchange-key``,
``dest-add-forward-headers``, ``dest-add-timestamp-header``, ``dest-publish-properties``,
``ack-mode``, ``reconnect-delay``...). :func:`validate` gives every problem, one per line, in
the order RabbitMQ 3.10.8 lists them (checked with curl against the reference broker):
first the source/destination choice, then unknown keys, then the per-key checks in reverse
declaration order (destination keys, source keys, shared keys).

URIs: ``amqp://`` and ``amqps://`` (RabbitMQ's URI spec); ``amqp://`` with an empty host is the
local broker. :func:`mask_uri` drops the credentials, as ``amqp_uri:remove_credentials``
does for ``/api/shovels``.

Source: https://www.rabbitmq.com/docs/shovel-dynamic, https://www.rabbitmq.com/docs/uri-spec.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from links.uri import Endpoint, endpoint, mask_uri, uri_error
from vhosts.erlang_format import erlang_pformat
from vhosts.policies import escape_html_tags

__all__ = ["ACK_MODES", "COMPONENT", "Endpoint", "ShovelParamError", "ShovelSpec", "endpoint",
           "mask_uri", "parse", "validate"]

COMPONENT = "shovel"
ACK_MODES = ("no-ack", "on-publish", "on-confirm")
DEFAULT_PREFETCH = 1000  # RabbitMQ's default src-prefetch-count
DEFAULT_RECONNECT_DELAY = 5.0  # s, RabbitMQ's default reconnect-delay
DEFAULT_SRC_EXCHANGE_KEY = "#"

_SRC_KEYS = ("src-uri", "src-exchange", "src-exchange-key", "src-queue", "src-queue-args",
             "src-consumer-args", "src-prefetch-count", "src-delete-after", "src-predeclared")
_DEST_KEYS = ("dest-uri", "dest-exchange", "dest-exchange-key", "dest-queue",
              "dest-queue-args", "dest-add-forward-headers", "dest-add-timestamp-header",
              "dest-publish-properties", "dest-predeclared")
_SHARED_KEYS = ("src-protocol", "dest-protocol", "ack-mode", "reconnect-delay",
                "add-forward-headers", "add-timestamp-header", "publish-properties",
                "prefetch-count", "delete-after")
KNOWN_KEYS = frozenset(_SRC_KEYS + _DEST_KEYS + _SHARED_KEYS)
_ACK_MODES_TEXT = '[<<"no-ack">>,<<"on-publish">>,<<"on-confirm">>]'


class ShovelParamError(ValueError):
    """A shovel value RabbitMQ would refuse; ``str()`` is the lines after
    ``Validation failed``, and :attr:`reason` the whole 400 reason (HTML-escaped as the
    management plugin sends it)."""

    @property
    def reason(self) -> str:
        return escape_html_tags(f"Validation failed\n\n{self}\n")


@dataclass(frozen=True)
class ShovelSpec:
    """A validated shovel, defaults filled in.

    Attributes:
        vhost, name: where the parameter lives.
        src_uris, dest_uris: URIs as given (one or more; tried in turn).
        src_queue / src_exchange + src_exchange_key: what to consume (one of queue/exchange).
        dest_queue / dest_exchange + dest_exchange_key: where to publish (neither: each
            message's own exchange and routing key).
        prefetch: ``src-prefetch-count``; delete_after: ``"never"``, ``"queue-length"`` or a
            number of messages; ack_mode: one of :data:`ACK_MODES`; reconnect_delay: seconds.
        add_forward_headers, add_timestamp_header, publish_properties: what the destination
            publish adds (``x-shovelled``, ``x-shovelled-timestamp``, properties).
    """

    vhost: str
    name: str
    src_uris: tuple[str, ...]
    dest_uris: tuple[str, ...]
    src_queue: str | None = None
    src_exchange: str | None = None
    src_exchange_key: str = DEFAULT_SRC_EXCHANGE_KEY
    src_queue_args: dict[str, Any] = field(default_factory=dict)
    dest_queue: str | None = None
    dest_exchange: str | None = None
    dest_exchange_key: str | None = None
    dest_queue_args: dict[str, Any] = field(default_factory=dict)
    prefetch: int = DEFAULT_PREFETCH
    delete_after: str | int = "never"
    ack_mode: str = "on-confirm"
    reconnect_delay: float = DEFAULT_RECONNECT_DELAY
    add_forward_headers: bool = False
    add_timestamp_header: bool = False
    publish_properties: dict[str, Any] = field(default_factory=dict)

    def status_fields(self, src_uri: str | None = None, dest_uri: str | None = None
                      ) -> dict[str, Any]:
        """The ``/api/shovels`` fields describing the ends (``src_uri``/``dest_uri``: the
        URIs connected to, default the first of each list; shown without credentials), in
        RabbitMQ 3.10.8's order: src_uri, src_protocol, dest_protocol, dest_uri, then
        src_queue or src_exchange(+_key), then dest_queue or dest_exchange(+_key)."""
        src = src_uri if src_uri is not None else (self.src_uris or ("",))[0]
        dest = dest_uri if dest_uri is not None else (self.dest_uris or ("",))[0]
        out: dict[str, Any] = {"src_uri": mask_uri(src), "src_protocol": "amqp091",
                               "dest_protocol": "amqp091", "dest_uri": mask_uri(dest)}
        out.update(self.end_names("_"))
        return out

    def end_names(self, sep: str) -> dict[str, Any]:
        """What the shovel consumes and where it publishes, keyed ``src{sep}queue`` or
        ``src{sep}exchange`` + ``src{sep}exchange{sep}key``, then ``dest{sep}queue`` or
        ``dest{sep}exchange`` (+ ``dest{sep}exchange{sep}key`` when set), in RabbitMQ
        3.10.8's order; ``sep`` is ``_`` in ``/api/shovels``, ``-`` in ``x-shovelled``."""
        out: dict[str, Any] = {}
        if self.src_queue is not None:
            out[f"src{sep}queue"] = self.src_queue
        else:
            out[f"src{sep}exchange"] = self.src_exchange
            out[f"src{sep}exchange{sep}key"] = self.src_exchange_key
        if self.dest_queue is not None:
            out[f"dest{sep}queue"] = self.dest_queue
        elif self.dest_exchange is not None:
            out[f"dest{sep}exchange"] = self.dest_exchange
            if self.dest_exchange_key is not None:
                out[f"dest{sep}exchange{sep}key"] = self.dest_exchange_key
        return out


def _p(value: Any) -> str:
    return erlang_pformat(value)


def _check_uris(key: str, value: Any) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return [f"{key} should be list, actually was {_p(value)}"]
    errors = []
    for uri in value:
        if not isinstance(uri, str):
            errors.append(f"{key} should be list of binaries, actually was {_p(value)}")
            continue
        problem = uri_error(uri)
        if problem:
            errors.append(problem)
    return errors


def _check(key: str, value: Any) -> str | None:
    """The error of one present key, or None."""
    if key in ("src-uri", "dest-uri"):
        return "\n".join(_check_uris(key, value)) or None
    if key in ("src-exchange", "src-exchange-key", "src-queue", "dest-exchange",
               "dest-exchange-key", "dest-queue"):
        return None if isinstance(value, str) else f"{key} should be binary, actually was {_p(value)}"
    if key in ("src-prefetch-count", "reconnect-delay", "prefetch-count"):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return None if ok else f"{key} should be a number, actually was {_p(value)}"
    if key in ("src-delete-after", "delete-after"):
        ok = value in ("never", "queue-length") or (
            isinstance(value, int) and not isinstance(value, bool) and value >= 0)
        return None if ok else (f'{key} should be a number greater than or equal to 0, '
                                f'"never" or "queue-length", actually was {_p(value)}')
    if key in ("dest-add-forward-headers", "dest-add-timestamp-header", "add-forward-headers",
               "add-timestamp-header", "src-predeclared", "dest-predeclared"):
        return None if isinstance(value, bool) else f"{key} should be boolean, actually was {_p(value)}"
    if key in ("dest-publish-properties", "publish-properties", "src-queue-args",
               "dest-queue-args", "src-consumer-args"):
        return None if isinstance(value, dict) else f"{key} not a list {_p(value)}"
    if key == "ack-mode":
        return None if value in ACK_MODES else (
            f"ack-mode should be one of {_ACK_MODES_TEXT}, actually was {_p(value)}")
    if key in ("src-protocol", "dest-protocol"):
        if value == "amqp091":
            return None
        if value == "amqp10":
            return f"{key} amqp10 is not supported by amqpq (only amqp091)"
        return f'{key} should be one of [<<"amqp10">>,<<"amqp091">>], actually was {_p(value)}'
    return None


def validate(name: str, value: Any) -> list[str]:
    """Every problem of shovel ``value`` named ``name``, in RabbitMQ's order (empty: valid).
    Texts as RabbitMQ 3.10.8 answers them, before HTML escaping."""
    if not isinstance(value, dict):
        return [f"shovel value should be a JSON object, actually was {_p(value)}"]
    errors: list[str] = []
    if "src-queue" in value and "src-exchange" in value:
        errors.append("Cannot specify 'src-exchange' and 'src-queue'")
    elif "src-queue" not in value and "src-exchange" not in value:
        errors.append("Must specify 'src-exchange' or 'src-queue'")
    if "dest-queue" in value and "dest-exchange" in value:
        errors.append("Cannot specify 'dest-exchange' and 'dest-queue'")
    delete_after = value.get("src-delete-after", value.get("delete-after"))
    if value.get("ack-mode") == "no-ack" and isinstance(delete_after, int) \
            and not isinstance(delete_after, bool):
        errors.append("Cannot specify 'no-ack' and numerical 'delete-after'")
    unknown = [(k, v) for k, v in value.items() if k not in KNOWN_KEYS]
    if unknown:
        terms = ",".join(f"{{{_p(k)},{_p(v)}}}" for k, v in unknown)
        errors.append(f"Unrecognised terms [{terms}] in {name}")
    for key in reversed(_SHARED_KEYS + _SRC_KEYS + _DEST_KEYS):
        if key in value:
            problem = _check(key, value[key])
            if problem:
                errors.append(problem)
        elif key in ("src-uri", "dest-uri"):
            errors.append(f'Key "{key}" not found in {name}')
    return errors


def _uris(value: Any) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def parse(vhost: str, name: str, value: Any) -> ShovelSpec:
    """The :class:`ShovelSpec` of a parameter value.

    Raises:
        ShovelParamError: :func:`validate` found problems (its lines joined).
    """
    errors = validate(name, value)
    if errors:
        raise ShovelParamError("\n".join(errors))

    def get(*keys: str, default: Any = None) -> Any:
        for k in keys:
            if k in value:
                return value[k]
        return default

    delete_after = get("src-delete-after", "delete-after", default="never")
    return ShovelSpec(
        vhost=vhost, name=name,
        src_uris=_uris(value["src-uri"]), dest_uris=_uris(value["dest-uri"]),
        src_queue=value.get("src-queue"), src_exchange=value.get("src-exchange"),
        src_exchange_key=value.get("src-exchange-key", DEFAULT_SRC_EXCHANGE_KEY),
        src_queue_args=dict(value.get("src-queue-args") or {}),
        dest_queue=value.get("dest-queue"), dest_exchange=value.get("dest-exchange"),
        dest_exchange_key=value.get("dest-exchange-key"),
        dest_queue_args=dict(value.get("dest-queue-args") or {}),
        prefetch=int(get("src-prefetch-count", "prefetch-count", default=DEFAULT_PREFETCH)),
        delete_after=delete_after,
        ack_mode=value.get("ack-mode", "on-confirm"),
        reconnect_delay=float(value.get("reconnect-delay", DEFAULT_RECONNECT_DELAY)),
        add_forward_headers=bool(get("dest-add-forward-headers", "add-forward-headers",
                                     default=False)),
        add_timestamp_header=bool(get("dest-add-timestamp-header", "add-timestamp-header",
                                      default=False)),
        publish_properties=dict(get("dest-publish-properties", "publish-properties",
                                    default={}) or {}),
    )
