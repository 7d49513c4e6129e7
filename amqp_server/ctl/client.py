"""A small synchronous client of the management HTTP API (stdlib ``urllib``), raising
:class:`CtlError` with one line that names the problem.

Source: https://www.rabbitmq.com/docs/management#http-api.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote

import click

#: Exit codes, as rabbitmqctl uses them (sysexits.h).
EX_UNAVAILABLE = 69  # broker not reachable
EX_ERROR = 1


class CtlError(click.ClickException):
    """An error reported as one line (``Error: vhost 'x' does not exist``), exit code 1."""

    exit_code = EX_ERROR


class Unreachable(CtlError):
    """The broker's management API does not answer (exit code 69, as rabbitmqctl)."""

    exit_code = EX_UNAVAILABLE


class HttpError(Exception):
    """A non-2xx answer: status and the JSON ``reason`` (or the body)."""

    def __init__(self, status: int, error: str, reason: str) -> None:
        super().__init__(f"{status} {error}: {reason}")
        self.status = status
        self.error = error
        self.reason = reason


def path(*segments: str) -> str:
    """``/api/queues/%2F/q`` from ``("queues", "/", "q")``: every segment quoted whole."""
    return "/api/" + "/".join(quote(s, safe="") for s in segments)


class ApiClient:
    """Requests to one broker's management API with basic authentication.

    Args:
        base_url: ``http://127.0.0.1:15672`` (no trailing ``/api``).
        user, password: credentials (guest/guest by default, loopback only).
        timeout: seconds per request.
    """

    def __init__(self, base_url: str, user: str, password: str, timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        if self.base_url.endswith("/api"):
            self.base_url = self.base_url[:-4]
        self.user = user
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        self._auth = f"Basic {token}"
        self.timeout = timeout

    def request(self, method: str, url_path: str, body: Any = None,
                headers: dict[str, str] | None = None) -> Any:
        """The decoded JSON answer (None for an empty one).

        Raises:
            HttpError: the API answered with an error status.
            CtlError: the broker is not reachable (exit code 69).
        """
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base_url + url_path, data=data, method=method)
        req.add_header("Authorization", self._auth)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        for key, value in (headers or {}).items():
            req.add_header(key, value)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raise _http_error(exc) from None
        except (TimeoutError, urllib.error.URLError, OSError):
            raise Unreachable(f"broker not reachable at {self.base_url}") from None
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise CtlError(f"unexpected answer from {self.base_url}: not JSON") from None

    def get(self, url_path: str) -> Any:
        return self.request("GET", url_path)

    def put(self, url_path: str, body: Any) -> Any:
        return self.request("PUT", url_path, body)

    def post(self, url_path: str, body: Any) -> Any:
        return self.request("POST", url_path, body)

    def delete(self, url_path: str, headers: dict[str, str] | None = None) -> Any:
        return self.request("DELETE", url_path, headers=headers)


def _http_error(exc: urllib.error.HTTPError) -> HttpError:
    raw = b""
    try:
        raw = exc.read()
    except OSError:
        pass
    error, reason = exc.reason if isinstance(exc.reason, str) else "", ""
    try:
        doc = json.loads(raw) if raw.strip() else {}
    except ValueError:
        doc = {}
    if isinstance(doc, dict):
        error = str(doc.get("error", error))
        value = doc.get("reason", "")
        reason = value if isinstance(value, str) else json.dumps(value)
    return HttpError(exc.code, error, reason.strip())
