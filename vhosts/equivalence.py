"""Redeclare equivalence checks with RabbitMQ's 406 texts.

Source: RabbitMQ ``rabbit_misc:assert_field_equivalence/4`` and
``rabbit_misc:assert_args_equivalence/4``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from amqp_common.errors import PreconditionFailed
from amqp_common.properties import amqp_type_name

#: Queue arguments RabbitMQ compares on redeclare (rabbit_amqqueue:declare_args/0).
QUEUE_EQUIVALENCE_ARGS = (
    "x-expires",
    "x-message-ttl",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-in-memory-length",
    "x-max-in-memory-bytes",
    "x-max-priority",
    "x-overflow",
    "x-queue-mode",
    "x-queue-type",
    "x-single-active-consumer",
    # amqpq's message groups: a redeclare that would change the dispatch rule is refused
    "x-group-by",
    "x-group-prefetch",
)


def inequivalent(field: str, what: str, received: str, current: str) -> PreconditionFailed:
    """``inequivalent arg 'durable' for queue 'q' in vhost '/': received 'true' but current is
    'false'`` as a 406 error (to raise)."""
    return PreconditionFailed(
        f"inequivalent arg '{field}' for {what}: received '{received}' but current is '{current}'"
    )


def _describe(value: Any) -> str:
    if value is None:
        return "none"
    return f"the value '{_shown(value)}' of type '{amqp_type_name(value)}'"


def _normal(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _shown(value: Any) -> str:
    """A value as RabbitMQ prints it in inequivalence texts (booleans lower case)."""
    return str(value).lower() if isinstance(value, bool) else str(_normal(value))


def assert_args_equivalent(
    requested: dict[str, Any], current: dict[str, Any], what: str, keys: Iterable[str]
) -> None:
    """Compare the listed ``x-`` arguments of a redeclare with the current ones.

    Raises:
        PreconditionFailed (406): ``inequivalent arg 'x-message-ttl' for queue 'q' in vhost
            '/': received '2000' but current is '1000'`` when both are set, ``... received the
            value '5' of type 'signedint' but current is none`` when one is missing.
    """
    for key in keys:
        want, have = requested.get(key), current.get(key)
        if _normal(want) == _normal(have) and (type(want) is bool) == (type(have) is bool):
            continue
        if want is not None and have is not None:
            # both set: RabbitMQ's assert_field_equivalence text, values only
            raise inequivalent(key, what, _shown(want), _shown(have))
        raise PreconditionFailed(
                f"inequivalent arg '{key}' for {what}: received {_describe(want)} but current is"
                f" {_describe(have)}"
            )
