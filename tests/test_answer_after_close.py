"""An answer from a queue elsewhere (another worker or node: Basic.GetOk, Basic.ConsumeOk,
a 404) that arrives after its channel or connection closed (amqp_server/connection.py,
``Connection.resume``).

While a Basic.Get or Basic.Consume waits for the queue's home, the connection reads no frame,
but the channel can still close under it (the consumer timeout's 406, a forced
Connection.Close, the socket lost). As in RabbitMQ, where the queue requeues what it gave a
channel process that is gone and drops its consumers, nothing is lost or stuck: a message
fetched for the closed channel goes back to the queue, flagged redelivered; a consumer
subscribed for it is cancelled at the queue; the client gets nothing more on that channel
(spec 2.2.4: after Channel.Close only Channel.CloseOk), in particular no second
Channel.Close for an error in the late answer (RabbitMQ sends one Close).

The queue elsewhere is :class:`QueueElsewhere`: a local queue whose Basic.Get and
Basic.Consume answer only when the test says, through the channel's ``await_answer`` /
``answered`` as :class:`~amqp_server.workers.remote_queue.RemoteQueue` does, so each order
of events is exact. Sans-IO connections (tests/conftest.py's Client), no process."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pamqp import commands

from amqp_common.errors import NotFound
from broker.broker import Broker
from broker.config import BrokerConfig
from queue_store.consumer import Consumer
from queue_store.queue import Queue, QueuedMessage
from queue_store.queue_kind import Requester
from tests.conftest import Client, methods

TIMEOUT_MS = 1000  # --consumer-timeout: closes channel 1 while it waits


class QueueElsewhere(Queue):
    """A queue whose answers to Basic.Get and Basic.Consume wait for :meth:`answer` (the
    round trip to a queue's home on another worker or node)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[Callable[[], None]] = []

    def request_get(self, requester: Requester, no_ack: bool,
                    then: Callable[[QueuedMessage | None, int], None]) -> None:
        requester.await_answer()

        def home() -> None:  # the home takes the message now and answers
            qm = self.get(no_ack)
            left = self.message_count
            requester.answered(lambda: then(qm, left if qm is not None else 0))

        self.calls.append(home)

    def request_consume(self, requester: Requester, consumer: Consumer,
                        then: Callable[[], None]) -> None:
        requester.await_answer()
        self.calls.append(lambda: requester.answered(then))

    def answer(self) -> None:
        """The home's answer to the oldest call arrives."""
        self.calls.pop(0)()


@pytest.fixture
def broker() -> Broker:
    return Broker(BrokerConfig(consumer_timeout=TIMEOUT_MS))


@pytest.fixture
def far(broker: Broker) -> QueueElsewhere:
    """Queue ``far`` with one message ``m``, its answers held."""
    vhost = broker.vhosts["/"]
    q = QueueElsewhere("far", "/", durable=False, vhost=vhost)
    vhost.queues["far"] = q
    return q


def _setup(make_client: Callable[..., Client], far: QueueElsewhere) -> Client:
    """Channel 1 holds a delivery (of queue ``local``) the consumer timeout will find
    overdue; ``far`` holds one message."""
    c = make_client()
    c.declare_queue(1, "local")
    c.publish(1, "", "local", b"x")
    c.publish(1, "", "far", b"m")
    assert far.message_count == 1
    [get_ok] = methods(c.send(1, commands.Basic.Get(queue="local")), commands.Basic.GetOk)
    assert get_ok.delivery_tag == 1
    return c


def _close_channel_by_timeout(c: Client) -> list[Any]:
    c.clock.advance(TIMEOUT_MS / 1000 + 1)
    c.conn.tick()
    frames = c.read()
    assert [m.reply_code for m in methods(frames, commands.Channel.Close)] == [406]
    return frames


def _get_back(make_client: Callable[..., Client], far: QueueElsewhere,
              redelivered: bool = True) -> None:
    """Another client's Basic.Get of ``far`` receives the message (flagged redelivered
    when it was taken for the closed channel)."""
    assert far.message_count == 1 and far.unacked_count == 0
    other = make_client()
    other.send(1, commands.Basic.Get(queue="far"))
    far.answer()
    [get_ok] = methods(other.read(), commands.Basic.GetOk)
    assert get_ok.redelivered is redelivered


def test_a_message_got_for_a_channel_closed_meanwhile_goes_back(
        make_client: Callable[..., Client], far: QueueElsewhere) -> None:
    c = _setup(make_client, far)
    assert c.send(1, commands.Basic.Get(queue="far")) == []  # waits for the home
    _close_channel_by_timeout(c)
    far.answer()  # GetOk for channel 1, which is closing
    assert c.read() == []  # nothing after Channel.Close
    _get_back(make_client, far)
    assert c.send(1, commands.Channel.CloseOk()) == []
    c.open_channel(1)  # the channel number is free again


@pytest.mark.parametrize("how", ["forced-close", "socket-lost"])
def test_a_message_got_for_a_connection_closed_meanwhile_goes_back(
        make_client: Callable[..., Client], far: QueueElsewhere, how: str) -> None:
    c = _setup(make_client, far)
    assert c.send(1, commands.Basic.Get(queue="far")) == []
    if how == "forced-close":  # rabbitmqctl close_connection, the HTTP API's DELETE
        c.conn.close(320, "CONNECTION_FORCED - Closed via management plugin")
        assert [m.reply_code for m in methods(c.read(), commands.Connection.Close)] == [320]
    else:
        c.conn.connection_lost()
    far.answer()
    assert c.read() == []
    _get_back(make_client, far)


def test_a_consumer_subscribed_for_a_channel_closed_meanwhile_is_cancelled(
        make_client: Callable[..., Client], far: QueueElsewhere) -> None:
    c = _setup(make_client, far)
    assert c.consume(1, "far", tag="late") == []
    _close_channel_by_timeout(c)
    far.answer()  # ConsumeOk for channel 1, which is closing
    assert c.read() == []
    assert far.consumer_count == 0
    _get_back(make_client, far, redelivered=False)  # never delivered


def test_an_error_answer_for_a_closing_channel_sends_no_second_close(
        make_client: Callable[..., Client], far: QueueElsewhere) -> None:
    c = _setup(make_client, far)
    assert c.send(1, commands.Basic.Get(queue="far")) == []
    _close_channel_by_timeout(c)
    far.calls.pop(0)  # the home answers with an error instead: the queue is gone (404)
    c.conn.channels[1].answered(_raise_not_found)
    assert c.read() == []  # one Channel.Close (the 406) in all
    assert c.send(1, commands.Channel.CloseOk()) == []
    c.open_channel(1)
    assert not c.closed


def _raise_not_found() -> None:
    raise NotFound("no queue 'far' in vhost '/'")
