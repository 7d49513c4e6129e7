"""HTTP handlers asking a queue that may live on another worker or node.

A queue's :class:`~queue_store.queue_kind.QueueKind` answers Basic.Get, purge and its
counts through a continuation (at once for a queue here, once its home answered for one on
another worker or node); these coroutines turn that into an awaitable result for the
management API, which worker 0 serves for every worker's queues. Errors the home raises
(:class:`~amqp_common.errors.AMQPError`: 404 when its worker is down or does not answer)
are raised from the await, for the route to turn into its HTTP status.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from amqp_common.errors import AMQPError
from queue_store.backing import QueuedMessage
from queue_store.queue_kind import QueueKind

__all__ = ["HttpRequest", "get", "purge"]


class HttpRequest:
    """A :class:`~queue_store.queue_kind.Requester` for one HTTP request: the answer (or
    the AMQPError its continuation raised) goes to :attr:`future`."""

    def __init__(self) -> None:
        self.future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    def await_answer(self) -> None:
        """Nothing to hold: the handler awaits :attr:`future`."""

    def answered(self, run: Callable[[], None]) -> None:
        try:
            run()
        except AMQPError as exc:
            if not self.future.done():
                self.future.set_exception(exc)

    def done(self, value: Any) -> None:
        if not self.future.done():
            self.future.set_result(value)


async def get(q: QueueKind, no_ack: bool) -> tuple[QueuedMessage | None, int]:
    """Basic.Get from ``q``: ``(message or None, ready messages left)``. Raises AMQPError."""
    request = HttpRequest()
    q.request_get(request, no_ack, lambda qm, left: request.done((qm, left)))
    result: tuple[QueuedMessage | None, int] = await request.future
    return result


async def purge(q: QueueKind) -> int:
    """Queue.Purge of ``q``: messages dropped. Raises AMQPError."""
    request = HttpRequest()
    q.request_purge(request, request.done)
    count: int = await request.future
    return count
