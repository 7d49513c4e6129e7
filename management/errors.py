"""The management API's error responses, shaped as RabbitMQ's management plugin writes them.

* 404 ``{"error": "Object Not Found", "reason": "Not Found"}`` for a missing vhost, queue,
  user... named in the path;
* 400 ``{"error": "bad_request", "reason": ...}`` for a body that is not JSON (``not_json``), a
  missing key (``[{key_missing,count}]``) or a broker refusal (406/405/503: the AMQP
  explanation, e.g. ``inequivalent arg 'durable' for queue 'q' in vhost '/': ...``);
* 404 ``{"error": "not_found", "reason": "no exchange 'x' in vhost '/'"}`` when the broker
  answers 404 to an operation (binding to a missing exchange);
* 401 ``{"error": "not_authorised", "reason": "Access refused."}`` when the broker answers 403.

Checked against RabbitMQ 3.10.8 with curl. Source:
https://www.rabbitmq.com/docs/management#http-api and ``rabbit_mgmt_util.erl``.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from amqp_common.errors import AMQPError, ReplyCode


class ApiError(Exception):
    """Raised by a handler; the error middleware turns it into a JSON response."""

    def __init__(self, status: int, error: str, reason: Any,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(f"{status} {error}: {reason}")
        self.status = status
        self.error = error
        self.reason = reason
        self.headers = headers or {}

    def response(self) -> web.Response:
        return web.json_response({"error": self.error, "reason": self.reason},
                                 status=self.status, headers=self.headers)


def not_found() -> ApiError:
    """404 ``Object Not Found``: the object named in the path does not exist."""
    return ApiError(404, "Object Not Found", "Not Found")


def bad_request(reason: Any) -> ApiError:
    """400 ``bad_request``."""
    return ApiError(400, "bad_request", reason)


def not_authorised(reason: str) -> ApiError:
    """401 ``not_authorised`` (a logged-in user lacking a tag or a permission)."""
    return ApiError(401, "not_authorised", reason)


def login_failed() -> ApiError:
    """401 for wrong credentials; RabbitMQ spells this one ``not_authorized``."""
    return ApiError(401, "not_authorized", "Login failed",
                    {"WWW-Authenticate": 'Basic realm="RabbitMQ Management"'})


def key_missing(keys: list[str]) -> ApiError:
    """400 for required body keys that are absent: ``[{key_missing,count}]``."""
    return bad_request("[" + ",".join(f"{{key_missing,{k}}}" for k in keys) + "]")


def from_amqp(exc: AMQPError) -> ApiError:
    """The HTTP error for a broker refusal, as the management plugin maps channel errors."""
    if exc.code == ReplyCode.ACCESS_REFUSED:
        return not_authorised("Access refused.")
    if exc.code == ReplyCode.NOT_FOUND:
        return ApiError(404, "not_found", exc.explanation)
    return bad_request(exc.explanation)
