"""Request bodies of the management API: which POSTs are read at all, and JSON within limits.

Cross-site requests. A page of another site can make the browser send a POST without a CORS
preflight when its ``Content-Type`` is ``text/plain``, ``application/x-www-form-urlencoded``
or ``multipart/form-data`` (an HTML form), or when it has none (``fetch`` with an untyped
body); with credentials the browser remembers (HTTP basic auth), such a POST would run as
the user. :func:`content_type_middleware` answers every such POST 415 before any route
runs, so nothing changes. PUT and DELETE cannot be sent cross-site without a preflight
(which amqpq never grants: it sends no CORS headers), so they are taken with any
``Content-Type``, as RabbitMQ takes them.

Deliberate differences from RabbitMQ 3.10.8, which refuses a non-JSON POST only on
``/api/definitions`` (415 with an empty body) and takes any ``Content-Type`` on publish,
get, bindings and the other POSTs: amqpq refuses those four kinds on every POST, and its
415 has a JSON body ``{"error": "unsupported_media_type", "reason": ...}``.

Nesting. AMQP field tables may nest :data:`~amqp_common.properties.MAX_TABLE_DEPTH` levels
(a table or an array inside a table is one level deeper): :func:`check_table` applies the
same limit to the JSON tables the API turns into AMQP ones (publish ``headers``, queue,
exchange and binding ``arguments``), and :func:`parse_json` refuses any body nested deeper
than :data:`MAX_BODY_DEPTH`, so no conversion recurses without bound (a body too deep for
Python's own parser is refused the same way). Both are 400 ``bad_request``; RabbitMQ has no
such limit.

Source: https://fetch.spec.whatwg.org/#cors-safelisted-request-header,
https://www.rabbitmq.com/docs/management#http-api.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from amqp_common.properties import MAX_TABLE_DEPTH
from management.auth import Handler
from management.errors import ApiError, bad_request

#: the media types an HTML form (or a no-cors fetch) can send without a preflight
FORM_MEDIA_TYPES = frozenset({"text/plain", "application/x-www-form-urlencoded",
                              "multipart/form-data"})
#: nesting accepted in a request body: a field table's limit plus the levels around it
#: (``{"properties": {"headers": ...}}``, ``{"queues": [{"arguments": ...}]}``)
MAX_BODY_DEPTH = MAX_TABLE_DEPTH + 8

NOT_JSON_TYPE = ("a POST must carry a JSON body with Content-Type: application/json "
                 "(text/plain, form or multipart bodies, or none, are refused: another "
                 "site's page could send them)")


def media_type(header: str) -> str:
    """The essence of a ``Content-Type`` value, lower-cased: ``text/plain`` for
    ``Text/Plain ; charset=utf-8``."""
    return header.split(";", 1)[0].strip().lower()


def unsupported_media_type(reason: str = NOT_JSON_TYPE) -> ApiError:
    """415 ``{"error": "unsupported_media_type", "reason": ...}``."""
    return ApiError(415, "unsupported_media_type", reason)


@web.middleware
async def content_type_middleware(request: web.Request, handler: Handler
                                  ) -> web.StreamResponse:
    """Refuse (415) a POST whose ``Content-Type`` is one a cross-site form can send, or
    missing, before the route runs."""
    if request.method == "POST":
        types = request.headers.getall("Content-Type", [])
        if not types or any(media_type(t) in FORM_MEDIA_TYPES for t in types):
            raise unsupported_media_type()
    return await handler(request)


def _too_deep(value: Any, limit: int) -> bool:
    """Whether ``value`` has a dict or list nested more than ``limit`` levels below it
    (``value`` itself is level 0). Iterative: any depth is safe to look at."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children
                     if isinstance(child, (dict, list)))
    return False


def check_table(value: Any, what: str) -> None:
    """Raises 400 when the JSON object ``value``, to become an AMQP field table, nests
    tables or arrays more than :data:`MAX_TABLE_DEPTH` levels (AMQP's limit; the table is
    level 0)."""
    if _too_deep(value, MAX_TABLE_DEPTH):
        raise bad_request(f"{what} nested deeper than {MAX_TABLE_DEPTH} levels")


def parse_json(raw: bytes, not_json: str = "not_json") -> Any:
    """The JSON document in ``raw``.

    Raises:
        ApiError: 400 ``not_json`` (the ``not_json`` given) when it does not parse, 400
            "request body nested deeper than 72 levels" when it nests too deeply.
    """
    try:
        data = json.loads(raw)
    except RecursionError:
        data = None
        too_deep = True
    except (ValueError, UnicodeDecodeError):
        raise bad_request(not_json) from None
    else:
        too_deep = _too_deep(data, MAX_BODY_DEPTH - 1)
    if too_deep:
        raise bad_request(f"request body nested deeper than {MAX_BODY_DEPTH} levels")
    return data
