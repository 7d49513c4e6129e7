"""Federation parameters and the upstream-side exchange, without brokers: validation texts
as RabbitMQ 3.10.8 answers them (checked with curl: ``PUT /api/parameters/federation-upstream``
and ``federation-upstream-set``), upstream sets with overrides and ``all``, a missing upstream,
``x-federation-upstream``'s max-hops and cycle checks.
"""

from __future__ import annotations

import pytest

from amqp_common.errors import PreconditionFailed
from exchanges.binding import Binding, Destination
from exchanges.federation_upstream import FederationUpstreamExchange, should_forward
from federation.ends import upstream_queue_name
from federation.params import UPSTREAM, UPSTREAM_SET, resolve, upstream_of, validate


def test_upstream_validation_texts_in_rabbitmq_order() -> None:
    assert validate(UPSTREAM, "bad", {"uri": "foo://x", "max-hops": "a", "bogus": 1}) == [
        'Unrecognised terms [{<<"bogus">>,1}] in bad',
        'max-hops should be a number, actually was <<"a">>',
        '"foo://x" not a valid URI: {{unexpected_uri_scheme,"foo"},"foo://x"}']
    assert validate(UPSTREAM, "bad", {"max-hops": 1}) == ['Key "uri" not found in bad']
    assert validate(UPSTREAM, "bad", {"uri": ["amqp://x", 3], "ack-mode": "x",
                                      "trust-user-id": "y", "exchange": 5}) == [
        'ack-mode should be one of [<<"no-ack">>,<<"on-publish">>,<<"on-confirm">>], '
        'actually was <<"x">>',
        'trust-user-id should be boolean, actually was <<"y">>',
        "exchange should be binary, actually was 5",
        "uri should be list, actually was 3"]
    assert validate(UPSTREAM, "bad", {"uri": "amqp://", "resource-cleanup-mode": "x",
                                      "channel-use-mode": "x"}) == [
        'channel-use-mode should be one of [<<"multiple">>,<<"single">>], actually was <<"x">>',
        'resource-cleanup-mode should be one of [<<"default">>,<<"never">>], actually was '
        '<<"x">>']
    assert validate(UPSTREAM_SET, "s1", [{"upstream": "u1", "max-hops": "x", "bogus": 2},
                                         {"upstream": 5}]) == [
        'Unrecognised terms [{<<"bogus">>,2}] in s1',
        'max-hops should be a number, actually was <<"x">>',
        "upstream should be binary, actually was 5"]
    assert validate(UPSTREAM_SET, "s1", [{"max-hops": 2}]) == ['Key "upstream" not found in s1']


def test_ack_mode_text_is_rabbitmqs() -> None:
    # RabbitMQ 3.10.8 lists the ack modes in this order
    assert validate(UPSTREAM, "u", {"uri": "amqp://", "ack-mode": "x"}) == [
        'ack-mode should be one of [<<"no-ack">>,<<"on-publish">>,<<"on-confirm">>], '
        'actually was <<"x">>']


def test_sets_all_overrides_and_missing_upstreams() -> None:
    ups = {"a": {"uri": "amqp://h1", "max-hops": 2}, "b": {"uri": ["amqp://h2", "amqp://h3"]}}
    sets = {"s": [{"upstream": "a", "max-hops": 3, "exchange": "other"}, {"upstream": "zz"}]}
    found, problems = resolve("/", {"federation-upstream-set": "s"}, ups, sets)
    assert [(u.name, u.max_hops, u.exchange) for u in found] == [("a", 3, "other")]
    assert problems == ["no upstream 'zz' in vhost '/'"]
    found, problems = resolve("/", {"federation-upstream-set": "all"}, ups, sets)
    assert [u.name for u in found] == ["a", "b"] and not problems
    assert found[1].uris == ("amqp://h2", "amqp://h3")
    assert resolve("/", {"federation-upstream": "nope"}, ups, sets) == (
        [], ["no upstream 'nope' in vhost '/'"])
    assert resolve("/", {"federation-upstream-set": "nope"}, ups, sets)[1] == [
        "no upstream set 'nope' in vhost '/'"]
    assert [u.name for u in resolve("/", {"federation-upstream-pattern": "^b"}, ups,
                                    sets)[0]] == ["b"]
    up = upstream_of("/", "a", {"uri": "amqp://h", "prefetch-count": 10, "expires": 60000,
                                "reconnect-delay": 2, "ack-mode": "on-publish"})
    assert (up.prefetch, up.expires, up.reconnect_delay, up.ack_mode, up.max_hops) == (
        10, 60000, 2.0, "on-publish", 1)


def test_upstream_queue_names_are_rabbitmqs() -> None:
    assert upstream_queue_name("x", "/", "rabbit@vm", "/", "x") == "federation: x -> rabbit@vm"
    assert upstream_queue_name("ux", "/", "rabbit@vm", "/", "fedx") == (
        "federation: ux -> rabbit@vm:fedx")
    assert upstream_queue_name("x", "/", "n", "v", "x") == "federation: x -> n:v:x"


def test_upstream_exchange_drops_by_hops_and_cycle() -> None:
    x = FederationUpstreamExchange({"x-max-hops": 2, "x-downstream-name": "B",
                                    "x-downstream-vhost": "/"})
    q = Destination("queue", "federation: x -> B")
    x.add_binding(Binding("f", q))
    assert x.route("k", None) == {q}
    assert x.route("k", {"x-received-from": [{"cluster-name": "A", "vhost": "/"}]}) == {q}
    assert x.route("k", {"x-received-from": [{"cluster-name": "B", "vhost": "/"}]}) == set()
    assert x.route("k", {"x-received-from": [{"cluster-name": b"B", "vhost": b"v2"}]}) == {q}
    two = [{"cluster-name": "A", "vhost": "/"}, {"cluster-name": "C", "vhost": "/"}]
    assert x.route("k", {"x-received-from": two}) == set()
    assert should_forward({"x-received-from": "not a list"}, 1, "B", "/")
    with pytest.raises(PreconditionFailed, match="Argument x-max-hops missing"):
        FederationUpstreamExchange({})
