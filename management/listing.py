"""The query parameters of list endpoints: ``sort``, ``sort_reverse``, ``columns`` and
pagination (``page``, ``page_size``, ``name``, ``use_regex``), as RabbitMQ's management API
applies them (``rabbit_mgmt_util``; behaviour checked against RabbitMQ 3.10.8).

* ``sort=field`` (a dotted path such as ``message_stats.publish``) orders the items, in
  Erlang's term order (numbers, then atoms such as null/true/false, maps, lists, strings);
  ``sort_reverse=true`` reverses it. An unknown field leaves the order as it is.
* ``columns=a,b.c`` keeps only those fields (nested ones as nested objects).
* ``page=N`` (1-based) turns the answer into ``{"filtered_count", "item_count", "items",
  "page", "page_count", "page_size", "total_count"}``, ``page_size`` 100 by default, 1..500;
  ``name`` then keeps items whose name contains it (case-insensitive), or matches it as a
  regular expression with ``use_regex=true``. Without ``page``, ``name`` is ignored.

Errors (400): ``invalid_pagination_parameters`` for a page or page size out of range,
``page_out_of_range`` past the last page, ``bad_request`` "Pagination parameters are
invalid" for a non-number or a bad regular expression.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from management.errors import ApiError, bad_request

#: query parameters handled here
PARAMETERS = frozenset({"sort", "sort_reverse", "columns", "page", "page_size", "name",
                        "use_regex"})
#: where ok() keeps a list answer's items on the response
LIST_DATA: web.ResponseKey[list[Any]] = web.ResponseKey("amqpq_list", list)
MAX_PAGE_SIZE = 500
DEFAULT_PAGE_SIZE = 100
_MISSING = object()


def _get(item: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(item, Mapping) or part not in item:
            return _MISSING
        item = item[part]
    return item


def _term_order(value: Any) -> tuple[int, Any]:
    """A sort key in Erlang's term order (number < atom < map < list < binary)."""
    if isinstance(value, bool) or value is None or value is _MISSING:
        return (1, str(value))
    if isinstance(value, int | float):
        return (0, value)
    if isinstance(value, Mapping):
        return (2, str(sorted(value.items())))
    if isinstance(value, list):
        return (3, str(value))
    return (4, str(value))


def _columns(item: Any, columns: list[str]) -> Any:
    if not isinstance(item, Mapping):
        return item
    out: dict[str, Any] = {}
    for column in columns:
        value = _get(item, column)
        if value is _MISSING:
            continue
        parts = column.split(".")
        target = out
        for part in parts[:-1]:
            target = target.setdefault(part, {})
        target[parts[-1]] = value
    return out


def _page(query: Mapping[str, str], items: list[Any]) -> dict[str, Any]:
    try:
        page = int(query["page"])
        size = int(query.get("page_size", DEFAULT_PAGE_SIZE))
    except ValueError:
        raise bad_request("Pagination parameters are invalid") from None
    if page < 1 or not 1 <= size <= MAX_PAGE_SIZE:
        shown = query.get("page_size", "undefined")
        raise ApiError(400, "invalid_pagination_parameters",
                       f"Invalid pagination parameters: page number {page}, page size {shown}")
    total = len(items)
    name = query.get("name")
    if name:
        if query.get("use_regex") == "true":
            try:
                pattern = re.compile(name)
            except re.error:
                raise bad_request("Pagination parameters are invalid") from None
            items = [i for i in items if pattern.search(str(_get(i, "name")))]
        else:
            needle = name.lower()
            items = [i for i in items if needle in str(_get(i, "name")).lower()]
    pages = math.ceil(len(items) / size)
    if page > max(pages, 1):
        raise ApiError(400, "page_out_of_range",
                       f"Page out of range, page: {page} page size: {size}, len: {len(items)}")
    chunk = items[(page - 1) * size:page * size]
    return {"filtered_count": len(items), "item_count": len(chunk), "items": chunk,
            "page": page, "page_count": pages, "page_size": size, "total_count": total}


def apply_list_query(query: Mapping[str, str], items: list[Any]) -> Any:
    """``items`` sorted, paginated and cut to ``columns`` as ``query`` asks (a list, or the
    page object when ``page`` is given).

    Raises:
        ApiError (400): bad pagination parameters (see the module docstring).
    """
    field = query.get("sort")
    if field:
        items = sorted(items, key=lambda i: _term_order(_get(i, field)),
                       reverse=query.get("sort_reverse") == "true")
    result: Any = _page(query, items) if "page" in query else items
    columns = [c for c in query.get("columns", "").split(",") if c]
    if columns:
        if isinstance(result, dict):
            result["items"] = [_columns(i, columns) for i in result["items"]]
        else:
            result = [_columns(i, columns) for i in result]
    return result


@web.middleware
async def list_query_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    """Apply :func:`apply_list_query` to a GET's list answer when the query asks for it."""
    response = await handler(request)
    if request.method != "GET" or not PARAMETERS.intersection(request.query):
        return response
    items = response.get(LIST_DATA) if isinstance(response, web.Response) else None
    if items is None:
        return response
    return web.json_response(apply_list_query(request.query, items))
