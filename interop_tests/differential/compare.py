"""Differences between two observations (JSON-able dicts).

A difference is reported at the deepest path where the two sides still have the same shape:
dict keys are followed one by one (a key on one side only is a difference with ``MISSING`` on
the other), lists of equal length element by element, anything else is compared whole.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

MISSING = "<missing>"


@dataclass(frozen=True)
class Difference:
    path: str
    amqpq: Any
    reference: Any

    def to_json(self) -> dict:
        return asdict(self)


def diff(amqpq: Any, reference: Any, path: str = "") -> list[Difference]:
    if isinstance(amqpq, dict) and isinstance(reference, dict):
        out: list[Difference] = []
        for key in sorted(set(amqpq) | set(reference), key=str):
            out += diff(amqpq.get(key, MISSING), reference.get(key, MISSING), f"{path}.{key}")
        return out
    if isinstance(amqpq, list) and isinstance(reference, list) and len(amqpq) == len(
            reference):
        out = []
        for i, (a, r) in enumerate(zip(amqpq, reference, strict=True)):
            out += diff(a, r, f"{path}[{i}]")
        return out
    if amqpq != reference or type(amqpq) is not type(reference):
        return [Difference(path or ".", amqpq, reference)]
    return []
