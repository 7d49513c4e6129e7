"""Erlang's ``~p`` (``io_lib:format("~p", [Term])``) for JSON values, as RabbitMQ prints
them in validation errors (``[{<<"max-lenght">>,5}] are not recognised policy settings``).

A JSON value maps to the Erlang term RabbitMQ's decoder makes: an object to a map (keys in
term order, i.e. by their UTF-8 bytes), an array to a list, a string to a binary, ``true``,
``false`` and ``null`` to atoms, numbers to integers and floats. The layout is OTP 25's
``io_lib_pretty`` (line length 80, starting at column 1): a term that does not fit is broken
over lines, one element per line unless the elements are short leaves.

Strings print as ``~p`` does with latin-1 encoding, which RabbitMQ 3.10 uses: a binary whose
every byte is printable latin-1 shows as ``<<"text">>`` (its UTF-8 bytes passed through, so
``"é"`` stays ``é``), any other as its bytes, ``<<226,130,172>>``.

Source: OTP ``lib/stdlib/src/io_lib_pretty.erl`` and ``io_lib.erl`` (25.x); checked against
RabbitMQ 3.10.8 (OTP 25.2.3) on the reference broker.
"""

from __future__ import annotations

import decimal
from dataclasses import dataclass
from typing import Any

LINE_LENGTH = 80
#: what ``io_lib:write_string`` writes for a printable control character
_ESCAPES = {0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t", 0x0B: "\\v", 0x08: "\\b", 0x0C: "\\f",
            0x1B: "\\e", 0x22: '\\"', 0x5C: "\\\\"}
_MAP_VALUE_INDENT = 4  # io_lib_pretty:map_value_indent/1 when no tagged tuples are involved


@dataclass
class _Node:
    """``io_lib_pretty``'s intermediate format: ``kind`` is ``leaf`` (text written as is),
    ``bin`` (a binary written as bytes), ``list``, ``tuple``, ``map`` or ``pair``; ``length``
    counts characters (one per byte, as latin-1)."""

    kind: str
    length: int
    text: str = ""
    items: tuple[_Node, ...] = ()
    chunks: tuple[str, ...] = ()


def erlang_pformat(value: Any) -> str:
    """``~p`` of the Erlang term for a JSON ``value`` (see the module docstring).

    Args:
        value: what :func:`json.loads` returns, or a list of ``(key, value)`` tuples for an
            Erlang proplist (``[{<<"k">>,1}]``).

    Returns:
        The text RabbitMQ 3.10 writes, possibly over several lines.
    """
    node = _node(value)
    if node.length < LINE_LENGTH - 1:
        text = _write(node)
    else:
        text = _pp(node, 1, node.length, "", 0, 0)
    # Erlang built latin-1 characters from UTF-8 bytes; the bytes go out unchanged
    return text.encode("latin-1").decode("utf-8", errors="replace")


def _latin1_printable(code: int) -> bool:
    return 32 <= code <= 126 or 160 <= code <= 255 or code in _ESCAPES


def _string(codes: bytes | list[int]) -> str:
    return '"' + "".join(_ESCAPES.get(c, chr(c)) for c in codes) + '"'


def _float(value: float) -> str:
    """``io_lib:write/1`` of a float: the shortest digits, in plain or exponent form,
    whichever is shorter (plain on a tie): ``100.0``, ``1.0e3``, ``0.0001``, ``1.0e-5``."""
    sign = "-" if value < 0 or str(value).startswith("-") else ""
    _, digits_t, exp = decimal.Decimal(repr(abs(value))).normalize().as_tuple()
    digits = "".join(map(str, digits_t)).lstrip("0") or "0"
    if digits == "0":
        return sign + "0.0"
    assert isinstance(exp, int)
    point = len(digits) + exp - 1  # the exponent of the first digit
    scientific = f"{digits[0]}.{digits[1:] or '0'}e{point}"
    if point >= 0:
        whole = digits[:point + 1].ljust(point + 1, "0")
        plain = f"{whole}.{digits[point + 1:] or '0'}"
    else:
        plain = "0." + "0" * (-point - 1) + digits
    return sign + (scientific if len(scientific) < len(plain) else plain)


def _leaf(text: str) -> _Node:
    return _Node("leaf", len(text), text=text)


def _node(value: Any) -> _Node:
    if value is None:
        return _leaf("null")
    if isinstance(value, bool):
        return _leaf("true" if value else "false")
    if isinstance(value, int):
        return _leaf(str(value))
    if isinstance(value, float):
        return _leaf(_float(value))
    if isinstance(value, str):
        raw = value.encode("utf-8")
        if not raw:
            return _leaf("<<>>")
        if all(_latin1_printable(b) for b in raw):
            return _leaf("<<" + _string(raw) + ">>")
        chunks = tuple(str(b) for b in raw)
        return _Node("bin", 4 + sum(map(len, chunks)) + len(chunks) - 1, chunks=chunks)
    if isinstance(value, tuple):
        return _container("tuple", [_node(v) for v in value], 2)
    if isinstance(value, list):
        if not value:
            return _leaf("[]")
        if all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 255
               and _latin1_printable(v) for v in value):
            return _leaf(_string(value))  # a printable list of integers is a string
        return _container("list", [_node(v) for v in value], 2)
    if isinstance(value, dict):
        if not value:
            return _leaf("#{}")
        pairs = []
        for key in sorted(value, key=lambda k: str(k).encode("utf-8")):
            k, v = _node(str(key)), _node(value[key])
            pairs.append(_Node("pair", k.length + 4 + v.length, items=(k, v)))
        return _container("map", pairs, 3)
    return _leaf(str(value))


