"""Headers exchange: routes on message header values against binding arguments.

RabbitMQ semantics (``rabbit_exchange_type_headers``, checked in 3.10.8 and 3.13.7):

* ``x-match`` is ``all`` (the default), ``any``, ``all-with-x`` or ``any-with-x``; anything
  else is refused at bind time with 406 PRECONDITION_FAILED;
* with ``all``/``any``, binding arguments whose key starts with ``x-`` take no part in
  matching; with ``*-with-x`` they do (``x-match`` itself never does);
* a binding value of void (``None``) only asks for the header key to be present;
* ``all`` with nothing left to compare matches every message, ``any`` then matches none;
* values compare as Erlang terms: ``True`` is not ``1``; ``1 == 1.0`` (3.10's ``==``); a
  longstr equals a byte array with the same bytes.

Source: AMQP 0-9-1 spec 3.1.3.4 (headers exchange type); RabbitMQ
https://www.rabbitmq.com/docs/exchanges#headers.
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Mapping
from typing import Any, ClassVar

from amqp_common.errors import PreconditionFailed
from amqp_common.properties import amqp_type_name
from exchanges.base import BaseExchangeType
from exchanges.binding import Binding, Destination

MATCH_KINDS = ("all", "any", "all-with-x", "any-with-x")
_VOID = object()  # binding value that means "key present"

_ESCAPES = (("\\", "\\\\"), ('"', '\\"'), ("\n", "\\n"), ("\t", "\\t"), ("\r", "\\r"))


def _match_kind(value: Any) -> Any:
    """``x-match`` as text when it is a longstr (pamqp gives bytes for non-UTF-8 ones)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def routing_value(value: Any) -> Any:
    """A form of a field value where equality is RabbitMQ's: ``True`` -> ``("bool", True)``."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        return ("num", value)
    if isinstance(value, str):
        return ("bin", value.encode("utf-8"))
    if isinstance(value, bytes | bytearray | memoryview):
        return ("bin", bytes(value))
    if isinstance(value, decimal.Decimal):  # {decimal, Scale, Unscaled}: 1.0 is not 1.00
        return ("dec", value.as_tuple())
    if isinstance(value, datetime.datetime):  # an AMQP timestamp is integer seconds
        return ("num", int(value.timestamp()))
    if isinstance(value, Mapping):
        return ("table", tuple(sorted((str(k), routing_value(v)) for k, v in value.items())))
    if isinstance(value, list | tuple):
        return ("array", tuple(routing_value(v) for v in value))
    return ("other", value)



def _erl_term(value: Any) -> str:
    """Erlang ``~p`` text of a value: ``b"foo"`` -> ``<<"foo">>``, ``True`` -> ``true``."""
    if isinstance(value, str | bytes | bytearray):
        raw = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        if all(32 <= b <= 126 or b >= 160 or b in b"\t\n\r" for b in raw):
            text = raw.decode("utf-8", "replace")
            for char, escaped in _ESCAPES:
                text = text.replace(char, escaped)
            return f'<<"{text}">>'
        return "<<" + ",".join(str(b) for b in raw) + ">>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "undefined"
    return repr(value)


class HeadersExchange(BaseExchangeType):
    """Routing table ``{binding key: (Destination, match all?, ((arg, value | VOID), ...))}``.

    ``route`` checks every binding (as RabbitMQ's ``match_bindings`` does) and returns the
    destinations of those that match, once each.
    """

    needs_headers: ClassVar[bool] = True

    def __init__(self) -> None:
        super().__init__()
        self._specs: dict[tuple[Any, ...], tuple[Destination, bool, tuple[Any, ...]]] = {}

    def validate_binding(self, binding: Binding) -> None:
        """Refuse an ``x-match`` that is not one of :data:`MATCH_KINDS` (406, RabbitMQ text)."""
        if "x-match" not in binding.arguments:
            return
        value = binding.arguments["x-match"]
        if isinstance(value, str | bytes):  # pamqp yields bytes for a non-UTF-8 longstr
            if _match_kind(value) not in MATCH_KINDS:
                raise PreconditionFailed(
                    f"Invalid x-match field value {_erl_term(value)}; "
                    "expected all, any, all-with-x, or any-with-x"
                )
            return
        raise PreconditionFailed(
            f"Invalid x-match field type {amqp_type_name(value)} (value {_erl_term(value)}); "
            "expected longstr"
        )

    def route(self, routing_key: str, headers: Mapping[str, Any] | None) -> set[Destination]:
        """Destinations of the bindings whose arguments match ``headers`` (None = no headers)."""
        data = headers or {}
        result: set[Destination] = set()
        for dest, match_all, spec in self._specs.values():
            if dest not in result and _matches(match_all, spec, data):
                result.add(dest)
        return result

    def _index(self, binding: Binding) -> None:
        kind = _match_kind(binding.arguments.get("x-match", "all"))
        with_x = kind in ("all-with-x", "any-with-x")
        spec = tuple(
            (key, _VOID if value is None else routing_value(value))
            for key, value in binding.arguments.items()
            if key != "x-match" and (with_x or not key.startswith("x-"))
        )
        # RabbitMQ treats an unvalidated x-match value as "all" (parse_x_match/1)
        match_all = kind not in ("any", "any-with-x")
        self._specs[binding.key] = (binding.destination, match_all, spec)

    def _unindex(self, binding: Binding) -> None:
        self._specs.pop(binding.key, None)


def _matches(match_all: bool, spec: tuple[Any, ...], data: Mapping[str, Any]) -> bool:
    for key, want in spec:
        hit = key in data and (want is _VOID or routing_value(data[key]) == want)
        if hit != match_all:  # first miss decides "all", first hit decides "any"
            return hit
    return match_all
