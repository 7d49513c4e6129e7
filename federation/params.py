"""Federation runtime parameters: components ``federation-upstream`` (one upstream: a URI or
a list, and how to link to it) and ``federation-upstream-set`` (a list of upstream names,
each with overrides), validated as RabbitMQ 3.10.8's ``rabbit_federation_parameters`` does,
with its texts (checked with curl against the reference broker), and turned into
:class:`Upstream`.

Keys (all optional but ``uri``): ``exchange`` / ``queue`` (the upstream's name for it;
default the local name), ``consumer-tag``, ``prefetch-count`` (1000), ``reconnect-delay`` (5
s), ``max-hops`` (1), ``expires`` / ``message-ttl`` (ms, the upstream queue's), ``trust-user-id``,
``ack-mode`` (``on-confirm``), ``resource-cleanup-mode``, ``ha-policy``, ``bind-nowait``,
``channel-use-mode``.

Source: https://www.rabbitmq.com/docs/federation-reference, ``rabbit_federation_parameters.erl``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from links.uri import uri_error
from vhosts.erlang_format import erlang_pformat
from vhosts.policies import escape_html_tags

UPSTREAM = "federation-upstream"
UPSTREAM_SET = "federation-upstream-set"
COMPONENTS = (UPSTREAM, UPSTREAM_SET)
ACK_MODES = ("no-ack", "on-publish", "on-confirm")

#: the shared keys in RabbitMQ 3.10.8's declaration order (errors come in reverse order)
_SHARED = (
    ("exchange", "binary"), ("queue", "binary"), ("consumer-tag", "binary"),
    ("prefetch-count", "number"), ("reconnect-delay", "number"), ("max-hops", "number"),
    ("expires", "number"), ("message-ttl", "number"), ("trust-user-id", "boolean"),
    ("ack-mode", ACK_MODES), ("resource-cleanup-mode", ("default", "never")),
    ("ha-policy", "binary"), ("bind-nowait", "boolean"),
    ("channel-use-mode", ("multiple", "single")),
)


class FederationParamError(ValueError):
    """A value RabbitMQ would refuse; ``str()`` is the lines after ``Validation failed``,
    :attr:`reason` the whole 400 reason (HTML-escaped as the management plugin sends it)."""

    @property
    def reason(self) -> str:
        return escape_html_tags(f"Validation failed\n\n{self}\n")


@dataclass(frozen=True)
class Upstream:
    """One upstream as a link uses it (an upstream set's entry: its overrides applied).

    Attributes:
        vhost, name: the ``federation-upstream`` parameter.
        uris: as given (one or more; the next is tried after a failure).
        exchange, queue: the upstream's exchange / queue name (None: the local name).
        consumer_tag: a federated queue's consumer tag (None: ``federation-link-<name>``).
        prefetch, reconnect_delay (s), max_hops, expires / message_ttl (ms, None: unset),
        trust_user_id, ack_mode: as the keys say.
    """

    vhost: str
    name: str
    uris: tuple[str, ...]
    exchange: str | None = None
    queue: str | None = None
    consumer_tag: str | None = None
    prefetch: int = 1000
    reconnect_delay: float = 5.0
    max_hops: int = 1
    expires: int | None = None
    message_ttl: int | None = None
    trust_user_id: bool = False
    ack_mode: str = "on-confirm"


def _p(value: Any) -> str:
    return erlang_pformat(value)


def _check(key: str, kind: Any, value: Any) -> str | None:
    if kind == "binary":
        return None if isinstance(value, str) else f"{key} should be binary, actually was {_p(value)}"
    if kind == "number":
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return None if ok else f"{key} should be a number, actually was {_p(value)}"
    if kind == "boolean":
        return None if isinstance(value, bool) else f"{key} should be boolean, actually was {_p(value)}"
    if not isinstance(value, str):
        return f"{key} should be binary, actually was {_p(value)}"
    if value in kind:
        return None
    options = ",".join(f"<<\"{v}\">>" for v in kind)
    return f"{key} should be one of [{options}], actually was {_p(value)}"


def _check_uri(value: Any) -> str | None:
    """RabbitMQ's ``validate_uri``: a string, or a list whose first bad element is named."""
    if isinstance(value, str):
        return uri_error(value)
    if not isinstance(value, list):
        return f"uri should be list, actually was {_p(value)}"
    for item in value:
        problem = _check_uri(item) if isinstance(item, str) else (
            f"uri should be list, actually was {_p(item)}")
        if problem:
            return problem
    return None


def _proplist(name: str, value: dict[str, Any], first: tuple[str, Any]) -> list[str]:
    """``rabbit_parameter_validation:proplist``: unknown keys, then each key's check in
    reverse declaration order; a missing mandatory key is ``Key "uri" not found in NAME``."""
    errors: list[str] = []
    known = {first[0], *(k for k, _ in _SHARED)}
    unknown = [(k, v) for k, v in value.items() if k not in known]
    if unknown:
        terms = ",".join(f"{{{_p(k)},{_p(v)}}}" for k, v in unknown)
        errors.append(f"Unrecognised terms [{terms}] in {name}")
    for key, kind in reversed((first, *_SHARED)):
        if key not in value:
            if key == first[0]:
                errors.append(f'Key "{key}" not found in {name}')
            continue
        problem = _check_uri(value[key]) if kind == "uri" else _check(key, kind, value[key])
        if problem:
            errors.append(problem)
    return errors


def validate(component: str, name: str, value: Any) -> list[str]:
    """Every problem of a ``federation-upstream`` or ``federation-upstream-set`` value
    (empty: valid), RabbitMQ 3.10.8's texts before HTML escaping."""
    if component == UPSTREAM:
        if not isinstance(value, dict):
            return [f"{UPSTREAM} value should be a JSON object, actually was {_p(value)}"]
        return _proplist(name, value, ("uri", "uri"))
    if not isinstance(value, list):
        return [f"{UPSTREAM_SET} value should be a list, actually was {_p(value)}"]
    errors: list[str] = []
    for entry in value:
        if not isinstance(entry, dict):
            errors.append(f"{UPSTREAM_SET} entries should be JSON objects, actually was "
                          f"{_p(entry)}")
            continue
        errors += _proplist(name, entry, ("upstream", "binary"))
    return errors


def _overrides(value: dict[str, Any]) -> dict[str, Any]:
    """The :class:`Upstream` fields a parameter value sets."""
    names = {"exchange": "exchange", "queue": "queue", "consumer-tag": "consumer_tag",
             "prefetch-count": "prefetch", "reconnect-delay": "reconnect_delay",
             "max-hops": "max_hops", "expires": "expires", "message-ttl": "message_ttl",
             "trust-user-id": "trust_user_id", "ack-mode": "ack_mode"}
    out: dict[str, Any] = {}
    for key, field_name in names.items():
        if key in value:
            v = value[key]
            if field_name in ("prefetch", "max_hops", "expires", "message_ttl"):
                v = int(v)
            elif field_name == "reconnect_delay":
                v = float(v)
            out[field_name] = v
    return out


def upstream_of(vhost: str, name: str, value: Any) -> Upstream:
    """The :class:`Upstream` of a ``federation-upstream`` parameter.

    Raises:
        FederationParamError: :func:`validate` found problems.
    """
    errors = validate(UPSTREAM, name, value)
    if errors:
        raise FederationParamError("\n".join(errors))
    uris = value["uri"]
    return Upstream(vhost=vhost, name=name,
                    uris=(uris,) if isinstance(uris, str) else tuple(uris), **_overrides(value))


def resolve(vhost: str, definition: dict[str, Any], upstreams: dict[str, Any],
            sets: dict[str, Any]) -> tuple[list[Upstream], list[str]]:
    """The upstreams a policy definition names in ``vhost``: ``federation-upstream`` (one),
    ``federation-upstream-set`` (a set's entries with their overrides; ``all``: every
    upstream), ``federation-upstream-pattern`` (upstream names matching the regular
    expression). ``upstreams`` / ``sets``: the vhost's parameter values by name. Returns the
    upstreams and the problems met (a missing upstream or set, an invalid stored value),
    which RabbitMQ only logs: such an upstream has no link."""
    problems: list[str] = []
    found: list[Upstream] = []

    def one(name: str, overrides: dict[str, Any] | None = None) -> None:
        if name not in upstreams:
            problems.append(f"no upstream '{name}' in vhost '{vhost}'")
            return
        try:
            up = upstream_of(vhost, name, upstreams[name])
        except FederationParamError as exc:
            problems.append(f"upstream '{name}' in vhost '{vhost}' is invalid: "
                            f"{' '.join(str(exc).split())}")
            return
        found.append(replace(up, **_overrides(overrides)) if overrides else up)

    if isinstance(definition.get(UPSTREAM), str):
        one(definition[UPSTREAM])
    elif isinstance(definition.get(UPSTREAM_SET), str):
        set_name = definition[UPSTREAM_SET]
        if set_name == "all":
            for name in sorted(upstreams):
                one(name)
        elif set_name not in sets or not isinstance(sets[set_name], list):
            problems.append(f"no upstream set '{set_name}' in vhost '{vhost}'")
        else:
            for entry in sets[set_name]:
                if isinstance(entry, dict) and isinstance(entry.get("upstream"), str):
                    one(entry["upstream"], entry)
    elif isinstance(definition.get("federation-upstream-pattern"), str):
        try:
            pattern = re.compile(definition["federation-upstream-pattern"])
        except re.error as exc:
            problems.append(f"bad federation-upstream-pattern: {exc}")
        else:
            for name in sorted(upstreams):
                if pattern.search(name):
                    one(name)
    return found, problems
