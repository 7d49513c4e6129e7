"""``amqpq-server --workers 2``: one broker in two processes, seen by real pika clients.

Connections land on either worker (the supervisor hands them out in turn); the queues here
are declared with ``PIN`` (``x-queue-master-locator: client-local``), so each lives on the
worker of the connection that declared it (``worker`` in ``/api/queues``) and is used from
the other (a transient queue without it lives where it is first used:
``tests/test_workers_placement.py``). These tests pick connections on
a given worker and check that what one worker's client does reaches the other's: topology,
publishes with confirms, consumers with acks and prefetch, Basic.Get, transactions,
exclusivity, deletes with consumer cancel notifications, and a worker killed with -9.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator

import pika
import pytest
from pamqp import commands
from pika.exceptions import ChannelClosedByBroker, NackError

from tests.support.broker_process import BrokerProcess
from tests.support.wire import AmqpError, Client
from tests.support.workers import (
    PIN,
    WAIT,
    api,
    connect_on,
    connected_pair,
    qname,
    queue_info,
    running_workers,
    worker_of,
    worker_pid,
    worker_pids,
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_workers(tmp_path_factory.mktemp("workers"), log_level="debug") as proc:
        yield proc


@pytest.fixture()
def pair(broker: BrokerProcess) -> Iterator[tuple[pika.BlockingConnection,
                                                  pika.BlockingConnection]]:
    yield from connected_pair(broker)


def test_connections_land_on_both_workers(broker: BrokerProcess) -> None:
    conns = [pika.BlockingConnection(pika.URLParameters(broker.url)) for _ in range(16)]
    try:
        seen = {worker_of(broker, c) for c in conns}
    finally:
        for c in conns:
            c.close()
    assert seen == {0, 1}


def test_topology_from_one_worker_routes_on_the_other(pair: tuple) -> None:
    a, b = pair
    ca, cb = a.channel(), b.channel()
    q, x = qname(), qname()
    ca.exchange_declare(x, "topic")
    ca.queue_declare(q, arguments=PIN)
    ca.queue_bind(q, x, "orders.*")
    cb.confirm_delivery()
    cb.basic_publish(x, "orders.new", b"routed across", mandatory=True)
    cb.exchange_declare(x, "topic", passive=True)  # visible on worker 1 too
    assert cb.queue_declare(q, passive=True).method.message_count == 1
    method, _, body = cb.basic_get(q, auto_ack=True)
    assert method is not None and body == b"routed across"
    ca.queue_delete(q)
    ca.exchange_delete(x)


def test_consumer_on_other_worker_gets_everything_in_order_with_acks(
        broker: BrokerProcess, pair: tuple) -> None:
    a, b = pair
    q = qname()
    ca = a.channel()
    ca.queue_declare(q, arguments=PIN)  # home: worker 0
    ca.confirm_delivery()
    cb = b.channel()
    cb.basic_qos(prefetch_count=10)
    got: list[bytes] = []

    def on_message(ch, method, props, body):  # type: ignore[no-untyped-def]
        got.append(body)
        ch.basic_ack(method.delivery_tag)

    cb.basic_consume(q, on_message)
    for i in range(500):
        ca.basic_publish("", q, b"m%d" % i, pika.BasicProperties(delivery_mode=2))
    deadline = time.monotonic() + WAIT
    while len(got) < 500 and time.monotonic() < deadline:
        b.process_data_events(time_limit=0.1)
    assert got == [b"m%d" % i for i in range(500)]
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        info = queue_info(broker, q)
        if info["messages"] == 0 and info["worker"] == 0:
            break
        time.sleep(0.1)
    assert (info["messages"], info["worker"]) == (0, 0)
    ca.queue_delete(q)


def test_prefetch_holds_across_workers(pair: tuple) -> None:
    a, b = pair
    q = qname()
    ca = a.channel()
    ca.queue_declare(q, arguments=PIN)
    for i in range(20):
        ca.basic_publish("", q, b"%d" % i)
    cb = b.channel()
    cb.basic_qos(prefetch_count=3)
    got: list[int] = []
    cb.basic_consume(q, lambda ch, m, p, body: got.append(m.delivery_tag))
    b.process_data_events(time_limit=1.0)
    assert len(got) == 3  # no ack: the home keeps to the prefetch
    cb.basic_ack(got[-1], multiple=True)
    b.process_data_events(time_limit=1.0)
    assert len(got) == 6
    cb.close()  # the three unacked go back, redelivered
    method, _, _ = ca.basic_get(q)
    assert method is not None and method.redelivered
    ca.queue_delete(q)


def test_basic_get_requeue_on_close_and_counts(pair: tuple) -> None:
    a, b = pair
    q = qname()
    ca = a.channel()
    ca.queue_declare(q, arguments=PIN)
    for i in range(3):
        ca.basic_publish("", q, b"g%d" % i)
    cb = b.channel()
    method, _, body = cb.basic_get(q)
    assert body == b"g0" and method.message_count == 2
    cb.close()  # unacked Basic.Get goes back to the home
    cb = b.channel()
    method, _, body = cb.basic_get(q, auto_ack=True)
    assert body == b"g0" and method.redelivered
    assert cb.queue_purge(q).method.message_count == 2
    assert cb.basic_get(q) == (None, None, None)
    ca.queue_delete(q)


def test_reject_publish_overflow_nacks_a_publisher_on_the_other_worker(pair: tuple) -> None:
    a, b = pair
    q = qname()
    a.channel().queue_declare(q, arguments={**PIN, "x-max-length": 1, "x-overflow": "reject-publish"})
    cb = b.channel()
    cb.confirm_delivery()
    cb.basic_publish("", q, b"fits")
    with pytest.raises(NackError):
        cb.basic_publish("", q, b"refused")
    assert cb.queue_declare(q, passive=True).method.message_count == 1
    cb.queue_delete(q)


def test_transaction_commits_to_a_queue_on_the_other_worker(pair: tuple) -> None:
    a, b = pair
    q = qname()
    a.channel().queue_declare(q, durable=True)
    cb = b.channel()
    cb.tx_select()
    cb.basic_publish("", q, b"t1", pika.BasicProperties(delivery_mode=2))
    cb.basic_publish("", q, b"t2", pika.BasicProperties(delivery_mode=2))
    assert cb.queue_declare(q, passive=True).method.message_count == 0  # not committed
    cb.tx_commit()
    assert cb.queue_declare(q, passive=True).method.message_count == 2
    cb.queue_delete(q)


def test_exclusive_queue_is_locked_for_the_other_worker(pair: tuple) -> None:
    a, b = pair
    q = qname()
    a.channel().queue_declare(q, exclusive=True)
    cb = b.channel()
    with pytest.raises(ChannelClosedByBroker) as err:
        cb.basic_consume(q, lambda *args: None)
    assert err.value.reply_code == 405
    a.close()  # the owner goes: the queue goes everywhere (within a record's trip)
    deadline = time.monotonic() + WAIT
    while True:
        cb = b.channel()
        try:
            cb.queue_declare(q, passive=True)
        except ChannelClosedByBroker as exc:
            if exc.reply_code == 404:
                break
            assert exc.reply_code == 405  # still there for a moment: still locked
        assert time.monotonic() < deadline, "exclusive queue outlived its owner"
        time.sleep(0.05)


def test_delete_on_one_worker_cancels_consumers_on_the_other(pair: tuple) -> None:
    a, b = pair
    q = qname()
    cb = b.channel()
    cb.queue_declare(q, arguments=PIN)  # home: worker 1
    ca = a.channel()
    cancelled: list[str] = []
    ca.basic_consume(q, lambda *args: None)
    ca.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    cb.queue_delete(q)
    deadline = time.monotonic() + WAIT
    while not cancelled and time.monotonic() < deadline:
        a.process_data_events(time_limit=0.1)
    assert cancelled


def test_kill_9_of_a_worker_keeps_the_broker_serving_and_loses_nothing_confirmed(
        broker: BrokerProcess) -> None:
    b = connect_on(broker, 1)
    q = qname()
    cb = b.channel()
    cb.queue_declare(q, durable=True)  # home: worker 1
    cb.confirm_delivery()
    for i in range(200):
        cb.basic_publish("", q, b"p%d" % i, pika.BasicProperties(delivery_mode=2))
    assert len(worker_pids(broker.pid)) == 2
    a = connect_on(broker, 0)
    os.kill(worker_pid(broker, 1), signal.SIGKILL)
    deadline = time.monotonic() + WAIT
    while b.is_open and time.monotonic() < deadline:
        try:
            b.process_data_events(time_limit=0.1)
        except Exception:
            break
    assert not b.is_open  # its clients see a closed connection
    a.channel().queue_declare(qname(), exclusive=True)  # worker 0 kept serving
    deadline = time.monotonic() + 3 * WAIT
    count = -1
    while time.monotonic() < deadline:
        try:
            conn = pika.BlockingConnection(pika.URLParameters(broker.url))
            count = conn.channel().queue_declare(q, passive=True).method.message_count
            conn.close()
            if count == 200:
                break
        except Exception:  # the restarted worker may still be recovering
            pass
        time.sleep(0.2)
    assert count == 200
    a.close()


def api_write(broker: BrokerProcess, method: str, path: str, body: object = None) -> int:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{broker.management_port}{path}",
                                 data=data, method=method)
    req.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=5) as resp:
        return resp.status


def test_http_api_changes_reach_every_worker(broker: BrokerProcess) -> None:
    vhost, user = qname(), qname()
    api_write(broker, "PUT", f"/api/vhosts/{vhost}")
    api_write(broker, "PUT", f"/api/users/{user}", {"password": "pw", "tags": ""})
    api_write(broker, "PUT", f"/api/permissions/{vhost}/{user}",
              {"configure": ".*", "write": ".*", "read": ".*"})
    api_write(broker, "PUT", f"/api/queues/{vhost}/hq", {"durable": False})
    params = pika.URLParameters(f"amqp://{user}:pw@127.0.0.1:{broker.port}/{vhost}")
    seen: list[int] = []
    conns = []
    for _ in range(40):  # until a connection of that user landed on each worker
        conn = pika.BlockingConnection(params)
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("", "hq", b"via http queue", mandatory=True)  # routed on both
        name = ch.queue_declare("", exclusive=True).method.queue  # lives on conn's worker
        seen.append(int(queue_info_in(broker, vhost, name)["worker"]))
        conns.append(conn)
        if set(seen) == {0, 1}:
            break
    assert set(seen) == {0, 1}
    # declared over HTTP, unplaced until used: its first publish (confirmed, so done before
    # the next connection) placed it on that publisher's worker (amqp_server.workers.placement)
    assert queue_info_in(broker, vhost, "hq")["worker"] == seen[0]
    api_write(broker, "DELETE", f"/api/users/{user}")
    deadline = time.monotonic() + WAIT
    for conn in conns:  # the user is gone everywhere: its connections are closed (320)
        while conn.is_open and time.monotonic() < deadline:
            try:
                conn.process_data_events(time_limit=0.1)
            except pika.exceptions.ConnectionClosedByBroker as exc:
                assert exc.reply_code == 320
    assert not any(c.is_open for c in conns)
    api_write(broker, "DELETE", f"/api/vhosts/{vhost}")


def queue_info_in(broker: BrokerProcess, vhost: str, name: str) -> dict:
    deadline = time.monotonic() + WAIT
    while True:
        try:
            info = api(broker, f"/api/queues/{vhost}/{name}")
            assert isinstance(info, dict)
            return info
        except urllib.error.HTTPError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_direct_reply_to_across_workers(pair: tuple) -> None:
    a, b = pair
    server_q = qname()
    ca = a.channel()
    ca.queue_declare(server_q, arguments=PIN)

    def serve(ch, method, props, body):  # type: ignore[no-untyped-def]
        ch.basic_publish("", props.reply_to, b"re:" + body)

    ca.basic_consume(server_q, serve, auto_ack=True)
    cb = b.channel()
    replies: list[bytes] = []
    cb.basic_consume("amq.rabbitmq.reply-to", lambda ch, m, p, body: replies.append(body),
                     auto_ack=True)
    cb.basic_publish("", server_q, b"ping",
                     pika.BasicProperties(reply_to="amq.rabbitmq.reply-to"))
    deadline = time.monotonic() + WAIT
    while not replies and time.monotonic() < deadline:
        a.process_data_events(time_limit=0.05)
        b.process_data_events(time_limit=0.05)
    assert replies == [b"re:ping"]
    ca.queue_delete(server_q)


def test_dead_letters_reach_a_queue_on_the_other_worker(pair: tuple) -> None:
    a, b = pair
    dlq, q = qname(), qname()
    b.channel().queue_declare(dlq, arguments=PIN)  # home: worker 1
    ca = a.channel()
    ca.queue_declare(q, arguments={**PIN, "x-dead-letter-exchange": "",
                                   "x-dead-letter-routing-key": dlq, "x-message-ttl": 50})
    ca.basic_publish("", q, b"expires")  # home: worker 0; expires, dead-lettered to worker 1
    cb = b.channel()
    deadline = time.monotonic() + WAIT
    body = None
    while body is None and time.monotonic() < deadline:
        _, props, body = cb.basic_get(dlq, auto_ack=True)
        time.sleep(0.05)
    assert body == b"expires"
    assert props.headers["x-death"][0]["queue"] == q
    ca.queue_delete(q)
    cb.queue_delete(dlq)


def test_workers_listed_with_their_queues_and_totals_summed(broker: BrokerProcess,
                                                             pair: tuple) -> None:
    a, b = pair
    q = qname()
    b.channel().queue_declare(q, arguments=PIN)  # lives on worker 1
    deadline = time.monotonic() + WAIT
    while True:  # summaries travel once a second
        workers = api(broker, "/api/workers")
        assert isinstance(workers, list)
        if all(w["up"] for w in workers) and workers[1].get("queues", 0) >= 1 and all(
                w.get("connections", 0) >= 1 for w in workers):
            break
        assert time.monotonic() < deadline, workers
        time.sleep(0.2)
    assert [w["index"] for w in workers] == [0, 1]
    assert len({w["pid"] for w in workers}) == 2
    overview = api(broker, "/api/overview")
    assert isinstance(overview, dict)
    assert overview["object_totals"]["connections"] == sum(w["connections"] for w in workers)
    from amqpqctl.cli import main as ctl  # the CLI over the same API

    with pytest.raises(SystemExit) as done:
        ctl(["--port", str(broker.management_port), "list_workers", "--formatter", "json"])
    assert done.value.code == 0
    b.channel().queue_delete(q)


def test_kill_9_of_a_queue_home_under_confirmed_publishing_loses_nothing_confirmed(
        broker: BrokerProcess) -> None:
    """A publisher on worker 0 keeps publishing persistent messages with confirms to a
    durable queue on worker 1 while worker 1 is killed and restarted: what was confirmed is
    all there afterwards, in order; what was nacked while it was down may be missing."""
    b = connect_on(broker, 1)
    q = qname()
    b.channel().queue_declare(q, durable=True)
    b.close()
    a = connect_on(broker, 0)
    ch = a.channel()
    ch.confirm_delivery()
    confirmed: list[int] = []
    nacked = 0
    killed_at = None
    i = 0
    deadline = time.monotonic() + 4 * WAIT
    while time.monotonic() < deadline:
        i += 1
        try:
            ch.basic_publish("", q, b"%d" % i, pika.BasicProperties(delivery_mode=2))
            confirmed.append(i)
        except NackError:
            nacked += 1
        if len(confirmed) == 300 and killed_at is None:
            os.kill(worker_pid(broker, 1), signal.SIGKILL)
            killed_at = i
        if killed_at is not None and nacked and confirmed[-1] > killed_at + 300:
            break  # nacked while down, confirmed again since the restart
    assert killed_at is not None and nacked > 0 and confirmed[-1] > killed_at + 300
    got: list[int] = []
    deadline = time.monotonic() + WAIT
    while len(got) < len(confirmed) and time.monotonic() < deadline:
        method, _, body = ch.basic_get(q, auto_ack=True)
        if method is None:
            time.sleep(0.05)
            continue
        got.append(int(body))
    assert set(confirmed) <= set(got)  # nothing confirmed is lost
    assert got == sorted(got)  # per-publisher order held
    ch.queue_delete(q)
    a.close()


def test_vhost_connection_limit_counts_every_worker(broker: BrokerProcess) -> None:
    vhost = qname()
    api_write(broker, "PUT", f"/api/vhosts/{vhost}")
    api_write(broker, "PUT", f"/api/permissions/{vhost}/guest",
              {"configure": ".*", "write": ".*", "read": ".*"})
    params = pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{broker.port}/{vhost}")
    held: list[pika.BlockingConnection] = []
    seen: set[int] = set()
    try:
        while len(held) < 2:  # one on each worker
            conn = pika.BlockingConnection(params)
            name = conn.channel().queue_declare("", exclusive=True).method.queue
            worker = int(queue_info_in(broker, vhost, name)["worker"])
            if worker in seen:
                conn.close()
                continue
            seen.add(worker)
            held.append(conn)
        api_write(broker, "PUT", f"/api/vhost-limits/{vhost}/max-connections", {"value": 2})
        # the workers tell each other their counts once a second: until both know, a third
        # may get in; then, whichever worker it lands on, six in a row are refused
        deadline = time.monotonic() + WAIT
        refused_in_a_row = 0
        while refused_in_a_row < 6:
            try:
                extra = pika.BlockingConnection(params)
            except pika.exceptions.AMQPConnectionError as refused:
                # pika reports a 530 at Connection.Open as ProbableAccessDeniedError
                assert "(530)" in str(refused) and "connection limit (2)" in str(refused)
                refused_in_a_row += 1
                continue
            extra.close()
            refused_in_a_row = 0
            assert time.monotonic() < deadline, "a third connection still got in"
            time.sleep(0.1)
    finally:
        for conn in held:
            conn.close()
        api_write(broker, "DELETE", f"/api/vhosts/{vhost}")


def test_connections_of_every_worker_are_listed_and_closed(broker: BrokerProcess) -> None:
    b = connect_on(broker, 1)
    ch = b.channel()
    ch.basic_consume(ch.queue_declare("", exclusive=True).method.queue, lambda *args: None)
    conns = api(broker, "/api/connections")
    assert isinstance(conns, list)
    on_1 = [c for c in conns if c.get("worker") == 1]
    assert on_1, conns
    channels = api(broker, "/api/channels")
    assert isinstance(channels, list) and any(c.get("worker") == 1 for c in channels)
    consumers = api(broker, "/api/consumers")
    assert isinstance(consumers, list) and any(c.get("worker") == 1 for c in consumers)
    assert api_write(broker, "DELETE", "/api/connections/" + urllib.parse.quote(
        on_1[-1]["name"], safe="")) == 204
    deadline = time.monotonic() + WAIT
    while b.is_open and time.monotonic() < deadline:
        try:
            b.process_data_events(time_limit=0.1)
        except pika.exceptions.ConnectionClosedByBroker as exc:
            assert exc.reply_code == 320
    assert not b.is_open


def _drain(conn: pika.BlockingConnection, until: object, wait: float = WAIT) -> None:
    deadline = time.monotonic() + wait
    while not until() and time.monotonic() < deadline:  # type: ignore[operator]
        conn.process_data_events(time_limit=0.05)


def test_single_active_consumer_across_workers(pair: tuple) -> None:
    a, b = pair
    q = qname()
    ca = a.channel()
    ca.queue_declare(q, arguments={**PIN, "x-single-active-consumer": True})
    got_a: list[bytes] = []
    got_b: list[bytes] = []
    cb = b.channel()
    tag_b = cb.basic_consume(q, lambda ch, m, p, body: got_b.append(body), auto_ack=True)
    b.process_data_events(time_limit=0.3)  # b's consumer is first: it is the active one
    ca.basic_consume(q, lambda ch, m, p, body: got_a.append(body), auto_ack=True)
    for i in range(10):
        ca.basic_publish("", q, b"%d" % i)
    _drain(b, lambda: len(got_b) == 10)
    a.process_data_events(time_limit=0.3)
    assert len(got_b) == 10 and got_a == []
    cb.basic_cancel(tag_b)
    ca.basic_publish("", q, b"after")
    _drain(a, lambda: got_a == [b"after"])
    assert got_a == [b"after"]
    ca.queue_delete(q)


def test_priorities_and_nack_requeue_across_workers(pair: tuple) -> None:
    a, b = pair
    q = qname()
    a.channel().queue_declare(q, arguments={**PIN, "x-max-priority": 5})
    cb = b.channel()
    for prio in (1, 5, 3):
        cb.basic_publish("", q, b"p%d" % prio, pika.BasicProperties(priority=prio))
    cb.queue_declare(q, passive=True)  # a round trip: the publishes are in
    cb.basic_qos(prefetch_count=10)
    got: list[tuple[bytes, bool]] = []
    tags: list[int] = []

    def on_message(ch, m, p, body):  # type: ignore[no-untyped-def]
        got.append((body, m.redelivered))
        tags.append(m.delivery_tag)

    cb.basic_consume(q, on_message)
    _drain(b, lambda: len(got) == 3)
    assert [body for body, _ in got] == [b"p5", b"p3", b"p1"]
    cb.basic_nack(tags[0], requeue=True)  # back at the home, redelivered first
    _drain(b, lambda: len(got) == 4)
    assert got[3] == (b"p5", True)
    cb.basic_ack(tags[-1])
    cb.basic_ack(tags[1])
    cb.basic_ack(tags[2])
    cb.queue_delete(q)


def test_stream_read_from_the_other_worker(pair: tuple) -> None:
    a, b = pair
    q = qname()
    ca = a.channel()
    ca.queue_declare(q, durable=True, arguments={"x-queue-type": "stream"})
    ca.confirm_delivery()
    for i in range(20):
        ca.basic_publish("", q, b"s%d" % i)
    cb = b.channel()
    cb.basic_qos(prefetch_count=50)
    got: list[bytes] = []

    def on_message(ch, m, p, body):  # type: ignore[no-untyped-def]
        got.append(body)
        ch.basic_ack(m.delivery_tag)

    cb.basic_consume(q, on_message, arguments={"x-stream-offset": "first"})
    _drain(b, lambda: len(got) == 20)
    assert got == [b"s%d" % i for i in range(20)]
    ca.queue_delete(q)


def test_quorum_delivery_limit_dead_letters_across_workers(pair: tuple) -> None:
    a, b = pair
    q, dlq = qname(), qname()
    a.channel().queue_declare(dlq, arguments=PIN)
    a.channel().queue_declare(q, durable=True, arguments={
        "x-queue-type": "quorum", "x-delivery-limit": 1, "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": dlq})
    cb = b.channel()
    cb.basic_publish("", q, b"poison")
    cb.queue_declare(q, passive=True)
    for _ in range(2):  # delivered, returned; delivered again, returned: past the limit
        deadline = time.monotonic() + WAIT
        method = None
        while method is None and time.monotonic() < deadline:
            method, _, _ = cb.basic_get(q)
        assert method is not None
        cb.basic_nack(method.delivery_tag, requeue=True)
    deadline = time.monotonic() + WAIT
    body = None
    while body is None and time.monotonic() < deadline:
        _, _, body = cb.basic_get(dlq, auto_ack=True)
    assert body == b"poison"
    cb.queue_delete(q)
    cb.queue_delete(dlq)


def test_exclusive_consumer_refused_by_the_home_at_once(pair: tuple) -> None:
    a, b = pair
    q = qname()
    ca = a.channel()
    ca.queue_declare(q, arguments=PIN)  # home: worker 0
    ca.basic_consume(q, lambda *args: None)
    cb = b.channel()  # at once: worker 1's figures of the queue are up to a second old
    with pytest.raises(ChannelClosedByBroker) as err:
        cb.basic_consume(q, lambda *args: None, exclusive=True)
    assert err.value.reply_code == 403
    assert "in exclusive use" in err.value.reply_text
    ca.queue_delete(q)


def _raw_client_on(broker: BrokerProcess, worker: int) -> Client:
    """A raw AMQP client (tests/support/wire.py) with channel 1 open, on ``worker``."""
    for _ in range(100):
        raw = Client(broker.port)
        raw.channel()
        name = qname()
        raw.call(1, commands.Queue.Declare(queue=name, exclusive=True), commands.Queue.DeclareOk)
        deadline = time.monotonic() + WAIT
        while True:
            try:
                on = int(queue_info(broker, name)["worker"])
                break
            except urllib.error.HTTPError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        if on == worker:
            return raw
        raw.sock.close()
    raise AssertionError(f"no connection landed on worker {worker} in 100 tries")


def test_a_get_answered_after_its_connection_closed_goes_back_to_the_queue(
        broker: BrokerProcess, pair: tuple) -> None:
    """A Basic.Get on worker 0 waits for the queue's home, worker 1 (stopped); the HTTP API
    closes the connection meanwhile (320). Once the home answers, the message it took for
    the get goes back to the queue, flagged redelivered, as RabbitMQ's queue requeues what a
    channel that is gone held (it stayed unacknowledged at the home for ever)."""
    _, b = pair
    q = qname()
    cb = b.channel()
    cb.queue_declare(q, arguments=PIN)  # home: worker 1
    cb.basic_publish("", q, b"late")
    raw = _raw_client_on(broker, 0)
    port = raw.sock.getsockname()[1]
    conns = api(broker, "/api/connections")
    assert isinstance(conns, list)
    [name] = [c["name"] for c in conns if c.get("peer_port") == port]
    home = worker_pid(broker, 1)
    os.kill(home, signal.SIGSTOP)
    try:
        raw.send(1, commands.Basic.Get(queue=q))
        time.sleep(0.5)  # worker 0 reads it and asks the home (else nothing is tested)
        assert api_write(broker, "DELETE",
                         "/api/connections/" + urllib.parse.quote(name, safe="")) == 204
    finally:
        os.kill(home, signal.SIGCONT)
    deadline = time.monotonic() + WAIT
    method = body = None
    while body is None and time.monotonic() < deadline:
        method, _, body = cb.basic_get(q, auto_ack=True)
    assert body == b"late" and method is not None and method.redelivered
    raw.sock.close()
    cb.queue_delete(q)


def test_an_exclusive_queue_declared_as_its_connection_dies_goes_with_it(
        broker: BrokerProcess, pair: tuple) -> None:
    """A Queue.Declare (exclusive) waits for the supervisor to order it (stopped); the
    connection dies meanwhile (missed heartbeats). Once the declare is applied, the queue
    goes, as every exclusive queue of a closed connection (it stayed, owned by nobody, and
    locked its name for ever: 405 for anyone else)."""
    _, b = pair
    name = qname()
    raw = Client(broker.port, heartbeat=1)
    raw.channel()
    os.kill(broker.pid, signal.SIGSTOP)
    try:
        raw.send(1, commands.Queue.Declare(queue=name, exclusive=True))
        with pytest.raises(AmqpError, match="closed by broker"):
            raw.expect(1, commands.Queue.DeclareOk, timeout=WAIT)  # 2 heartbeats missed
    finally:
        os.kill(broker.pid, signal.SIGCONT)
    raw.sock.close()
    cb = b.channel()
    deadline = time.monotonic() + WAIT
    while True:  # the name is free: another connection declares it exclusive
        try:
            cb.queue_declare(name, exclusive=True)
            break
        except ChannelClosedByBroker as exc:
            assert exc.reply_code == 405 and time.monotonic() < deadline, exc
            cb = b.channel()
            time.sleep(0.1)
    cb.queue_delete(name)
