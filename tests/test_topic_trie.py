"""Property test: the topic trie agrees with a plain recursive matcher.

The matcher below is the topic semantics of RabbitMQ's ``rabbit_exchange_type_topic.erl``
(``split_topic_key`` + ``trie_match``) written as directly as possible: ``*`` is one word,
``#`` is zero or more, keys split on every dot and the empty key is zero words.
"""

from __future__ import annotations

import pytest

from exchanges.binding import Binding, Destination
from exchanges.topic import TopicExchange

pytest.importorskip("hypothesis")  # a test extra (pyproject); skip cleanly without it

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

Q1, Q2, Q3 = Destination("queue", "q1"), Destination("queue", "q2"), Destination("queue", "q3")
X1 = Destination("exchange", "x1")


def bind(dest: Destination, key: str) -> Binding:
    return Binding("src", dest, key, {})


def ref_split(key: str) -> list[str]:
    """RabbitMQ's ``split_topic_key``: ``""`` is no words, else split on every dot."""
    return key.split(".") if key else []


def reference_match(pattern: list[str], words: list[str]) -> bool:
    """Plain recursive topic matcher, the specification the trie must agree with."""
    if not pattern:
        return not words
    head, rest = pattern[0], pattern[1:]
    if head == "#":
        return any(reference_match(rest, words[i:]) for i in range(len(words) + 1))
    if not words:
        return False
    return (head == "*" or head == words[0]) and reference_match(rest, words[1:])


WORD = st.sampled_from(["a", "b", "", "*", "#"])
TOPIC_KEY = st.lists(WORD, max_size=5).map(".".join)
DESTS = st.sampled_from([Q1, Q2, Q3, X1])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(TOPIC_KEY, DESTS), max_size=12),
    st.lists(TOPIC_KEY, min_size=1, max_size=8),
    st.data(),
)
def test_topic_trie_agrees_with_reference(
    bindings: list[tuple[str, Destination]], routing_keys: list[str], data: st.DataObject
) -> None:
    x = TopicExchange()
    live = {bind(dest, key).key: (key, dest) for key, dest in bindings}
    for key, dest in bindings:
        x.add_binding(bind(dest, key))

    def check() -> None:
        for rk in routing_keys:
            words = ref_split(rk)
            want = {d for k, d in live.values() if reference_match(ref_split(k), words)}
            assert x.route(rk, None) == want, (rk, sorted(live.values()))

    check()
    if live:  # remove some bindings and check again (pruning must not lose others)
        doomed = data.draw(st.lists(st.sampled_from(sorted(live)), unique=True))
        for key in doomed:
            assert x.remove_binding(bind(live[key][1], live[key][0]))
            del live[key]
        assert len(x) == len(live)
        check()
