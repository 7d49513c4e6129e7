"""Definitions: the broker's topology as RabbitMQ's definitions JSON, exported and imported.

The document has the keys RabbitMQ writes (``rabbit_version``, ``users``, ``vhosts``,
``permissions``, ``topic_permissions``, ``parameters``, ``global_parameters``, ``policies``,
``queues``, ``exchanges``, ``bindings``), so a file exported from RabbitMQ (``GET
/api/definitions``, ``rabbitmqctl export_definitions``) imports here and ours imports there.

Two views are exported:

* the default, *durable* view: durable non-exclusive queues, durable exchanges (not the default
  or ``amq.*`` ones) and the bindings between durable ends -- what survives a restart, which
  is what :mod:`broker.persistence` keeps on disk;
* ``include_transient=True``: what RabbitMQ 3.10's ``GET /api/definitions`` returns (checked
  against 3.10.8): every non-exclusive queue and every exchange, durable or not.

Import is all-or-nothing: :func:`import_definitions` first checks every entry against the
broker's current state plus everything the file itself declares (types, names, regular
expressions, exchange types, policy definitions, queue arguments, binding ends), and raises
:class:`DefinitionsError` naming the first bad entry (``exchanges[3] (name 'x' in vhost '/'):
unknown exchange type 'nope'``; a bad policy: RabbitMQ's reason and `` (vhost/name)``) before
anything changes. As RabbitMQ does, existing queues and
exchanges are left as they are, users and permissions are replaced, exchanges whose name
starts with ``amq.`` are skipped, and user tags may be a list or a comma-separated string
(3.10 and earlier wrote a string). Operator policies travel as ``parameters`` entries of
component ``operator_policy``, as RabbitMQ stores them (and imports them); a vhost's limits
come from its ``limits`` object or, as RabbitMQ 3.10 exports them, a ``vhost-limits``
parameter (name ``limits``; the vhost's whole set).

Source: https://www.rabbitmq.com/docs/definitions; RabbitMQ ``rabbit_definitions.erl``.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import logging
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

from amqp_common.errors import AMQPError
from exchanges import EXCHANGE_TYPES, make_exchange_type
from exchanges.binding import Binding, Destination
from queue_store.queue_args import validate_queue_arguments
from vhosts.limits import LimitsError, validate_limits
from vhosts.names import DEFAULT_EXCHANGES
from vhosts.policies import (
    Policy,
    PolicyError,
    escape_html_tags,
    validate_operator_policy,
    validate_policy,
)
from vhosts.users import HASHING_ALGORITHM, hash_password

if TYPE_CHECKING:
    from broker.broker import Broker

log = logging.getLogger("amqpq.definitions")

#: The RabbitMQ version this broker's definitions are compatible with (``rabbit_version``).
RABBITMQ_COMPAT_VERSION = "3.10.8"

OPERATOR_POLICY = "operator_policy"  # the runtime-parameter component of operator policies
VHOST_LIMITS = "vhost-limits"  # RabbitMQ 3.10 exports a vhost's limits as this parameter


class DefinitionsError(ValueError):
    """A definitions document that cannot be imported; the message names the entry."""


def parse_tags(value: Any) -> list[str]:
    """User/vhost tags from a list or a comma-separated string (RabbitMQ accepts both).

    Raises:
        ValueError: neither a string nor a list of strings.
    """
    if value is None:
        return []
    if isinstance(value, str):
        return [t.strip() for t in value.split(",") if t.strip()]
    if isinstance(value, list) and all(isinstance(t, str) for t in value):
        return [t.strip() for t in value if t.strip()]
    raise ValueError(f"tags must be a list of strings or a comma-separated string, got "
                     f"{value!r}")


def jsonable(value: Any) -> Any:
    """An AMQP field value (table, array, bytes, Decimal, timestamp...) as plain JSON data."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(raw).decode()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, datetime.datetime):
        return int(value.timestamp())
    return value


# ---- export ------------------------------------------------------------------------------


