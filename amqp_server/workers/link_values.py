"""Control records of the worker link as tagged JSON: no code runs when a record is read.

The link's rare records (consume, cancel, calls and their answers, topology records, figures)
are tuples of plain values and AMQP field-table values. Pickle would carry them too, but a
link between nodes ([5/8]) must not let a peer's bytes choose what runs, so they are JSON
with a tag for each type JSON lacks:

========================  ===========================================================
``None``, bool, str, int  as JSON (a number sent with an AMQP type, such as a consumer's
float, list              ``x-priority`` as ``signedint``, keeps it: ``{"n": type, "v": x}``)
tuple                     ``{"t": [...]}``
dict                      ``{"d": [[key, value], ...]}`` (keys of any type above)
bytes                     ``{"b": base64}``
Decimal, datetime         ``{"dec": "1.50"}``, ``{"dt": ISO 8601}``
AMQPError                 ``{"e": class name, "x": explanation, "c": class id, "m": method id}``
                          (only :mod:`amqp_common.errors` classes are rebuilt)
========================  ===========================================================

Raises ``ValueError`` for a value or a document outside this list.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
from typing import Any

from amqp_common import errors
from amqp_common.method_tables import wire_number


def encode(record: tuple[Any, ...]) -> bytes:
    """``record`` as UTF-8 JSON. Raises ValueError for a value of another type."""
    return json.dumps(_out(record), separators=(",", ":")).encode()


def decode(data: bytes) -> tuple[Any, ...]:
    """The record :func:`encode` wrote. Raises ValueError for anything else."""
    try:
        value = _in(json.loads(data))
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"malformed control record: {exc!r}") from None
    if not isinstance(value, tuple):
        raise ValueError("control record is not a tuple")
    return value


def _out(v: Any) -> Any:
    if v is None or isinstance(v, bool | str):
        return v
    if isinstance(v, int | float):
        kind = getattr(v, "amqp_type", None)
        if kind is not None:
            return {"n": kind, "v": int(v) if isinstance(v, int) else float(v)}
        return v
    if isinstance(v, tuple):
        return {"t": [_out(x) for x in v]}
    if isinstance(v, list):
        return [_out(x) for x in v]
    if isinstance(v, dict):
        return {"d": [[_out(k), _out(x)] for k, x in v.items()]}
    if isinstance(v, bytes | bytearray | memoryview):
        return {"b": base64.b64encode(bytes(v)).decode()}
    if isinstance(v, decimal.Decimal):
        return {"dec": str(v)}
    if isinstance(v, datetime.datetime):
        return {"dt": v.isoformat()}
    if isinstance(v, errors.AMQPError):
        return {"e": type(v).__name__, "x": v.explanation, "c": v.class_id, "m": v.method_id}
    raise ValueError(f"cannot send a {type(v).__name__} over the worker link")


def _in(v: Any) -> Any:
    if isinstance(v, list):
        return [_in(x) for x in v]
    if not isinstance(v, dict):
        return v
    if "t" in v:
        return tuple(_in(x) for x in v["t"])
    if "d" in v:
        return {_in(k): _in(x) for k, x in v["d"]}
    if "b" in v:
        return base64.b64decode(v["b"], validate=True)
    if "n" in v:
        return wire_number(str(v["n"]), v["v"])
    if "dec" in v:
        return decimal.Decimal(v["dec"])
    if "dt" in v:
        return datetime.datetime.fromisoformat(v["dt"])
    if "e" in v:
        cls = getattr(errors, str(v["e"]), None)
        if not (isinstance(cls, type) and issubclass(cls, errors.AMQPError)):
            raise ValueError(f"unknown error class {v['e']!r}")
        return cls(str(v["x"]), int(v["c"]), int(v["m"]))
    raise ValueError(f"unknown tag in {sorted(v)}")
