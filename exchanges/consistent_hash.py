"""Consistent-hash exchange (``x-consistent-hash``): a message goes to one destination chosen
by a hash of its routing key (or of a header, or of a property), in proportion to weights.

Theory of operation
-------------------
A binding's routing key is its *weight* (a positive integer). The hash space is cut into
:data:`BUCKETS` buckets; each bucket belongs to the binding with the highest weighted
rendezvous score for it (``-weight / ln(u)``, ``u`` a uniform draw from a 64-bit hash of the
binding and the bucket: Schindelhauer and Schomaker's weighted rendezvous hashing). So:

* the same key always reaches the same destination while the bindings do not change;
* a binding's expected share of buckets is exactly its share of the total weight, and with
  65,536 buckets the realised share is within about 1% of it (RabbitMQ's plugin places one
  ring point per unit of weight, so a few equal-weight queues can get very unequal shares);
* adding a binding moves only the buckets it wins (about ``weight / total`` of them) and
  removing one moves only its own: every other key stays where it was.

Routing is a hash and a list index; a binding change costs one pass over the buckets
(tens of milliseconds), which is fine for bindings that change rarely.

Exchange arguments (RabbitMQ's names): ``hash-header`` (hash that header's value) or
``hash-property`` (``message_id``, ``correlation_id`` or ``timestamp``), not both. A message
without that header or property is hashed as an empty value and still routed, as the plugin
does.

Source: https://github.com/rabbitmq/rabbitmq-server/tree/main/deps/rabbitmq_consistent_hash_exchange
(README: weights, hash-header, hash-property; texts checked against RabbitMQ 3.10.8).
"""

from __future__ import annotations

import hashlib
import math
import zlib
from array import array
from collections.abc import Mapping
from typing import Any, ClassVar

from amqp_common.errors import PreconditionFailed
from exchanges.base import BaseExchangeType
from exchanges.binding import Binding, Destination

BUCKETS = 1 << 16
HASH_PROPERTIES = ("message_id", "correlation_id", "timestamp")
_MASK64 = (1 << 64) - 1


def validate_arguments(arguments: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """``(hash_header, hash_property)`` from Exchange.Declare arguments.

    Raises:
        PreconditionFailed (406): both given ("hash-header and hash-property are mutually
            exclusive"), an unknown property ("Unsupported property: x"), or a header name
            that is not a string (RabbitMQ 3.10.8 fails with 541 there).
    """
    header, prop = arguments.get("hash-header"), arguments.get("hash-property")
    if header is not None and prop is not None:
        raise PreconditionFailed("hash-header and hash-property are mutually exclusive")
    if isinstance(header, bytes):
        header = header.decode("utf-8", "replace")
    if header is not None and not isinstance(header, str):
        raise PreconditionFailed(f"hash-header must be a string, got {header!r}")
    if isinstance(prop, bytes):
        prop = prop.decode("utf-8", "replace")
    if prop is not None and prop not in HASH_PROPERTIES:
        raise PreconditionFailed(f"Unsupported property: {prop}")
    return header, prop


def binding_weight(routing_key: str) -> int:
    """A binding's weight from its routing key.

    Raises:
        PreconditionFailed (406): not an integer, or not above 0 (RabbitMQ's texts).
    """
    try:
        weight = int(routing_key.strip())
    except ValueError:
        raise PreconditionFailed(
            f'The binding key must be an integer: <<"{routing_key}">>') from None
    if weight <= 0:
        raise PreconditionFailed("The binding key must be greater than 0")
    return weight


def _seed(binding: Binding) -> int:
    d = binding.destination
    raw = f"{d.kind}\0{d.name}\0{binding.routing_key}".encode()
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "little")