def export_definitions(broker: Broker, *, include_transient: bool = False,
                       vhost: str | None = None) -> dict[str, Any]:
    """The broker's definitions as a RabbitMQ definitions document.

    Args:
        include_transient: also non-durable queues and exchanges (RabbitMQ 3.10's
            ``GET /api/definitions``); by default only what survives a restart.
        vhost: only that vhost's queues, exchanges, bindings, policies (users, vhosts and
            permissions are still all exported; callers trim them for a per-vhost export).
    """
    config = broker.config
    x = broker.extras
    names = sorted(broker.vhosts) if vhost is None else [vhost]
    vhosts = [broker.vhosts[n] for n in names if n in broker.vhosts]
    doc: dict[str, Any] = {
        "rabbit_version": RABBITMQ_COMPAT_VERSION,
        "rabbitmq_version": RABBITMQ_COMPAT_VERSION,
        "product_name": config.product,
        "product_version": config.version,
        "users": [
            {"name": u.name, "password_hash": u.password_hash,
             "hashing_algorithm": HASHING_ALGORITHM, "tags": list(u.tags),
             "limits": dict(broker.limits.users.get(u.name, {}))}
            for u in sorted(broker.users.users.values(), key=lambda u: u.name)
        ],
        "vhosts": [
            {"name": v.name, "limits": dict(broker.limits.vhosts.get(v.name, {})),
             "metadata": x.metadata(v.name)}
            for v in (broker.vhosts[n] for n in sorted(broker.vhosts))
        ],
        "permissions": [
            {"user": user, "vhost": vh, "configure": p.configure, "write": p.write,
             "read": p.read}
            for (user, vh), p in sorted(broker.permissions.permissions.items())
        ],
        "topic_permissions": [
            {"user": user, "vhost": vh, "exchange": tp.exchange, "write": tp.write,
             "read": tp.read}
            for (user, vh), entries in sorted(broker.permissions.topic_permissions.items())
            for tp in sorted(entries.values(), key=lambda t: t.exchange)
        ],
        "parameters": [dict(p) for p in x.parameters
                       if vhost is None or p.get("vhost") == vhost] + [
            # operator policies are runtime parameters in RabbitMQ, exported as such
            {"vhost": v.name, "component": OPERATOR_POLICY, "name": p.name,
             "value": {"pattern": p.pattern, "definition": dict(p.definition),
                       "priority": p.priority, "apply-to": p.apply_to}}
            for v in vhosts for _, p in sorted(v.operator_policies.items())],
        "global_parameters": [dict(p) for p in x.global_parameters],
        "policies": [],
        "queues": [],
        "exchanges": [],
        "bindings": [],
    }
    for v in vhosts:
        for p in sorted(v.policies.values(), key=lambda p: p.name):
            doc["policies"].append({
                "vhost": v.name, "name": p.name, "pattern": p.pattern, "apply-to": p.apply_to,
                "definition": jsonable(p.definition), "priority": p.priority})
        queues = {q.name: q for q in v.queues.values()
                  if not q.exclusive and (include_transient or q.durable)}
        for q in sorted(queues.values(), key=lambda q: q.name):
            doc["queues"].append({
                "name": q.name, "vhost": v.name, "durable": q.durable,
                "auto_delete": q.auto_delete, "arguments": jsonable(q.arguments)})
        exchanges = {e.name: e for e in v.exchanges.values()
                     if e.name and not e.name.startswith("amq.")
                     and (include_transient or e.durable)}
        for e in sorted(exchanges.values(), key=lambda e: e.name):
            doc["exchanges"].append({
                "name": e.name, "vhost": v.name, "type": e.type_name, "durable": e.durable,
                "auto_delete": e.auto_delete, "internal": e.internal,
                "arguments": jsonable(e.arguments)})
        bindings = []
        for b in v.bindings():
            source = v.exchanges.get(b.source)
            if source is None or not b.source:
                continue
            if not (b.source in exchanges or b.source.startswith("amq.")):
                continue
            dest_ok = (b.destination.name in queues if b.destination.kind == "queue"
                       else b.destination.name in exchanges
                       or b.destination.name.startswith("amq."))
            if not dest_ok:
                continue
            bindings.append({
                "source": b.source, "vhost": v.name, "destination": b.destination.name,
                "destination_type": b.destination.kind, "routing_key": b.routing_key,
                "arguments": jsonable(b.arguments)})
        bindings.sort(key=lambda d: (d["source"], d["destination_type"], d["destination"],
                                     d["routing_key"], repr(sorted(d["arguments"].items()))))
        doc["bindings"].extend(bindings)
    return doc


