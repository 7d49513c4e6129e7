"""The management HTTP API as an aiohttp application, run in the broker's event loop.

:func:`start_management` serves :func:`build_app` on ``host:port`` (RabbitMQ's 15672 by
default; 0 picks a free port, see ``runner.addresses``) and returns the runner that
:func:`stop_management` stops. Handlers touch the broker directly: they run on the loop
thread, between two AMQP frames, like any channel does.

Every response to a failure is JSON as RabbitMQ's management plugin writes it
(:mod:`management.errors`). A POST whose body a cross-site form could send is refused with
415 before its route runs (:mod:`management.bodies`). After each request that may change something
(anything but GET/HEAD) the broker is told, so changed definitions are persisted and
persistent messages published over HTTP are written, as after a batch of AMQP frames.

Source: https://www.rabbitmq.com/docs/management#http-api.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Sequence
from typing import TYPE_CHECKING

from aiohttp import web

from amqp_common.errors import AMQPError
from management.access_changes import shares_document
from management.auth import Handler, auth_middleware
from management.bodies import content_type_middleware
from management.errors import ApiError, from_amqp, not_found
from management.listing import list_query_middleware
from management.routes import all_routes
from management.routes.ui_files import add_ui_routes
from management.serve import runner_port, serve_app, stop_runner
from management.state import STATE_KEY, ManagementState, node_name

if TYPE_CHECKING:
    from broker.broker import Broker

log = logging.getLogger("amqpq.management")

DEFAULT_PORT = 15672
DEFAULT_TLS_PORT = 15671  # RabbitMQ's management.ssl.port


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Turn ApiError/AMQPError/unknown paths into RabbitMQ-shaped JSON errors."""
    try:
        return await handler(request)
    except ApiError as exc:
        return exc.response()
    except AMQPError as exc:
        return from_amqp(exc).response()
    except web.HTTPNotFound:
        return not_found().response()
    except web.HTTPException:
        raise
    except Exception:
        log.exception("management request %s %s failed", request.method, request.path)
        return ApiError(500, "internal_error", "see the broker log").response()


@web.middleware
async def persist_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """After a request that may change state, let the broker persist what changed."""
    try:
        return await handler(request)
    finally:
        if request.method not in ("GET", "HEAD", "OPTIONS"):
            broker = request.app[STATE_KEY].broker
            workers = getattr(broker, "workers", None)
            if shares_document(broker, request.path):
                # --workers N: the other workers take the same users, vhosts, policies...
                # (a cluster orders most such changes as deltas: management.access_changes)
                workers.share_access(request.path.startswith("/api/definitions"))
            for hook in ("mark_changed", "after_batch"):
                fn = getattr(broker, hook, None)
                if callable(fn):
                    try:
                        fn()
                    except Exception:
                        log.exception("broker.%s failed after %s %s", hook, request.method,
                                      request.path)


def build_app(broker: Broker, amqp_host: str = "127.0.0.1", amqp_port: int = 5672
              ) -> web.Application:
    """The management application for ``broker`` (AMQP listener address for connection
    names)."""
    # the Content-Type check after authentication (401 first, as RabbitMQ) and before
    # anything runs or is persisted
    app = web.Application(middlewares=[error_middleware, auth_middleware,
                                       content_type_middleware, persist_middleware,
                                       list_query_middleware],
                          client_max_size=64 * 1024 * 1024)
    app[STATE_KEY] = ManagementState(broker, amqp_host, amqp_port,
                                     node=broker.config.node_name or node_name())
    for table in all_routes():
        app.add_routes(table)
    add_ui_routes(app)  # the web UI at /, after the API
    return app


async def start_management(broker: Broker, host: str | Sequence[str],
                           port: int = DEFAULT_PORT, amqp_port: int | None = None,
                           optional: Sequence[str] = (),
                           ssl_context: ssl.SSLContext | None = None) -> web.AppRunner:
    """Serve the management API on ``port`` of every address in ``host`` in the running loop.

    Args:
        host: one address or several (the AMQP listener's); port 0 picks a free port on
            the first and binds the others to it.
        optional: addresses whose failure is logged and skipped (defaulted ::1).
        ssl_context: serve HTTPS with it (None: HTTP).

    Raises:
        ListenError (an OSError): an address cannot be bound.
    """
    hosts = [host] if isinstance(host, str) else list(host)
    app = build_app(broker, hosts[0],
                    amqp_port if amqp_port is not None else broker.config.port)
    runner = await serve_app(app, hosts, port, optional, ssl_context)
    bound = runner_port(runner)
    app[STATE_KEY].http_port = bound
    log.info("management API listening on %s port %d (%s)", ", ".join(hosts), bound,
             "https" if ssl_context is not None else "http")
    return runner


management_port = runner_port  # the port a management runner listens on
stop_management = stop_runner  # stop serving (idempotent; None is accepted)
