"""Queue arguments (``x-...``) and policies: validation and the effective settings.

Queue.Declare arguments are validated as RabbitMQ's ``rabbit_amqqueue:check_declare_arguments``
does, with its 406 text: ``invalid arg 'x-message-ttl' for queue 'q' in vhost '/':
{value_negative,-1}``. The settings a queue runs with come from its arguments and the
highest-priority matching policy, resolved per key as RabbitMQ does: the lower of the two for
limits and TTLs, the argument over the policy for the rest.

Source: https://www.rabbitmq.com/docs/queues#optional-arguments, /docs/ttl, /docs/maxlength,
/docs/dlx, /docs/priority, /docs/parameters#policies; RabbitMQ ``rabbit_amqqueue.erl``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from amqp_common.errors import PreconditionFailed
from amqp_common.properties import amqp_type_name

MAX_PRIORITY = 255
MAX_EXPIRY_MS = 315_360_000_000  # RabbitMQ's check_expiry upper bound (10 years, ms)
OVERFLOW_MODES = ("drop-head", "reject-publish", "reject-publish-dlx")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int_error(value: Any) -> str | None:
    # RabbitMQ formats this one as an Erlang string: "expected integer, got longstr"
    return None if _is_int(value) else f'"expected integer, got {amqp_type_name(value)}"'


def _non_neg(value: Any) -> str | None:
    err = _int_error(value)
    if err is None and value < 0:
        return f"{{value_negative,{value}}}"
    return err


def _expiry(value: Any) -> str | None:
    err = _non_neg(value)
    if err is None and value > MAX_EXPIRY_MS:
        return f"{{value_too_large,{value}}}"
    return err


def _expires(value: Any) -> str | None:
    if _is_int(value) and value == 0:
        return "{value_zero,0}"
    return _expiry(value)


def _string(value: Any) -> str | None:
    return None if isinstance(value, str | bytes) else (
        f"{{unacceptable_type,{amqp_type_name(value)}}}")


def _one_of(choices: tuple[str, ...], wrong: Callable[[str], str]) -> Callable[[Any], str | None]:
    """A validator for a longstr that must be one of ``choices`` (``wrong(value)``: the
    error otherwise)."""
    def check(value: Any) -> str | None:
        err = _string(value)
        if err is None and _text(value) not in choices:
            return wrong(_text(value))
        return err
    return check

def _queue_version(value: Any) -> str | None:
    err = _non_neg(value)
    if err is None and value not in (1, 2):
        return f"\"unsupported queue version '{value}'\""
    return err


def _dlrk(value: Any, args: dict[str, Any]) -> str | None:
    err = _string(value)
    if err is None and "x-dead-letter-exchange" not in args:
        return "routing_key_but_no_dlx_defined"
    return err


def _overflow(value: Any) -> str | None:
    if not isinstance(value, str | bytes):
        return f"{{unacceptable_type,{amqp_type_name(value)}}}"
    return None if _text(value) in OVERFLOW_MODES else "invalid_overflow"


def _max_priority(value: Any) -> str | None:
    err = _non_neg(value)
    if err is None and value > MAX_PRIORITY:
        return f"{{max_value_exceeded,{value}}}"
    return err


def _bool(value: Any) -> str | None:
    return None if isinstance(value, bool) else (
        f"{{unacceptable_type,{amqp_type_name(value)}}}")


def _positive(value: Any) -> str | None:
    if _is_int(value) and value == 0:
        return "{value_zero,0}"
    return _non_neg(value)


_AGE = re.compile(r"^\d+[YMDhms]$")


def _max_age(value: Any) -> str | None:
    """``x-max-age``: a string such as ``7D``, ``12h``, ``30m``, ``10s`` (RabbitMQ's texts)."""
    if not isinstance(value, str | bytes):
        return f"{{unacceptable_type,{amqp_type_name(value)}}}"
    return None if _AGE.match(_text(value)) else "invalid_max_age"


def _segment_size(value: Any) -> str | None:
    if not _is_int(value):
        return f'"expected integer, got {amqp_type_name(value)}"'
    return _positive(value)


def _group_by(value: Any, args: dict[str, Any]) -> str | None:
    """``x-group-by``: ``routing-key`` or ``header:<name>`` (name 1-255 characters); not
    with priorities (a priority would overtake a key's order)."""
    err = _string(value)
    if err is not None:
        return err
    text = _text(value)
    if text != "routing-key" and not (
            text.startswith("header:") and 0 < len(text) - len("header:") <= 255):
        return f"\"unsupported group-by '{text}': expected routing-key or header:<name>\""
    if args.get("x-max-priority"):
        return "{incompatible_with,'x-max-priority'}"
    return None


def _group_prefetch(value: Any, args: dict[str, Any]) -> str | None:
    err = _non_neg(value)
    if err is None and args.get("x-group-by") is None:
        return "group_prefetch_but_no_group_by_defined"
    return err


_VALIDATORS: dict[str, Callable[[Any], str | None]] = {
    "x-expires": _expires,
    "x-message-ttl": _expiry,
    "x-dead-letter-exchange": _string,
    "x-max-length": _non_neg,
    "x-max-length-bytes": _non_neg,
    "x-max-in-memory-length": _non_neg,
    "x-max-in-memory-bytes": _non_neg,
    "x-max-priority": _max_priority,
    "x-overflow": _overflow,
    "x-single-active-consumer": _bool,
    "x-dead-letter-strategy": _one_of(("at-most-once", "at-least-once"),
                                      lambda _: "invalid_dlx_strategy"),
    "x-queue-mode": _one_of(("default", "lazy"), lambda v: f"\"unsupported queue mode '{v}'\""),
    "x-queue-version": _queue_version,
    "x-queue-leader-locator": _one_of(("client-local", "balanced"),
                                      lambda _: "invalid_queue_locator_arg"),
    "x-quorum-initial-group-size": _positive,
    "x-initial-cluster-size": _positive,
    "x-max-age": _max_age,
    "x-stream-max-segment-size-bytes": _segment_size,
    # message deduplication (the rabbitmq-message-deduplication plugin's, LavinMQ's sizes)
    "x-message-deduplication": _bool,
    "x-cache-size": _positive,
    "x-cache-ttl": _positive,
}
#: queue-level deduplication's arguments, taken by classic and quorum queues
DEDUP_ARGUMENTS = frozenset({"x-message-deduplication", "x-cache-size", "x-cache-ttl"})
#: message groups' arguments (amqpq's own), taken by classic and quorum queues
GROUP_ARGUMENTS = frozenset({"x-group-by", "x-group-prefetch"})
#: validators that look at the other arguments too
_CROSS_VALIDATORS: dict[str, Callable[[Any, dict[str, Any]], str | None]] = {
    "x-dead-letter-routing-key": _dlrk,
    "x-group-by": _group_by,
    "x-group-prefetch": _group_prefetch,
}


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


#: the arguments each queue type takes (RabbitMQ 3.10's ``capabilities()``), and the name
#: of its module in error texts
QUEUE_TYPE_ARGUMENTS: dict[str, frozenset[str]] = {
    "classic": frozenset({
        "x-expires", "x-message-ttl", "x-dead-letter-exchange", "x-dead-letter-routing-key",
        "x-max-length", "x-max-length-bytes", "x-max-priority", "x-overflow", "x-queue-mode",
        "x-queue-version", "x-single-active-consumer", "x-queue-type",
        "x-queue-master-locator"}) | DEDUP_ARGUMENTS | GROUP_ARGUMENTS,
    "quorum": frozenset({
        "x-dead-letter-exchange", "x-dead-letter-routing-key", "x-dead-letter-strategy",
        "x-expires", "x-max-length", "x-max-length-bytes", "x-max-in-memory-length",
        "x-max-in-memory-bytes", "x-overflow", "x-single-active-consumer", "x-queue-type",
        "x-quorum-initial-group-size", "x-delivery-limit", "x-message-ttl",
        "x-queue-leader-locator"}) | DEDUP_ARGUMENTS | GROUP_ARGUMENTS,
    "stream": frozenset({
        "x-max-length-bytes", "x-queue-type", "x-max-age", "x-stream-max-segment-size-bytes",
        "x-initial-cluster-size", "x-queue-leader-locator"}),
}
QUEUE_TYPE_MODULES = {"classic": "rabbit_classic_queue", "quorum": "rabbit_quorum_queue",
                      "stream": "rabbit_stream_queue"}
#: the types amqpq implements
SUPPORTED_QUEUE_TYPES = ("classic", "quorum", "stream")
_ALL_TYPE_ARGUMENTS = frozenset().union(*QUEUE_TYPE_ARGUMENTS.values())


def queue_type_of(args: dict[str, Any]) -> str:
    """The queue type ``x-queue-type`` names ("classic" when absent)."""
    value = args.get("x-queue-type")
    return "classic" if value is None else _text(value)


def _queue_type(value: Any) -> str | None:
    if not isinstance(value, str | bytes):
        return f"{{unacceptable_type,{amqp_type_name(value)}}}"
    if _text(value) not in SUPPORTED_QUEUE_TYPES:
        return f'"unsupported queue type \'{_text(value)}\'"'
    return None


def validate_queue_arguments(args: dict[str, Any], what: str) -> None:
    """Check Queue.Declare arguments; ``what`` is ``"queue 'q' in vhost '/'"``. In RabbitMQ's
    order: ``x-queue-type`` itself, then the values of the arguments the type takes, then
    arguments only other types take.

    Raises:
        PreconditionFailed (406): ``invalid arg 'x-max-length' for queue 'q' in vhost '/':
            {value_negative,-1}``; ``invalid arg 'x-max-priority' for queue 'q' in vhost
            '/' of queue type rabbit_quorum_queue``; ``... "unsupported queue type
            'stream'"`` (amqpq has no streams).
    """
    if "x-queue-type" in args:
        err = _queue_type(args["x-queue-type"])
        if err is not None:
            raise PreconditionFailed(f"invalid arg 'x-queue-type' for {what}: {err}")
    kind = queue_type_of(args)
    takes = QUEUE_TYPE_ARGUMENTS[kind]
    for key, value in args.items():
        if key not in takes and key in _ALL_TYPE_ARGUMENTS:
            continue
        if key == "x-dead-letter-exchange" and not isinstance(value, str | bytes):
            # checked by rabbit_channel before the queue's own validation, other wording
            raise PreconditionFailed(
                f"invalid type '{amqp_type_name(value)}' for arg '{key}' in {what}")
        cross = _CROSS_VALIDATORS.get(key)
        if cross is not None:
            err = cross(value, args)
        else:
            check = _VALIDATORS.get(key)
            err = check(value) if check is not None else None
        if err is not None:
            raise PreconditionFailed(f"invalid arg '{key}' for {what}: {err}")
    for key in args:
        if key not in takes and key in _ALL_TYPE_ARGUMENTS:
            raise PreconditionFailed(
                f"invalid arg '{key}' for {what} of queue type {QUEUE_TYPE_MODULES[kind]}")


#: the Basic.Consume arguments each queue type takes (RabbitMQ 3.10's ``capabilities()``)
CONSUMER_ARGUMENTS: dict[str, frozenset[str]] = {
    "classic": frozenset({"x-cancel-on-ha-failover", "x-priority", "x-credit"}),
    "quorum": frozenset({"x-priority", "x-credit"}),
    "stream": frozenset({"x-stream-offset", "x-credit"}),
}
_ALL_CONSUMER_ARGUMENTS = frozenset().union(*CONSUMER_ARGUMENTS.values())


def validate_consumer_arguments(args: dict[str, Any], kind: str, what: str) -> int:
    """Check Basic.Consume arguments for a queue of type ``kind``; the consumer's
    ``x-priority`` (0 when absent).

    Raises:
        PreconditionFailed (406): a non-integer priority (``invalid arg 'x-priority' for
            queue 'q' in vhost '/': "expected integer, got longstr"``), or an argument only
            other queue types take (``... of queue type rabbit_quorum_queue``).
    """
    value = args.get("x-priority", 0)
    err = _int_error(value)
    if err is not None:
        raise PreconditionFailed(f"invalid arg 'x-priority' for {what}: {err}")
    takes = CONSUMER_ARGUMENTS[kind]
    for key in args:
        if key not in takes and key in _ALL_CONSUMER_ARGUMENTS:
            raise PreconditionFailed(
                f"invalid arg '{key}' for {what} of queue type {QUEUE_TYPE_MODULES[kind]}")
    return int(value)


@dataclass(frozen=True)
class QueueSettings:
    """The effective settings of a queue (arguments resolved with its policy).

    Units: ``message_ttl``/``expires`` in ms, ``max_length`` in messages,
    ``max_length_bytes`` in body bytes; None means "not set".
    """

    message_ttl: int | None = None
    expires: int | None = None
    max_length: int | None = None
    max_length_bytes: int | None = None
    max_age: str | None = None  # streams: x-max-age / max-age (e.g. "7D")
    overflow: str = "drop-head"
    dead_letter_exchange: str | None = None
    dead_letter_routing_key: str | None = None
    max_priority: int | None = None
    single_active_consumer: bool = False
    delivery_limit: int | None = None  # quorum queues: deliveries before a message is dropped
    policy: str | None = None
    operator_policy: str | None = None
    #: a length limit is set (max_length or max_length_bytes): computed once, read by every
    #: publish of a queue that is not plain (a property cost a call each time)
    limited: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "limited",
                           self.max_length is not None or self.max_length_bytes is not None)


