"""Confirmed publishing that survives a dropped connection (one per Spark task).

:class:`ReliablePublisher` keeps the encoded frames of every message the broker has not
confirmed yet. When the connection drops (:class:`~spark_sink.publisher.ConnectionLost`: a
socket error, or the broker closing it with 320 CONNECTION_FORCED, e.g. a restart or a
management "close connection"), it reconnects, trying each URI in turn with exponential
backoff (0.1 s doubling to 2 s), and republishes those messages, in their order, on the new
connection. It gives up with :class:`~spark_sink.publisher.PublishError` once ``timeout``
seconds have passed without a new connection making confirm progress; Spark then retries the
whole task as before.

Delivery stays at-least-once: a message the broker stored but whose confirm was lost with the
connection is published twice (same ``message_id``); one that no queue took is never counted
as confirmed. Everything else (nack, unroutable row, channel error, no confirm progress for
``timeout`` seconds on a live connection) fails at once, as before.
"""

from __future__ import annotations

import logging
import random
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from spark_sink.frames import split_messages
from spark_sink.publisher import ConfirmPublisher, ConnectionLost, PublishError
from spark_sink.tls import TlsSettings
from spark_sink.uri import BrokerAddress

log = logging.getLogger("spark_sink.retry")

BACKOFF_FIRST = 0.1  # seconds before the second round of connection attempts
BACKOFF_MAX = 2.0


@dataclass
class _Chunk:
    """Messages written together: delivery tags ``first .. first + count - 1``."""

    first: int
    count: int
    data: bytes | bytearray | memoryview


