"""Serving an aiohttp application on the broker's listen addresses: one runner, one site per
address, the same port on each (the management API on 15672, Prometheus on 15692).

Port 0 picks a free port on the first address and binds the others to it; addresses in
``optional`` (a defaulted ::1) may fail with a warning (:func:`broker.listeners.bind_all`).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable, Sequence

from aiohttp import web

from broker.listeners import bind_all


async def serve_app(app: web.Application, hosts: Sequence[str], port: int,
                    optional: Sequence[str] = (),
                    ssl_context: ssl.SSLContext | None = None) -> web.AppRunner:
    """Serve ``app`` on ``port`` of every address in ``hosts`` in the running loop; the port
    bound is :func:`runner_port`; HTTPS when ``ssl_context`` is given.

    Raises:
        ListenError (an OSError): an address cannot be bound (nothing is left listening).
    """
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()

    async def bind(one: str, port: int) -> int:
        site = web.TCPSite(runner, one, port, reuse_address=True, ssl_context=ssl_context)
        await site.start()
        return runner_port(runner)

    try:
        await bind_all(bind, hosts, port, optional)
    except BaseException:
        await runner.cleanup()
        raise
    return runner


def runner_port(runner: web.AppRunner) -> int:
    """The TCP port the runner listens on."""
    return int(runner.addresses[0][1])


async def stop_runner(runner: web.AppRunner | None) -> None:
    """Stop serving (idempotent; None is accepted)."""
    if runner is not None:
        await runner.cleanup()


async def start_listener(start: Callable[[int], Awaitable[web.AppRunner]],
                         requested: int | None, amqp_port: int, default: int, what: str,
                         log: logging.Logger) -> web.AppRunner | None:
    """Start an HTTP listener of the broker (``start(port)``) on the ``requested`` port, else
    on ``default`` (0, a free port, when the AMQP port is 0). A requested port that cannot be
    bound stops the start; the default one being taken (a RabbitMQ on the same machine) only
    logs ``{what} not started: cannot listen on ...`` and gives None.

    Raises:
        OSError: the requested port cannot be bound.
    """
    port = requested if requested is not None else (0 if amqp_port == 0 else default)
    try:
        return await start(port)
    except OSError as exc:
        if requested is not None:
            raise
        log.error("%s not started: cannot listen on %s", what, exc.strerror)
        return None