# ---- validation --------------------------------------------------------------------------


class _Entry:
    """One entry being checked: raises DefinitionsError prefixed with where it is."""

    def __init__(self, section: str, index: int, data: Any) -> None:
        self.section = section
        self.index = index
        self.data = data
        self.where = f"{section}[{index}]"
        if not isinstance(data, dict):
            self.fail(f"must be an object, got {type(data).__name__}")
        label = _label(section, data)
        if label:
            self.where += f" ({label})"

    def fail(self, message: str) -> NoReturn:
        raise DefinitionsError(f"{self.where}: {message}")

    def text(self, key: str, default: str | None = None, required: bool = True,
             empty_ok: bool = False) -> str:
        value = self.data.get(key, default)
        if value is None:
            if required:
                self.fail(f"'{key}' is missing")
            return ""
        if not isinstance(value, str):
            self.fail(f"'{key}' must be a string, got {value!r}")
        if not value and not empty_ok:
            self.fail(f"'{key}' must not be empty")
        return value

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            self.fail(f"'{key}' must be true or false, got {value!r}")
        return value

    def table(self, key: str) -> dict[str, Any]:
        value = self.data.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.fail(f"'{key}' must be an object, got {value!r}")
        return value

    def limits(self, kind: str) -> dict[str, int]:
        """The entry's ``limits`` object, validated for a vhost or user."""
        try:
            return validate_limits(kind, self.table("limits"))
        except LimitsError as exc:
            self.fail(str(exc))

    def regex(self, key: str) -> str:
        pattern = self.text(key, empty_ok=True)
        try:
            re.compile(pattern)
        except re.error as exc:
            self.fail(f"invalid {key} pattern '{pattern}': {exc}")
        return pattern


def _label(section: str, data: dict[str, Any]) -> str:
    def q(key: str) -> str:
        return repr(str(data.get(key))) if key in data else "?"

    if section in ("users", "vhosts", "global_parameters"):
        return f"name {q('name')}"
    if section in ("permissions", "topic_permissions"):
        return f"user {q('user')} in vhost {q('vhost')}"
    if section == "bindings":
        return (f"source {q('source')} to {data.get('destination_type', '?')} "
                f"{q('destination')} in vhost {q('vhost')}")
    if section == "parameters":
        return f"component {q('component')} name {q('name')} in vhost {q('vhost')}"
    return f"name {q('name')} in vhost {q('vhost')}"


@dataclass
class _Plan:
    """Checked entries, ready to apply."""

    users: list[tuple[str, str, list[str], dict[str, Any]]] = field(default_factory=list)
    vhosts: list[tuple[str, str | None, list[str] | None, dict[str, Any]]] = field(
        default_factory=list)
    permissions: list[tuple[str, str, str, str, str]] = field(default_factory=list)
    topic_permissions: list[tuple[str, str, str, str, str]] = field(default_factory=list)
    parameters: list[dict[str, Any]] = field(default_factory=list)
    global_parameters: list[dict[str, Any]] = field(default_factory=list)
    policies: list[tuple[str, Policy]] = field(default_factory=list)
    operator_policies: list[tuple[str, Policy]] = field(default_factory=list)
    vhost_limits: list[tuple[str, dict[str, int]]] = field(default_factory=list)
    queues: list[tuple[str, str, bool, bool, dict[str, Any]]] = field(default_factory=list)
    exchanges: list[tuple[str, str, str, bool, bool, bool, dict[str, Any]]] = field(
        default_factory=list)
    bindings: list[tuple[str, str, Destination, str, dict[str, Any]]] = field(
        default_factory=list)


def _section(data: dict[str, Any], name: str) -> list[Any]:
    value = data.get(name)
    if value is None:
        return []
    if not isinstance(value, list):
        raise DefinitionsError(f"'{name}' must be a list, got {type(value).__name__}")
    return value


