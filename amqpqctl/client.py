"""A small synchronous client of the management HTTP API (stdlib ``urllib``: no extra
dependency), raising :class:`CtlError` with one line that names what was reached and what
was expected: ``port 5672 on 127.0.0.1 speaks AMQP, not HTTP: the management port is 15672
by default``, ``nothing listens on port 15673 on 127.0.0.1 (connection refused) ...``, ``no
answer from http://h:15672 within 30s (--timeout) ...``, ``... answered HTTP 200 with
text/html, not JSON ...``.

Source: https://www.rabbitmq.com/docs/management#http-api.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote, urlsplit

import click

#: Exit codes, as rabbitmqctl uses them (sysexits.h).
EX_UNAVAILABLE = 69  # broker not reachable
EX_ERROR = 1
#: the management API's port when none is configured
DEFAULT_PORT = 15672


class CtlError(click.ClickException):
    """An error reported as one line (``Error: vhost 'x' does not exist``), exit code 1;
    line breaks in ``message`` become spaces."""

    exit_code = EX_ERROR

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


class Unreachable(CtlError):
    """The broker's management API does not answer (exit code 69, as rabbitmqctl)."""

    exit_code = EX_UNAVAILABLE


class HttpError(Exception):
    """A non-2xx answer: status and the JSON ``reason`` (or the body)."""

    def __init__(self, status: int, error: str, reason: str, url: str = "",
                 doc: Any = None) -> None:
        super().__init__(f"{status} {error}: {reason}")
        self.status = status
        self.error = error
        self.reason = reason
        self.url = url
        self.doc = doc  # the JSON body, when it was one (a health check's 503: its fields)


def path(*segments: str) -> str:
    """``/api/queues/%2F/q`` from ``("queues", "/", "q")``: every segment quoted whole."""
    return "/api/" + "/".join(quote(s, safe="") for s in segments)


class ApiClient:
    """Requests to one broker's management API with basic authentication.

    Args:
        base_url: ``http://127.0.0.1:15672`` (no trailing ``/api``).
        user, password: credentials (guest/guest by default, loopback only).
        timeout: seconds per request.
        ssl_context: for an ``https`` URL (None: Python's default verification).
    """

    def __init__(self, base_url: str, user: str, password: str, timeout: float = 30.0,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        if self.base_url.endswith("/api"):
            self.base_url = self.base_url[:-4]
        self.user = user
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        self._auth = f"Basic {token}"
        self.timeout = timeout
        self.ssl_context = ssl_context

    def request(self, method: str, url_path: str, body: Any = None,
                headers: dict[str, str] | None = None) -> Any:
        """The decoded JSON answer (None for an empty one).

        Raises:
            HttpError: the API answered with an error status.
            Unreachable: nothing answers HTTP there: refused, timed out, an AMQP or other
                non-HTTP port, an unknown host (exit code 69).
            CtlError: a 2xx answer that is not JSON.
        """
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base_url + url_path, data=data, method=method)
        req.add_header("Authorization", self._auth)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        for key, value in (headers or {}).items():
            req.add_header(key, value)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout,
                                        context=self.ssl_context) as resp:
                raw = resp.read()
                status, content_type = resp.status, resp.headers.get_content_type()
        except urllib.error.HTTPError as exc:
            raise _http_error(exc) from None
        except urllib.error.URLError as exc:  # failed while connecting or sending
            reason = exc.reason
            raise self._unreachable(reason if isinstance(reason, BaseException)
                                    else OSError(str(reason))) from None
        except (http.client.HTTPException, OSError) as exc:  # failed reading the answer
            raise self._unreachable(exc) from None
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise CtlError(f"{self.base_url}{url_path} answered HTTP {status} with "
                           f"{content_type}, not JSON: is {self.base_url} the management "
                           f"API? (port {DEFAULT_PORT} by default)") from None

    def _where(self) -> tuple[str, int]:
        parts = urlsplit(self.base_url)
        try:
            port = parts.port
        except ValueError:
            port = None
        return (parts.hostname or "?",
                port if port is not None else 443 if parts.scheme == "https" else 80)

    def _unreachable(self, exc: BaseException) -> Unreachable:
        """One line for a connection that did not yield an HTTP answer."""
        host, port = self._where()
        at = f"port {port} on {host}"
        hint = f"the management port is {DEFAULT_PORT} by default"
        if isinstance(exc, http.client.RemoteDisconnected | ConnectionResetError) and (
                _speaks_amqp(host, port, min(self.timeout, 5.0))):
            return Unreachable(f"{at} speaks AMQP, not HTTP: {hint}")
        if isinstance(exc, http.client.RemoteDisconnected):
            return Unreachable(f"{at} closed the connection without an HTTP answer (an AMQP "
                               f"or other non-HTTP port?): {hint}")
        if isinstance(exc, http.client.BadStatusLine):
            line = str(exc.args[0]) if exc.args else ""
            if line.startswith("AMQP"):  # the protocol header, AMQP\x00\x00\x09\x01
                return Unreachable(f"{at} speaks AMQP, not HTTP: {hint}")
            return Unreachable(f"{at} does not speak HTTP (it answered {line[:40]!r}): {hint}")
        if isinstance(exc, http.client.HTTPException):
            return Unreachable(f"{at} sent an answer that is not valid HTTP "
                               f"({type(exc).__name__}): {hint}")
        if isinstance(exc, ssl.SSLError):
            return Unreachable(f"TLS with {at} failed: {exc.reason or exc} (--ssl-ca-cert-file, "
                               f"--ssl-insecure)")
        if isinstance(exc, TimeoutError | socket.timeout):
            return Unreachable(f"no answer from {self.base_url} within {self.timeout:g}s "
                               f"(--timeout): is the broker busy, or is this not its "
                               f"management port? ({DEFAULT_PORT} by default)")
        if isinstance(exc, ConnectionRefusedError):
            return Unreachable(f"nothing listens on {at} (connection refused): is the broker "
                               f"running? {hint}")
        if isinstance(exc, socket.gaierror):
            return Unreachable(f"cannot resolve host '{host}': {exc.strerror or exc}")
        if isinstance(exc, ConnectionResetError):
            return Unreachable(f"{at} reset the connection without an HTTP answer (an AMQP "
                               f"or TLS port?): {hint}")
        text = " ".join(str(getattr(exc, "strerror", None) or exc).split())
        return Unreachable(f"cannot reach {self.base_url}: {text or type(exc).__name__}")

    def get(self, url_path: str) -> Any:
        return self.request("GET", url_path)

    def put(self, url_path: str, body: Any) -> Any:
        return self.request("PUT", url_path, body)

    def post(self, url_path: str, body: Any) -> Any:
        return self.request("POST", url_path, body)

    def delete(self, url_path: str, headers: dict[str, str] | None = None) -> Any:
        return self.request("DELETE", url_path, headers=headers)


def _speaks_amqp(host: str, port: int, timeout: float) -> bool:
    """Whether ``host:port`` answers 8 bytes that are not a protocol header with AMQP's
    (``AMQP\\x00\\x00\\x09\\x01``), as an AMQP 0-9-1 server does before closing. Needed
    because a server that closes with our HTTP request unread resets the connection, and the
    reset can discard its header before urllib reads it."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(b"GET / \r\n")  # exactly one protocol header's length
            data = b""
            while len(data) < 4:
                chunk = sock.recv(8)
                if not chunk:
                    break
                data += chunk
    except OSError:
        return False
    return data.startswith(b"AMQP")


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
    return HttpError(exc.code, error, reason.strip(), exc.url, doc)
