"""Topic exchange: binding keys are dot-separated word patterns with ``*`` and ``#``.

Semantics follow RabbitMQ (``rabbit_exchange_type_topic`` / ``rabbit_db_topic_exchange``,
``split_topic_key`` and ``trie_match``):

* a key is split on every ``.``; the empty key is zero words, any other key keeps its empty
  words (``"a..b"`` -> ``["a", "", "b"]``, ``"a."`` -> ``["a", ""]``, ``"."`` -> ``["", ""]``);
* ``*`` matches exactly one word (an empty word too), ``#`` matches zero or more words;
  so ``"#"`` matches ``""``, ``"a.#"`` matches ``"a"``, ``"a.#.b"`` matches ``"a.b"``, and the
  binding key ``""`` matches only the routing key ``""``.

Source: AMQP 0-9-1 spec 3.1.3.3 (topic exchange type); RabbitMQ tutorial five
(https://www.rabbitmq.com/tutorials/tutorial-five-python).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from exchanges.base import BaseExchangeType, decr, incr
from exchanges.binding import Binding, Destination

#: Routing results remembered per routing key; the cache is dropped on every binding change.
ROUTE_CACHE_SIZE = 4096


def split_topic_key(key: str) -> list[str]:
    """``"a.b"`` -> ``["a", "b"]``, ``""`` -> ``[]`` (RabbitMQ's ``split_topic_key/1``)."""
    return key.split(".") if key else []


class _Node:
    """A trie node: edges by word (literal, ``"*"`` or ``"#"``) and the bindings ending here."""

    __slots__ = ("children", "dests", "is_hash")

    def __init__(self, is_hash: bool) -> None:
        self.children: dict[str, _Node] = {}
        self.dests: dict[Destination, int] = {}
        # a node reached over a '#' edge may swallow further words while staying put
        self.is_hash = is_hash


class TopicExchange(BaseExchangeType):
    """Trie over binding-key words, matched like RabbitMQ's ``trie_match``.

    Routing walks states ``(node, word index)``; each state is visited once, so many ``#``
    cannot blow up exponentially: cost is at most trie nodes x (words + 1). Results are kept
    in an LRU of ``cache_size`` routing keys (0 disables it), cleared on any binding change.
    """

    def __init__(self, cache_size: int = ROUTE_CACHE_SIZE) -> None:
        super().__init__()
        self._root = _Node(is_hash=False)
        self._cache_size = cache_size
        self._cache: OrderedDict[str, frozenset[Destination]] = OrderedDict()

    def route(self, routing_key: str, headers: Mapping[str, Any] | None) -> set[Destination]:
        """Destinations whose binding key pattern matches ``routing_key`` (headers ignored)."""
        cache = self._cache
        hit = cache.get(routing_key)
        if hit is not None:
            cache.move_to_end(routing_key)
            return set(hit)
        result = self._match(split_topic_key(routing_key))
        if self._cache_size > 0:
            cache[routing_key] = frozenset(result)
            if len(cache) > self._cache_size:
                cache.popitem(last=False)
        return result

    def _match(self, words: list[str]) -> set[Destination]:
        n = len(words)
        result: set[Destination] = set()
        seen: set[tuple[_Node, int]] = set()
        stack = [(self._root, 0)]
        while stack:
            state = stack.pop()
            if state in seen:
                continue
            seen.add(state)
            node, i = state
            children = node.children
            if i == n:
                if node.dests:
                    result.update(node.dests)
            else:
                word = words[i]
                child = children.get(word)
                if child is not None:
                    stack.append((child, i + 1))
                if word != "*":  # a literal "*" word already took the "*" edge above
                    child = children.get("*")
                    if child is not None:
                        stack.append((child, i + 1))
                if node.is_hash:
                    stack.append((node, i + 1))
            child = children.get("#")
            if child is not None:
                stack.append((child, i))
        return result

    def _index(self, binding: Binding) -> None:
        node = self._root
        for word in split_topic_key(binding.routing_key):
            child = node.children.get(word)
            if child is None:
                child = node.children[word] = _Node(is_hash=word == "#")
            node = child
        incr(node.dests, binding.destination)
        self._cache.clear()

    def _unindex(self, binding: Binding) -> None:
        path: list[tuple[_Node, str, _Node]] = []
        node = self._root
        for word in split_topic_key(binding.routing_key):
            child = node.children.get(word)
            if child is None:
                return
            path.append((node, word, child))
            node = child
        decr(node.dests, binding.destination)
        # prune nodes left without bindings or edges, deepest first
        for parent, word, child in reversed(path):
            if child.children or child.dests:
                break
            del parent.children[word]
        self._cache.clear()
