"""What one matrix cell (client x scenario) needs besides the client: unique names, an admin
connection for side actions (pika.BlockingConnection), and observation normalisation.

Names are unique per run (a uuid suffix) so cells never collide on a shared broker; the
observation replaces them by placeholders (``<queue:a>``, ``<exchange:x>``) so the observations
of two brokers compare equal. Server-generated names (``amq.gen-…``, ``amq.ctag-…``) become
``amq.gen-*`` / ``amq.ctag-*``, aio-pika's robust queue names ``amq_*``. Bodies become text when they are short UTF-8, otherwise
``{"bytes": n, "sha256": …}``.
"""

from __future__ import annotations

import hashlib
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from interop_tests.conftest import AmqpParams, parse_amqp_url, pika_parameters

SERVER_NAMES = re.compile(r"amq\.(gen|ctag)-[A-Za-z0-9_\-]+")
#: aio-pika's RobustChannel names queues declared without a name itself: amq_<uuid4 hex>.
ROBUST_NAMES = re.compile(r"\bamq_[0-9a-f]{32}\b")


class Names:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.queues: dict[str, str] = {}
        self.exchanges: dict[str, str] = {}
        self.literals: dict[str, str] = {}

    def _make(self, label: str) -> str:
        return f"{self.prefix}.{label}.{uuid.uuid4().hex[:10]}"

    def queue(self, label: str) -> str:
        if label not in self.queues:
            self.queues[label] = self._make(label)
        return self.queues[label]

    def exchange(self, label: str) -> str:
        if label not in self.exchanges:
            self.exchanges[label] = self._make(label)
        return self.exchanges[label]

    def custom_exchange(self, label: str, prefix: str) -> str:
        """An exchange name starting with ``prefix`` (e.g. a reserved ``amq.`` one)."""
        if label not in self.exchanges:
            self.exchanges[label] = f"{prefix}.{uuid.uuid4().hex[:10]}"
        return self.exchanges[label]

    def sized_queue(self, label: str, length: int) -> str:
        """A queue name of exactly ``length`` characters (server texts quoting it then have a
        known length)."""
        if label not in self.queues:
            name = f"mx.{uuid.uuid4().hex[:10]}."
            self.queues[label] = (name + "n" * length)[:length]
        return self.queues[label]

    def literal(self, label: str, value: str) -> str:
        """Any other run-specific string (a vhost, a user name) shown as ``<label>``."""
        self.literals[label] = value
        return value

    def placeholders(self) -> list[tuple[str, str]]:
        pairs = [(real, f"<queue:{label}>") for label, real in self.queues.items()]
        pairs += [(real, f"<exchange:{label}>") for label, real in self.exchanges.items()]
        pairs += [(real, f"<{label}>") for label, real in self.literals.items()]
        return sorted(pairs, key=lambda pair: -len(pair[0]))


class Admin:
    """A pika.BlockingConnection beside the client under test, for setup and side actions."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._conn = None
        self._channel = None

    @property
    def channel(self):
        import pika

        if self._conn is None or not self._conn.is_open:
            self._conn = pika.BlockingConnection(pika_parameters(self.url))
            self._channel = None
        if self._channel is None or not self._channel.is_open:
            self._channel = self._conn.channel()
        return self._channel

    def counts(self, queue: str) -> tuple[int, int] | None:
        """(messages ready, consumers), None when the queue does not exist."""
        from pika.exceptions import ChannelClosedByBroker

        try:
            ok = self.channel.queue_declare(queue, passive=True).method
        except ChannelClosedByBroker:
            self._channel = None
            return None
        return ok.message_count, ok.consumer_count

    def wait_counts(self, queue: str, messages: int | None = None,
                    consumers: int | None = None, timeout: float = 5.0) -> tuple[int, int] | None:
        deadline = time.monotonic() + timeout
        while True:
            counts = self.counts(queue)
            if counts is not None and (messages is None or counts[0] == messages) and (
                    consumers is None or counts[1] == consumers):
                return counts
            if time.monotonic() > deadline:
                return counts
            time.sleep(0.02)

    def declare_queue(self, queue: str, **kwargs: Any) -> None:
        self.channel.queue_declare(queue, **kwargs)

    def declare_exchange(self, exchange: str, kind: str) -> None:
        self.channel.exchange_declare(exchange, kind)

    def bind(self, queue: str, exchange: str, routing_key: str = "",
             arguments: dict | None = None) -> None:
        self.channel.queue_bind(queue, exchange, routing_key, arguments)

    def bind_exchange(self, destination: str, source: str, routing_key: str = "") -> None:
        """An exchange-to-exchange binding (RabbitMQ's Exchange.Bind)."""
        self.channel.exchange_bind(destination, source, routing_key)

    def publish(self, exchange: str, routing_key: str, body: bytes) -> None:
        self.channel.basic_publish(exchange, routing_key, body)

    def delete_queue(self, queue: str) -> None:
        self.channel.queue_delete(queue)

    def cleanup(self, names: Names) -> None:
        from pika.exceptions import AMQPError

        try:
            for queue in names.queues.values():
                try:
                    self.channel.queue_delete(queue)
                except AMQPError:
                    self._channel = None
            for exchange in names.exchanges.values():
                try:
                    self.channel.exchange_delete(exchange)
                except AMQPError:
                    self._channel = None
        except Exception:  # best effort: the cell's verdict is in already
            pass

    def close(self) -> None:
        if self._conn is not None and self._conn.is_open:
            try:
                self._conn.close()
            except Exception:
                pass


@dataclass
class Ctx:
    url: str
    names: Names
    admin: Admin
    params: AmqpParams = field(init=False)

    def __post_init__(self) -> None:
        self.params = parse_amqp_url(self.url)


def describe_body(body: bytes) -> Any:
    if len(body) <= 200:
        try:
            decoded = body.decode("utf-8")
            if decoded.isprintable():
                return decoded
        except UnicodeDecodeError:
            pass
    return {"bytes": len(body), "sha256": hashlib.sha256(body).hexdigest()[:16]}


def normalize(value: Any, names: Names) -> Any:
    """A JSON-able copy of an observation with run-specific names replaced by placeholders."""
    pairs = names.placeholders()

    def walk(v: Any) -> Any:
        if isinstance(v, bytes | bytearray):
            v = describe_body(bytes(v))
            if not isinstance(v, str):
                return v
        if isinstance(v, str):
            for real, placeholder in pairs:
                v = v.replace(real, placeholder)
            v = SERVER_NAMES.sub(lambda m: f"amq.{m.group(1)}-*", v)
            return ROBUST_NAMES.sub("amq_*", v)
        if isinstance(v, dict):
            return {str(walk(k)): walk(item) for k, item in v.items()}
        if isinstance(v, list | tuple):
            return [walk(item) for item in v]
        if v is None or isinstance(v, bool | int | float):
            return v
        return repr(v)

    return walk(value)
