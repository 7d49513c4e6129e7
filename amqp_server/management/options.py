"""Command-line options of the management API and what the server does with them at start.

``--management-port`` (default 15672, RabbitMQ's; when ``--port 0`` is given without it, 0
too, so a broker started on free ports does not take RabbitMQ's), ``--no-management``, and
``--definitions FILE`` (a definitions document imported at every start, like RabbitMQ's
``load_definitions``). The HTTP listener binds the AMQP host. An explicitly requested port
that is taken stops the start (``OSError``); the default one being taken only logs an error,
so that a broker still runs beside a RabbitMQ that holds 15672.

Source: https://www.rabbitmq.com/docs/management#configuration,
https://www.rabbitmq.com/docs/definitions#import-on-boot.
"""

from __future__ import annotations

import argparse
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from amqp_server.management.app import DEFAULT_PORT, start_management
from vhosts.definitions import DefinitionsError, import_definitions

if TYPE_CHECKING:
    from amqp_server.broker import Broker
    from amqp_server.config import BrokerConfig

log = logging.getLogger("amqpq.management")

_ATTR = "management_options"


@dataclass
class ManagementOptions:
    """``enabled``; ``port`` (None: the default); ``definitions``: file to import at start."""

    enabled: bool = False
    port: int | None = None
    definitions: Path | None = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--management-port``, ``--no-management``, ``--definitions`` to ``parser``."""
    parser.add_argument("--management-port", type=int, default=None,
                        help=f"management HTTP API port (default {DEFAULT_PORT}; 0 with "
                        "--port 0)")
    parser.add_argument("--no-management", action="store_true",
                        help="do not serve the management HTTP API")
    parser.add_argument("--definitions", default=None, metavar="FILE",
                        help="RabbitMQ definitions JSON file to import at start")


def attach(config: BrokerConfig, args: argparse.Namespace,
           parser: argparse.ArgumentParser) -> BrokerConfig:
    """Record the parsed options on ``config`` (exits 2 on a bad port); returns ``config``."""
    port = args.management_port
    if port is not None and not 0 <= port <= 65535:
        parser.error(f"--management-port must be 0..65535, got {port}")
    definitions = Path(args.definitions) if args.definitions else None
    if definitions is not None and not definitions.is_file():
        parser.error(f"--definitions: no such file: {definitions}")
    setattr(config, _ATTR, ManagementOptions(not args.no_management, port, definitions))
    return config


def options_of(config: BrokerConfig) -> ManagementOptions:
    """The options recorded by :func:`attach` (management off for a config made in code)."""
    found = getattr(config, _ATTR, None)
    return found if isinstance(found, ManagementOptions) else ManagementOptions()


def load_definitions(broker: Broker, config: BrokerConfig) -> None:
    """Import ``--definitions FILE`` if given.

    Raises:
        ValueError: unreadable JSON or a document the import refuses (nothing changed).
    """
    path = options_of(config).definitions
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
    opts = options_of(config)
    if not opts.enabled:
        return None
    port = opts.port
    if port is None:
        port = 0 if config.port == 0 else DEFAULT_PORT
    try:
        return await start_management(broker, config.listen_hosts, port, amqp_port=amqp_port,
                                      optional=config.optional_hosts)
    except OSError as exc:
        if opts.port is not None:
            raise
        log.error("management API not started: cannot listen on %s", exc.strerror)
        return None
