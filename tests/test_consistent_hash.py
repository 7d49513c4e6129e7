"""The consistent-hash exchange's routing table: stable choice per key, shares in proportion
to the weights, minimal movement when a binding comes or goes, and RabbitMQ 3.10.8's texts
for bad weights and arguments (checked with pika against the plugin).
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from amqp_common.errors import PreconditionFailed
from exchanges import make_exchange_type
from exchanges.binding import Binding, Destination
from exchanges.consistent_hash import ConsistentHashExchange


def bind(x: ConsistentHashExchange, queue: str, weight: str = "1") -> Binding:
    b = Binding("chx", Destination("queue", queue), weight)
    x.add_binding(b)
    return b


def owner(x: ConsistentHashExchange, key: str) -> str:
    [dest] = x.route(key, None)
    return dest.name


def keys(n: int, seed: int = 7) -> list[str]:
    rnd = random.Random(seed)
    return [f"{rnd.getrandbits(64):x}" for _ in range(n)]


@pytest.mark.parametrize("weights", [(1, 1, 1, 1), (1, 2, 3), (5, 1), (1,) * 10])
def test_shares_follow_the_weights_within_5_percent(weights: tuple[int, ...]) -> None:
    x = ConsistentHashExchange()
    for i, w in enumerate(weights):
        bind(x, f"q{i}", str(w))
    counts = Counter(owner(x, k) for k in keys(100_000))
    total = sum(weights)
    for i, w in enumerate(weights):
        expected = 100_000 * w / total
        assert abs(counts[f"q{i}"] - expected) <= 0.05 * expected, (i, counts)


def test_same_key_same_queue_and_adding_one_moves_about_its_share() -> None:
    x = ConsistentHashExchange()
    for i in range(4):
        bind(x, f"q{i}")
    sample = keys(20_000)
    before = {k: owner(x, k) for k in sample}
    assert before == {k: owner(x, k) for k in sample}  # stable while bindings do not change
    bind(x, "q4")
    after = {k: owner(x, k) for k in sample}
    moved = [k for k in sample if before[k] != after[k]]
    assert all(after[k] == "q4" for k in moved)  # keys only move to the newcomer
    assert abs(len(moved) / len(sample) - 1 / 5) < 0.02
    x.remove_binding(Binding("chx", Destination("queue", "q4"), "1"))
    assert {k: owner(x, k) for k in sample} == before  # and come back when it goes


def test_a_fresh_table_with_the_same_bindings_routes_the_same() -> None:
    """The choice depends on the bindings, not on process state (hash seeds): a restarted
    broker sends each key where it went before."""
    a, b = ConsistentHashExchange(), ConsistentHashExchange()
    for name in ("orders-1", "orders-2", "orders-3"):
        bind(a, name)
    for name in ("orders-3", "orders-1", "orders-2"):  # another order of declaration
        bind(b, name)
    sample = keys(2_000, seed=3)
    assert [owner(a, k) for k in sample] == [owner(b, k) for k in sample]


def test_no_binding_routes_nowhere() -> None:
    x = ConsistentHashExchange()
    assert x.route("k", None) == set()
    b = bind(x, "q")
    x.remove_binding(b)
    assert x.route("k", None) == set()


@pytest.mark.parametrize(("weight", "text"), [
    ("abc", 'PRECONDITION_FAILED - The binding key must be an integer: <<"abc">>'),
    ("", 'PRECONDITION_FAILED - The binding key must be an integer: <<"">>'),
    ("0", "PRECONDITION_FAILED - The binding key must be greater than 0"),
    ("-1", "PRECONDITION_FAILED - The binding key must be greater than 0"),
])
def test_bad_weights_are_refused_with_rabbitmqs_text(weight: str, text: str) -> None:
    x = make_exchange_type("x-consistent-hash")
    with pytest.raises(PreconditionFailed) as err:
        x.validate_binding(Binding("chx", Destination("queue", "q"), weight))
    assert err.value.reply_text == text


@pytest.mark.parametrize(("arguments", "text"), [
    ({"hash-header": "h", "hash-property": "message_id"},
     "PRECONDITION_FAILED - hash-header and hash-property are mutually exclusive"),
    ({"hash-property": "nope"}, "PRECONDITION_FAILED - Unsupported property: nope"),
    ({"hash-header": 5}, "PRECONDITION_FAILED - hash-header must be a string, got 5"),
])
def test_bad_arguments_are_refused(arguments: dict, text: str) -> None:
    with pytest.raises(PreconditionFailed) as err:
        make_exchange_type("x-consistent-hash", arguments)
    assert err.value.reply_text == text


class FakeMessage:
    def __init__(self, headers: dict | None = None, **properties: object) -> None:
        self.headers = headers
        self.properties = type("Props", (), properties)()


def test_hash_header_and_hash_property_choose_the_input() -> None:
    by_header = ConsistentHashExchange({"hash-header": "tenant"})
    by_id = ConsistentHashExchange({"hash-property": "message_id"})
    for x in (by_header, by_id):
        for i in range(8):
            bind(x, f"q{i}")
    # the routing key does not matter, the header (or the message id) does
    for tenant in ("acme", "globex", "initech"):
        seen = {next(iter(by_header.route_message(rk, FakeMessage({"tenant": tenant}))))
                for rk in ("a", "b", "c", "d")}
        assert len(seen) == 1
        seen = {next(iter(by_id.route_message(rk, FakeMessage(message_id=tenant))))
                for rk in ("a", "b", "c", "d")}
        assert len(seen) == 1
    spread = {next(iter(by_id.route_message("rk", FakeMessage(message_id=k)))) for k in keys(200)}
    assert len(spread) == 8
    # absent: hashed as empty, still routed (as the plugin)
    assert by_header.route_message("rk", FakeMessage(None)) != set()
    assert by_id.route_message("rk", FakeMessage()) != set()
