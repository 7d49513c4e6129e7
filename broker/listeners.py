"""Listening on several addresses with one port: the AMQP, AMQPS and management listeners.

With no ``--host`` the broker listens on both loopbacks, 127.0.0.1 and ::1, so a client that
resolves ``localhost`` to ::1 first (Node.js 17+, Java with IPv6 preferred) connects as it
does to RabbitMQ, whose default listener is every interface. Given ``--host`` values are
bound exactly as given. Port 0 picks a free port on the first address and binds the others
to the same one, so every address answers on the port the broker prints.

Source: https://www.rabbitmq.com/docs/networking#interfaces (``listeners.tcp``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Sequence

log = logging.getLogger("amqpq.listeners")



class ListenError(OSError):
    """An address could not be bound; ``strerror`` is ``host:port: reason``."""


def format_host(host: str) -> str:
    """``host`` as it stands in a URL: IPv6 addresses in brackets (``[::1]``)."""
    return f"[{host}]" if ":" in host else host


async def bind_all(
    bind: Callable[[str, int], Awaitable[int]],
    hosts: Sequence[str],
    port: int,
    optional: Sequence[str] = (),
) -> int:
    """Bind ``port`` on every address of ``hosts``; returns the port bound (> 0).

    Args:
        bind: binds one (host, port) and returns the port it got (port 0: a free one).
        hosts: addresses in order; the first decides the port when ``port`` is 0.
        port: TCP port, 0 for a free one.
        optional: addresses whose failure is logged and skipped (::1 on a machine without
            IPv6, when the address was defaulted rather than asked for).

    Raises:
        ListenError (an OSError): an address that is not optional cannot be bound (strerror names
            ``host:port``), or none could.
    """
    bound = 0
    for host in hosts:
        try:
            bound = await bind(host, bound or port)
        except OSError as exc:
            where = f"{format_host(host)}:{bound or port}"
            # asyncio's strerror repeats the address; the errno's own text is enough
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            if host in optional:
                log.warning("not listening on %s: %s", where, reason)
                continue
            raise ListenError(exc.errno, f"{where}: {reason}") from exc
    if not bound:
        raise ListenError(0, f"no address to listen on among {', '.join(hosts)}")
    return bound
