"""Definitions export/import (``vhosts.definitions``) in RabbitMQ's JSON format.

The fixture ``tests/data/rabbitmq-3.10-definitions.json`` is a real ``GET /api/definitions``
from RabbitMQ 3.10.8 (real sha256 password hashes: user ``narrow`` has password ``narrowpw``;
vhost ``fixture-vh`` holds durable/transient queues and exchanges, e2e, headers and
alternate-exchange setups, policies and topic permissions).

Source: https://www.rabbitmq.com/docs/definitions.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from broker.broker import Broker
from broker.config import BrokerConfig
from exchanges.binding import Destination
from vhosts.definitions import (
    DefinitionsError,
    export_definitions,
    import_definitions,
)

FIXTURE = Path(__file__).parent / "data" / "rabbitmq-3.10-definitions.json"


@pytest.fixture
def rabbit_doc() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(FIXTURE.read_text())
    return data


def fresh() -> Broker:
    return Broker(BrokerConfig())


def test_rabbitmq_export_imports_and_users_log_in(rabbit_doc: dict[str, Any]) -> None:
    broker = fresh()
    import_definitions(broker, rabbit_doc)
    assert broker.users.authenticate("narrow", "narrowpw", "127.0.0.1") is not None
    assert broker.users.authenticate("narrow", "wrong", "127.0.0.1") is None
    assert broker.users.users["fx-admin"].tags == ["administrator", "management"]
    vh = broker.vhosts["fixture-vh"]
    assert set(vh.queues) == {"app.orders", "app.ttl.retry", "app.unrouted", "app.transient"}
    assert vh.queues["app.orders"].arguments["x-max-length"] == 10000
    assert vh.queues["app.ttl.retry"].settings.policy == "app-ttl"
    assert vh.exchanges["app.hdr"].internal and vh.exchanges["app.hdr"].type_name == "headers"
    assert vh.exchanges["app.in"].alternate_exchange == "app.unrouted"
    keys = {(b.source, b.destination, b.routing_key) for b in vh.bindings()}
    assert ("app.in", Destination("exchange", "app.events"), "orders.new") in keys
    assert ("app.events", Destination("queue", "app.orders"), "orders.#") in keys
    perm = broker.permissions.get("fx-app", "fixture-vh")
    assert perm is not None and perm.configure == "^app\\."
    assert broker.permissions.topic_permissions[("fx-app", "fixture-vh")]["app.events"].write \
        == "^orders\\."
    assert broker.extras.global_parameters[0]["name"] == "internal_cluster_id"


def test_imported_topology_routes(rabbit_doc: dict[str, Any]) -> None:
    from queue_store.message import Message

    broker = fresh()
    import_definitions(broker, rabbit_doc)
    vh = broker.vhosts["fixture-vh"]
    msg = Message.create("app.in", "orders.new", b"\x00\x00", b"x")
    # direct binding "" does not match "orders.new"; the e2e binding to app.events does
    assert [q.name for q in vh.route(vh.exchanges["app.in"], "orders.new", msg)] == \
        ["app.orders"]
    # nothing matches: the alternate exchange (from the arguments) takes it
    other = Message.create("app.in", "zzz", b"\x00\x00", b"x")
    assert [q.name for q in vh.route(vh.exchanges["app.in"], "zzz", other)] == \
        ["app.unrouted"]


@pytest.mark.parametrize("include_transient", [True, False])
def test_round_trip_export_import_export(rabbit_doc: dict[str, Any],
                                         include_transient: bool) -> None:
    first = fresh()
    import_definitions(first, rabbit_doc)
    exported = export_definitions(first, include_transient=include_transient)
    second = fresh()
    import_definitions(second, copy.deepcopy(exported))
    assert export_definitions(second, include_transient=include_transient) == exported
    json.dumps(exported)  # plain JSON data


def test_durable_view_leaves_out_transient_objects(rabbit_doc: dict[str, Any]) -> None:
    broker = fresh()
    import_definitions(broker, rabbit_doc)
    durable = export_definitions(broker)
    names = {q["name"] for q in durable["queues"]}
    assert "app.orders" in names and "app.transient" not in names and "bench.q" not in names
    assert "app.tmp" not in {x["name"] for x in durable["exchanges"]}
    assert all(b["source"] != "app.tmp" for b in durable["bindings"])
    everything = export_definitions(broker, include_transient=True)
    assert {"app.transient", "bench.q"} <= {q["name"] for q in everything["queues"]}


def test_export_shape_and_exclusions() -> None:
    broker = fresh()
    vh = broker.vhosts["/"]
    owner = object()
    vh.declare_queue("excl", exclusive=True, connection=owner)
    vh.declare_queue("dq", durable=True, arguments={"x-message-ttl": 5})
    vh.declare_exchange("dx", "fanout", durable=True)
    vh.bind(Destination("queue", "dq"), "dx", "k")
    vh.bind(Destination("queue", "excl"), "dx", "k")
    doc = export_definitions(broker, include_transient=True)
    assert list(doc) == ["rabbit_version", "rabbitmq_version", "product_name",
                         "product_version", "users", "vhosts", "permissions",
                         "topic_permissions", "parameters", "global_parameters", "policies",
                         "queues", "exchanges", "bindings"]
    assert doc["queues"] == [{"name": "dq", "vhost": "/", "durable": True,
                              "auto_delete": False, "arguments": {"x-message-ttl": 5}}]
    assert [x["name"] for x in doc["exchanges"]] == ["dx"]  # no "" nor amq.*
    assert doc["bindings"] == [{"source": "dx", "vhost": "/", "destination": "dq",
                                "destination_type": "queue", "routing_key": "k",
                                "arguments": {}}]
    assert doc["users"][0]["hashing_algorithm"] == "rabbit_password_hashing_sha256"
    assert doc["vhosts"] == [{"name": "/", "limits": {},
                              "metadata": {"description": "", "tags": []}}]


def test_tags_as_comma_separated_string_and_vhost_metadata() -> None:
    broker = fresh()
    import_definitions(broker, {
        "users": [{"name": "ops", "password_hash": "", "tags": "administrator, monitoring"}],
        "vhosts": [{"name": "v", "description": "d", "tags": ["a"]},
                   {"name": "w", "metadata": {"description": "m", "tags": ["t"]}}]})
    assert broker.users.users["ops"].tags == ["administrator", "monitoring"]
    vhosts = {v["name"]: v for v in export_definitions(broker)["vhosts"]}
    assert vhosts["v"]["metadata"] == {"description": "d", "tags": ["a"]}
    assert vhosts["w"]["metadata"] == {"description": "m", "tags": ["t"]}


def test_binding_may_refer_to_objects_declared_in_the_same_file() -> None:
    broker = fresh()
    import_definitions(broker, {
        "vhosts": [{"name": "new"}],
        "queues": [{"name": "q", "vhost": "new", "durable": True, "auto_delete": False,
                    "arguments": {}}],
        "bindings": [{"source": "amq.topic", "vhost": "new", "destination": "q",
                      "destination_type": "queue", "routing_key": "#", "arguments": {}}]})
    assert len(broker.vhosts["new"].bindings()) == 1


def test_existing_objects_are_kept_and_amq_exchanges_skipped() -> None:
    broker = fresh()
    vh = broker.vhosts["/"]
    vh.declare_exchange("x", "direct")
    import_definitions(broker, {"exchanges": [
        {"name": "x", "vhost": "/", "type": "fanout", "durable": True},
        {"name": "amq.custom", "vhost": "/", "type": "topic", "durable": True}]})
    assert vh.exchanges["x"].type_name == "direct"
    assert "amq.custom" not in vh.exchanges


BAD_DOCS = [
    ({"exchanges": [{"name": "ok", "vhost": "/", "type": "direct"},
                    {"name": "x", "vhost": "/", "type": "nope"}]},
     "exchanges[1] (name 'x' in vhost '/'): unknown exchange type 'nope'"),
    ({"permissions": [{"user": "guest", "vhost": "/", "configure": "(", "write": ".*",
                       "read": ".*"}]},
     "permissions[0] (user 'guest' in vhost '/'): invalid configure pattern '('"),
    ({"permissions": [{"user": "ghost", "vhost": "/", "configure": "", "write": "",
                       "read": ""}]},
     "permissions[0] (user 'ghost' in vhost '/'): no user 'ghost'"),
    ({"policies": [{"name": "p", "vhost": "/", "pattern": "^q", "apply-to": "queues",
                    "definition": {"max-length": -1}, "priority": 0}]},
     "Validation failed\n\n'max-length' must be a non-negative integer, got -1\n (//p)"),
    ({"policies": [{"name": "p", "vhost": "/", "pattern": "([", "definition": {"a": 1}}]},
     "Validation failed\n\ninvalid pattern '(['"),
    ({"bindings": [{"source": "amq.direct", "vhost": "/", "destination": "missing",
                    "destination_type": "queue", "routing_key": "", "arguments": {}}]},
     "bindings[0] (source 'amq.direct' to queue 'missing' in vhost '/'): no queue 'missing'"),
    ({"bindings": [{"source": "nox", "vhost": "/", "destination": "amq.topic",
                    "destination_type": "exchange", "routing_key": "", "arguments": {}}]},
     "no exchange 'nox' in vhost '/'"),
    ({"queues": [{"name": "q", "vhost": "/", "durable": "yes"}]},
     "queues[0] (name 'q' in vhost '/'): 'durable' must be true or false, got 'yes'"),
    ({"queues": [{"name": "q", "vhost": "nowhere", "durable": True}]},
     "queues[0] (name 'q' in vhost 'nowhere'): no vhost 'nowhere'"),
    ({"queues": [{"name": "q", "vhost": "/", "arguments": {"x-max-length": "ten"}}]},
     "invalid arg 'x-max-length' for queue 'q' in vhost '/'"),
    ({"users": [{"name": "u", "password_hash": "not-base64!!", "tags": []}]},
     "users[0] (name 'u'): 'password_hash' is not a base64 salted SHA-256 hash"),
    ({"users": [{"name": "u", "password_hash": "", "tags": 5}]}, "users[0] (name 'u'): tags"),
    ({"queues": {"name": "q"}}, "'queues' must be a list"),
    ({"vhosts": ["v"]}, "vhosts[0]: must be an object, got str"),
    ([], "definitions must be a JSON object"),
]


@pytest.mark.parametrize(("doc", "message"), BAD_DOCS)
def test_bad_documents_change_nothing(doc: Any, message: str) -> None:
    broker = fresh()
    full = copy.deepcopy(doc)
    if isinstance(full, dict):  # a valid entry before the bad one must not be applied either
        full.setdefault("vhosts", [])
        if all(isinstance(v, dict) for v in full["vhosts"]):
            full["vhosts"].append({"name": "should-not-appear"})
    before = export_definitions(broker, include_transient=True)
    with pytest.raises(DefinitionsError) as info:
        import_definitions(broker, full)
    assert message in str(info.value)
    assert export_definitions(broker, include_transient=True) == before
    assert "should-not-appear" not in broker.vhosts


def test_limits_round_trip_and_are_enforced_after_import() -> None:
    broker = Broker(BrokerConfig())
    import_definitions(broker, {
        "vhosts": [{"name": "lim", "limits": {"max-queues": 1, "max-connections": 10}}],
        "users": [{"name": "u", "password": "p", "tags": [],
                   "limits": {"max-channels": 3}}]})
    assert broker.limits.vhost("lim", "max-queues") == 1
    assert broker.limits.user("u", "max-channels") == 3
    doc = export_definitions(broker)
    assert [v["limits"] for v in doc["vhosts"] if v["name"] == "lim"] == [
        {"max-queues": 1, "max-connections": 10}]
    assert [u["limits"] for u in doc["users"] if u["name"] == "u"] == [{"max-channels": 3}]


def test_rabbitmq_310_vhost_limits_parameter_sets_the_limits() -> None:
    """RabbitMQ 3.10.8 exports vhost limits as a ``vhost-limits`` parameter (seen in its
    ``GET /api/definitions``), not in the vhost entry: imported, the limits apply."""
    broker = Broker(BrokerConfig())
    import_definitions(broker, {"vhosts": [{"name": "lim"}], "parameters": [
        {"value": {"max-connections": 100}, "vhost": "lim", "component": "vhost-limits",
         "name": "limits"}]})
    assert broker.limits.vhost("lim", "max-connections") == 100
    assert [v["limits"] for v in export_definitions(broker)["vhosts"] if v["name"] == "lim"
            ] == [{"max-connections": 100}]
    assert export_definitions(broker)["parameters"] == []  # not kept twice
    with pytest.raises(DefinitionsError) as info:
        import_definitions(broker, {"parameters": [
            {"value": {"max-foo": 1}, "vhost": "lim", "component": "vhost-limits",
             "name": "limits"}]})
    assert 'Unrecognised terms [{<<"max-foo">>,1}] in limits' in str(info.value)
    assert broker.limits.vhost("lim", "max-connections") == 100


@pytest.mark.parametrize(("entry", "text"), [
    ({"vhosts": [{"name": "v", "limits": {"max-foo": 1}}]},
     'Unrecognised terms [{<<"max-foo">>,1}] in limits'),
    ({"vhosts": [{"name": "v", "limits": {"max-queues": "x"}}]},
     'max-queues should be a number, actually was <<"x">>'),
    ({"users": [{"name": "u", "password": "p", "limits": {"max-queues": 1}}]},
     'Unrecognised terms [{<<"max-queues">>,1}] in user-limits'),
])
def test_bad_limits_refuse_the_whole_import(entry: dict[str, Any], text: str) -> None:
    broker = Broker(BrokerConfig())
    with pytest.raises(DefinitionsError) as info:
        import_definitions(broker, entry)
    assert text in str(info.value)
    assert "v" not in broker.vhosts and "u" not in broker.users.users  # nothing half-applied


def test_operator_policies_travel_as_runtime_parameters() -> None:
    broker = Broker(BrokerConfig())
    broker.vhosts["/"].set_operator_policy("cap", "^q", {"max-length": 3}, 1, "queues")
    doc = export_definitions(broker)
    assert doc["parameters"] == [{"vhost": "/", "component": "operator_policy", "name": "cap",
                                  "value": {"pattern": "^q", "definition": {"max-length": 3},
                                            "priority": 1, "apply-to": "queues"}}]
    other = Broker(BrokerConfig())
    import_definitions(other, json.loads(json.dumps(doc)))
    q = other.vhosts["/"].declare_queue("q1")
    assert (q.settings.operator_policy, q.settings.max_length) == ("cap", 3)
    assert export_definitions(other)["parameters"] == doc["parameters"]
    with pytest.raises(DefinitionsError) as info:
        import_definitions(Broker(BrokerConfig()), {"parameters": [
            {"vhost": "/", "component": "operator_policy", "name": "x",
             "value": {"pattern": ".*", "definition": {"foo": 1}}}]})
    assert str(info.value) == ("Validation failed\n\n[{&lt;&lt;\"foo\"&gt;&gt;,1}] are not "
                               "recognised policy settings\n (//operator_policy/x)")


def test_policy_with_an_unknown_key_fails_the_import_with_rabbitmqs_reason() -> None:
    """RabbitMQ 3.10.8 answers this document 400 with the HTML-escaped reason below. It
    has by then created the user, vhost and exchange; this import changes nothing."""
    broker = fresh()
    before = export_definitions(broker, include_transient=True)
    with pytest.raises(DefinitionsError) as info:
        import_definitions(broker, {
            "users": [{"name": "u", "password": "p", "tags": ""}],
            "vhosts": [{"name": "v"}],
            "exchanges": [{"name": "x", "vhost": "/", "type": "fanout", "durable": True}],
            "policies": [
                {"vhost": "/", "name": "ok", "pattern": "^ok$", "definition": {"max-length": 3}},
                {"vhost": "/", "name": "p1", "pattern": ".*", "apply-to": "queues",
                 "definition": {"max-lenght": 5, "message-ttl": 10}, "priority": 0}]})
    assert str(info.value) == ("Validation failed\n\n[{&lt;&lt;\"max-lenght\"&gt;&gt;,5}] are "
                               "not recognised policy settings\n (//p1)")
    assert export_definitions(broker, include_transient=True) == before


def test_policies_with_known_rabbitmq_keys_import() -> None:
    """Keys of RabbitMQ 3.13's core (mirroring, streams, leader placement) are accepted."""
    broker = fresh()
    definition = {"ha-mode": "all", "ha-sync-mode": "automatic", "queue-mode": "lazy",
                  "max-age": "1D", "queue-leader-locator": "balanced", "max-length": 2}
    import_definitions(broker, {"policies": [
        {"vhost": "/", "name": "p", "pattern": "^q$", "definition": definition}]})
    assert broker.vhosts["/"].declare_queue("q").settings.max_length == 2


def test_deleting_a_vhost_drops_its_runtime_parameters() -> None:
    broker = Broker(BrokerConfig())
    import_definitions(broker, {"vhosts": [{"name": "gone"}], "parameters": [
        {"vhost": "gone", "component": "federation-upstream", "name": "up",
         "value": {"uri": "amqp://elsewhere"}},
        {"vhost": "/", "component": "federation-upstream", "name": "kept",
         "value": {"uri": "amqp://elsewhere"}}]})
    assert broker.delete_vhost("gone")
    assert [p["name"] for p in export_definitions(broker)["parameters"]] == ["kept"]
    broker.add_vhost("gone")  # a new vhost of that name starts without them
    import_definitions(Broker(BrokerConfig()), export_definitions(broker))
