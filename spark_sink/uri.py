"""AMQP URI parsing (``amqp[s]://user:pass@host:port/vhost?heartbeat=N``).

Source: RabbitMQ URI specification, https://www.rabbitmq.com/docs/uri-spec and
https://www.rabbitmq.com/docs/uri-query-parameters. Like pika, an empty path means the default
vhost "/" (write ``%2F`` to be explicit); user and password default to guest/guest.
``amqps://`` means TLS (default port 5671); its certificates come from the sink's ``ssl*``
options (:mod:`spark_sink.tls`), not from the URI.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlsplit

DEFAULT_PORT = 5672
DEFAULT_TLS_PORT = 5671
QUERY_KEYS = ("heartbeat", "connection_timeout")


class UriError(ValueError):
    """A URI that cannot be used (message names the problem, never the password)."""


@dataclass(frozen=True)
class BrokerAddress:
    """Where and as whom to connect.

    Attributes:
        host, port: TCP address (port 5672, amqps 5671, unless given).
        username, password: PLAIN credentials (guest/guest unless given).
        vhost: virtual host ("/" unless given).
        heartbeat: heartbeat to request (seconds; None = accept the broker's offer, 0 = off).
        connection_timeout: TCP connect + handshake limit (seconds; None = the sink's timeout).
        tls: ``amqps://``: speak TLS.
    """

    host: str
    port: int = DEFAULT_PORT
    username: str = "guest"
    password: str = "guest"
    vhost: str = "/"
    heartbeat: int | None = None
    connection_timeout: float | None = None
    tls: bool = False

    def redacted(self) -> str:
        """The address as a URI without the password (safe for logs and errors)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        vhost = self.vhost.replace("%", "%25").replace("/", "%2F")
        scheme = "amqps" if self.tls else "amqp"
        return f"{scheme}://{self.username}@{host}:{self.port}/{vhost}"


def parse_uri(uri: str) -> BrokerAddress:
    """Parse one ``amqp://`` or ``amqps://`` URI (raises :class:`UriError`)."""
    text = uri.strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise UriError(f"malformed AMQP URI {_safe(text)!r}: {exc}") from None
    if parts.scheme not in ("amqp", "amqps"):
        raise UriError(f"{_safe(text)!r}: expected an amqp:// or amqps:// URI")
    tls = parts.scheme == "amqps"
    if not parts.hostname:
        raise UriError(f"{_safe(text)!r}: no host")
    path = parts.path[1:] if parts.path.startswith("/") else parts.path
    if "/" in path:
        raise UriError(f"{_safe(text)!r}: a vhost containing '/' must be written %2F")
    vhost = unquote(path) if path else "/"
    heartbeat: int | None = None
    connection_timeout: float | None = None
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        try:
            if key == "heartbeat":
                heartbeat = int(value)
                if heartbeat < 0:
                    raise ValueError
            elif key == "connection_timeout":
                connection_timeout = float(value)
                if connection_timeout <= 0:
                    raise ValueError
            else:
                raise UriError(
                    f"{_safe(text)!r}: unsupported query parameter {key!r} "
                    f"(supported: {', '.join(QUERY_KEYS)})"
                )
        except ValueError:
            raise UriError(f"{_safe(text)!r}: bad value for {key}: {value!r}") from None
    return BrokerAddress(
        host=parts.hostname,
        port=port or (DEFAULT_TLS_PORT if tls else DEFAULT_PORT),
        username=unquote(parts.username) if parts.username is not None else "guest",
        password=unquote(parts.password) if parts.password is not None else "guest",
        vhost=vhost,
        heartbeat=heartbeat,
        connection_timeout=connection_timeout,
        tls=tls,
    )


def parse_uri_list(value: str) -> list[BrokerAddress]:
    """Parse a comma-separated failover list of URIs (tried in the order given)."""
    items = [item for item in (v.strip() for v in value.split(",")) if item]
    if not items:
        raise UriError("no URI given")
    return [parse_uri(item) for item in items]


def _safe(uri: str) -> str:
    """The URI with any password replaced by ``***``."""
    try:
        parts = urlsplit(uri)
        if parts.password is None:
            return uri
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
        return parts._replace(netloc=netloc).geturl()
    except ValueError:
        return "<unparseable URI>"