def _plan(broker: Broker, data: Any) -> _Plan:
    if not isinstance(data, dict):
        raise DefinitionsError("definitions must be a JSON object")
    plan = _Plan()
    vhost_names = set(broker.vhosts)
    for i, raw in enumerate(_section(data, "vhosts")):
        e = _Entry("vhosts", i, raw)
        name = e.text("name")
        meta = e.table("metadata")
        description = raw.get("description", meta.get("description"))
        if description is not None and not isinstance(description, str):
            e.fail(f"'description' must be a string, got {description!r}")
        tags_raw = raw.get("tags", meta.get("tags"))
        try:
            tags = parse_tags(tags_raw) if tags_raw is not None else None
        except ValueError as exc:
            e.fail(str(exc))
        plan.vhosts.append((name, description, tags, e.limits("vhost")))
        vhost_names.add(name)

    user_names = set(broker.users.users)
    for i, raw in enumerate(_section(data, "users")):
        e = _Entry("users", i, raw)
        name = e.text("name")
        algorithm = raw.get("hashing_algorithm", HASHING_ALGORITHM)
        if algorithm != HASHING_ALGORITHM:
            e.fail(f"unsupported hashing_algorithm {algorithm!r} (only "
                   f"{HASHING_ALGORITHM})")
        password_hash = e.text("password_hash", required=False, empty_ok=True)
        password = raw.get("password")
        if password is not None and not isinstance(password, str):
            e.fail(f"'password' must be a string, got {password!r}")
        if password_hash and not _valid_hash(password_hash):
            e.fail("'password_hash' is not a base64 salted SHA-256 hash")
        try:
            tags = parse_tags(raw.get("tags"))
        except ValueError as exc:
            e.fail(str(exc))
        if password is not None and not password_hash:
            password_hash = hash_password(password)
        plan.users.append((name, password_hash, tags, e.limits("user")))
        user_names.add(name)

    for section, target in (("permissions", plan.permissions),
                            ("topic_permissions", plan.topic_permissions)):
        for i, raw in enumerate(_section(data, section)):
            e = _Entry(section, i, raw)
            user, vh = e.text("user"), e.text("vhost")
            if user not in user_names:
                e.fail(f"no user '{user}'")
            if vh not in vhost_names:
                e.fail(f"no vhost '{vh}'")
            if section == "permissions":
                target.append((user, vh, e.regex("configure"), e.regex("write"),
                               e.regex("read")))
            else:
                target.append((user, vh, e.text("exchange", empty_ok=True), e.regex("write"),
                               e.regex("read")))

    for i, raw in enumerate(_section(data, "parameters")):
        e = _Entry("parameters", i, raw)
        component = e.text("component")
        name = e.text("name")
        if e.text("vhost") not in vhost_names:
            e.fail(f"no vhost '{raw['vhost']}'")
        if component == OPERATOR_POLICY:
            plan.operator_policies.append((raw["vhost"], _policy(
                _Entry("parameters", i, {"name": name, **e.table("value")}),
                f"{raw['vhost']}/{OPERATOR_POLICY}/{name}", operator=True)))
        elif component == VHOST_LIMITS:
            plan.vhost_limits.append((raw["vhost"], _Entry(
                "parameters", i, {"limits": e.table("value")}).limits("vhost")))
        else:
            plan.parameters.append(dict(raw))
    for i, raw in enumerate(_section(data, "global_parameters")):
        e = _Entry("global_parameters", i, raw)
        e.text("name")
        plan.global_parameters.append(dict(raw))

    for i, raw in enumerate(_section(data, "policies")):
        e = _Entry("policies", i, raw)
        name, vh = e.text("name"), e.text("vhost")
        if vh not in vhost_names:
            e.fail(f"no vhost '{vh}'")
        plan.policies.append((vh, _policy(e, f"{vh}/{name}")))

    # exchanges by (vhost, name) -> type, existing and declared, for binding checks
    exchange_types: dict[tuple[str, str], str] = {
        (v.name, x.name): x.type_name for v in broker.vhosts.values()
        for x in v.exchanges.values()}
    # and their arguments: the types configured by them (x-delayed-message, deduplication)
    exchange_args: dict[tuple[str, str], dict[str, Any]] = {
        (v.name, x.name): x.arguments for v in broker.vhosts.values()
        for x in v.exchanges.values()}
    for name, *_ in plan.vhosts:
        if name not in broker.vhosts:
            exchange_types.update({(name, x): t for x, t in DEFAULT_EXCHANGES.items()})
    for i, raw in enumerate(_section(data, "exchanges")):
        e = _Entry("exchanges", i, raw)
        name, vh = e.text("name"), e.text("vhost")
        if vh not in vhost_names:
            e.fail(f"no vhost '{vh}'")
        type_name = e.text("type")
        if type_name not in EXCHANGE_TYPES:
            e.fail(f"unknown exchange type '{type_name}'")
        durable, auto_delete = e.flag("durable", True), e.flag("auto_delete")
        internal, arguments = e.flag("internal"), e.table("arguments")
        ae = arguments.get("alternate-exchange")
        if ae is not None and not isinstance(ae, str):
            e.fail(f"'alternate-exchange' must be a string, got {ae!r}")
        if name.startswith("amq."):
            log.warning("definitions: skipping exchange '%s' in vhost '%s' (reserved name)",
                        name, vh)
            continue
        try:  # the type's own argument checks (x-delayed-type, x-cache-size)
            make_exchange_type(type_name, arguments)
        except AMQPError as exc:
            e.fail(exc.explanation)
        exchange_types.setdefault((vh, name), type_name)
        exchange_args.setdefault((vh, name), arguments)
        plan.exchanges.append((vh, name, type_name, durable, auto_delete, internal, arguments))

    queue_names = {(v.name, q) for v in broker.vhosts.values() for q in v.queues}
    exclusive = {(v.name, q.name) for v in broker.vhosts.values() for q in v.queues.values()
                 if q.exclusive}
    for i, raw in enumerate(_section(data, "queues")):
        e = _Entry("queues", i, raw)
        name, vh = e.text("name"), e.text("vhost")
        if vh not in vhost_names:
            e.fail(f"no vhost '{vh}'")
        durable, auto_delete = e.flag("durable", True), e.flag("auto_delete")
        arguments = e.table("arguments")  # x-queue-type is kept, as Queue.Declare keeps it
        try:
            validate_queue_arguments(arguments, f"queue '{name}' in vhost '{vh}'")
        except AMQPError as exc:
            e.fail(exc.explanation)
        queue_names.add((vh, name))
        plan.queues.append((vh, name, durable, auto_delete, arguments))

    for i, raw in enumerate(_section(data, "bindings")):
        e = _Entry("bindings", i, raw)
        vh = e.text("vhost")
        if vh not in vhost_names:
            e.fail(f"no vhost '{vh}'")
        source = e.text("source")
        dest_name = e.text("destination")
        kind = e.text("destination_type")
        if kind not in ("queue", "exchange"):
            e.fail(f"'destination_type' must be 'queue' or 'exchange', got {kind!r}")
        routing_key = e.text("routing_key", default="", empty_ok=True)
        arguments = e.table("arguments")
        source_type = exchange_types.get((vh, source))
        if source_type is None:
            e.fail(f"no exchange '{source}' in vhost '{vh}'")
        found = ((vh, dest_name) in queue_names if kind == "queue"
                 else (vh, dest_name) in exchange_types and dest_name != "")
        if not found:
            e.fail(f"no {kind} '{dest_name}' in vhost '{vh}'")
        if kind == "queue" and (vh, dest_name) in exclusive:
            e.fail(f"queue '{dest_name}' in vhost '{vh}' is exclusive to a connection")
        destination = Destination("queue" if kind == "queue" else "exchange", dest_name)
        try:
            make_exchange_type(str(source_type), exchange_args.get((vh, source))).validate_binding(
                Binding(source, destination, routing_key, dict(arguments)))
        except AMQPError as exc:
            e.fail(exc.explanation)
        plan.bindings.append((vh, source, destination, routing_key, arguments))
    return plan


