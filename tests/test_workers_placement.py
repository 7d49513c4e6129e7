"""``--workers 2``: a transient classic queue lives where it is first used
(``amqp_server/workers/placement.py``), seen by real pika clients and ``/api/queues``.

A queue declared on a control connection moves nowhere until a client uses it: its first
consumer's worker becomes its home (so a publisher handed to the other worker parses and
routes on the other core), or, when a publish comes first, the publisher's. Order, confirms,
exclusivity and counts are those of any queue.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from tests.support.broker_process import BrokerProcess
from tests.support.http import http
from tests.support.workers import (
    PIN,
    WAIT,
    connected_pair,
    qname,
    queue_info,
    running_workers,
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_workers(tmp_path_factory.mktemp("placement")) as proc:
        yield proc


@pytest.fixture()
def pair(broker: BrokerProcess) -> Iterator[tuple[pika.BlockingConnection,
                                                  pika.BlockingConnection]]:
    yield from connected_pair(broker)


def wait_for_worker(broker: BrokerProcess, name: str, worker: int) -> dict:
    """``/api/queues`` for ``name`` once it shows ``worker`` (the last answer otherwise)."""
    deadline = time.monotonic() + WAIT
    info = queue_info(broker, name)
    while info["worker"] != worker and time.monotonic() < deadline:
        time.sleep(0.05)
        info = queue_info(broker, name)
    return info


def consume(conn: pika.BlockingConnection, q: str, n: int, **kwargs: object) -> list[bytes]:
    """``n`` bodies from ``q`` (auto-ack), in the order they came."""
    got: list[bytes] = []
    ch = conn.channel()
    ch.basic_consume(q, lambda c, m, p, body: got.append(body), auto_ack=True, **kwargs)
    deadline = time.monotonic() + WAIT
    while len(got) < n and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.1)
    return got


def test_queue_declared_elsewhere_moves_to_its_first_consumer(
        broker: BrokerProcess, pair: tuple) -> None:
    a, b = pair
    q = qname()
    ca = a.channel()
    ca.queue_declare(q)  # on worker 0, a control connection
    assert queue_info(broker, q)["worker"] == 0  # the declaring worker until used
    cb = b.channel()
    got: list[bytes] = []
    cb.basic_consume(q, lambda c, m, p, body: got.append(body), auto_ack=True)
    assert wait_for_worker(broker, q, 1)["worker"] == 1  # the consumer's
    ca.confirm_delivery()
    for i in range(300):
        ca.basic_publish("", q, b"m%d" % i)  # confirmed: raises on a nack
    deadline = time.monotonic() + WAIT
    while len(got) < 300 and time.monotonic() < deadline:
        b.process_data_events(time_limit=0.1)
    assert got == [b"m%d" % i for i in range(300)]
    assert ca.queue_declare(q, passive=True).method.consumer_count == 1
    ca.queue_delete(q)


def test_first_publish_places_it_with_the_publisher_in_order_and_confirmed(
        broker: BrokerProcess, pair: tuple) -> None:
    a, b = pair
    q = qname()
    a.channel().queue_declare(q)
    cb = b.channel()
    cb.confirm_delivery()
    for i in range(200):
        cb.basic_publish("", q, b"p%d" % i)
    # the publisher's own Basic.Get sees its publishes (they waited for the placement)
    method, _, body = cb.basic_get(q, auto_ack=True)
    assert method is not None and body == b"p0"
    assert wait_for_worker(broker, q, 1)["worker"] == 1
    assert a.channel().queue_declare(q, passive=True).method.message_count == 199
    assert consume(a, q, 199) == [b"p%d" % i for i in range(1, 200)]
    a.channel().queue_delete(q)


def test_queues_of_a_control_connection_follow_their_consumers(
        broker: BrokerProcess, pair: tuple) -> None:
    a, b = pair
    control = a.channel()
    qs = [qname() for _ in range(4)]
    for q in qs:
        control.queue_declare(q)
    for i, q in enumerate(qs):  # consumers on alternating workers
        (a if i % 2 == 0 else b).channel().basic_consume(q, lambda *args: None,
                                                         auto_ack=True)
    assert [wait_for_worker(broker, q, i % 2)["worker"] for i, q in enumerate(qs)] == \
        [0, 1, 0, 1]
    for q in qs:
        control.queue_delete(q)


def test_exclusive_consumer_on_the_new_home_locks_out_the_other_worker(
        broker: BrokerProcess, pair: tuple) -> None:
    a, b = pair
    q = qname()
    a.channel().queue_declare(q)
    b.channel().basic_consume(q, lambda *args: None, exclusive=True)
    ca = a.channel()
    with pytest.raises(ChannelClosedByBroker) as err:
        ca.basic_consume(q, lambda *args: None)
    assert err.value.reply_code == 403
    assert "in exclusive use" in err.value.reply_text
    a.channel().queue_delete(q)


def test_an_unused_queue_answers_as_empty_and_is_deleted_like_any(
        broker: BrokerProcess, pair: tuple) -> None:
    a, b = pair
    q = qname()
    a.channel().queue_declare(q)
    cb = b.channel()
    ok = cb.queue_declare(q, passive=True).method
    assert (ok.message_count, ok.consumer_count) == (0, 0)
    assert cb.basic_get(q)[0] is None
    assert cb.queue_purge(q).method.message_count == 0
    assert queue_info(broker, q)["worker"] == 0  # asking placed nothing
    a.channel().queue_delete(q)
    with pytest.raises(ChannelClosedByBroker) as err:
        cb.queue_declare(q, passive=True)
    assert err.value.reply_code == 404


def test_a_queue_declared_over_http_is_placed_by_its_first_consumer(
        broker: BrokerProcess, pair: tuple) -> None:
    a, b = pair
    q = qname()
    base = f"http://127.0.0.1:{broker.management_port}"
    assert http(base, "PUT", f"/api/queues/%2F/{q}", {"durable": False})[0] == 201
    assert queue_info(broker, q)["worker"] == 0  # served by worker 0, not used yet
    got: list[bytes] = []
    b.channel().basic_consume(q, lambda c, m, p, body: got.append(body), auto_ack=True)
    assert wait_for_worker(broker, q, 1)["worker"] == 1  # the consumer's
    ca = a.channel()
    ca.confirm_delivery()
    for i in range(100):
        ca.basic_publish("", q, b"h%d" % i)  # confirmed: raises on a nack
    deadline = time.monotonic() + WAIT
    while len(got) < 100 and time.monotonic() < deadline:
        b.process_data_events(time_limit=0.1)
    assert got == [b"h%d" % i for i in range(100)]
    durable = qname()  # a durable one stays where it was declared (worker 0)
    assert http(base, "PUT", f"/api/queues/%2F/{durable}", {"durable": True})[0] == 201
    b.channel().basic_consume(durable, lambda *args: None, auto_ack=True)
    assert queue_info(broker, durable)["worker"] == 0
    a.channel().queue_delete(q)
    a.channel().queue_delete(durable)


def test_a_pinned_queue_stays_with_its_declarer(broker: BrokerProcess, pair: tuple) -> None:
    a, b = pair
    q = qname()
    a.channel().queue_declare(q, arguments=PIN)
    b.channel().basic_consume(q, lambda *args: None, auto_ack=True)
    assert queue_info(broker, q)["worker"] == 0
    a.channel().queue_delete(q)


def test_an_expires_policy_expires_a_queue_nobody_used(broker: BrokerProcess,
                                                       pair: tuple) -> None:
    a, b = pair
    base = f"http://127.0.0.1:{broker.management_port}"
    status, _ = http(base, "PUT", "/api/policies/%2F/placement-expiry",
                     {"pattern": "^expiring-", "definition": {"expires": 300},
                      "apply-to": "queues"})
    assert status in (201, 204)
    try:
        q = "expiring-" + qname()
        b.channel().queue_declare(q)  # on worker 1, never used
        deadline = time.monotonic() + WAIT
        while http(base, "GET", f"/api/queues/%2F/{q}")[0] != 404 \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        assert http(base, "GET", f"/api/queues/%2F/{q}")[0] == 404
        with pytest.raises(ChannelClosedByBroker) as err:
            a.channel().queue_declare(q, passive=True)
        assert err.value.reply_code == 404
    finally:
        http(base, "DELETE", "/api/policies/%2F/placement-expiry")


def test_publishers_on_both_workers_racing_to_place_it_lose_nothing_and_keep_order(
        broker: BrokerProcess, pair: tuple) -> None:
    a, b = pair
    q = qname()
    a.channel().queue_declare(q)
    ca, cb = a.channel(), b.channel()
    for i in range(100):  # both workers hold publishes and ask to place it
        ca.basic_publish("", q, b"a%d" % i)
        cb.basic_publish("", q, b"b%d" % i)
    got = consume(a, q, 200)
    assert sorted(got) == sorted([b"a%d" % i for i in range(100)] +
                                 [b"b%d" % i for i in range(100)])
    assert [m for m in got if m.startswith(b"a")] == [b"a%d" % i for i in range(100)]
    assert [m for m in got if m.startswith(b"b")] == [b"b%d" % i for i in range(100)]
    a.channel().queue_delete(q)
