"""Routing tables of the four exchange types, checked against RabbitMQ's semantics.

Topic cases follow ``split_topic_key``/``trie_match`` in RabbitMQ's
``rabbit_exchange_type_topic.erl`` (3.10) / ``rabbit_db_topic_exchange.erl`` (3.13+); headers
cases follow ``rabbit_exchange_type_headers.erl``.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from amqp_common.errors import CommandInvalid, PreconditionFailed, ReplyCode
from exchanges import EXCHANGE_TYPES, make_exchange_type
from exchanges.binding import Binding, Destination
from exchanges.consistent_hash import ConsistentHashExchange
from exchanges.deduplication import DeduplicationExchange
from exchanges.delayed import DelayedMessageExchange
from exchanges.direct import DirectExchange
from exchanges.fanout import FanoutExchange
from exchanges.federation_upstream import FederationUpstreamExchange
from exchanges.headers import HeadersExchange
from exchanges.topic import TopicExchange, split_topic_key

Q1, Q2, Q3 = Destination("queue", "q1"), Destination("queue", "q2"), Destination("queue", "q3")
X1 = Destination("exchange", "x1")
#: declare arguments a type requires (x-message-deduplication: a cache size)
REQUIRED_ARGS: dict[str, dict[str, Any]] = {"x-message-deduplication": {"x-cache-size": 10},
                                            "x-federation-upstream": {"x-max-hops": 1},
                                            "x-delayed-message": {"x-delayed-type": "direct"}}


def bind(dest: Destination, key: str = "", **args: Any) -> Binding:
    return Binding("src", dest, key, dict(args))


def hbind(dest: Destination, args: dict[str, Any]) -> Binding:
    return Binding("src", dest, "", args)


# -- common behaviour -------------------------------------------------------------------


@pytest.mark.parametrize("type_name", sorted(EXCHANGE_TYPES))
def test_identical_binding_is_added_once(type_name: str) -> None:
    # binding key "1": a key every type takes (x-consistent-hash: a weight)
    x = make_exchange_type(type_name, REQUIRED_ARGS.get(type_name))
    x.add_binding(bind(Q1, "1"))
    x.add_binding(bind(Q1, "1"))  # a distinct but equal Binding object
    assert len(x) == 1
    assert [b.key for b in x.bindings()] == [bind(Q1, "1").key]
    assert x.remove_binding(bind(Q1, "1")) is True
    assert len(x) == 0 and x.bindings() == []
    assert x.route("1", {}) == set()
    assert x.remove_binding(bind(Q1, "1")) is False


@pytest.mark.parametrize("type_name", sorted(EXCHANGE_TYPES))
def test_removing_one_of_two_bindings_keeps_the_destination(type_name: str) -> None:
    x = make_exchange_type(type_name, REQUIRED_ARGS.get(type_name))
    first, second = bind(Q1, "1"), bind(Q1, "1", extra="arg")
    headers = {"extra": "arg"}  # so both bindings match in a headers exchange too
    x.add_binding(first)
    x.add_binding(second)
    assert len(x) == 2
    assert x.route("1", headers) == {Q1}  # two matching bindings, delivered once
    assert x.remove_binding(first)
    assert x.route("1", headers) == {Q1}
    assert x.remove_binding(second)
    assert x.route("1", headers) == set()


def test_needs_headers_only_for_types_reading_headers() -> None:
    """Only the headers exchange gets decoded headers; the types that read one header or a
    property take the whole message and read what they need from its raw properties."""
    assert {n for n, cls in EXCHANGE_TYPES.items() if cls.needs_headers} == {
        "headers", "x-federation-upstream"}  # its x-received-from (max-hops, cycles)
    assert {n for n, cls in EXCHANGE_TYPES.items() if cls.needs_message} == {
        "x-consistent-hash", "x-message-deduplication"}


def test_registry_makes_fresh_tables() -> None:
    assert EXCHANGE_TYPES == {
        "direct": DirectExchange,
        "fanout": FanoutExchange,
        "topic": TopicExchange,
        "headers": HeadersExchange,
        "x-consistent-hash": ConsistentHashExchange,
        "x-message-deduplication": DeduplicationExchange,
        "x-delayed-message": DelayedMessageExchange,
        "x-federation-upstream": FederationUpstreamExchange,
    }
    a, b = make_exchange_type("direct"), make_exchange_type("direct")
    a.add_binding(bind(Q1, "k"))
    assert isinstance(b, DirectExchange) and len(b) == 0


def test_unknown_exchange_type_is_command_invalid() -> None:
    with pytest.raises(CommandInvalid) as info:
        make_exchange_type("x-nope")
    err = info.value
    assert err.code == ReplyCode.COMMAND_INVALID == 503
    assert err.reply_text == "COMMAND_INVALID - unknown exchange type 'x-nope'"
    assert not err.is_soft


# -- direct and fanout ------------------------------------------------------------------


def test_direct_routes_on_exact_key() -> None:
    x = DirectExchange()
    x.add_binding(bind(Q1, "a.b"))
    x.add_binding(bind(Q2, "a.b"))
    x.add_binding(bind(X1, ""))
    x.add_binding(bind(Q3, "other"))
    assert x.route("a.b", None) == {Q1, Q2}
    assert x.route("", None) == {X1}
    assert x.route("A.B", None) == set()
    assert x.route("a.*", None) == set()  # no wildcards in a direct exchange


def test_direct_same_queue_two_keys() -> None:
    x = DirectExchange()
    x.add_binding(bind(Q1, "k1"))
    x.add_binding(bind(Q1, "k2"))
    x.remove_binding(bind(Q1, "k1"))
    assert x.route("k1", None) == set()
    assert x.route("k2", None) == {Q1}


def test_fanout_ignores_key_and_headers() -> None:
    x = FanoutExchange()
    x.add_binding(bind(Q1, "ignored"))
    x.add_binding(bind(Q1, "also-ignored"))
    x.add_binding(bind(X1))
    assert x.route("anything", {"h": 1}) == {Q1, X1}
    x.remove_binding(bind(Q1, "ignored"))
    assert x.route("", None) == {Q1, X1}
    x.remove_binding(bind(Q1, "also-ignored"))
    assert x.route("", None) == {X1}


# -- topic ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "words"),
    [("", []), ("a", ["a"]), ("a.b", ["a", "b"]), ("a..b", ["a", "", "b"]),
     ("a.", ["a", ""]), (".", ["", ""]), (".a", ["", "a"])],
)  # fmt: skip
def test_split_topic_key_like_rabbitmq(key: str, words: list[str]) -> None:
    assert split_topic_key(key) == words


TOPIC_CASES = [
    # '#' matches zero or more words, including the empty routing key
    ("#", "", True), ("#", "a.b.c", True), ("#", ".", True), ("#.#", "", True),
    ("#.#", "a.b", True), ("a.#", "a", True), ("a.#", "a.b.c", True), ("a.#", "a.", True),
    ("a.#", "b", False), ("a.#", "", False), ("#.a", "a", True), ("#.a", "b.c.a", True),
    ("#.a", "a.b", False), ("a.#.b", "a.b", True), ("a.#.b", "a.x.y.b", True),
    ("a.#.b", "a.b.c", False), ("#.b.#", "b", True), ("#.b.#", "a.b.c", True),
    ("#.b.#", "a.c", False), ("a.#.#.b", "a.b", True),
    # '*' is exactly one word; empty words are words
    ("*", "a", True), ("*", "", False), ("*", "a.b", False), ("*", ".", False),
    ("*.*", ".", True), ("a.*.b", "a..b", True), ("a.*", "a.", True), ("a.*", "a", False),
    ("*.#", "", False), ("*.#", "a", True), ("#.*", "", False), ("#.*", "a.b", True),
    ("a.*.#", "a", False), ("a.*.#", "a.b", True), ("*.*.#", "a", False),
    # literal words; the empty binding key is zero words
    ("", "", True), ("", "a", False), ("a", "", False), ("a..b", "a..b", True),
    ("a.b", "a..b", False), ("a.", "a", False), ("a.b", "a.b.", False),
    ("a", "*", False), ("*", "*", True), ("#", "#", True), ("a.b", "a.b", True),
]  # fmt: skip


@pytest.mark.parametrize(("binding_key", "routing_key", "matches"), TOPIC_CASES)
def test_topic_edge_cases(binding_key: str, routing_key: str, matches: bool) -> None:
    x = TopicExchange()
    x.add_binding(bind(Q1, binding_key))
    assert x.route(routing_key, None) == ({Q1} if matches else set())
    assert x.route(routing_key, None) == ({Q1} if matches else set())  # cached answer


def test_topic_destination_once_across_patterns() -> None:
    x = TopicExchange()
    for key in ("a.b", "a.*", "#", "*.b", "a.#"):
        x.add_binding(bind(Q1, key))
    x.add_binding(bind(Q2, "*.c"))
    assert x.route("a.b", None) == {Q1}
    assert x.route("z.c", None) == {Q1, Q2}


def test_topic_many_hashes_do_not_blow_up() -> None:
    x = TopicExchange(cache_size=0)
    x.add_binding(bind(Q1, ".".join(["#"] * 12 + ["z"])))
    x.add_binding(bind(Q2, "#.a.#.a.#.a.#.a.#.a.#.a.#.b"))
    started = time.perf_counter()
    assert x.route(".".join(["a"] * 120), None) == set()
    assert x.route(".".join(["a"] * 120 + ["z"]), None) == {Q1}
    assert x.route(".".join(["a"] * 120 + ["b"]), None) == {Q2}
    assert time.perf_counter() - started < 2.0


def test_topic_cache_follows_binding_changes() -> None:
    x = TopicExchange()
    assert x.route("a.b", None) == set()
    x.add_binding(bind(Q1, "a.*"))
    assert x.route("a.b", None) == {Q1}
    result = x.route("a.b", None)
    result.add(Q3)  # callers may mutate what they get back
    assert x.route("a.b", None) == {Q1}
    x.remove_binding(bind(Q1, "a.*"))
    assert x.route("a.b", None) == set()


def test_topic_cache_is_bounded() -> None:
    x = TopicExchange(cache_size=2)
    x.add_binding(bind(Q1, "#"))
    for key in ("a", "b", "c", "a"):
        assert x.route(key, None) == {Q1}
    assert list(x._cache) == ["c", "a"]


def test_topic_prunes_empty_nodes() -> None:
    x = TopicExchange()
    keys = ["a.b.c", "a.b", "a.#.c", "*.x", ""]
    for key in keys:
        x.add_binding(bind(Q1, key))
    x.add_binding(bind(Q2, "a.b.c"))
    for key in keys:
        assert x.remove_binding(bind(Q1, key))
    assert x.route("a.b.c", None) == {Q2}
    assert list(x._root.children) == ["a"]
    x.remove_binding(bind(Q2, "a.b.c"))
    assert x._root.children == {} and x._root.dests == {}


# -- headers ----------------------------------------------------------------------------


def headers_route(args: dict[str, Any], headers: dict[str, Any] | None) -> bool:
    x = HeadersExchange()
    binding = hbind(Q1, args)
    x.validate_binding(binding)
    x.add_binding(binding)
    return x.route("ignored", headers) == {Q1}


@pytest.mark.parametrize(
    ("args", "headers", "matches"),
    [
        # all (default): every non-x- argument must be present and equal
        ({"a": 1, "b": "x"}, {"a": 1, "b": "x", "c": 3}, True),
        ({"a": 1, "b": "x"}, {"a": 1}, False),
        ({"x-match": "all", "a": 1}, {"a": 2}, False),
        ({"a": 1}, None, False),
        ({}, None, True),  # nothing to compare: all matches every message
        ({"x-match": "all"}, {}, True),
        # any: one equal argument is enough; nothing to compare matches nothing
        ({"x-match": "any", "a": 1, "b": 2}, {"b": 2}, True),
        ({"x-match": "any", "a": 1, "b": 2}, {"b": 3, "c": 2}, False),
        ({"x-match": "any", "a": 1}, None, False),
        ({"x-match": "any"}, {"a": 1}, False),
        # x- arguments are ignored unless *-with-x
        ({"x-match": "all", "x-foo": "bar", "a": 1}, {"a": 1}, True),
        ({"x-match": "any", "x-foo": "bar"}, {"x-foo": "bar"}, False),
        ({"x-match": "all-with-x", "x-foo": "bar", "a": 1}, {"a": 1}, False),
        ({"x-match": "all-with-x", "x-foo": "bar", "a": 1}, {"a": 1, "x-foo": "bar"}, True),
        ({"x-match": "any-with-x", "x-foo": "bar", "a": 1}, {"x-foo": "bar"}, True),
        ({"x-match": "any-with-x"}, {"x-match": "any-with-x"}, False),
        # void binding value: the key only has to be present
        ({"a": None}, {"a": 5}, True),
        ({"a": None}, {"a": None}, True),
        ({"a": None}, {"b": 5}, False),
        ({"x-match": "any", "a": None, "b": 1}, {"a": "anything"}, True),
        # typed comparison: bool is not int, str equals the same bytes
        ({"a": 1}, {"a": True}, False),
        ({"a": True}, {"a": 1}, False),
        ({"a": False}, {"a": 0}, False),
        ({"a": True}, {"a": True}, True),
        ({"t": {"k": True}}, {"t": {"k": 1}}, False),
        ({"t": {"k": [1, "s"]}}, {"t": {"k": [1, b"s"]}}, True),
        ({"a": "x"}, {"a": b"x"}, True),
        ({"a": "x"}, {"a": bytearray(b"x")}, True),
        ({"a": 1}, {"a": 1.0}, True),  # Erlang == in 3.10 (3.13's =:= would say no)
        ({"a": "1"}, {"a": 1}, False),
    ],
)
def test_headers_matching(
    args: dict[str, Any], headers: dict[str, Any] | None, matches: bool
) -> None:
    assert headers_route(args, headers) is matches


def test_headers_destination_once_and_partial_removal() -> None:
    x = HeadersExchange()
    by_a = hbind(Q1, {"a": 1})
    by_b = hbind(Q1, {"x-match": "any", "b": 2})
    for b in (by_a, by_b, hbind(Q2, {"x-match": "any", "a": 1, "z": 0})):
        x.add_binding(b)
    assert x.route("", {"a": 1, "b": 2}) == {Q1, Q2}
    assert x.remove_binding(hbind(Q1, {"a": 1}))
    assert x.route("", {"a": 1, "b": 2}) == {Q1, Q2}
    assert x.route("", {"a": 1}) == {Q2}
    assert len(x) == 2


@pytest.mark.parametrize("kind", ["all", "any", "all-with-x", "any-with-x"])
def test_headers_accepts_valid_x_match(kind: str) -> None:
    HeadersExchange().validate_binding(hbind(Q1, {"x-match": kind}))
    HeadersExchange().validate_binding(hbind(Q1, {"a": 1}))


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("foo", 'Invalid x-match field value <<"foo">>; '
                "expected all, any, all-with-x, or any-with-x"),
        ("ALL", 'Invalid x-match field value <<"ALL">>; '
                "expected all, any, all-with-x, or any-with-x"),
        (23, "Invalid x-match field type signedint (value 23); expected longstr"),
        (True, "Invalid x-match field type bool (value true); expected longstr"),
    ],
)  # fmt: skip
def test_headers_refuses_invalid_x_match(value: Any, text: str) -> None:
    with pytest.raises(PreconditionFailed) as info:
        HeadersExchange().validate_binding(hbind(Q1, {"x-match": value}))
    assert info.value.code == ReplyCode.PRECONDITION_FAILED == 406
    assert info.value.explanation == text
    assert info.value.reply_text == f"PRECONDITION_FAILED - {text}"