def _container(kind: str, items: list[_Node], brackets: int) -> _Node:
    length = brackets + sum(n.length for n in items) + len(items) - 1
    return _Node(kind, length, items=tuple(items))


_OPEN = {"list": "[", "tuple": "{", "map": "#{"}
_CLOSE = {"list": "]", "tuple": "}", "map": "}"}


def _write(node: _Node) -> str:
    if node.kind == "leaf":
        return node.text
    if node.kind == "bin":
        return "<<" + ",".join(node.chunks) + ">>"
    if node.kind == "pair":
        return _write(node.items[0]) + " => " + _write(node.items[1])
    return _OPEN[node.kind] + ",".join(_write(n) for n in node.items) + _CLOSE[node.kind]


def _atomic(node: _Node) -> bool:
    if node.kind == "pair":
        return all(n.kind == "leaf" for n in node.items)
    return node.kind == "leaf"


def _fits(length: int, col: int, max_chars: int, last_depth: int, width: int) -> bool:
    return (length < LINE_LENGTH - col - last_depth
            and length + width + last_depth <= max_chars)


def _pp(node: _Node, col: int, m: int, ind: str, ld: int, w: int) -> str:
    """``io_lib_pretty:pp/8``: ``col`` is the 1-based column, ``m`` the most characters
    on a line, ``ind`` the indentation of continuation lines, ``ld`` how many closing
    brackets follow, ``w`` the characters already on this line."""
    if _fits(node.length, col, m, ld, w):
        return _write(node)
    if node.kind in ("list", "tuple"):
        inner = _pp_list(node.items, col + 1, m, ind + " ", ld, w + 1)
        return _OPEN[node.kind] + inner + _CLOSE[node.kind]
    if node.kind == "map":
        return "#{" + _pp_map(node.items, col + 2, m, ind + "  ", ld, w + 1) + "}"
    if node.kind == "bin":
        return _pp_binary(node.chunks, col + 2, m, ind + "  ", ld, w)
    return _write(node)


def _last_depth(rest: tuple[_Node, ...], ld: int) -> int:
    return 0 if rest else ld + 1


def _element(node: _Node, col: int, m: int, ind: str, ld: int, w: int) -> tuple[str, int]:
    if _atomic(node) and _fits(node.length, col, m, ld, w):
        return _write(node), node.length
    return _pp(node, col, m, ind, ld, w), LINE_LENGTH  # forces the next onto a new line


def _tail_fits(node: _Node, col: int, m: int, ld1: int, w: int) -> bool:
    """Whether ``,element`` stays on the current line (``pp_tail``'s test)."""
    n = 1 + node.length
    if not _atomic(node):
        return False
    if ld1 == 0:
        return n + 1 < LINE_LENGTH - col and w + n + 1 <= m
    return n < LINE_LENGTH - col - ld1 and w + n + ld1 <= m


def _pp_list(items: tuple[_Node, ...], col0: int, m: int, ind: str, ld: int, w: int) -> str:
    text, width = _element(items[0], col0, m, ind, _last_depth(items[1:], ld), w)
    out, col, w = [text], col0 + width, w + width
    for i in range(1, len(items)):
        node, ld1 = items[i], _last_depth(items[i + 1:], ld)
        if _tail_fits(node, col, m, ld1, w):
            out.append("," + _write(node))
            col, w = col + 1 + node.length, w + 1 + node.length
        else:
            text, width = _element(node, col0, m, ind, ld1, 0)
            out.append(",\n" + ind + text)
            col, w = col0 + width, width
    return "".join(out)


def _pair(node: _Node, col: int, m: int, ind: str, ld: int, w: int) -> tuple[str, int]:
    if _fits(node.length, col, m, ld, w):
        return _write(node), node.length if _atomic(node) else LINE_LENGTH
    key, value = node.items
    value_ind = ind + " " * _MAP_VALUE_INDENT
    return (_pp(key, col, m, ind, ld, w) + " =>\n" + value_ind
            + _pp(value, col + _MAP_VALUE_INDENT, m, value_ind, ld, 0), LINE_LENGTH)


def _pp_map(pairs: tuple[_Node, ...], col0: int, m: int, ind: str, ld: int, w: int) -> str:
    text, width = _pair(pairs[0], col0, m, ind, _last_depth(pairs[1:], ld), w)
    out, col, w = [text], col0 + width, width
    for i in range(1, len(pairs)):
        node, ld1 = pairs[i], _last_depth(pairs[i + 1:], ld)
        if _tail_fits(node, col, m, ld1, w):
            out.append("," + _write(node))
            col, w = col + 1 + node.length, w + 1 + node.length
        else:
            text, width = _pair(node, col0, m, ind, ld1, 0)
            out.append(",\n" + ind + text)
            col, w = col0 + width, width
    return "".join(out)


def _pp_binary(chunks: tuple[str, ...], col: int, m: int, ind: str, ld: int, w: int) -> str:
    """A byte-list binary over lines (``io_lib_pretty:pp_binary/7``)."""
    start = max(8, min(LINE_LENGTH - col, m - 4 - w) - ld)
    room, out = start, []
    for chunk in chunks[:-1]:
        n = len(chunk) + 1
        if room - n < 0:
            out.append("\n" + ind + chunk + ",")
            room = start - n
        else:
            out.append(chunk + ",")
            room -= n
    last = chunks[-1]
    out.append("\n" + ind + last if len(last) > room else last)
    return "<<" + "".join(out) + ">>"
