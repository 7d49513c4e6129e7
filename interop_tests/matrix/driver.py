"""The driver API every client library implements, and the pieces drivers share.

A driver owns one connection and one current channel. All methods are synchronous and bounded
by timeouts; drivers of asynchronous libraries run their event loop in a background thread.
Asynchronous events land in three lists the scenarios read: ``deliveries`` (Basic.Deliver),
``returns`` (Basic.Return) and ``server_cancels`` (consumer tags of Basic.Cancel from the
broker). A channel closed by the broker surfaces as :class:`ChannelError` from the method that
caused it.

Messages are plain dicts (``msg()``): body (bytes), delivery_tag, redelivered, exchange,
routing_key, message_count (Basic.Get-Ok only, else None) and properties (content_type,
delivery_mode, priority, message_id, correlation_id, headers; None when absent).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from typing import Any

#: Value of an observation field this client cannot observe; checks skip it.
NA = "n/a"

#: Seconds any single expected event (a delivery, a confirm, a return) may take.
WAIT = 5.0


class Unsupported(Exception):
    """The client library lacks the feature a scenario needs: the cell is skipped."""


class ChannelError(Exception):
    """The broker closed the channel (Channel.Close) with ``code`` and ``text``."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(f"{code} {text}")
        self.code = int(code)
        self.text = text


PROPERTY_NAMES = ("content_type", "delivery_mode", "priority", "message_id", "correlation_id",
                  "user_id", "headers")

REPLY_TEXT = re.compile(r"\b((?:[A-Z]+_)*[A-Z]+ - [^'\"\n]*)")
REPLY_CODE = re.compile(r"\((\d{3})\)|\b(\d{3}) \(")


def describe_refusal(exc: BaseException) -> dict:
    """{"code", "text"} of a refused connection, from whatever the library's exception (and
    its causes) tells: a ``reply_code``/``reply_text`` pair, or a "(403) 'TEXT'"-like message;
    ``NA`` for what it does not tell."""
    code: Any = NA
    found_text: Any = NA
    seen = 0
    x: BaseException | None = exc
    while x is not None and seen < 5:
        seen += 1
        if code == NA and isinstance(getattr(x, "reply_code", None), int):
            code = x.reply_code
        if found_text == NA and isinstance(getattr(x, "reply_text", None), str):
            found_text = x.reply_text
        for blob in (str(x), repr(x)):
            if code == NA and (m := REPLY_CODE.search(blob)):
                code = int(m.group(1) or m.group(2))
            if found_text == NA and (m := REPLY_TEXT.search(blob)):
                found_text = m.group(1).rstrip()
        x = x.__cause__ or x.__context__
    return {"code": code, "text": found_text}


