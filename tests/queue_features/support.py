"""Shared helpers of the queue feature tests (``tests/queue_features/test_*.py``).

Most tests drive a :class:`~vhosts.vhost.VirtualHost` and its :class:`~queue_store.queue.Queue`
objects directly, with a fake clock behind the broker's :class:`~amqp_common.timers.Timers`
(time moves only when a test calls :meth:`World.advance`). What a client observes on the wire
(publisher nacks, Channel.Close texts, GetOk counts, header types) goes through a sans-IO
:class:`~amqp_server.connection.Connection` fed with pamqp-marshalled frames (:class:`Wire`).
The fixtures ``world`` and ``wired`` are in this folder's ``conftest.py``.

Expected values come from RabbitMQ 3.13's sources (``rabbit_amqqueue_process``,
``rabbit_dead_letter``, ``mc``/``mc_amqpl``, ``rabbit_amqqueue:declare_args/0``,
``rabbit_misc:check_expiry/1``, ``rabbit_basic:parse_expiration/1``); texts were also checked
against a RabbitMQ 3.10.8 broker where both versions agree.
"""

from __future__ import annotations

from typing import Any

from pamqp import commands
from pamqp import frame as pamqp_frame
from pamqp.body import ContentBody
from pamqp.header import ContentHeader

from amqp_common.timers import Timers
from amqp_server.connection import Connection
from broker.broker import Broker
from exchanges.binding import Destination
from queue_store.message import Message
from queue_store.outcomes import Settlement
from queue_store.queue import Consumer, Queue, QueuedMessage
from vhosts.vhost import VirtualHost

# ---- helpers: a vhost on a fake clock ---------------------------------------------------------


class FakeClock:
    """Monotonic seconds that move only when a test says so."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def make_message(routing_key: str, body: bytes = b"m", exchange: str = "",
                 **props: Any) -> Message:
    """A message as a publisher would send it (properties encoded by pamqp)."""
    properties = commands.Basic.Properties(**props)
    raw = ContentHeader(0, len(body), properties).marshal()[12:]
    return Message.create(exchange, routing_key, raw, body)


class FakeChannel:
    """The channel side of consumers: records deliveries, can be blocked (``open=False``)."""

    def __init__(self) -> None:
        self.open = True
        self.deliveries: list[tuple[Consumer, QueuedMessage, Queue]] = []
        self.cancelled: list[str] = []

    def can_deliver(self) -> bool:
        return self.open

    def deliver(self, consumer: Consumer, qm: QueuedMessage, queue: Queue) -> None:
        self.deliveries.append((consumer, qm, queue))

    def consumer_cancelled_by_broker(self, consumer: Consumer) -> None:
        self.cancelled.append(consumer.tag)

    def bodies(self, tag: str | None = None) -> list[bytes]:
        return [qm.message.body for c, qm, _ in self.deliveries if tag is None or c.tag == tag]


class World:
    """One vhost whose timers run on a fake clock."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.timers = Timers(clock=self.clock)
        self.vhost = VirtualHost("/", self.timers)
        self.channel = FakeChannel()

    def advance(self, ms: float) -> None:
        """Move the clock ``ms`` milliseconds on and run the timers that came due."""
        self.clock.now += ms / 1000.0
        self.timers.run_due(self.clock.now)

    def declare(self, name: str, **arguments: Any) -> Queue:
        return self.vhost.declare_queue(name, arguments=arguments)

    def exchange(self, name: str, type_name: str = "fanout", **kw: Any) -> None:
        self.vhost.declare_exchange(name, type_name, **kw)

    def bind(self, queue: str, exchange: str, routing_key: str = "") -> None:
        self.vhost.bind(Destination("queue", queue), exchange, routing_key)

    def bind_x(self, destination: str, source: str, routing_key: str = "") -> None:
        self.vhost.bind(Destination("exchange", destination), source, routing_key)

    def route(self, exchange: str, routing_key: str, message: Message) -> list[Queue]:
        if exchange == "":
            return self.vhost.route_default(routing_key)
        return self.vhost.route(self.vhost.exchange(exchange), routing_key, message)

    def publish(self, routing_key: str, body: bytes = b"m", exchange: str = "",
                **props: Any) -> list[int]:
        """Route and enqueue a message as a channel does; the queues' publish results."""
        message = make_message(routing_key, body, exchange, **props)
        return [q.publish(message) for q in self.route(exchange, routing_key, message)]

    def queue(self, name: str) -> Queue:
        return self.vhost.queues[name]

    def get(self, name: str) -> Message | None:
        """Basic.Get with no-ack: the head message (or None)."""
        qm = self.queue(name).get(no_ack=True)
        return None if qm is None else qm.message

    def drain(self, name: str) -> list[Message]:
        out = []
        while (m := self.get(name)) is not None:
            out.append(m)
        return out

    def bodies(self, name: str) -> list[bytes]:
        return [m.body for m in self.drain(name)]

    def consume(self, queue: str, tag: str, prefetch: int = 0, priority: int = 0,
                channel: FakeChannel | None = None, no_ack: bool = False) -> Consumer:
        q = self.queue(queue)
        ch = channel or self.channel
        consumer = Consumer(tag, tag.encode(), ch, q, no_ack, False, prefetch, priority)
        q.add_consumer(consumer)
        return consumer

    def settle(self, index: int, requeue: bool | None = None,
               channel: FakeChannel | None = None) -> None:
        """Ack (None), requeue (True) or reject (False) the ``index``-th delivery."""
        consumer, qm, q = (channel or self.channel).deliveries[index]
        outcome = Settlement.ACK if requeue is None else (
            Settlement.REQUEUE if requeue else Settlement.REJECT)
        q.settle([(qm, q, consumer)], outcome)


