"""The management API (served by worker 0) gets, purges and moves messages of a queue whose
home is worker 1, as it does for a queue of its own (``amqpq-server --workers 2``).

Worker 0 holds only a stand-in for such a queue; the requests go to the queue's home through
its :class:`~queue_store.queue_kind.QueueKind` continuations (these answered 500 before).
"""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pika
import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.workers import PIN, WAIT, connect_on, qname, queue_info, running_workers


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_workers(tmp_path_factory.mktemp("workers-http")) as proc:
        yield proc


def _call(broker: BrokerProcess, method: str, path: str, body: object = None
          ) -> tuple[int, object]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://127.0.0.1:{broker.management_port}{path}",
                                 data=data, method=method)
    req.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _messages_become(broker: BrokerProcess, name: str, count: int) -> None:
    deadline = time.monotonic() + WAIT
    while queue_info(broker, name)["messages"] != count:
        assert time.monotonic() < deadline, queue_info(broker, name)
        time.sleep(0.05)


@pytest.fixture()
def on_worker_1(broker: BrokerProcess) -> Iterator[tuple[str, pika.BlockingConnection]]:
    """A queue whose home is worker 1, holding messages m0..m4."""
    conn = connect_on(broker, 1)
    ch = conn.channel()
    ch.confirm_delivery()
    name = qname()
    ch.queue_declare(name, arguments=PIN)
    for i in range(5):
        ch.basic_publish("", name, f"m{i}".encode())
    assert queue_info(broker, name)["worker"] == 1
    _messages_become(broker, name, 5)
    yield name, conn
    conn.close()


def test_get_from_a_queue_on_the_other_worker(broker: BrokerProcess, on_worker_1) -> None:
    name, conn = on_worker_1
    status, got = _call(broker, "POST", f"/api/queues/%2F/{name}/get",
                        {"count": 2, "ackmode": "ack_requeue_true", "encoding": "auto"})
    assert status == 200, got
    assert [m["payload"] for m in got] == ["m0", "m1"]
    assert [m["message_count"] for m in got] == [4, 3]
    status, got = _call(broker, "POST", f"/api/queues/%2F/{name}/get",
                        {"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"})
    assert status == 200, got
    assert [(m["payload"], m["redelivered"]) for m in got] == [("m0", True)]
    _messages_become(broker, name, 4)
    # the requeued m1 is back at its place, for an AMQP client on the home worker too
    method, _, body = conn.channel().basic_get(name, auto_ack=True)
    assert (body, method.redelivered) == (b"m1", True)


def test_purge_of_a_queue_on_the_other_worker(broker: BrokerProcess, on_worker_1) -> None:
    name, conn = on_worker_1
    status, body = _call(broker, "DELETE", f"/api/queues/%2F/{name}/contents")
    assert status == 204, body
    _messages_become(broker, name, 0)
    assert conn.channel().basic_get(name, auto_ack=True) == (None, None, None)


def test_move_from_a_queue_on_the_other_worker(broker: BrokerProcess, on_worker_1) -> None:
    name, conn = on_worker_1
    target = qname()
    home0 = connect_on(broker, 0)
    try:
        home0.channel().queue_declare(target, arguments=PIN)
        status, body = _call(broker, "POST", f"/api/queues/%2F/{name}/move",
                             {"destination": target, "count": 3})
        assert status == 200, body
        assert body["moved"] == 3
        _messages_become(broker, name, 2)
        _messages_become(broker, target, 3)
        ch = home0.channel()
        assert [ch.basic_get(target, auto_ack=True)[2] for _ in range(3)] == [b"m0", b"m1",
                                                                              b"m2"]
    finally:
        home0.close()