def text(value: Any) -> Any:
    """bytes -> str (field tables and short strings come back as either, by library)."""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, dict):
        return {text(k): text(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [text(v) for v in value]
    return value


def msg(*, body: bytes, delivery_tag: int | None, redelivered: bool | None,
        exchange: str | None, routing_key: str | None, message_count: int | None = None,
        properties: dict[str, Any] | None = None, consumer_tag: str | None = None) -> dict:
    props = {name: None for name in PROPERTY_NAMES}
    for name, value in (properties or {}).items():
        if name in props:
            props[name] = text(value)
    if props["headers"] == {}:
        props["headers"] = None
    return {
        "body": bytes(body),
        "delivery_tag": delivery_tag,
        "redelivered": redelivered,
        "exchange": text(exchange),
        "routing_key": text(routing_key),
        "message_count": message_count,
        "properties": props,
        "consumer_tag": text(consumer_tag),
    }


def returned(*, reply_code: int, reply_text: str, exchange: str, routing_key: str,
             body: bytes | str) -> dict:
    return {"reply_code": int(reply_code), "reply_text": text(reply_text),
            "exchange": text(exchange), "routing_key": text(routing_key),
            "body": bytes(body) if isinstance(body, bytes | bytearray) else body}


class ConfirmTracker:
    """Counts publisher confirms (multiple-aware) for drivers that receive them as events."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.next_seq = 0
        self.pending: set[int] = set()
        self.acked = 0
        self.nacked = 0

    def published(self) -> int:
        with self.lock:
            self.next_seq += 1
            self.pending.add(self.next_seq)
            return self.next_seq

    def confirm(self, tag: int, multiple: bool, ack: bool) -> None:
        with self.lock:
            tags = [t for t in self.pending if t <= tag] if multiple else [tag]
            for t in tags:
                if t in self.pending:
                    self.pending.discard(t)
                    if ack:
                        self.acked += 1
                    else:
                        self.nacked += 1

    def counts(self) -> dict[str, int]:
        with self.lock:
            return {"acked": self.acked, "nacked": self.nacked}


def wait_until(predicate: Callable[[], bool], timeout: float, pump: Callable[[float], None],
               step: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return predicate()
        pump(min(step, remaining))


def python_header_extras() -> dict[str, Any]:
    """Decimal ('D'), timestamp ('T') and void ('V'): the Python libraries encode all three."""
    import datetime
    import decimal

    return {"decimal": decimal.Decimal("1.25"),
            "timestamp": datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.UTC),
            "void": None}


class Driver:
    """Base class: the API the scenarios use. Subclasses implement the abstract methods."""

    #: Client name in the matrix.
    name = "?"
    #: SASL mechanisms the library can log in with (subset of PLAIN, AMQPLAIN).
    mechanisms: tuple[str, ...] = ("PLAIN",)
    #: Why a scenario cannot run with this client: {scenario: reason}.
    unsupported: dict[str, str] = {}
    #: Whether an asynchronous channel error (after a publish or an ack, which get no reply)
    #: reliably reaches the next synchronous call; when not, such probes observe ``NA``.
    async_errors_reliable = True

    def __init__(self) -> None:
        self.deliveries: list[dict] = []
        self.returns: list[dict] = []
        self.server_cancels: list[str] = []
        self.confirms = ConfirmTracker()
        self.confirm_mode = False

    def observe_async_error(self, sync: Callable[[], object]) -> object:
        """Run ``sync``, the synchronous method that shows the asynchronous channel error (if
        any) of the method sent just before it (a publish or an ack, which get no reply), and
        return its result. A library whose own I/O thread answers the broker's Channel.Close
        first waits for that close (the amqpstorm driver)."""
        return sync()

    # -- connection ----------------------------------------------------------------------
    def connect(self, url: str, *, heartbeat: int | None = None, mechanism: str = "PLAIN",
                confirms: bool = False) -> None:
        """Open the connection and a channel (in confirm mode when ``confirms``)."""
        raise NotImplementedError

    def connect_refusal(self, url: str) -> dict[str, Any]:
        """Try to connect where the broker must refuse: {"refused": True, "code", "text"}."""
        try:
            self.connect(url)
        except Exception as exc:
            return {"refused": True, **describe_refusal(exc)}
        finally:
            self.shutdown()
        return {"refused": False}

    def extra_header_values(self) -> dict[str, Any]:
        """Header values of further field types this library encodes (decimal, timestamp,
        void, ...), for header_types; the observation shows them, the check does not. All the
        Python libraries here encode decimal, timestamp and void."""
        return python_header_extras()

    def negotiated(self) -> dict[str, Any]:
        """{"frame_max", "channel_max", "heartbeat"} after Connection.Tune (NA if unknown)."""
        raise NotImplementedError

    def server_properties(self) -> dict[str, Any] | None:
        """Connection.Start server properties, decoded (None when the library hides them)."""
        raise NotImplementedError

    def is_open(self) -> bool:
        raise NotImplementedError

    def open_channel(self) -> None:
        """A new current channel (confirm mode again if the connection asked for it)."""
        raise NotImplementedError

    def open_numbered_channel(self, number: int) -> int:
        """A new current channel with channel number ``number`` (chosen by the caller, not
        the library; confirm mode again if the connection asked for it); returns the number
        the library reports for it."""
        raise Unsupported(f"{self.name} allocates channel numbers itself")

    def close_channel(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Graceful Connection.Close; returns once Close-Ok arrived."""
        raise NotImplementedError

    def update_secret(self, new_secret: str, reason: str) -> None:
        """Connection.UpdateSecret (RabbitMQ's extension); returns once UpdateSecret-Ok
        arrived."""
        raise Unsupported(f"{self.name} has no connection.update_secret")

    def shutdown(self) -> None:
        """Best effort: release everything (called after every scenario, even a failed one)."""
        try:
            if self.is_open():
                self.close()
        except Exception:
            pass

    # -- topology ------------------------------------------------------------------------
    def queue_declare(self, name: str, *, passive: bool = False, durable: bool = False,
                      exclusive: bool = False, auto_delete: bool = False,
                      arguments: dict | None = None) -> tuple[str, Any, Any]:
        """(queue name, message_count, consumer_count) from Queue.Declare-Ok."""
        raise NotImplementedError

    def exchange_declare(self, name: str, kind: str, *, passive: bool = False) -> None:
        raise NotImplementedError

    def queue_bind(self, queue: str, exchange: str, routing_key: str,
                   arguments: dict | None = None) -> None:
        raise NotImplementedError

    def queue_unbind(self, queue: str, exchange: str, routing_key: str,
                     arguments: dict | None = None) -> None:
        """Queue.Unbind; returns once Unbind-Ok arrived."""
        raise Unsupported(f"{self.name} has no queue.unbind")

    def exchange_unbind(self, destination: str, source: str, routing_key: str) -> None:
        """Exchange.Unbind (RabbitMQ's exchange-to-exchange bindings); returns once Unbind-Ok
        arrived."""
        raise Unsupported(f"{self.name} has no exchange.unbind")

    def queue_delete(self, name: str, *, if_unused: bool = False,
                     if_empty: bool = False) -> Any:
        """Queue.Delete; the Delete-Ok message count."""
        raise NotImplementedError

    def queue_purge(self, name: str) -> Any:
        """Queue.Purge; the Purge-Ok message count."""
        raise NotImplementedError

    # -- transactions and recover ------------------------------------------------------------
    def tx_select(self) -> None:
        raise Unsupported(f"{self.name} has no transactions (tx.select)")

    def tx_commit(self) -> None:
        raise Unsupported(f"{self.name} has no transactions (tx.commit)")

    def tx_rollback(self) -> None:
        raise Unsupported(f"{self.name} has no transactions (tx.rollback)")

    def recover(self) -> None:
        """Basic.Recover with requeue."""
        raise Unsupported(f"{self.name} has no basic.recover")

    # -- messages ------------------------------------------------------------------------
    def qos(self, prefetch_count: int) -> None:
        raise NotImplementedError

    def publish(self, exchange: str, routing_key: str, body: bytes, *,
                properties: dict | None = None, mandatory: bool = False) -> None:
        """Publish; in confirm mode the driver counts the confirm in ``self.confirms``."""
        raise NotImplementedError

    def wait_confirms(self, n: int, timeout: float = WAIT) -> dict[str, int]:
        """Wait until ``n`` publishes were acked or nacked; {"acked", "nacked"}."""
        wait_until(lambda: sum(self.confirms.counts().values()) >= n, timeout, self.pump)
        return self.confirms.counts()

    def get(self, queue: str, *, no_ack: bool = False) -> dict | None:
        raise NotImplementedError

    def ack(self, delivery_tag: int, multiple: bool = False) -> None:
        raise NotImplementedError

    def nack(self, delivery_tag: int, multiple: bool = False, requeue: bool = True) -> None:
        raise NotImplementedError

    def reject(self, delivery_tag: int, requeue: bool = True) -> None:
        raise NotImplementedError

    def consume(self, queue: str, *, no_ack: bool = False) -> str:
        """Basic.Consume; deliveries are appended to ``self.deliveries``. Returns the tag."""
        raise NotImplementedError

    def cancel(self, consumer_tag: str) -> None:
        raise NotImplementedError

    def pump(self, seconds: float) -> None:
        """Let the library do I/O for ``seconds`` (sleep, for libraries with an I/O thread)."""
        time.sleep(seconds)

    def wait_deliveries(self, n: int, timeout: float = WAIT) -> list[dict]:
        wait_until(lambda: len(self.deliveries) >= n, timeout, self.pump)
        return list(self.deliveries)

    def wait_returns(self, n: int, timeout: float = WAIT) -> list[dict]:
        wait_until(lambda: len(self.returns) >= n, timeout, self.pump)
        return list(self.returns)

    def wait_server_cancels(self, n: int, timeout: float = WAIT) -> list[str]:
        wait_until(lambda: len(self.server_cancels) >= n, timeout, self.pump)
        return list(self.server_cancels)
