"""Policies: settings applied by name pattern to a vhost's queues and exchanges.

A policy has a name, a regular expression matched (unanchored, ``re.search``) against queue
or exchange names, ``apply-to`` (``queues``, ``exchanges``, ``all``), a priority (the highest
matching policy is the one that applies; ties are broken by name) and a definition such as ``{"message-ttl": 60000, "dead-letter-exchange": "dlx"}``.

Source: https://www.rabbitmq.com/docs/policies; RabbitMQ ``rabbit_policy.erl``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

APPLY_TO = ("queues", "exchanges", "all", "classic_queues", "quorum_queues")
# definition keys this broker acts on, with the type each needs
QUEUE_KEYS = {
    "message-ttl": int,
    "expires": int,
    "max-length": int,
    "max-length-bytes": int,
    "overflow": str,
    "dead-letter-exchange": str,
    "dead-letter-routing-key": str,
    "delivery-limit": int,  # quorum queues
}
EXCHANGE_KEYS = {"alternate-exchange": str}
#: what an operator policy may set (RabbitMQ 3.10's operator_policy_validator): limits only,
#: each combined with the user's policy and arguments by taking the lower value
OPERATOR_KEYS = ("expires", "message-ttl", "max-length", "max-length-bytes",
                 "max-in-memory-length", "max-in-memory-bytes", "delivery-limit")
OVERFLOW_VALUES = ("drop-head", "reject-publish", "reject-publish-dlx")


class PolicyError(ValueError):
    """A policy that cannot be set; the message says which field is wrong."""


@dataclass
class Policy:
    """One policy of a vhost (RabbitMQ definitions' shape)."""

    name: str
    pattern: str
    definition: dict[str, Any]
    priority: int = 0
    apply_to: str = "all"
    regex: re.Pattern[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        try:
            self.regex = re.compile(self.pattern)
        except re.error as exc:
            raise PolicyError(f"invalid pattern '{self.pattern}': {exc}") from None

    def applies_to(self, kind: str, name: str, queue_type: str = "classic") -> bool:
        """``kind`` is ``"queue"`` (of ``queue_type`` "classic" or "quorum") or
        ``"exchange"``; ``classic_queues``/``quorum_queues`` policies (RabbitMQ 3.12+) apply
        to that type of queue only."""
        if kind == "queue" and self.apply_to not in (
                "queues", "all", f"{queue_type}_queues"):
            return False
        if kind == "exchange" and self.apply_to not in ("exchanges", "all"):
            return False
        return self.regex.search(name) is not None


def validate_policy(policy: Policy) -> None:
    """Check apply-to and the definition's known keys and value types.

    Raises:
        PolicyError: e.g. ``"message-ttl" must be a non-negative integer``.
    """
    if policy.apply_to not in APPLY_TO:
        raise PolicyError(f"apply-to '{policy.apply_to}' must be one of {', '.join(APPLY_TO)}")
    if not policy.definition:
        raise PolicyError("definition must not be empty")
    for key, value in policy.definition.items():
        kind = QUEUE_KEYS.get(key) or EXCHANGE_KEYS.get(key)
        if kind is int and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise PolicyError(f"'{key}' must be a non-negative integer, got {value!r}")
        if kind is str and not isinstance(value, str):
            raise PolicyError(f"'{key}' must be a string, got {value!r}")
        if key == "overflow" and value not in OVERFLOW_VALUES:
            raise PolicyError(f"'overflow' must be one of {', '.join(OVERFLOW_VALUES)}")
        if key == "expires" and value == 0:
            raise PolicyError("'expires' must be a positive integer")


def _erl(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return str(value)
    return f'<<"{value}">>'


def validate_operator_policy(policy: Policy) -> None:
    """Check an operator policy: apply-to, and only :data:`OPERATOR_KEYS`, each a
    non-negative integer.

    Raises:
        PolicyError: ``[{<<"foo">>,1}] are not recognised policy settings`` (RabbitMQ
            3.10.8's text), or a value that is not a non-negative integer.
    """
    if policy.apply_to not in APPLY_TO:
        raise PolicyError(f"apply-to '{policy.apply_to}' must be one of {', '.join(APPLY_TO)}")
    unknown = [(k, v) for k, v in policy.definition.items() if k not in OPERATOR_KEYS]
    if unknown:
        terms = ",".join(f'{{<<"{k}">>,{_erl(v)}}}' for k, v in unknown)
        raise PolicyError(f"[{terms}] are not recognised policy settings")
    if not policy.definition:
        raise PolicyError("definition must not be empty")
    for key, value in policy.definition.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise PolicyError(f"'{key}' must be a non-negative integer, got {value!r}")


def matching_policy(policies: dict[str, Policy], kind: str, name: str,
                    queue_type: str = "classic") -> Policy | None:
    """The policy that applies to queue/exchange ``name``: the highest priority match
    (ties: the name sorting last wins, as RabbitMQ's sort by {priority, name} does)."""
    best: Policy | None = None
    for policy in policies.values():
        if not policy.applies_to(kind, name, queue_type):
            continue
        if best is None or (policy.priority, policy.name) > (best.priority, best.name):
            best = policy
    return best