class ReliablePublisher:
    """A :class:`ConfirmPublisher` that reconnects and republishes unconfirmed messages.

    Args:
        addresses: brokers in failover order (each reconnection round tries them all).
        timeout: seconds for one connection attempt, without confirm progress, and (from the
            moment a connection drops) to get a new connection that confirms something.
        max_in_flight: most unconfirmed messages (:meth:`send` waits above it).
        client_name: ``connection_name`` shown by the broker.
        tls: settings for ``amqps://`` addresses.
        on_unroutable: ``"fail"`` or ``"drop"`` (see :class:`ConfirmPublisher`).

    Attributes:
        sent: distinct messages handed to :meth:`send`.
        republished: messages written again after a reconnection.
        reconnects: connections opened after the first one.
    """

    def __init__(
        self,
        addresses: Sequence[BrokerAddress],
        *,
        timeout: float = 30.0,
        max_in_flight: int = 20000,
        client_name: str = "amqpq-spark-sink",
        tls: TlsSettings | None = None,
        on_unroutable: str = "fail",
    ) -> None:
        self.addresses = list(addresses)
        self.timeout = timeout
        self.max_in_flight = max_in_flight
        self.client_name = client_name
        self.tls = tls
        self.on_unroutable = on_unroutable
        self._conn: ConfirmPublisher | None = None
        self._pending: deque[_Chunk] = deque()  # written on the current connection, unconfirmed
        self._frame_max = 0
        self._returned_before = 0  # Basic.Returns counted on earlier connections
        self._outage_since: float | None = None
        self.sent = 0
        self.republished = 0
        self.reconnects = 0

    # ------------------------------------------------------------------ state
    @property
    def frame_max(self) -> int:
        """frame_max (bytes) the messages must be encoded for (that of the first connection)."""
        return self._frame_max

    @property
    def address(self) -> BrokerAddress | None:
        """The broker of the current connection."""
        return self._conn.address if self._conn else None

    @property
    def unroutable(self) -> int:
        """Messages the broker returned as unroutable (``on_unroutable="drop"``)."""
        return self._returned_before + (self._conn.returned if self._conn else 0)

    # ------------------------------------------------------------------ API
    def connect(self) -> BrokerAddress:
        """Connect (retrying with backoff for up to ``timeout`` seconds).

        Raises:
            PublishError: no broker accepted a connection in time.
        """
        self._outage_since = time.monotonic()
        self._connect("no broker accepted a connection")
        assert self._conn is not None and self._conn.address is not None
        self._frame_max = self._conn.frame_max
        return self._conn.address

    def send(self, data: bytes | bytearray | memoryview, count: int) -> None:
        """Publish ``count`` encoded messages (``data`` is kept until they are confirmed: do
        not modify it afterwards).

        Raises:
            PublishError: see the module docstring.
        """
        conn = self._live()
        self._pending.append(_Chunk(conn.published + 1, count, data))
        self.sent += count
        try:
            conn.send(data, count)
        except ConnectionLost as exc:
            self._recover(exc)  # republishes this chunk too
        self._forget_confirmed()

    def wait_for_confirms(self) -> None:
        """Block until every message is confirmed (reconnecting and republishing as needed).

        Raises:
            PublishError: see the module docstring.
        """
        while True:
            try:
                self._live().wait_for_confirms()
            except ConnectionLost as exc:
                self._recover(exc)
                continue
            self._pending.clear()
            return

    def close(self) -> None:
        """Close the connection politely; never raises."""
        if self._conn is not None:
            self._conn.close()

    # ------------------------------------------------------------------ internals
    def _live(self) -> ConfirmPublisher:
        if self._conn is None:
            raise PublishError("not connected")
        return self._conn

    def _forget_confirmed(self) -> None:
        conn = self._live()
        if conn.confirmed and self._outage_since is not None:
            self._outage_since = None  # the connection works: a later drop starts a new clock
        pending = self._pending
        while pending and pending[0].first + pending[0].count - 1 <= conn.confirmed:
            pending.popleft()

    def _unconfirmed(self, conn: ConfirmPublisher) -> list[memoryview]:
        """The frames of every pending message ``conn`` did not confirm, in publish order."""
        out: list[memoryview] = []
        for chunk in self._pending:
            if chunk.first + chunk.count - 1 <= conn.confirmed:
                continue
            for i, message in enumerate(split_messages(chunk.data)):
                if not conn.is_confirmed(chunk.first + i):
                    out.append(message)
        return out

    def _recover(self, exc: ConnectionLost) -> None:
        """Reconnect and republish everything unconfirmed; loop if the new connection drops
        too, until the outage has lasted ``timeout`` seconds."""
        while True:
            conn = self._live()
            if conn.confirmed:
                self._outage_since = None
            if self._outage_since is None:
                self._outage_since = time.monotonic()
            messages = self._unconfirmed(conn)
            self._returned_before += conn.returned
            conn.abandon()
            log.warning("amqpq sink: %s; reconnecting to republish %d unconfirmed messages",
                        exc, len(messages))
            self._connect(f"{exc}; {len(messages)} messages unconfirmed; reconnecting failed")
            self.reconnects += 1
            self._pending.clear()
            try:
                self._republish(messages)
                return
            except ConnectionLost as again:
                exc = again

    def _republish(self, messages: list[memoryview]) -> None:
        conn = self._live()
        if conn.frame_max < self._frame_max:
            raise PublishError(
                f"{conn.address.redacted() if conn.address else 'the broker'} offers frame_max "
                f"{conn.frame_max}, less than the {self._frame_max} the messages were encoded "
                "for; cannot republish them")
        # every chunk is pending before the first write: if this connection drops too, the
        # next round finds all of them (written or not) unconfirmed
        step = 1000
        base = conn.published + 1
        chunks = [_Chunk(base + start, len(messages[start:start + step]),
                         b"".join(messages[start:start + step]))
                  for start in range(0, len(messages), step)]
        self._pending.extend(chunks)
        for chunk in chunks:
            conn.send(chunk.data, chunk.count)
            self.republished += chunk.count
            self._forget_confirmed()

    def _connect(self, what: str) -> None:
        """Open a new connection: rounds over every address with backoff until the outage
        (``_outage_since``) has lasted ``timeout`` seconds."""
        assert self._outage_since is not None
        deadline = self._outage_since + self.timeout
        delay = BACKOFF_FIRST
        while True:
            conn = ConfirmPublisher(self.addresses, timeout=self.timeout,
                                    max_in_flight=self.max_in_flight,
                                    client_name=self.client_name, tls=self.tls,
                                    on_unroutable=self.on_unroutable)
            try:
                conn.connect(limit=max(deadline - time.monotonic(), 0.1))
            except PublishError as exc:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise PublishError(
                        f"amqpq sink: {what} within timeout={self.timeout:g} s: {exc}"
                    ) from None
                time.sleep(min(delay * random.uniform(0.8, 1.2), left))
                delay = min(delay * 2, BACKOFF_MAX)
                continue
            self._conn = conn
            return