def _scores(seed: int, weight: int) -> array:
    """The binding's rendezvous score for every bucket (higher wins)."""
    out = array("d", bytes(8 * BUCKETS))
    log = math.log
    for i in range(BUCKETS):
        z = (seed + (i + 1) * 0x9E3779B97F4A7C15) & _MASK64  # splitmix64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        z ^= z >> 31
        u = ((z >> 11) + 0.5) / 9007199254740992.0  # (0, 1), 53 bits
        out[i] = -weight / log(u)
    return out


def bucket_of(value: bytes) -> int:
    """The bucket (0..BUCKETS-1) a hashed value falls in."""
    return ((zlib.crc32(value) * 0x9E3779B1) & 0xFFFFFFFF) >> 16


def hash_input(value: Any) -> bytes:
    """A header or property value as the bytes that are hashed (None: empty)."""
    if value is None:
        return b""
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if hasattr(value, "timestamp"):  # datetime: whole seconds, as on the wire
        return str(int(value.timestamp())).encode()
    return str(value).encode("utf-8", "surrogateescape")


class ConsistentHashExchange(BaseExchangeType):
    """The routing table of one ``x-consistent-hash`` exchange (see the module docstring).

    Args:
        arguments: Exchange.Declare arguments (``hash-header`` / ``hash-property``).

    Raises:
        PreconditionFailed (406): see :func:`validate_arguments`.
    """

    needs_headers: ClassVar[bool] = False
    needs_message = True  # routes on the routing key, a header or a property

    def __init__(self, arguments: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self.hash_header, self.hash_property = validate_arguments(arguments or {})
        self._owner: list[Binding | None] = [None] * BUCKETS
        self._best = array("d", bytes(8 * BUCKETS))  # the owner's score per bucket
        self._scores: dict[tuple[Any, ...], array] = {}

    def validate_binding(self, binding: Binding) -> None:
        """Raises PreconditionFailed (406) for a routing key that is not a positive weight."""
        binding_weight(binding.routing_key)

    def _index(self, binding: Binding) -> None:
        scores = _scores(_seed(binding), binding_weight(binding.routing_key))
        self._scores[binding.key] = scores
        owner, best = self._owner, self._best
        for i in range(BUCKETS):
            if owner[i] is None or scores[i] > best[i]:
                owner[i] = binding
                best[i] = scores[i]

    def _unindex(self, binding: Binding) -> None:
        del self._scores[binding.key]
        owner, best = self._owner, self._best
        rest = [(self._by_key[k], s) for k, s in self._scores.items()]
        for i in range(BUCKETS):
            if owner[i] is not binding:
                continue
            winner, top = None, 0.0
            for b, s in rest:
                if winner is None or s[i] > top:
                    winner, top = b, s[i]
            owner[i] = winner
            best[i] = top

    def route(self, routing_key: str, headers: Mapping[str, Any] | None) -> set[Destination]:
        """The destination for a routing key (``hash-header``: that header of ``headers``)."""
        if self.hash_header is not None:
            key = hash_input((headers or {}).get(self.hash_header))
        else:
            key = routing_key.encode("utf-8", "surrogateescape")
        return self._pick(key)

    def route_message(self, routing_key: str, message: Any) -> set[Destination]:
        """The destination for a message (its routing key, header or property)."""
        if self.hash_property is not None:  # decodes the properties: only such exchanges pay
            try:
                value = getattr(message.properties, self.hash_property, None)
            except ValueError:  # not expected: properties were checked at publish
                value = None
            return self._pick(hash_input(value))
        if self.hash_header is not None:
            return self.route(routing_key, message.headers)
        return self._pick(routing_key.encode("utf-8", "surrogateescape"))

    def _pick(self, key: bytes) -> set[Destination]:
        binding = self._owner[bucket_of(key)]
        return {binding.destination} if binding is not None else set()

    def share(self) -> dict[Destination, float]:
        """Each destination's fraction of the buckets (what it receives of random keys)."""
        out: dict[Destination, float] = {}
        for b in self._owner:
            if b is not None:
                out[b.destination] = out.get(b.destination, 0.0) + 1.0 / BUCKETS
        return out
