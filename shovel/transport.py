"""aiormq connections that write coalesced: the frames written during one event-loop turn go
out in one ``send`` instead of one each.

aiormq writes every frame (a publish, an ack) to its ``StreamWriter`` as it comes, and
asyncio sends each write at once when the socket buffer is empty: a shovel moving thousands of
messages a second made one system call per message and per ack (profiled: most of a link's
time on a loaded 2-core machine). aiormq's public extension point, a
:class:`aiormq.connection.TransportFactory`, gives it a writer that buffers ``write`` and
sends the buffer at the end of the loop turn (``loop.call_soon``), on ``drain`` and before
``close``. Order is kept (one buffer per connection, flushed in order).

Source: aiormq ``TransportFactory`` (aiormq/connection.py), asyncio streams.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiormq.connection import TransportFactory
from aiormq.exceptions import AMQPConnectionError
from yarl import URL


class CoalescingWriter:
    """A ``StreamWriter`` stand-in: ``write`` buffers, the buffer goes out once per loop
    turn; everything else is the wrapped writer's."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self._buffer: list[bytes] = []
        self._scheduled = False

    def write(self, data: bytes) -> None:
        self._buffer.append(data)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        """Hand what is buffered to the transport (one ``send``)."""
        self._scheduled = False
        if self._buffer and not self._writer.is_closing():
            data = b"".join(self._buffer)
            self._buffer.clear()
            self._writer.write(data)
        else:
            self._buffer.clear()

    async def drain(self) -> None:
        self.flush()
        await self._writer.drain()

    def close(self) -> None:
        self.flush()
        self._writer.close()

    def __getattr__(self, name: str) -> Any:  # transport, is_closing, wait_closed...
        return getattr(self._writer, name)


class CoalescingTransportFactory(TransportFactory):
    """TCP or TLS (``amqps``) connections whose writer is a :class:`CoalescingWriter`."""

    async def create(self, url: URL, **kwargs: Any
                     ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        provider = kwargs.pop("ssl_context_provider", None)
        ssl = None
        if url.scheme == "amqps" and provider is not None:
            ssl = await provider.get_context()
        try:
            reader, writer = await asyncio.open_connection(host=url.host, port=url.port,
                                                           ssl=ssl, **kwargs)
        except OSError as exc:
            raise AMQPConnectionError(*exc.args) from exc
        return reader, CoalescingWriter(writer)  # type: ignore[return-value]