def _valid_hash(password_hash: str) -> bool:
    try:
        return len(base64.b64decode(password_hash, validate=True)) == 36
    except ValueError:
        return False


# ---- import ------------------------------------------------------------------------------


def import_definitions(broker: Broker, data: Any) -> None:
    """Import a RabbitMQ definitions document into ``broker``, all or nothing.

    Raises:
        DefinitionsError: an entry is invalid; nothing was changed.
    """
    plan = _plan(broker, data)
    try:
        _apply(broker, plan)
    except (AMQPError, ValueError) as exc:  # every entry was checked, so not expected
        raise DefinitionsError(f"import failed part-way: {exc}") from exc
    mark = getattr(broker, "mark_changed", None)
    if callable(mark):
        mark()


def _apply(broker: Broker, plan: _Plan) -> None:
    x = broker.extras
    for name, description, tags, limits in plan.vhosts:
        broker.add_vhost(name)
        if description is not None or tags is not None:
            x.set_metadata(name, description, tags)
        if limits:
            broker.limits.set("vhost", name, limits)
    for name, password_hash, tags, limits in plan.users:
        broker.users.add(name, None, tags, password_hash=password_hash)
        if limits:
            broker.limits.set("user", name, limits)
    for vh, limits in plan.vhost_limits:  # the parameter is the vhost's whole set
        broker.limits.clear("vhost", vh)
        broker.limits.set("vhost", vh, limits)
    for user, vh, configure, write, read in plan.permissions:
        broker.permissions.set(user, vh, configure, write, read)
    for user, vh, exchange, write, read in plan.topic_permissions:
        broker.permissions.set_topic(user, vh, exchange, write, read)
    for vh, policy in plan.policies:
        broker.vhosts[vh].set_policy(policy.name, policy.pattern, policy.definition,
                                     policy.priority, policy.apply_to)
    for vh, policy in plan.operator_policies:
        broker.vhosts[vh].set_operator_policy(policy.name, policy.pattern, policy.definition,
                                              policy.priority, policy.apply_to)
    for vh, name, type_name, durable, auto_delete, internal, args in plan.exchanges:
        _declare_exchange(broker, vh, name, type_name, durable, auto_delete, internal, args)
    for vh, name, durable, auto_delete, args in plan.queues:
        _declare_queue(broker, vh, name, durable, auto_delete, args)
    for vh, source, destination, routing_key, args in plan.bindings:
        broker.vhosts[vh].bind(destination, source, routing_key, dict(args))
    _merge_parameters(x.parameters, plan.parameters, ("vhost", "component", "name"))
    _merge_parameters(x.global_parameters, plan.global_parameters, ("name",))


