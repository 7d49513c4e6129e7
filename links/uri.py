"""AMQP URIs as RabbitMQ's shovel and federation parameters take them: ``amqp://`` and
``amqps://`` (RabbitMQ's URI spec; an empty host is the local broker), the error text of one
``amqp_uri:parse`` refuses, and the URI without credentials for a status.

Source: https://www.rabbitmq.com/docs/uri-spec, ``amqp_uri.erl``.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

__all__ = ["Endpoint", "endpoint", "mask_uri", "uri_error"]


def uri_error(uri: str) -> str | None:
    """RabbitMQ's text for a URI ``amqp_uri:parse`` refuses (``"foo://x" not a valid URI:
    {{unexpected_uri_scheme,"foo"},"foo://x"}``), or None: the shovel and federation
    parameters' check."""
    try:
        parts = urlsplit(uri)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        return f'"{uri}" not a valid URI: {{unable_to_parse_uri,{{malformed_uri,"{uri}"}}}}'
    if parts.scheme not in ("amqp", "amqps"):
        scheme = parts.scheme or uri.split(":", 1)[0]
        return f'"{uri}" not a valid URI: {{{{unexpected_uri_scheme,"{scheme}"}},"{uri}"}}'
    return None


def mask_uri(uri: str) -> str:
    """``uri`` without user name and password (``amqp://u:p@h/v`` -> ``amqp://h/v``), as
    RabbitMQ shows shovel URIs; a URI that does not parse is replaced by ``<invalid uri>``."""
    try:
        parts = urlsplit(uri)
    except ValueError:
        return "<invalid uri>"
    if "@" not in parts.netloc:
        return uri
    host = parts.netloc.rsplit("@", 1)[1]
    return parts._replace(netloc=host).geturl()


@dataclass(frozen=True)
class Endpoint:
    """Where one URI connects: ``local`` when the host is empty (this broker)."""

    scheme: str
    host: str
    port: int
    user: str
    password: str
    vhost: str
    query: str
    local: bool


def endpoint(uri: str) -> Endpoint:
    """Split an ``amqp(s)://user:pass@host:port/vhost?query`` URI (RabbitMQ's defaults:
    guest/guest, port 5672 or 5671, vhost ``/`` when the path is empty; ``%2F`` decoded).

    Raises:
        ValueError: not an amqp/amqps URI.
    """
    parts = urlsplit(uri)
    if parts.scheme not in ("amqp", "amqps"):
        raise ValueError(f"unexpected URI scheme {parts.scheme!r}")
    path = parts.path[1:] if parts.path.startswith("/") else parts.path
    return Endpoint(
        scheme=parts.scheme, host=parts.hostname or "",
        port=parts.port or (5671 if parts.scheme == "amqps" else 5672),
        user=unquote(parts.username) if parts.username is not None else "guest",
        password=unquote(parts.password) if parts.password is not None else "guest",
        vhost=unquote(path) if parts.path else "/", query=parts.query,
        local=not parts.hostname)