def x_death(message: Message) -> list[dict[str, Any]]:
    return list((message.headers or {}).get("x-death") or [])


def text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def death_view(death: dict[str, Any]) -> dict[str, Any]:
    """An x-death entry without its timestamp, strings as str."""
    out = {k: text(v) for k, v in death.items() if k != "time"}
    if "routing-keys" in out:
        out["routing-keys"] = [text(k) for k in out["routing-keys"]]
    return out


# ---- helpers: a sans-IO client on the wire -----------------------------------------------------

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
CAPABILITIES = {"publisher_confirms": True, "basic.nack": True, "consumer_cancel_notify": True}


class Wire:
    """A client test double speaking frames to one server :class:`Connection`."""

    def __init__(self, broker: Broker, clock: FakeClock,
                 capabilities: dict[str, bool] | None = None) -> None:
        self.conn = Connection(broker, peer=("127.0.0.1", 5000), clock=clock)
        self.raw: list[bytes] = []
        start = self._feed(PROTOCOL_HEADER)
        assert isinstance(start[0][1], commands.Connection.Start)
        tune = self.send(0, commands.Connection.StartOk(
            client_properties={"product": "test_queue_features",
                               "capabilities": CAPABILITIES if capabilities is None
                               else capabilities},
            mechanism="PLAIN", response="\0guest\0guest"))
        tune = tune[0][1]
        opened = self.send(0, commands.Connection.TuneOk(
            channel_max=tune.channel_max, frame_max=tune.frame_max, heartbeat=0),
            commands.Connection.Open(virtual_host="/"))
        assert isinstance(opened[-1][1], commands.Connection.OpenOk)
        self.frame_max = tune.frame_max

    def _feed(self, data: bytes) -> list[tuple[int, Any]]:
        self.conn.receive_data(data)
        return self.read()

    def read(self) -> list[tuple[int, Any]]:
        data = self.conn.data_to_send()
        out = []
        pos = 0
        while pos < len(data):
            consumed, channel, value = pamqp_frame.unmarshal(data[pos:])
            self.raw.append(data[pos:pos + consumed])
            out.append((channel, value))
            pos += consumed
        return out

    def send(self, channel: int, *methods: Any) -> list[tuple[int, Any]]:
        return self._feed(b"".join(pamqp_frame.marshal(m, channel) for m in methods))

    def open(self, channel: int = 1) -> Wire:
        frames = self.send(channel, commands.Channel.Open())
        assert isinstance(frames[0][1], commands.Channel.OpenOk)
        return self

    def publish(self, channel: int, exchange: str, routing_key: str, body: bytes = b"m",
                **props: Any) -> list[tuple[int, Any]]:
        properties = commands.Basic.Properties(**props)
        data = (pamqp_frame.marshal(commands.Basic.Publish(exchange=exchange,
                                                           routing_key=routing_key), channel)
                + pamqp_frame.marshal(ContentHeader(0, len(body), properties), channel)
                + pamqp_frame.marshal(ContentBody(body), channel))
        return self._feed(data)


def methods(frames: list[tuple[int, Any]], kind: type) -> list[Any]:
    return [f for _, f in frames if isinstance(f, kind)]


def contents(frames: list[tuple[int, Any]]) -> list[tuple[Any, commands.Basic.Properties, bytes]]:
    """(method, properties, body) of every Deliver/GetOk in ``frames`` (single body frame)."""
    out = []
    pending: list[Any] = []
    for _, f in frames:
        if isinstance(f, commands.Basic.Deliver | commands.Basic.GetOk):
            pending = [f]
        elif isinstance(f, ContentHeader) and pending:
            pending.append(f.properties)
            if f.body_size == 0:
                out.append((pending[0], pending[1], b""))
                pending = []
        elif isinstance(f, ContentBody) and pending:
            out.append((pending[0], pending[1], f.value))
            pending = []
    return out


def dlx_setup(world: World, queue: str = "q", **arguments: Any) -> Queue:
    """Queue ``queue`` dead-lettering to fanout ``dlx`` -> queue ``dead``."""
    world.exchange("dlx", "fanout")
    world.declare("dead")
    world.bind("dead", "dlx")
    return world.declare(queue, **{"x-dead-letter-exchange": "dlx", **arguments})