def _policy(e: _Entry, where: str, operator: bool = False) -> Policy:
    """A policy entry, validated; a bad definition fails with RabbitMQ's HTML-escaped reason
    and `` (<where>)`` (``rabbit_definitions:add_policy/3``, ``add_parameter/3``)."""
    name = e.text("name")
    pattern = e.text("pattern", empty_ok=True)
    priority = e.data.get("priority", 0)
    if not isinstance(priority, int) or isinstance(priority, bool):
        e.fail(f"'priority' must be an integer, got {priority!r}")
    apply_to = e.text("apply-to", default="queues" if operator else "all")
    try:
        policy = Policy(name, pattern, dict(e.table("definition")), priority, apply_to)
        (validate_operator_policy if operator else validate_policy)(policy)
    except PolicyError as exc:
        raise DefinitionsError(
            escape_html_tags(f"Validation failed\n\n{exc}\n ({where})")) from None
    return policy


def _declare_exchange(broker: Broker, vhost: str, name: str, type_name: str, durable: bool,
                      auto_delete: bool, internal: bool, arguments: dict[str, Any]) -> None:
    v = broker.vhosts[vhost]
    if name not in v.exchanges:  # RabbitMQ's import leaves an existing exchange as it is
        v.declare_exchange(name, type_name, durable=durable, auto_delete=auto_delete,
                           internal=internal, arguments=dict(arguments))


def _declare_queue(broker: Broker, vhost: str, name: str, durable: bool, auto_delete: bool,
                   arguments: dict[str, Any]) -> None:
    v = broker.vhosts[vhost]
    if name not in v.queues:
        v.declare_queue(name, durable=durable, auto_delete=auto_delete,
                        arguments=dict(arguments), server_named=True)


def _merge_parameters(current: list[dict[str, Any]], new: list[dict[str, Any]],
                      key: tuple[str, ...]) -> None:
    for param in new:
        ident = tuple(param.get(k) for k in key)
        current[:] = [p for p in current if tuple(p.get(k) for k in key) != ident]
        current.append(param)
