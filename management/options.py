"""Command-line options of the management API and what the server does with them at start.

``--management-port`` (default 15672, RabbitMQ's; when ``--port 0`` is given without it, 0
too, so a broker started on free ports does not take RabbitMQ's), ``--no-management``, and
``--definitions FILE`` (a definitions document imported at every start, like RabbitMQ's
``load_definitions``), ``--management-ssl-cert/-key`` (HTTPS instead of HTTP on the same
listener, whose default port is then 15671, RabbitMQ's ``management.ssl.port``). The HTTP
listener binds the AMQP host. An explicitly requested port
that is taken stops the start (``OSError``); the default one being taken only logs an error,
so that a broker still runs beside a RabbitMQ that holds 15672. The parsed options are
``BrokerConfig.management`` (:class:`~broker.config.ManagementOptions`).

Source: https://www.rabbitmq.com/docs/management#configuration,
https://www.rabbitmq.com/docs/management#single-listener-https,
https://www.rabbitmq.com/docs/definitions#import-on-boot.
"""

from __future__ import annotations

import argparse
import json
import logging
import ssl
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from broker.config import ManagementOptions, TLSConfig
from broker.tls_context import make_context
from management.app import DEFAULT_PORT, DEFAULT_TLS_PORT, start_management
from management.serve import start_listener
from vhosts.definitions import DefinitionsError, import_definitions

if TYPE_CHECKING:
    from broker.broker import Broker
    from broker.config import BrokerConfig

log = logging.getLogger("amqpq.management")

__all__ = ["ManagementOptions", "add_arguments", "from_args", "load_definitions",
           "start_for_server"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--management-port``, ``--no-management``, ``--definitions``,
    ``--management-ssl-cert/-key`` to ``parser``."""
    parser.add_argument("--management-port", type=int, default=None,
                        help=f"management HTTP API port (default {DEFAULT_PORT}; 0 with "
                        "--port 0)")
    parser.add_argument("--no-management", action="store_true",
                        help="do not serve the management HTTP API")
    parser.add_argument("--definitions", default=None, metavar="FILE",
                        help="RabbitMQ definitions JSON file to import at start")
    parser.add_argument("--management-ssl-cert", default=None, metavar="FILE",
                        help=f"serve the management API over HTTPS with this certificate "
                        f"(PEM; default port then {DEFAULT_TLS_PORT})")
    parser.add_argument("--management-ssl-key", default=None, metavar="FILE",
                        help="the key of --management-ssl-cert (PEM)")


def from_args(args: argparse.Namespace, parser: argparse.ArgumentParser
              ) -> ManagementOptions:
    """The options of :func:`add_arguments` as parsed (``parser.error``, exit 2, on a bad
    port or a missing definitions file)."""
    port = args.management_port
    if port is not None and not 0 <= port <= 65535:
        parser.error(f"--management-port must be 0..65535, got {port}")
    definitions = Path(args.definitions) if args.definitions else None
    if definitions is not None and not definitions.is_file():
        parser.error(f"--definitions: no such file: {definitions}")
    cert, key = args.management_ssl_cert, args.management_ssl_key
    if bool(cert) != bool(key):
        parser.error("--management-ssl-cert and --management-ssl-key go together")
    for option, path in (("--management-ssl-cert", cert), ("--management-ssl-key", key)):
        if path and not Path(path).is_file():
            parser.error(f"{option}: no such file: {path}")
    return ManagementOptions(not args.no_management, port, definitions,
                             certfile=cert, keyfile=key)


def tls_context(opts: ManagementOptions) -> ssl.SSLContext | None:
    """The HTTPS listener's context (:func:`broker.tls_context.make_context`: TLS 1.2 or
    newer, no client certificates), None for plain HTTP.

    Raises:
        OSError / ssl.SSLError: the certificate or key cannot be read or do not match.
    """
    if opts.certfile is None:
        return None
    return make_context(TLSConfig(certfile=opts.certfile, keyfile=opts.keyfile))


def load_definitions(broker: Broker, config: BrokerConfig) -> None:
    """Import ``--definitions FILE`` if given.

    Raises:
        ValueError: unreadable JSON or a document the import refuses (nothing changed).
    """
    path = config.management.definitions
    if path is None:
        return
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"--definitions {path}: cannot read: {exc}") from None
    try:
        import_definitions(broker, data)
    except DefinitionsError as exc:
        raise ValueError(f"--definitions {path}: {exc}") from None
    log.info("imported definitions from %s", path)


async def start_for_server(broker: Broker, config: BrokerConfig,
                           amqp_port: int) -> web.AppRunner | None:
    """Start the management API as the options say (None when disabled or not started)."""
    opts = config.management
    if not opts.enabled:
        return None
    hosts = (opts.host,) if opts.host else config.listen_hosts
    optional = () if opts.host else config.optional_hosts
    ctx = tls_context(opts)
    return await start_listener(
        lambda port: start_management(broker, hosts, port, amqp_port=amqp_port,
                                      optional=optional, ssl_context=ctx),
        opts.port, config.port, DEFAULT_PORT if ctx is None else DEFAULT_TLS_PORT,
        "management API", log)
