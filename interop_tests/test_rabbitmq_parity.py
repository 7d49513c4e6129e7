"""Behaviours real clients rely on, each run with the same client script against amqpq and
against the reference RabbitMQ (``AMQPQ_REFERENCE_URL``, default 127.0.0.1:5672; those cases
skip when it does not answer): idempotent unbind (aio-pika's RPC pattern closes by unbinding
its auto-deleted reply queue), Connection.UpdateSecret, channel numbers above channel_max,
and the ::1 loopback listener.

Found by running client libraries' own integration tests against amqpq (issue 14).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Callable
from pathlib import Path

import aio_pika
import aiormq
import pika
import pytest
from aio_pika.patterns import RPC
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker

from interop_tests.conftest import REFERENCE_URL, pika_parameters, url_for
from tests.support.broker_process import BrokerProcess

pytestmark = pytest.mark.timeout(60)



def _reference_or_skip() -> str:
    try:
        pika.BlockingConnection(pika_parameters(REFERENCE_URL)).close()
    except Exception as exc:  # not running here: only amqpq is checked
        pytest.skip(f"reference RabbitMQ at {REFERENCE_URL} not reachable: {exc!r}")
    return REFERENCE_URL


@pytest.fixture(params=["amqpq", "rabbitmq"])
def url(request: pytest.FixtureRequest, broker_url: str) -> str:
    """The broker under test, then the reference RabbitMQ: the same script runs on both."""
    chosen = url_for(request.param, broker_url)
    return chosen if request.param == "amqpq" else _reference_or_skip()


def _name(prefix: str) -> str:
    return f"it.parity.{prefix}.{uuid.uuid4().hex[:10]}"


# ---- unbind is idempotent ------------------------------------------------------------------


def _outcome(step: Callable[[], object]) -> str:
    try:
        step()
    except ChannelClosedByBroker as exc:
        return f"{exc.reply_code} {exc.reply_text}"
    return "ok"


def test_unbind_of_missing_queue_exchange_or_binding_is_ok(url: str) -> None:
    conn = pika.BlockingConnection(pika_parameters(url))
    try:
        ch = conn.channel()
        queue, exchange = _name("q"), _name("x")
        ch.queue_declare(queue, exclusive=True)
        ch.exchange_declare(exchange, "direct", auto_delete=True)
        ch.queue_bind(queue, exchange, "k")
        outcomes = {
            "missing queue": _outcome(lambda: ch.queue_unbind(_name("gone"), exchange, "k")),
            "missing exchange": _outcome(lambda: ch.queue_unbind(queue, _name("gone"), "k")),
            "missing binding": _outcome(lambda: ch.queue_unbind(queue, exchange, "other")),
            "missing e2e destination": _outcome(
                lambda: ch.exchange_unbind(_name("gone"), exchange, "k")),
            "missing e2e source": _outcome(
                lambda: ch.exchange_unbind(exchange, _name("gone"), "k")),
        }
        assert outcomes == dict.fromkeys(outcomes, "ok")
        # the real binding is untouched and the channel still works
        ch.basic_publish(exchange, "k", b"still-bound")
        method, _, body = None, None, None
        for _ in range(50):
            method, _, body = ch.basic_get(queue, auto_ack=True)
            if method is not None:
                break
            conn.sleep(0.02)
        assert body == b"still-bound"
        # bind to a missing queue is still 404 (channel closed), as in RabbitMQ
        gone = _name("gone")
        assert _outcome(lambda: ch.queue_bind(gone, exchange, "k")) == (
            f"404 NOT_FOUND - no queue '{gone}' in vhost '/'")
    finally:
        if conn.is_open:
            conn.close()


def test_aio_pika_rpc_pattern_creates_calls_and_closes(url: str) -> None:
    method = _name("rpc").replace(".", "_")

    async def scenario() -> int:
        connection = await aio_pika.connect(url, timeout=10)
        async with connection:
            channel = await connection.channel()
            rpc = await RPC.create(channel)

            async def multiply(*, x: int, y: int) -> int:
                return x * y

            await rpc.register(method, multiply, auto_delete=True)
            result = await rpc.call(method, kwargs={"x": 6, "y": 7})
            await rpc.close()  # unbinds its auto-deleted reply queue: must not close the channel
            assert not channel.is_closed
            await channel.declare_queue(exclusive=True)  # the channel is still usable
            return int(result)

    assert asyncio.run(asyncio.wait_for(scenario(), 30)) == 42


# ---- Connection.UpdateSecret ---------------------------------------------------------------


@pytest.mark.parametrize("secret", ["guest", "new-secret"])
def test_pika_update_secret_keeps_the_connection(url: str, secret: str) -> None:
    conn = pika.BlockingConnection(pika_parameters(url))
    try:
        ch = conn.channel()
        conn.update_secret(secret, "token refresh")
        assert conn.is_open and ch.is_open
        assert ch.queue_declare("", exclusive=True).method.queue.startswith("amq.gen-")
    finally:
        if conn.is_open:
            conn.close()


def test_aiormq_update_secret_keeps_the_connection(url: str) -> None:
    async def scenario() -> bool:
        conn = await aiormq.connect(url)
        try:
            ch = await conn.channel()
            await conn.update_secret("guest", reason="token refresh")
            ok = await ch.queue_declare("", exclusive=True)
            return bool(ok.queue) and not conn.is_closed
        finally:
            await conn.close()

    assert asyncio.run(asyncio.wait_for(scenario(), 20))


# ---- channel numbers -----------------------------------------------------------------------


def test_aiormq_opens_channel_65535(url: str) -> None:
    """aiormq lets the user pick the number; RabbitMQ only limits the count of channels."""

    async def scenario() -> tuple[int, int]:
        conn = await aiormq.connect(url)
        try:
            ch = await conn.channel(channel_number=65535)
            ok = await ch.queue_declare("", exclusive=True)
            return ch.number, ok.message_count
        finally:
            await conn.close()

    assert asyncio.run(asyncio.wait_for(scenario(), 20)) == (65535, 0)


def test_channel_count_limit_is_a_connection_error(url: str) -> None:
    params = pika_parameters(url)
    params.channel_max = 3
    conn = pika.BlockingConnection(params)
    try:
        assert conn._impl.params.channel_max == 3
        channels = [conn.channel(channel_number=n) for n in (3, 1, 2)]
        assert [c.channel_number for c in channels] == [3, 1, 2]
        channels[0].close()
        assert conn.channel(channel_number=3).is_open  # a freed slot is usable again
        with pytest.raises(ConnectionClosedByBroker) as closed:
            conn.channel(channel_number=65535)  # a 4th channel: the count is over
        assert (closed.value.reply_code, closed.value.reply_text) == (
            530, "NOT_ALLOWED - number of channels opened (3) has reached the negotiated "
                 "channel_max (3)")
    finally:
        if conn.is_open:
            conn.close()


# ---- both loopbacks ------------------------------------------------------------------------


@pytest.mark.own_broker
def test_ipv6_loopback_reaches_the_default_listener(tmp_path: Path) -> None:
    """``make run`` / no ``--host``: a client resolving localhost to ::1 connects, and one
    resolving it to 127.0.0.1 too."""
    if os.environ.get("AMQPQ_TEST_URL"):
        pytest.skip("checks amqpq's own default listener")
    broker = BrokerProcess(tmp_path / "data", tmp_path / "broker.log", hosts=None,
                           log_level="info")
    broker.start()
    try:
        for host in ("::1", "127.0.0.1", "localhost"):
            conn = pika.BlockingConnection(pika.ConnectionParameters(host, broker.port))
            try:
                assert conn.channel().queue_declare("", exclusive=True).method.queue
            finally:
                conn.close()
    finally:
        broker.stop()
