"""Queue features against RabbitMQ 3.13 semantics: TTL and expiry, length limits and overflow,
dead lettering (x-death), priorities, single active consumer, consumer priorities, argument
validation, policies, alternate exchanges and exchange-to-exchange routing.

Most tests drive a :class:`~vhosts.vhost.VirtualHost` and its :class:`~queue_store.queue.Queue`
objects directly, with a fake clock behind the broker's :class:`~amqp_server.timers.Timers`
(time moves only when a test calls :meth:`World.advance`). What a client observes on the wire
(publisher nacks, Channel.Close texts, GetOk counts, header types) goes through a sans-IO
:class:`~amqp_server.connection.Connection` fed with pamqp-marshalled frames (:class:`Wire`).

Expected values come from RabbitMQ 3.13's sources (``rabbit_amqqueue_process``,
``rabbit_dead_letter``, ``mc``/``mc_amqpl``, ``rabbit_amqqueue:declare_args/0``,
``rabbit_misc:check_expiry/1``, ``rabbit_basic:parse_expiration/1``); texts were also checked
against a RabbitMQ 3.10.8 broker where both versions agree.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from pamqp import commands
from pamqp import frame as pamqp_frame
from pamqp.body import ContentBody
from pamqp.header import ContentHeader

from amqp_server.broker import Broker
from amqp_server.config import BrokerConfig
from amqp_server.connection import Connection
from amqp_server.errors import PreconditionFailed
from amqp_server.timers import Timers
from exchanges.binding import Destination
from queue_store.dead_letter import dead_letter_message
from queue_store.message import Message
from queue_store.queue import ACCEPTED, REJECTED, Consumer, Queue, QueuedMessage
from queue_store.queue_args import validate_consumer_arguments
from vhosts.policies import PolicyError
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
        q = self.queue(name)
        qm = q.get()
        if qm is None:
            return None
        q.ack(qm)
        return qm.message

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
        q.settled(consumer)
        if requeue:
            q.requeue([qm])
        elif requeue is False:
            q.reject(qm)
            q.dispatch()
        else:
            q.ack(qm)
            q.dispatch()


@pytest.fixture
def world() -> World:
    return World()


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


@pytest.fixture
def wired() -> tuple[Broker, FakeClock, Wire]:
    clock = FakeClock()
    broker = Broker(BrokerConfig(), timers=Timers(clock=clock))
    return broker, clock, Wire(broker, clock).open(1)


# ================================================================================================
# Message TTL (x-message-ttl, expiration)
# ================================================================================================


def dlx_setup(world: World, queue: str = "q", **arguments: Any) -> Queue:
    """Queue ``queue`` dead-lettering to fanout ``dlx`` -> queue ``dead``."""
    world.exchange("dlx", "fanout")
    world.declare("dead")
    world.bind("dead", "dlx")
    return world.declare(queue, **{"x-dead-letter-exchange": "dlx", **arguments})


def test_queue_ttl_expires_message_and_dead_letters_it_with_reason_expired(world: World) -> None:
    q = dlx_setup(world, **{"x-message-ttl": 100})
    world.publish("q", b"hello")
    world.advance(99)
    assert q.message_count == 1
    assert world.queue("dead").message_count == 0
    world.advance(2)
    assert q.message_count == 0
    [dead] = world.drain("dead")
    assert dead.body == b"hello"
    [death] = x_death(dead)
    assert death_view(death) == {"count": 1, "reason": "expired", "queue": "q", "exchange": "",
                                 "routing-keys": ["q"]}
    assert dead.expiration is None  # no per-message TTL: no original-expiration either


def test_per_message_expiration_dead_letters_with_original_expiration(world: World) -> None:
    dlx_setup(world)
    world.publish("q", b"m", expiration="50")
    world.advance(49)
    assert world.queue("q").message_count == 1
    world.advance(2)
    [dead] = world.drain("dead")
    [death] = x_death(dead)
    assert death["reason"] == "expired"
    assert text(death["original-expiration"]) == "50"
    # the dead-lettered copy loses its expiration (it must not expire again downstream)
    assert dead.properties.expiration is None


@pytest.mark.parametrize(("queue_ttl", "expiration", "expires_after_ms"), [
    (100, "1000", 100),
    (1000, "30", 30),
    (100, "100", 100),
])
def test_the_lower_of_queue_ttl_and_message_expiration_applies(
        world: World, queue_ttl: int, expiration: str, expires_after_ms: int) -> None:
    q = dlx_setup(world, **{"x-message-ttl": queue_ttl})
    world.publish("q", b"m", expiration=expiration)
    world.advance(expires_after_ms - 1)
    assert q.message_count == 1
    world.advance(2)
    assert q.message_count == 0
    [dead] = world.drain("dead")
    # original-expiration is the message's own property, not the effective TTL
    assert text(x_death(dead)[0]["original-expiration"]) == expiration


def test_messages_expire_only_at_the_head_of_the_queue(world: World) -> None:
    q = dlx_setup(world)
    world.publish("q", b"long", expiration="10000")
    world.publish("q", b"short", expiration="10")
    world.advance(50)
    # classic queues expire from the head: "short" waits behind an unexpired message
    assert q.message_count == 2
    assert world.queue("dead").message_count == 0
    assert world.get("q").body == b"long"
    world.advance(0)
    assert q.message_count == 0
    assert [m.body for m in world.drain("dead")] == [b"short"]


def test_expired_messages_are_not_delivered_to_a_late_consumer(world: World) -> None:
    dlx_setup(world, **{"x-message-ttl": 100})
    world.publish("q", b"old")
    world.advance(150)
    world.publish("q", b"new")
    world.consume("q", "c")
    assert world.channel.bodies() == [b"new"]
    assert [m.body for m in world.drain("dead")] == [b"old"]


def test_expired_message_without_dead_letter_exchange_is_dropped(world: World) -> None:
    q = world.declare("q", **{"x-message-ttl": 10})
    world.publish("q", b"m")
    world.advance(11)
    assert q.message_count == 0
    assert world.get("q") is None


def test_ttl_zero_expires_at_once_when_no_consumer_can_take_it(world: World) -> None:
    q = dlx_setup(world, **{"x-message-ttl": 0})
    world.publish("q", b"nobody")  # no consumer
    assert q.message_count == 0
    world.consume("q", "c", prefetch=1)
    world.channel.open = False  # a consumer exists but cannot take a message now
    world.publish("q", b"blocked")
    assert q.message_count == 0
    assert world.channel.bodies() == []
    assert [m.body for m in world.drain("dead")] == [b"nobody", b"blocked"]


def test_ttl_zero_is_delivered_when_a_consumer_can_take_it_at_once(world: World) -> None:
    dlx_setup(world, **{"x-message-ttl": 0})
    world.consume("q", "c")
    world.publish("q", b"now")
    assert world.channel.bodies() == [b"now"]
    assert world.queue("dead").message_count == 0


def test_expiration_zero_is_delivered_when_a_consumer_can_take_it_at_once(world: World) -> None:
    dlx_setup(world)
    world.consume("q", "c")
    world.publish("q", b"now", expiration="0")
    assert world.channel.bodies() == [b"now"]
    assert world.queue("dead").message_count == 0


def test_requeued_message_keeps_its_original_deadline(world: World) -> None:
    dlx_setup(world, **{"x-message-ttl": 100})
    world.consume("q", "c", prefetch=1)
    world.publish("q", b"m")
    world.channel.open = False
    world.advance(60)
    world.settle(0, requeue=True)  # back in the queue; nobody can take it now
    world.advance(39)
    assert world.queue("q").message_count == 1
    world.advance(2)
    assert world.queue("q").message_count == 0
    assert [m.body for m in world.drain("dead")] == [b"m"]


def test_get_ok_message_count_excludes_expired_message_behind_the_head(wired) -> None:
    broker, clock, wire = wired
    wire.send(1, commands.Queue.Declare(queue="q"))
    wire.publish(1, "", "q", b"long", expiration="10000")
    wire.publish(1, "", "q", b"short", expiration="10")
    clock.now += 0.05
    broker.timers.run_due(clock.now)
    [(get_ok, _, body)] = contents(wire.send(1, commands.Basic.Get(queue="q", no_ack=True)))
    assert body == b"long"
    assert get_ok.message_count == 0


# ================================================================================================
# Queue expiry (x-expires)
# ================================================================================================


def test_x_expires_deletes_an_unused_queue(world: World) -> None:
    world.declare("q", **{"x-expires": 1000})
    world.publish("q", b"m")
    world.advance(999)
    assert "q" in world.vhost.queues
    world.advance(2)
    assert "q" not in world.vhost.queues


def test_x_expires_does_not_dead_letter_the_messages_of_the_expired_queue(world: World) -> None:
    dlx_setup(world, **{"x-expires": 100})
    world.publish("q", b"m")
    world.advance(101)
    assert "q" not in world.vhost.queues
    assert world.queue("dead").message_count == 0


def test_x_expires_is_reset_by_a_redeclare(world: World) -> None:
    world.declare("q", **{"x-expires": 1000})
    world.advance(600)
    world.declare("q", **{"x-expires": 1000})
    world.advance(600)
    assert "q" in world.vhost.queues
    world.advance(401)
    assert "q" not in world.vhost.queues


def test_x_expires_is_reset_by_a_passive_declare(world: World) -> None:
    world.declare("q", **{"x-expires": 1000})
    world.advance(600)
    world.vhost.declare_queue("q", passive=True)
    world.advance(600)
    assert "q" in world.vhost.queues
    world.advance(401)
    assert "q" not in world.vhost.queues


def test_x_expires_is_reset_by_basic_get(world: World) -> None:
    world.declare("q", **{"x-expires": 1000})
    world.advance(600)
    assert world.get("q") is None  # an empty Basic.Get counts as use too
    world.advance(600)
    assert "q" in world.vhost.queues
    world.advance(401)
    assert "q" not in world.vhost.queues


def test_x_expires_never_deletes_a_queue_with_consumers(world: World) -> None:
    world.declare("q", **{"x-expires": 1000})
    consumer = world.consume("q", "c")
    world.advance(5000)
    assert "q" in world.vhost.queues
    world.queue("q").remove_consumer(consumer)  # unused from now on
    world.advance(999)
    assert "q" in world.vhost.queues
    world.advance(2)
    assert "q" not in world.vhost.queues


# ================================================================================================
# Length limits (x-max-length, x-max-length-bytes, x-overflow)
# ================================================================================================


def test_max_length_drop_head_dead_letters_the_oldest_with_reason_maxlen(world: World) -> None:
    q = dlx_setup(world, **{"x-max-length": 2})
    for body in (b"m1", b"m2", b"m3"):
        assert world.publish("q", body) == [ACCEPTED]
    assert q.message_count == 2
    [dead] = world.drain("dead")
    assert dead.body == b"m1"
    assert death_view(x_death(dead)[0]) == {"count": 1, "reason": "maxlen", "queue": "q",
                                            "exchange": "", "routing-keys": ["q"]}
    assert world.bodies("q") == [b"m2", b"m3"]


def test_max_length_bytes_counts_body_bytes_and_drops_from_the_head(world: World) -> None:
    q = dlx_setup(world, **{"x-max-length-bytes": 10})
    for body in (b"aaaa", b"bbbb", b"cccc"):
        world.publish("q", body)
    assert q.message_count == 2  # 12 bytes > 10: the oldest goes
    world.publish("q", b"0123456789")  # 18 bytes: both older ones go, 10 bytes stay
    assert world.bodies("q") == [b"0123456789"]
    dead = world.drain("dead")
    assert [m.body for m in dead] == [b"aaaa", b"bbbb", b"cccc"]
    assert [x_death(m)[0]["reason"] for m in dead] == ["maxlen"] * 3


def test_max_length_zero_drops_everything_without_a_consumer(world: World) -> None:
    q = world.declare("q", **{"x-max-length": 0})
    world.publish("q", b"m")
    assert q.message_count == 0


def test_max_length_counts_only_ready_messages(world: World) -> None:
    q = world.declare("q", **{"x-max-length": 1})
    world.consume("q", "c", prefetch=1)
    world.publish("q", b"m1")  # delivered, unacknowledged
    world.publish("q", b"m2")  # ready: 1 <= 1
    assert q.message_count == 1
    world.publish("q", b"m3")  # ready: 2 > 1, m2 dropped
    assert world.channel.bodies() == [b"m1"]
    assert world.bodies("q") == [b"m3"]


def test_reject_publish_refuses_new_messages_and_keeps_the_old_ones(world: World) -> None:
    q = dlx_setup(world, **{"x-max-length": 2, "x-overflow": "reject-publish"})
    assert world.publish("q", b"m1") == [ACCEPTED]
    assert world.publish("q", b"m2") == [ACCEPTED]
    assert world.publish("q", b"m3") == [REJECTED]
    assert q.message_count == 2
    assert world.queue("dead").message_count == 0  # reject-publish does not dead-letter
    assert world.bodies("q") == [b"m1", b"m2"]
    assert world.publish("q", b"m4") == [ACCEPTED]  # room again


def test_reject_publish_dlx_dead_letters_the_refused_message(world: World) -> None:
    q = dlx_setup(world, **{"x-max-length": 1, "x-overflow": "reject-publish-dlx"})
    assert world.publish("q", b"m1") == [ACCEPTED]
    assert world.publish("q", b"m2") == [REJECTED]
    assert q.message_count == 1
    [dead] = world.drain("dead")
    assert dead.body == b"m2"
    assert death_view(x_death(dead)[0]) == {"count": 1, "reason": "maxlen", "queue": "q",
                                            "exchange": "", "routing-keys": ["q"]}


def test_reject_publish_by_bytes(world: World) -> None:
    world.declare("q", **{"x-max-length-bytes": 5, "x-overflow": "reject-publish"})
    assert world.publish("q", b"abc") == [ACCEPTED]
    assert world.publish("q", b"def") == [REJECTED]  # 6 bytes would not fit
    assert world.publish("q", b"de") == [ACCEPTED]  # 5 bytes fit
    assert world.bodies("q") == [b"abc", b"de"]


def test_reject_publish_nacks_the_publisher_under_confirms(wired) -> None:
    broker, _, wire = wired
    wire.send(1, commands.Confirm.Select())
    wire.send(1, commands.Queue.Declare(queue="q", arguments={
        "x-max-length": 1, "x-overflow": "reject-publish"}))
    assert [a.delivery_tag for a in methods(wire.publish(1, "", "q", b"m1"),
                                            commands.Basic.Ack)] == [1]
    out = wire.publish(1, "", "q", b"m2")
    assert methods(out, commands.Basic.Ack) == []
    [nack] = methods(out, commands.Basic.Nack)
    assert nack.delivery_tag == 2
    assert broker.vhosts["/"].queues["q"].message_count == 1
    [(_, _, body)] = contents(wire.send(1, commands.Basic.Get(queue="q", no_ack=True)))
    assert body == b"m1"


def test_reject_publish_nack_has_rabbitmq_requeue_flag(wired) -> None:
    _, _, wire = wired
    wire.send(1, commands.Confirm.Select())
    wire.send(1, commands.Queue.Declare(queue="q", arguments={
        "x-max-length": 0, "x-overflow": "reject-publish"}))
    [nack] = methods(wire.publish(1, "", "q", b"m"), commands.Basic.Nack)
    assert nack.requeue is True


def test_reject_publish_still_delivers_to_the_other_queues(wired) -> None:
    broker, _, wire = wired
    wire.send(1, commands.Confirm.Select())
    wire.send(1, commands.Exchange.Declare(exchange="fan", exchange_type="fanout"))
    wire.send(1, commands.Queue.Declare(queue="full", arguments={
        "x-max-length": 0, "x-overflow": "reject-publish"}))
    wire.send(1, commands.Queue.Declare(queue="open"))
    wire.send(1, commands.Queue.Bind(queue="full", exchange="fan"))
    wire.send(1, commands.Queue.Bind(queue="open", exchange="fan"))
    out = wire.publish(1, "fan", "", b"m")
    assert len(methods(out, commands.Basic.Nack)) == 1
    queues = broker.vhosts["/"].queues
    assert (queues["full"].message_count, queues["open"].message_count) == (0, 1)


# ================================================================================================
# Dead lettering: x-death, routing key, cycles
# ================================================================================================


def test_x_death_of_a_rejected_message(world: World) -> None:
    world.exchange("ex", "direct")
    dlx_setup(world)
    world.bind("q", "ex", "k")
    world.publish("k", b"m", exchange="ex", headers={"app": "kept"})
    world.consume("q", "c")
    world.settle(0, requeue=False)
    [dead] = world.drain("dead")
    headers = dead.headers
    assert headers["app"] == "kept"
    [death] = headers["x-death"]
    assert death_view(death) == {"count": 1, "reason": "rejected", "queue": "q",
                                 "exchange": "ex", "routing-keys": ["k"]}
    assert isinstance(death["time"], datetime.datetime)
    assert (headers["x-first-death-reason"], headers["x-first-death-queue"],
            headers["x-first-death-exchange"]) == ("rejected", "q", "ex")
    # 3.13 adds x-last-death-* (3.10 does not)
    assert (headers["x-last-death-reason"], headers["x-last-death-queue"],
            headers["x-last-death-exchange"]) == ("rejected", "q", "ex")
    # republished to the dead-letter exchange with the original routing key
    assert (dead.exchange, dead.routing_key) == ("dlx", "k")


def test_rejected_with_requeue_is_not_dead_lettered(world: World) -> None:
    dlx_setup(world)
    world.publish("q", b"m")
    world.consume("q", "c", prefetch=1)
    world.settle(0, requeue=True)
    assert world.queue("dead").message_count == 0
    assert len(world.channel.deliveries) == 2
    assert world.channel.deliveries[1][1].redelivered


def test_dead_letter_routing_key_replaces_the_routing_key(world: World) -> None:
    world.exchange("dlx", "direct")
    world.declare("dead")
    world.declare("other")
    world.bind("dead", "dlx", "dead-key")
    world.bind("other", "dlx", "q")
    world.declare("q", **{"x-dead-letter-exchange": "dlx",
                          "x-dead-letter-routing-key": "dead-key"})
    world.publish("q", b"m")
    world.consume("q", "c")
    world.settle(0, requeue=False)
    assert world.queue("other").message_count == 0
    [dead] = world.drain("dead")
    assert dead.routing_key == "dead-key"
    # x-death records the routing keys the message died with, not the new one
    assert x_death(dead)[0]["routing-keys"] == ["q"]


def test_dead_letter_to_the_default_exchange(world: World) -> None:
    world.declare("dead")
    world.declare("q", **{"x-dead-letter-exchange": "",
                          "x-dead-letter-routing-key": "dead", "x-message-ttl": 10})
    world.publish("q", b"m")
    world.advance(11)
    [dead] = world.drain("dead")
    assert x_death(dead)[0]["reason"] == "expired"
    assert dead.exchange == ""


def test_missing_dead_letter_exchange_drops_the_message(world: World) -> None:
    q = world.declare("q", **{"x-dead-letter-exchange": "nowhere", "x-message-ttl": 10})
    world.publish("q", b"m")
    world.advance(11)
    assert q.message_count == 0


def two_rejecting_queues(world: World) -> None:
    """q1 -dlx1-> q2 -dlx2-> q1, messages published to q1 through direct exchange ``ex``."""
    world.exchange("ex", "direct")
    world.exchange("dlx1", "fanout")
    world.exchange("dlx2", "fanout")
    world.declare("q1", **{"x-dead-letter-exchange": "dlx1"})
    world.declare("q2", **{"x-dead-letter-exchange": "dlx2"})
    world.bind("q1", "ex", "k")
    world.bind("q2", "dlx1")
    world.bind("q1", "dlx2")


def reject_head(world: World, queue: str) -> Message:
    """Take the head of ``queue`` with Basic.Get and reject it without requeue."""
    q = world.queue(queue)
    qm = q.get()
    assert qm is not None
    q.reject(qm)
    return qm.message


def test_repeat_deaths_increment_count_and_move_to_the_front(world: World) -> None:
    two_rejecting_queues(world)
    world.publish("k", b"m", exchange="ex")
    reject_head(world, "q1")
    reject_head(world, "q2")
    reject_head(world, "q1")
    [message] = world.drain("q2")
    deaths = x_death(message)
    assert [death_view(d) for d in deaths] == [
        # the (q1, rejected) record keeps its first exchange and routing keys
        {"count": 2, "reason": "rejected", "queue": "q1", "exchange": "ex", "routing-keys": ["k"]},
        {"count": 1, "reason": "rejected", "queue": "q2", "exchange": "dlx1",
         "routing-keys": ["k"]},
    ]
    headers = message.headers
    assert (headers["x-first-death-queue"], headers["x-first-death-reason"],
            headers["x-first-death-exchange"]) == ("q1", "rejected", "ex")
    # 3.13: x-last-death-* follow the latest death (the message came to q1 through dlx2)
    assert (headers["x-last-death-queue"], headers["x-last-death-reason"],
            headers["x-last-death-exchange"]) == ("q1", "rejected", "dlx2")


def test_a_different_reason_in_the_same_queue_is_a_new_record(world: World) -> None:
    # q1 (ttl) -> q2 -> q1 -> (expires) q2: deaths are kept per (queue, reason)
    world.declare("q1", **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "q2",
                           "x-message-ttl": 50})
    world.declare("q2", **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "q1"})
    world.publish("q1", b"m")
    reject_head(world, "q1")
    reject_head(world, "q2")
    world.advance(51)  # expires in q1; q2's rejection is in the cycle, so it is delivered
    [message] = world.drain("q2")
    assert [(d["queue"], d["reason"], d["count"]) for d in x_death(message)] == [
        ("q1", "expired", 1), ("q2", "rejected", 1), ("q1", "rejected", 1)]


def test_expiry_after_a_rejection_in_the_same_queue_is_an_automatic_cycle(world: World) -> None:
    # rejected in q -> back to q by its own routing key (allowed), then expires in q: the
    # latest hop q -> q is automatic, so 3.13 drops it (is_cycle_v2 / is_cycle_v1 agree)
    q = world.declare("q", **{"x-dead-letter-exchange": "", "x-message-ttl": 50})
    world.publish("q", b"m")
    reject_head(world, "q")
    assert q.message_count == 1
    world.advance(51)
    assert q.message_count == 0


def test_repeat_death_keeps_the_first_death_time() -> None:
    first = datetime.datetime(2024, 1, 1, 12, 0, 0, tzinfo=datetime.UTC)
    later = first + datetime.timedelta(minutes=5)
    message = make_message("q", b"m")
    once, _ = dead_letter_message(message, "rejected", "q", "", None, now=first)
    twice, _ = dead_letter_message(once, "rejected", "q", "", None, now=later)
    [death] = x_death(twice)
    assert death["count"] == 2
    assert death["time"] == first


def test_expired_dead_letter_cycle_is_dropped(world: World) -> None:
    # q dead-letters to the default exchange with its own name as routing key: a loop
    q = world.declare("q", **{"x-dead-letter-exchange": "", "x-message-ttl": 10})
    world.publish("q", b"m")
    world.advance(11)
    assert q.message_count == 0
    world.advance(100)
    assert q.message_count == 0


def test_expired_cycle_through_two_queues_is_dropped_on_return(world: World) -> None:
    world.declare("q1", **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "q2",
                           "x-message-ttl": 10})
    world.declare("q2", **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "q1",
                           "x-message-ttl": 10})
    world.publish("q1", b"m")
    world.advance(11)
    assert (world.queue("q1").message_count, world.queue("q2").message_count) == (0, 1)
    world.advance(11)  # expires in q2; q1 is in its history without a rejection: dropped
    assert (world.queue("q1").message_count, world.queue("q2").message_count) == (0, 0)


def test_rejected_dead_letter_loop_is_allowed(world: World) -> None:
    world.declare("q", **{"x-dead-letter-exchange": ""})
    world.publish("q", b"m")
    reject_head(world, "q")
    reject_head(world, "q")
    [message] = world.drain("q")
    assert [(d["queue"], d["reason"], d["count"]) for d in x_death(message)] == [
        ("q", "rejected", 2)]


def test_expired_after_rejection_in_the_cycle_is_not_dropped(world: World) -> None:
    # q1 (reject) -> q2 (expire) -> q1: a rejection in the cycle, so it is delivered
    world.declare("q1", **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "q2"})
    world.declare("q2", **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "q1",
                           "x-message-ttl": 10})
    world.publish("q1", b"m")
    reject_head(world, "q1")
    world.advance(11)
    [message] = world.drain("q1")
    assert [(d["queue"], d["reason"]) for d in x_death(message)] == [
        ("q2", "expired"), ("q1", "rejected")]


def test_x_death_on_the_wire(wired) -> None:
    _, _, wire = wired
    wire.send(1, commands.Exchange.Declare(exchange="dlx", exchange_type="fanout"))
    wire.send(1, commands.Queue.Declare(queue="dead"))
    wire.send(1, commands.Queue.Bind(queue="dead", exchange="dlx"))
    wire.send(1, commands.Queue.Declare(queue="q", arguments={"x-dead-letter-exchange": "dlx"}))
    wire.publish(1, "", "q", b"m", expiration="60000")
    [(get_ok, _, _)] = contents(wire.send(1, commands.Basic.Get(queue="q")))
    wire.send(1, commands.Basic.Reject(delivery_tag=get_ok.delivery_tag, requeue=False))
    [(_, props, body)] = contents(wire.send(1, commands.Basic.Get(queue="dead", no_ack=True)))
    assert body == b"m"
    assert props.expiration is None
    [death] = props.headers["x-death"]
    assert {k: v for k, v in death.items() if k != "time"} == {
        "count": 1, "reason": "rejected", "queue": "q", "exchange": "",
        "routing-keys": ["q"], "original-expiration": "60000"}
    assert isinstance(death["time"], datetime.datetime)


def test_x_death_field_types_on_the_wire(wired) -> None:
    _, _, wire = wired
    wire.send(1, commands.Queue.Declare(queue="dead"))
    wire.send(1, commands.Queue.Declare(queue="q", arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"}))
    wire.publish(1, "", "q", b"m")
    [(get_ok, _, _)] = contents(wire.send(1, commands.Basic.Get(queue="q")))
    wire.send(1, commands.Basic.Reject(delivery_tag=get_ok.delivery_tag, requeue=False))
    before = len(wire.raw)
    wire.send(1, commands.Basic.Get(queue="dead", no_ack=True))
    header = wire.raw[before + 1]  # GetOk, then the content header frame
    assert b"\x04timeT" in header  # timestamp
    assert b"\x05countl" in header  # long


# ================================================================================================
# Priority queues (x-max-priority)
# ================================================================================================


def test_priority_queue_delivers_higher_priority_first_fifo_within(world: World) -> None:
    world.declare("q", **{"x-max-priority": 5})
    for body, priority in ((b"a0", 0), (b"b3", 3), (b"c5", 5), (b"d3", 3), (b"e1", 1),
                           (b"f5", 5)):
        world.publish("q", body, priority=priority)
    world.publish("q", b"g-none")  # no priority property: 0
    assert world.bodies("q") == [b"c5", b"f5", b"b3", b"d3", b"e1", b"a0", b"g-none"]


def test_priority_above_max_is_capped_to_max(world: World) -> None:
    world.declare("q", **{"x-max-priority": 3})
    world.publish("q", b"three", priority=3)
    world.publish("q", b"nine", priority=9)  # same level as 3, so after "three"
    world.publish("q", b"two", priority=2)
    assert world.bodies("q") == [b"three", b"nine", b"two"]


def test_without_max_priority_the_priority_property_is_ignored(world: World) -> None:
    world.declare("q")
    world.publish("q", b"low", priority=0)
    world.publish("q", b"high", priority=9)
    assert world.bodies("q") == [b"low", b"high"]


def test_priority_order_to_a_consumer_and_after_requeue(world: World) -> None:
    world.declare("q", **{"x-max-priority": 10})
    world.publish("q", b"low", priority=1)
    world.publish("q", b"high", priority=8)
    world.consume("q", "c", prefetch=1)
    assert world.channel.bodies() == [b"high"]
    world.settle(0, requeue=True)  # back at its place: still first
    assert world.channel.bodies() == [b"high", b"high"]
    world.settle(1)
    assert world.channel.bodies() == [b"high", b"high", b"low"]


def test_priority_queue_drop_head_drops_the_next_message_to_deliver(world: World) -> None:
    world.declare("q", **{"x-max-priority": 5, "x-max-length": 2})
    world.publish("q", b"low", priority=1)
    world.publish("q", b"high", priority=5)
    world.publish("q", b"mid", priority=3)
    # the head (what would be delivered next) is dropped: here the highest priority one
    assert world.bodies("q") == [b"mid", b"low"]


# ================================================================================================
# Single active consumer
# ================================================================================================


def test_single_active_consumer_only_the_first_consumer_gets_messages(world: World) -> None:
    world.declare("q", **{"x-single-active-consumer": True})
    world.consume("q", "first")
    world.consume("q", "second")
    for i in range(4):
        world.publish("q", f"m{i}".encode())
    assert world.channel.bodies("first") == [b"m0", b"m1", b"m2", b"m3"]
    assert world.channel.bodies("second") == []


def test_single_active_consumer_next_in_line_takes_over_after_cancel(world: World) -> None:
    world.declare("q", **{"x-single-active-consumer": True})
    first = world.consume("q", "first", prefetch=1)
    world.consume("q", "second")
    world.consume("q", "third")
    for i in range(3):
        world.publish("q", f"m{i}".encode())
    # the active consumer is blocked by its prefetch; the others still get nothing
    assert world.channel.bodies("first") == [b"m0"]
    assert world.channel.bodies("second") == []
    q = world.queue("q")
    q.remove_consumer(first)
    # the hand-over waits until the old active consumer's delivery is settled, so the next
    # consumer sees the messages in order (what RabbitMQ shows pika, see the interop test)
    assert world.channel.bodies("second") == []
    world.settle(0, requeue=True)
    assert world.channel.bodies("second") == [b"m0", b"m1", b"m2"]
    assert world.channel.bodies("third") == []
    assert world.channel.deliveries[-3][1].redelivered


def sac_over_the_wire(wire: Wire) -> list[tuple[int, Any]]:
    """SAC queue; 'first' on channel 2 (prefetch 1) holds m1 unacked, 'second' on channel 3
    waits; m1..m3 published on channel 1. Returns what closing channel 2 produced."""
    wire.open(2).open(3)
    wire.send(1, commands.Queue.Declare(queue="q", arguments={"x-single-active-consumer": True}))
    wire.send(2, commands.Basic.Qos(prefetch_count=1))
    wire.send(2, commands.Basic.Consume(queue="q", consumer_tag="first"))
    wire.send(3, commands.Basic.Consume(queue="q", consumer_tag="second", no_ack=True))
    delivered = []
    for body in (b"m1", b"m2", b"m3"):
        delivered += contents(wire.publish(1, "", "q", body))
    assert [(d.consumer_tag, b) for d, _, b in delivered] == [("first", b"m1")]
    return wire.send(2, commands.Channel.Close(reply_code=200, reply_text="bye",
                                                       class_id=0, method_id=0))


def test_single_active_consumer_channel_close_hands_everything_over(wired) -> None:
    _, _, wire = wired
    out = sac_over_the_wire(wire)
    got = contents(out)
    assert sorted(b for _, _, b in got) == [b"m1", b"m2", b"m3"]
    assert {d.consumer_tag for d, _, _ in got} == {"second"}
    assert {b: d.redelivered for d, _, b in got} == {b"m1": True, b"m2": False, b"m3": False}


def test_single_active_consumer_channel_close_requeues_before_handing_over(wired) -> None:
    _, _, wire = wired
    out = sac_over_the_wire(wire)
    assert [b for _, _, b in contents(out)] == [b"m1", b"m2", b"m3"]


def test_without_single_active_consumer_consumers_share_round_robin(world: World) -> None:
    world.declare("q")
    world.consume("q", "a")
    world.consume("q", "b")
    for i in range(4):
        world.publish("q", f"m{i}".encode())
    assert world.channel.bodies("a") == [b"m0", b"m2"]
    assert world.channel.bodies("b") == [b"m1", b"m3"]


# ================================================================================================
# Consumer priorities (x-priority)
# ================================================================================================


def test_higher_priority_consumer_gets_everything_while_it_can_take(world: World) -> None:
    world.declare("q")
    world.consume("q", "low", priority=1)
    world.consume("q", "high", priority=10)
    for i in range(3):
        world.publish("q", f"m{i}".encode())
    assert world.channel.bodies("high") == [b"m0", b"m1", b"m2"]
    assert world.channel.bodies("low") == []


def test_lower_priority_consumer_gets_messages_when_higher_is_blocked(world: World) -> None:
    world.declare("q")
    world.consume("q", "high", prefetch=1, priority=10)
    world.consume("q", "low", prefetch=10, priority=0)
    for i in range(3):
        world.publish("q", f"m{i}".encode())
    assert world.channel.bodies("high") == [b"m0"]
    assert world.channel.bodies("low") == [b"m1", b"m2"]
    world.settle(0)  # high acks: it can take again, and is preferred again
    world.publish("q", b"m3")
    assert world.channel.bodies("high") == [b"m0", b"m3"]


def test_negative_consumer_priority_ranks_below_the_default(world: World) -> None:
    world.declare("q")
    world.consume("q", "negative", priority=-5)
    world.consume("q", "default")
    world.publish("q", b"m")
    assert world.channel.bodies("default") == [b"m"]


def test_equal_priority_consumers_share_round_robin(world: World) -> None:
    world.declare("q")
    world.consume("q", "low", priority=0)
    world.consume("q", "a", priority=5)
    world.consume("q", "b", priority=5)
    for i in range(4):
        world.publish("q", f"m{i}".encode())
    assert world.channel.bodies("a") == [b"m0", b"m2"]
    assert world.channel.bodies("b") == [b"m1", b"m3"]
    assert world.channel.bodies("low") == []


def test_invalid_consumer_priority_is_refused(wired) -> None:
    _, _, wire = wired
    wire.send(1, commands.Queue.Declare(queue="q"))
    out = wire.send(1, commands.Basic.Consume(queue="q", arguments={"x-priority": "high"}))
    [close] = methods(out, commands.Channel.Close)
    assert close.reply_code == 406
    assert close.reply_text == ("PRECONDITION_FAILED - invalid arg 'x-priority' for queue 'q' "
                                "in vhost '/': \"expected integer, got longstr\"")


# ================================================================================================
# Consumer cancel notification
# ================================================================================================


def test_queue_delete_cancels_consumers_with_basic_cancel(wired) -> None:
    _, _, wire = wired
    wire.open(2)
    wire.send(1, commands.Queue.Declare(queue="q"))
    wire.send(1, commands.Basic.Consume(queue="q", consumer_tag="c1"))
    out = wire.send(2, commands.Queue.Delete(queue="q"))
    [cancel] = methods(out, commands.Basic.Cancel)
    assert cancel.consumer_tag == "c1"
    assert [ch for ch, f in out if isinstance(f, commands.Basic.Cancel)] == [1]
    assert methods(out, commands.Channel.Close) == []
    # the tag is free again on that channel
    wire.send(1, commands.Queue.Declare(queue="q2"))
    out = wire.send(1, commands.Basic.Consume(queue="q2", consumer_tag="c1"))
    assert len(methods(out, commands.Basic.ConsumeOk)) == 1


def test_no_basic_cancel_without_the_client_capability() -> None:
    clock = FakeClock()
    broker = Broker(BrokerConfig(), timers=Timers(clock=clock))
    wire = Wire(broker, clock, capabilities={"publisher_confirms": True}).open(1)
    wire.send(1, commands.Queue.Declare(queue="q"))
    wire.send(1, commands.Basic.Consume(queue="q", consumer_tag="c1"))
    out = wire.send(1, commands.Queue.Delete(queue="q"))
    assert methods(out, commands.Basic.Cancel) == []
    assert len(methods(out, commands.Queue.DeleteOk)) == 1


def test_x_expires_deletion_cancels_nothing_and_drops_bindings(world: World) -> None:
    world.exchange("fan", "fanout")
    world.declare("q", **{"x-expires": 100})
    world.bind("q", "fan")
    world.advance(101)
    assert "q" not in world.vhost.queues
    assert world.vhost.bindings() == []
    assert world.publish("", b"m", exchange="fan") == []


# ================================================================================================
# Queue argument validation and equivalence
# ================================================================================================

TOO_LARGE = 315_360_000_001


@pytest.mark.parametrize(("arguments", "error"), [
    ({"x-message-ttl": -1}, "{value_negative,-1}"),
    ({"x-message-ttl": "abc"}, '"expected integer, got longstr"'),
    ({"x-message-ttl": TOO_LARGE}, f"{{value_too_large,{TOO_LARGE}}}"),
    ({"x-expires": 0}, "{value_zero,0}"),
    ({"x-expires": -5}, "{value_negative,-5}"),
    ({"x-expires": "x"}, '"expected integer, got longstr"'),
    ({"x-max-length": -1}, "{value_negative,-1}"),
    ({"x-max-length": "a"}, '"expected integer, got longstr"'),
    ({"x-max-length-bytes": -2}, "{value_negative,-2}"),
    ({"x-max-priority": 256}, "{max_value_exceeded,256}"),
    ({"x-max-priority": -1}, "{value_negative,-1}"),
    ({"x-max-priority": "a"}, '"expected integer, got longstr"'),
    ({"x-overflow": "foo"}, "invalid_overflow"),
    ({"x-overflow": 100000}, "{unacceptable_type,signedint}"),
    ({"x-dead-letter-routing-key": "rk"}, "routing_key_but_no_dlx_defined"),
    ({"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": 100000},
     "{unacceptable_type,signedint}"),
    ({"x-single-active-consumer": 100000}, "{unacceptable_type,signedint}"),
    ({"x-single-active-consumer": "true"}, "{unacceptable_type,longstr}"),
])
def test_invalid_queue_argument_text(world: World, arguments: dict[str, Any], error: str) -> None:
    key = list(arguments)[-1]
    with pytest.raises(PreconditionFailed) as info:
        world.declare("q", **arguments)
    assert info.value.reply_text == (
        f"PRECONDITION_FAILED - invalid arg '{key}' for queue 'q' in vhost '/': {error}")
    assert "q" not in world.vhost.queues


def test_invalid_dead_letter_exchange_type_text(world: World) -> None:
    with pytest.raises(PreconditionFailed) as info:
        world.declare("q", **{"x-dead-letter-exchange": 100000})
    assert info.value.reply_text == ("PRECONDITION_FAILED - invalid type 'signedint' for arg "
                                     "'x-dead-letter-exchange' in queue 'q' in vhost '/'")


def test_invalid_queue_argument_closes_the_channel_with_406(wired) -> None:
    _, _, wire = wired
    out = wire.send(1, commands.Queue.Declare(queue="q", arguments={"x-message-ttl": -1}))
    [close] = methods(out, commands.Channel.Close)
    assert (close.reply_code, close.class_id, close.method_id) == (406, 50, 10)
    assert close.reply_text == ("PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue 'q' "
                                "in vhost '/': {value_negative,-1}")


def test_invalid_argument_text_names_the_wire_type(wired) -> None:
    _, _, wire = wired
    out = wire.send(1, commands.Queue.Declare(queue="q", arguments={"x-overflow": 1}))
    [close] = methods(out, commands.Channel.Close)
    assert close.reply_text == ("PRECONDITION_FAILED - invalid arg 'x-overflow' for queue 'q' "
                                "in vhost '/': {unacceptable_type,byte}")


def test_redeclare_with_an_argument_removed_or_added_is_406(world: World) -> None:
    world.declare("q", **{"x-message-ttl": 1000})
    with pytest.raises(PreconditionFailed) as info:
        world.declare("q")
    assert info.value.reply_text == (
        "PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue 'q' in vhost '/': "
        "received none but current is the value '1000' of type 'signedint'")
    with pytest.raises(PreconditionFailed) as info:
        world.declare("q", **{"x-message-ttl": 1000, "x-max-length": 5})
    assert info.value.reply_text == (
        "PRECONDITION_FAILED - inequivalent arg 'x-max-length' for queue 'q' in vhost '/': "
        "received the value '5' of type 'signedint' but current is none")
    world.declare("q", **{"x-message-ttl": 1000})  # the same arguments: fine


@pytest.mark.parametrize(("key", "first", "second", "shown"), [
    ("x-message-ttl", 1000, 2000, ("2000", "1000")),
    ("x-overflow", "drop-head", "reject-publish", ("reject-publish", "drop-head")),
    ("x-single-active-consumer", False, True, ("true", "false")),
])
def test_redeclare_with_a_different_argument_value_is_406(
        world: World, key: str, first: Any, second: Any, shown: tuple[str, str]) -> None:
    # with both values set RabbitMQ prints the bare values (assert_field_equivalence)
    world.declare("q", **{key: first})
    with pytest.raises(PreconditionFailed) as info:
        world.declare("q", **{key: second})
    assert info.value.reply_text == (
        f"PRECONDITION_FAILED - inequivalent arg '{key}' for queue 'q' in vhost '/': "
        f"received '{shown[0]}' but current is '{shown[1]}'")


def test_redeclare_checks_equivalence_before_validating(world: World) -> None:
    world.declare("q", **{"x-max-length": 3})
    with pytest.raises(PreconditionFailed) as info:
        world.declare("q", **{"x-max-length": "3"})
    # same text, different type: inequivalent (the text checked against RabbitMQ 3.10.8)
    assert info.value.reply_text == (
        "PRECONDITION_FAILED - inequivalent arg 'x-max-length' for queue 'q' in vhost '/': "
        "received '3' but current is '3'")


@pytest.mark.parametrize("key", ["x-max-length", "x-overflow", "x-max-priority",
                                 "x-single-active-consumer", "x-dead-letter-exchange"])
def test_redeclare_with_a_different_x_argument_is_refused(world: World, key: str) -> None:
    first = {"x-max-length": 1, "x-overflow": "drop-head", "x-max-priority": 2,
             "x-single-active-consumer": False, "x-dead-letter-exchange": "a"}
    second = {"x-max-length": 2, "x-overflow": "reject-publish", "x-max-priority": 3,
              "x-single-active-consumer": True, "x-dead-letter-exchange": "b"}
    world.declare("q", **{key: first[key]})
    with pytest.raises(PreconditionFailed) as info:
        world.declare("q", **{key: second[key]})
    assert info.value.reply_text.startswith(
        f"PRECONDITION_FAILED - inequivalent arg '{key}' for queue 'q' in vhost '/': received ")


# ================================================================================================
# Message properties checked at publish
# ================================================================================================


@pytest.mark.parametrize(("expiration", "error"), [
    ("abc", "no_integer"),
    (" 5", "no_integer"),
    ("-5", "{value_negative,-5}"),
    ("12abc", '{leftover_string,"abc"}'),
    ("1.5", '{leftover_string,".5"}'),
    (str(TOO_LARGE), f"{{value_too_large,{TOO_LARGE}}}"),
])
def test_invalid_expiration_property_is_406(wired, expiration: str, error: str) -> None:
    _, _, wire = wired
    wire.send(1, commands.Queue.Declare(queue="q"))
    out = wire.publish(1, "", "q", b"m", expiration=expiration)
    [close] = methods(out, commands.Channel.Close)
    assert close.reply_code == 406
    assert close.reply_text == f"PRECONDITION_FAILED - invalid expiration '{expiration}': {error}"


def test_expiration_with_a_plus_sign_is_accepted(wired) -> None:
    broker, _, wire = wired
    wire.send(1, commands.Queue.Declare(queue="q"))
    out = wire.publish(1, "", "q", b"m", expiration="+5000")
    assert methods(out, commands.Channel.Close) == []
    assert broker.vhosts["/"].queues["q"].message_count == 1


def test_publish_to_an_internal_exchange_is_403(wired) -> None:
    _, _, wire = wired
    wire.send(1, commands.Exchange.Declare(exchange="int", exchange_type="fanout", internal=True))
    out = wire.publish(1, "int", "", b"m")
    [close] = methods(out, commands.Channel.Close)
    assert (close.reply_code, close.class_id, close.method_id) == (403, 60, 40)
    assert close.reply_text == ("ACCESS_REFUSED - cannot publish to internal exchange 'int' in "
                                "vhost '/'")


# ================================================================================================
# Policies
# ================================================================================================


def test_policy_applies_to_existing_queues_at_once(world: World) -> None:
    q = dlx_setup(world)
    for i in range(3):
        world.publish("q", f"m{i}".encode())
    world.vhost.set_policy("limit", "^q$", {"max-length": 1}, apply_to="queues")
    assert q.settings.policy == "limit"
    assert q.message_count == 1
    assert [m.body for m in world.drain("dead")] == [b"m0", b"m1"]
    assert world.bodies("q") == [b"m2"]


def test_policy_applies_to_queues_declared_later(world: World) -> None:
    world.vhost.set_policy("ttl", "^later", {"message-ttl": 50})
    q = world.declare("later-q")
    world.declare("other")
    world.publish("later-q", b"m")
    world.publish("other", b"m")
    world.advance(51)
    assert q.message_count == 0
    assert world.queue("other").message_count == 1


def test_highest_priority_policy_wins_alone(world: World) -> None:
    world.vhost.set_policy("low", "^q$", {"max-length": 5, "message-ttl": 50}, priority=1)
    world.vhost.set_policy("high", "^q$", {"max-length": 2}, priority=10)
    q = world.declare("q")
    assert q.settings.policy == "high"
    for i in range(4):
        world.publish("q", f"m{i}".encode())
    world.advance(100)  # "low"'s message-ttl does not apply: policies are not merged
    assert world.bodies("q") == [b"m2", b"m3"]
    world.vhost.clear_policy("high")
    assert q.settings.policy == "low"
    assert (q.settings.max_length, q.settings.message_ttl) == (5, 50)


def test_policy_apply_to_exchanges_does_not_touch_queues(world: World) -> None:
    world.vhost.set_policy("xs", ".*", {"max-length": 1}, apply_to="exchanges")
    q = world.declare("q")
    world.publish("q", b"a")
    world.publish("q", b"b")
    assert q.message_count == 2


def test_argument_wins_over_policy_for_dead_letter_exchange(world: World) -> None:
    for name in ("from-arg", "from-policy"):
        world.exchange(name, "fanout")
        world.declare(name + "-q")
        world.bind(name + "-q", name)
    world.declare("q", **{"x-dead-letter-exchange": "from-arg", "x-message-ttl": 10})
    world.vhost.set_policy("dlx", "^q$", {"dead-letter-exchange": "from-policy"})
    world.publish("q", b"m")
    world.advance(11)
    assert world.queue("from-arg-q").message_count == 1
    assert world.queue("from-policy-q").message_count == 0


def test_policy_dead_letter_exchange_applies_without_argument(world: World) -> None:
    world.exchange("dlx", "fanout")
    world.declare("dead")
    world.bind("dead", "dlx")
    world.declare("q", **{"x-message-ttl": 10})
    world.vhost.set_policy("dlx", "^q$", {"dead-letter-exchange": "dlx",
                                          "dead-letter-routing-key": "rk"})
    world.publish("q", b"m")
    world.advance(11)
    [dead] = world.drain("dead")
    assert dead.routing_key == "rk"


def test_argument_wins_over_policy_for_overflow(world: World) -> None:
    world.declare("q", **{"x-overflow": "reject-publish"})
    world.vhost.set_policy("p", "^q$", {"max-length": 1, "overflow": "drop-head"})
    assert world.publish("q", b"m1") == [ACCEPTED]
    assert world.publish("q", b"m2") == [REJECTED]
    assert world.bodies("q") == [b"m1"]


@pytest.mark.parametrize(("arg", "policy"), [(1000, 50), (50, 1000)])
def test_lower_of_argument_and_policy_message_ttl_wins(world: World, arg: int,
                                                       policy: int) -> None:
    q = world.declare("q", **{"x-message-ttl": arg})
    world.vhost.set_policy("p", "^q$", {"message-ttl": policy})
    world.publish("q", b"m")
    world.advance(49)
    assert q.message_count == 1
    world.advance(2)
    assert q.message_count == 0


@pytest.mark.parametrize(("arg", "policy"), [(5, 2), (2, 5)])
def test_lower_of_argument_and_policy_max_length_wins(world: World, arg: int,
                                                      policy: int) -> None:
    q = world.declare("q", **{"x-max-length": arg})
    world.vhost.set_policy("p", "^q$", {"max-length": policy})
    for i in range(6):
        world.publish("q", f"m{i}".encode())
    assert q.message_count == 2


def test_lower_of_argument_and_policy_expires_wins(world: World) -> None:
    world.declare("q", **{"x-expires": 10_000})
    world.vhost.set_policy("p", "^q$", {"expires": 100})
    world.advance(101)
    assert "q" not in world.vhost.queues


def test_clear_policy_reverts_to_the_arguments(world: World) -> None:
    q = world.declare("q", **{"x-max-length": 3})
    world.vhost.set_policy("p", "^q$", {"max-length": 1, "message-ttl": 10})
    assert (q.settings.max_length, q.settings.message_ttl) == (1, 10)
    assert world.vhost.clear_policy("p") is True
    assert (q.settings.max_length, q.settings.message_ttl, q.settings.policy) == (3, None, None)
    for i in range(3):
        world.publish("q", f"m{i}".encode())
    world.advance(100)
    assert q.message_count == 3
    assert world.vhost.clear_policy("p") is False


def test_policy_replaced_by_name(world: World) -> None:
    q = world.declare("q")
    world.vhost.set_policy("p", "^q$", {"max-length": 1})
    world.vhost.set_policy("p", "^q$", {"max-length": 4})
    assert q.settings.max_length == 4
    assert list(world.vhost.policies) == ["p"]


@pytest.mark.parametrize(("pattern", "definition", "apply_to"), [
    ("(", {"max-length": 1}, "all"),
    ("^q$", {"max-length": 1}, "everything"),
    ("^q$", {}, "all"),
    ("^q$", {"message-ttl": -1}, "all"),
    ("^q$", {"message-ttl": "100"}, "all"),
    ("^q$", {"max-length": True}, "all"),
    ("^q$", {"expires": 0}, "all"),
    ("^q$", {"overflow": "drop-tail"}, "all"),
    ("^q$", {"dead-letter-exchange": 5}, "all"),
    ("^x$", {"alternate-exchange": 5}, "exchanges"),
])
def test_invalid_policy_raises_and_changes_nothing(world: World, pattern: str,
                                                   definition: dict[str, Any],
                                                   apply_to: str) -> None:
    q = world.declare("q")
    before = q.settings
    with pytest.raises(PolicyError):
        world.vhost.set_policy("bad", pattern, definition, apply_to=apply_to)
    assert "bad" not in world.vhost.policies
    assert q.settings == before


# ================================================================================================
# Alternate exchanges and exchange-to-exchange routing
# ================================================================================================


def ae_setup(world: World, **main_args: Any) -> None:
    world.exchange("ae", "fanout")
    world.declare("unrouted")
    world.bind("unrouted", "ae")
    world.exchange("main", "direct", arguments=main_args)
    world.declare("routed")
    world.bind("routed", "main", "k")


def test_alternate_exchange_argument_takes_unroutable_messages(world: World) -> None:
    ae_setup(world, **{"alternate-exchange": "ae"})
    world.publish("k", b"routable", exchange="main")
    world.publish("other", b"unroutable", exchange="main")
    assert world.bodies("routed") == [b"routable"]
    [message] = world.drain("unrouted")
    # the message keeps the exchange and routing key it was published with
    assert (message.body, message.exchange, message.routing_key) == (
        b"unroutable", "main", "other")


def test_alternate_exchange_by_policy(world: World) -> None:
    ae_setup(world)
    world.publish("other", b"before", exchange="main")
    world.vhost.set_policy("ae", "^main$", {"alternate-exchange": "ae"}, apply_to="exchanges")
    world.publish("other", b"with-policy", exchange="main")
    world.vhost.clear_policy("ae")
    world.publish("other", b"after", exchange="main")
    assert world.bodies("unrouted") == [b"with-policy"]


def test_alternate_exchange_argument_wins_over_policy(world: World) -> None:
    ae_setup(world, **{"alternate-exchange": "ae"})
    world.exchange("ae2", "fanout")
    world.declare("unrouted2")
    world.bind("unrouted2", "ae2")
    world.vhost.set_policy("ae", "^main$", {"alternate-exchange": "ae2"})
    world.publish("other", b"m", exchange="main")
    assert (world.queue("unrouted").message_count, world.queue("unrouted2").message_count) == (
        1, 0)


def test_missing_alternate_exchange_routes_nowhere(world: World) -> None:
    world.exchange("main", "direct", arguments={"alternate-exchange": "missing"})
    assert world.publish("k", b"m", exchange="main") == []


def test_alternate_exchange_chain_with_a_cycle_terminates(world: World) -> None:
    world.exchange("a", "direct", arguments={"alternate-exchange": "b"})
    world.exchange("b", "direct", arguments={"alternate-exchange": "a"})
    assert world.publish("k", b"m", exchange="a") == []
    world.exchange("c", "direct", arguments={"alternate-exchange": "d"})
    world.exchange("d", "direct", arguments={"alternate-exchange": "e"})
    world.exchange("e", "fanout")
    world.declare("end")
    world.bind("end", "e")
    assert world.publish("k", b"m", exchange="c") == [ACCEPTED]


def test_exchange_to_exchange_binding_routes_by_the_binding_key(world: World) -> None:
    world.exchange("src", "topic")
    world.exchange("dst", "direct")
    world.bind_x("dst", "src", "orders.*")
    world.declare("q")
    world.bind("q", "dst", "orders.new")
    world.publish("orders.new", b"yes", exchange="src")
    world.publish("orders.old", b"no-dst-binding", exchange="src")
    world.publish("invoices.new", b"no-src-binding", exchange="src")
    assert world.bodies("q") == [b"yes"]


def test_exchange_to_exchange_cycle_delivers_once(world: World) -> None:
    world.exchange("x1", "fanout")
    world.exchange("x2", "fanout")
    world.bind_x("x2", "x1")
    world.bind_x("x1", "x2")
    world.declare("q")
    world.bind("q", "x2")
    world.bind("q", "x1")  # reachable two ways
    assert world.publish("k", b"m", exchange="x1") == [ACCEPTED]
    assert world.bodies("q") == [b"m"]
    assert world.publish("k", b"m", exchange="x2") == [ACCEPTED]


def test_internal_exchange_is_reachable_through_an_exchange_binding(world: World) -> None:
    world.exchange("front", "fanout")
    world.exchange("inner", "fanout", internal=True)
    world.bind_x("inner", "front")
    world.declare("q")
    world.bind("q", "inner")
    world.publish("k", b"m", exchange="front")
    assert world.bodies("q") == [b"m"]


def test_unroutable_through_exchange_binding_falls_back_to_alternate_exchange(
        world: World) -> None:
    world.exchange("ae", "fanout")
    world.declare("unrouted")
    world.bind("unrouted", "ae")
    world.exchange("front", "fanout")
    world.exchange("inner", "direct", arguments={"alternate-exchange": "ae"})
    world.bind_x("inner", "front")
    world.publish("nothing-bound", b"m", exchange="front")
    assert world.bodies("unrouted") == [b"m"]


# --- sender-selected distribution (CC / BCC) -------------------------------------------------


def test_cc_and_bcc_headers_add_routing_keys_and_bcc_is_removed(wired) -> None:
    broker, _, wire = wired
    for name in ("a", "b", "c", "d"):
        wire.send(1, commands.Queue.Declare(queue=name))
    wire.publish(1, "", "a", b"hi", headers={"CC": ["b"], "BCC": ["c"], "keep": 1})
    vhost = broker.vhosts["/"]
    assert vhost.queues["d"].message_count == 0
    got = {name: vhost.queues[name].get() for name in ("a", "b", "c")}
    assert all(qm is not None for qm in got.values())
    for qm in got.values():
        headers = qm.message.headers
        assert headers["CC"] == ["b"] and headers["keep"] == 1
        assert "BCC" not in headers


# ================================================================================================
# Queue types: x-queue-type classic / quorum (RabbitMQ 3.10.8's texts, checked with pika)
# ================================================================================================


@pytest.mark.parametrize(("arguments", "text_"), [
    ({"x-queue-type": "bogus"},
     "invalid arg 'x-queue-type' for queue 'q' in vhost '/': \"unsupported queue type 'bogus'\""),
    # deliberate difference: RabbitMQ 3.13 has streams, amqpq refuses them
    ({"x-queue-type": "stream"},
     "invalid arg 'x-queue-type' for queue 'q' in vhost '/': \"unsupported queue type "
     "'stream'\""),
    ({"x-queue-type": 1},
     "invalid arg 'x-queue-type' for queue 'q' in vhost '/': {unacceptable_type,signedint}"),
    ({"x-delivery-limit": 3},
     "invalid arg 'x-delivery-limit' for queue 'q' in vhost '/' of queue type "
     "rabbit_classic_queue"),
    ({"x-max-in-memory-length": 3},
     "invalid arg 'x-max-in-memory-length' for queue 'q' in vhost '/' of queue type "
     "rabbit_classic_queue"),
    ({"x-queue-type": "quorum", "x-queue-mode": "lazy"},
     "invalid arg 'x-queue-mode' for queue 'q' in vhost '/' of queue type rabbit_quorum_queue"),
])
def test_queue_type_arguments_are_checked(world: World, arguments: dict[str, Any],
                                          text_: str) -> None:
    with pytest.raises(PreconditionFailed) as info:
        world.vhost.declare_queue("q", durable=True, arguments=arguments)
    assert info.value.reply_text == f"PRECONDITION_FAILED - {text_}"


def test_quorum_queue_returns_count_on_channel_close_too(world: World) -> None:
    q = world.vhost.declare_queue("qq", durable=True,
                                  arguments={"x-queue-type": "quorum", "x-delivery-limit": 1})
    assert q.kind == "quorum"
    world.publish("qq", b"m")
    for expected in (0, 1):
        qm = q.get()
        assert qm is not None
        assert qm.message.headers["x-delivery-count"] == expected
        q.settled(None)
        q.requeue([qm])  # what a channel closing with the delivery unacked does
    assert q.message_count == 0  # two returns > delivery-limit 1: dropped (no DLX)


def test_delivery_limit_from_a_policy(world: World) -> None:
    world.vhost.set_policy("dl", "^qq$", {"delivery-limit": 0}, 0, "queues")
    q = world.vhost.declare_queue("qq", durable=True, arguments={"x-queue-type": "quorum"})
    assert q.settings.delivery_limit == 0
    world.publish("qq", b"m")
    qm = q.get()
    q.settled(None)
    q.requeue([qm])
    assert q.message_count == 0


def test_classic_queues_carry_no_delivery_count(world: World) -> None:
    q = world.vhost.declare_queue("cq", arguments={"x-queue-type": "classic"})
    world.publish("cq", b"m")
    qm = q.get()
    assert "x-delivery-count" not in (qm.message.headers or {})


def test_quorum_queue_takes_reject_publish_dlx_as_drop_head(world: World) -> None:
    q = world.vhost.declare_queue("qq", durable=True, arguments={
        "x-queue-type": "quorum", "x-max-length": 1, "x-overflow": "reject-publish-dlx"})
    assert q.settings.overflow == "drop-head"
    world.publish("qq", b"old")
    world.publish("qq", b"new")
    assert world.get("qq").body == b"new"


@pytest.mark.parametrize(("arguments", "error"), [
    ({"x-queue-mode": "weird"}, "\"unsupported queue mode 'weird'\""),
    ({"x-queue-mode": 5}, "{unacceptable_type,signedint}"),
    ({"x-queue-version": 3}, "\"unsupported queue version '3'\""),
    ({"x-queue-version": "x"}, '"expected integer, got longstr"'),
    ({"x-queue-type": "quorum", "x-dead-letter-strategy": "nope"}, "invalid_dlx_strategy"),
    ({"x-queue-type": "quorum", "x-queue-leader-locator": "far"}, "invalid_queue_locator_arg"),
    ({"x-queue-type": "quorum", "x-quorum-initial-group-size": 0}, "{value_zero,0}"),
], ids=lambda v: str(v))
def test_more_argument_values_as_rabbitmq_checks_them(world: World, arguments: dict[str, Any],
                                                       error: str) -> None:
    """Texts as RabbitMQ 3.10.8 gave them to pika (the same script against both brokers)."""
    key = next(k for k in arguments if k != "x-queue-type" or len(arguments) == 1)
    with pytest.raises(PreconditionFailed) as info:
        world.vhost.declare_queue("q", durable=True, arguments=arguments)
    assert info.value.reply_text == (
        f"PRECONDITION_FAILED - invalid arg '{key}' for queue 'q' in vhost '/': {error}")


@pytest.mark.parametrize(("kind", "arguments", "error"), [
    ("classic", {"x-stream-offset": "first"},
     "invalid arg 'x-stream-offset' for queue 'q' in vhost '/' of queue type "
     "rabbit_classic_queue"),
    ("quorum", {"x-cancel-on-ha-failover": True},
     "invalid arg 'x-cancel-on-ha-failover' for queue 'q' in vhost '/' of queue type "
     "rabbit_quorum_queue"),
    ("quorum", {"x-priority": "x"},
     "invalid arg 'x-priority' for queue 'q' in vhost '/': \"expected integer, got longstr\""),
])
def test_consumer_arguments_per_queue_type(kind: str, arguments: dict[str, Any],
                                           error: str) -> None:
    """RabbitMQ 3.10.8's texts (the same pika script against both brokers: identical)."""
    with pytest.raises(PreconditionFailed) as info:
        validate_consumer_arguments(arguments, kind, "queue 'q' in vhost '/'")
    assert info.value.reply_text == f"PRECONDITION_FAILED - {error}"
    assert validate_consumer_arguments({"x-priority": 3, "x-credit": {}}, kind, "q") == 3


