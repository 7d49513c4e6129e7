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

from vhosts.erlang_format import erlang_pformat

APPLY_TO = ("queues", "exchanges", "all", "classic_queues", "quorum_queues", "streams")
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
#: Every key RabbitMQ 3.13's core registers as a ``policy_validator`` (``rabbit_policies``,
#: ``rabbit_mirror_queue_misc``, ``rabbit_queue_location_validator``,
#: ``rabbit_quorum_queue``); any other key is refused, as RabbitMQ refuses it. Beyond
#: :data:`QUEUE_KEYS` and :data:`EXCHANGE_KEYS` these are accepted so that definitions
#: exported from RabbitMQ import, but nothing here acts on them (mirroring, queue storage,
#: streams, per-queue consumer timeouts), except ``queue-leader-locator`` (a cluster's
#: placement of quorum queue leaders; its value is checked) and ``target-group-size`` (a
#: quorum queue's target member count when the cluster grows queues: a positive integer). The federation keys
#: (:data:`FEDERATION_KEYS`, run by the ``federation`` package) are known, as with
#: RabbitMQ's federation plugin enabled; other plugins' keys (``shards-per-node``,
#: ``routing-key``) are refused, as by a RabbitMQ without those plugins.
POLICY_KEYS = frozenset({
    *QUEUE_KEYS, *EXCHANGE_KEYS,
    "consumer-timeout", "dead-letter-strategy", "max-in-memory-length", "max-in-memory-bytes",
    "queue-mode", "queue-version", "max-age", "stream-max-segment-size-bytes",
    "stream-filter-size-bytes", "queue-leader-locator", "initial-cluster-size",
    "ha-mode", "ha-params", "ha-sync-mode", "ha-sync-batch-size", "ha-promote-on-shutdown",
    "ha-promote-on-failure", "queue-master-locator", "target-group-size",
    "federation-upstream", "federation-upstream-set", "federation-upstream-pattern",
})
#: ``queue-leader-locator`` values a policy may set (RabbitMQ 3.10.8 and 3.13: the last two
#: are older names of ``balanced``); a cluster places new quorum queue leaders by it
#: (:mod:`amqp_server.cluster.placement`)
LEADER_LOCATORS = ("client-local", "balanced", "random", "least-leaders")
#: the ``rabbitmq_federation`` plugin's policy keys: an upstream's name, an upstream set's
#: name (``all``: every upstream of the vhost), a regular expression over upstream names
FEDERATION_KEYS = ("federation-upstream", "federation-upstream-set",
                   "federation-upstream-pattern")
#: what an operator policy may set (RabbitMQ 3.10's operator_policy_validator): limits only,
#: each combined with the user's policy and arguments by taking the lower value. RabbitMQ
#: 3.12+ also takes queue-version, overflow, ha-mode, ha-params, ha-sync-mode and
#: target-group-size; they are refused here, as 3.10 refuses them.
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
        ``"exchange"``; ``classic_queues``/``quorum_queues``/``streams`` policies (RabbitMQ
        3.12+) apply to that type of queue only."""
        if kind == "queue" and self.apply_to not in (
                "queues", "all", "streams" if queue_type == "stream" else f"{queue_type}_queues"):
            return False
        if kind == "exchange" and self.apply_to not in ("exchanges", "all"):
            return False
        return self.regex.search(name) is not None


def unrecognised(definition: dict[str, Any], known: Any) -> str | None:
    """RabbitMQ's error for the keys of ``definition`` not in ``known``, or None.

    Returns:
        ``[{<<"max-lenght">>,5}] are not recognised policy settings``: the keys in term
        order with their values, printed as Erlang's ``~p`` prints them (over several lines
        when long). Source: ``rabbit_policy:validation0/2``.
    """
    unknown = [(k, definition[k]) for k in sorted(definition, key=lambda k: k.encode())
               if k not in known]
    if not unknown:
        return None
    return f"{erlang_pformat(unknown)} are not recognised policy settings"


def validate_policy(policy: Policy) -> None:
    """Check apply-to, the values of the keys this broker acts on, then that every key is
    one RabbitMQ knows (:data:`POLICY_KEYS`), in RabbitMQ's order (values before unknown
    keys).

    Raises:
        PolicyError: ``no policy provided`` (empty definition); a bad value such as
            ``'message-ttl' must be a non-negative integer, got -1``; or RabbitMQ's
            ``[{<<"max-lenght">>,5}] are not recognised policy settings``.
    """
    if policy.apply_to not in APPLY_TO:
        raise PolicyError(f"apply-to '{policy.apply_to}' must be one of {', '.join(APPLY_TO)}")
    if not policy.definition:
        raise PolicyError("no policy provided")
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
        if key == "queue-leader-locator" and value not in LEADER_LOCATORS:
            raise PolicyError(f"{erlang_pformat(value)} is not a valid queue leader locator "
                              "value")
        if key == "target-group-size" and not (
                isinstance(value, int) and not isinstance(value, bool) and value > 0):
            # RabbitMQ 3.13's rabbit_quorum_queue:validate_policy (3.10.8 has no such key)
            raise PolicyError(f"{erlang_pformat(value)} is not a valid qq target count value")
    error = unrecognised(policy.definition, POLICY_KEYS) or _federation_error(policy.definition)
    if error:
        raise PolicyError(error)


def _federation_error(definition: dict[str, Any]) -> str | None:
    """RabbitMQ 3.10.8's texts for the federation keys (``5 is not a valid federation
    upstream name``; two of them together), or None. Source:
    ``rabbit_federation_parameters:validate_policy/1``."""
    keys = [k for k in FEDERATION_KEYS if k in definition]
    if len(keys) > 1:
        return ("cannot specify federation-upstream, federation-upstream-set or "
                "federation-upstream-pattern together")
    if not keys or isinstance(definition[keys[0]], str):
        return None
    what = {"federation-upstream": "upstream name", "federation-upstream-set": "upstream set name",
            "federation-upstream-pattern": "upstream pattern"}[keys[0]]
    return f"{erlang_pformat(definition[keys[0]])} is not a valid federation {what}"


def validate_operator_policy(policy: Policy) -> None:
    """Check an operator policy: apply-to, and only :data:`OPERATOR_KEYS`, each a
    non-negative integer.

    Raises:
        PolicyError: ``no policy provided``; a limit that is not a non-negative integer;
            then ``[{<<"foo">>,1}] are not recognised policy settings`` (RabbitMQ 3.10.8's
            text and order).
    """
    if policy.apply_to not in APPLY_TO:
        raise PolicyError(f"apply-to '{policy.apply_to}' must be one of {', '.join(APPLY_TO)}")
    if not policy.definition:
        raise PolicyError("no policy provided")
    for key, value in policy.definition.items():
        if key in OPERATOR_KEYS and (
                not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise PolicyError(f"'{key}' must be a non-negative integer, got {value!r}")
    error = unrecognised(policy.definition, OPERATOR_KEYS)
    if error:
        raise PolicyError(error)


def escape_html_tags(text: str) -> str:
    """``&``, ``<`` and ``>`` as HTML entities, as RabbitMQ escapes policy errors in the
    policies API and definitions import (``rabbit_misc:escape_html_tags/1``)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


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