def _min(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def _policy_int(definition: dict[str, Any], key: str) -> int | None:
    value = definition.get(key)
    return value if _is_int(value) and value >= 0 else None


def _overflow_for(kind: str, overflow: str | None) -> str:
    """The overflow mode in effect: a quorum queue takes reject-publish-dlx as drop-head
    (RabbitMQ 3.10's ``rabbit_quorum_queue:overflow/3``, with a logged warning)."""
    if overflow is None or (kind == "quorum" and overflow == "reject-publish-dlx"):
        return "drop-head"
    return overflow


def merge_operator_definition(definition: dict[str, Any] | None,
                              operator: dict[str, Any] | None) -> dict[str, Any]:
    """A policy definition with an operator policy's limits applied: for each key both set,
    the lower value (RabbitMQ's ``rabbit_policy:merge_operator_definitions``)."""
    merged = dict(definition or {})
    for key, value in (operator or {}).items():
        current = merged.get(key)
        merged[key] = min(current, value) if _is_int(current) and _is_int(value) else value
    return merged


def resolve_settings(
    args: dict[str, Any], policy_name: str | None = None,
    definition: dict[str, Any] | None = None,
    operator_name: str | None = None, operator_definition: dict[str, Any] | None = None,
) -> QueueSettings:
    """Effective :class:`QueueSettings` from validated arguments and a policy definition
    (``{"message-ttl": 1000, "max-length": 10, ...}``), as RabbitMQ resolves them: the lower
    value for message-ttl/expires/max-length/max-length-bytes/delivery-limit (a negative
    x-delivery-limit means none), the argument's value for
    overflow and dead-letter-*; x-max-priority and x-single-active-consumer are
    declare-only. An operator policy's limits (``operator_definition``) lower the policy's.
    """
    d = merge_operator_definition(definition, operator_definition)

    def arg_or_policy(arg_key: str, policy_key: str) -> str | None:
        if arg_key in args:
            return _text(args[arg_key])
        value = d.get(policy_key)
        return _text(value) if isinstance(value, str | bytes) else None

    return QueueSettings(
        message_ttl=_min(args.get("x-message-ttl"), _policy_int(d, "message-ttl")),
        expires=_min(args.get("x-expires"), _policy_int(d, "expires") or None),
        max_length=_min(args.get("x-max-length"), _policy_int(d, "max-length")),
        max_length_bytes=_min(args.get("x-max-length-bytes"),
                              _policy_int(d, "max-length-bytes")),
        overflow=_overflow_for(queue_type_of(args), arg_or_policy("x-overflow", "overflow")),
        dead_letter_exchange=arg_or_policy("x-dead-letter-exchange", "dead-letter-exchange"),
        dead_letter_routing_key=arg_or_policy(
            "x-dead-letter-routing-key", "dead-letter-routing-key"),
        max_priority=args.get("x-max-priority") or None,
        single_active_consumer=bool(args.get("x-single-active-consumer", False)),
        delivery_limit=_min(args.get("x-delivery-limit") if _is_int(
            args.get("x-delivery-limit")) and args["x-delivery-limit"] >= 0 else None,
            _policy_int(d, "delivery-limit")),
        max_age=arg_or_policy("x-max-age", "max-age"),
        policy=policy_name,
        operator_policy=operator_name,
    )