def test_policies_for_one_queue_type_apply_to_that_type_only(world: World) -> None:
    world.vhost.set_policy("cq", ".*", {"max-length": 1}, 0, "classic_queues")
    world.vhost.set_policy("qq", ".*", {"delivery-limit": 2}, 0, "quorum_queues")
    classic = world.vhost.declare_queue("c", durable=True)
    quorum = world.vhost.declare_queue("q", durable=True, arguments={"x-queue-type": "quorum"})
    assert (classic.settings.policy, classic.settings.max_length) == ("cq", 1)
    assert (quorum.settings.policy, quorum.settings.delivery_limit) == ("qq", 2)
    assert quorum.settings.max_length is None


def test_delivery_limit_policy_must_be_a_non_negative_integer(world: World) -> None:
    with pytest.raises(PolicyError):
        world.vhost.set_policy("bad", ".*", {"delivery-limit": "x"}, 0, "queues")


# ================================================================================================
# Operator policies (https://www.rabbitmq.com/docs/policies#operator-policies)
# ================================================================================================


def test_operator_policy_caps_arguments_and_user_policies(world: World) -> None:
    world.vhost.set_operator_policy("cap", "^op\\.", {"max-length": 2, "message-ttl": 60000})
    q = world.vhost.declare_queue("op.q", arguments={"x-max-length": 5})
    assert (q.settings.max_length, q.settings.message_ttl) == (2, 60000)
    assert q.settings.operator_policy == "cap"
    world.vhost.set_policy("user", "^op\\.", {"max-length": 1}, 0, "queues")
    assert q.settings.max_length == 1  # the lowest of argument, policy and operator policy
    for body in (b"a", b"b", b"c"):
        world.publish("op.q", body)
    assert world.get("op.q").body == b"c"
    world.vhost.clear_policy("user")
    world.vhost.clear_operator_policy("cap")
    assert (q.settings.max_length, q.settings.operator_policy) == (5, None)


@pytest.mark.parametrize(("definition", "error"), [
    ({"foo": 1}, '[{<<"foo">>,1}] are not recognised policy settings'),
    ({"dead-letter-exchange": "x"},
     '[{<<"dead-letter-exchange">>,<<"x">>}] are not recognised policy settings'),
    ({"max-length": -1}, "'max-length' must be a non-negative integer, got -1"),
])
def test_operator_policies_set_limits_only(world: World, definition: dict[str, Any],
                                           error: str) -> None:
    with pytest.raises(PolicyError) as info:
        world.vhost.set_operator_policy("bad", ".*", definition)
    assert str(info.value) == error
    assert world.vhost.operator_policies == {}
