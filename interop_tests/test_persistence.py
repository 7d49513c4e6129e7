"""Persistence against real processes: the broker is SIGKILLed while a pika publisher streams
persistent messages with publisher confirms, restarted on the same data dir, and at the end
every confirmed message must be there exactly once, and nothing acked before a kill may come
back. Also: SIGTERM closes clients with 320 CONNECTION_FORCED and a restart recovers.

These tests start their own broker processes (one data dir each), so they ignore
``AMQPQ_TEST_URL``: killing a shared broker is not an option.
"""

from __future__ import annotations

import contextlib
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator

import pytest

pika = pytest.importorskip("pika")
from pika import exceptions as pika_exc  # noqa: E402

from interop_tests.conftest import process_connection as connect  # noqa: E402
from tests.support.broker_process import BrokerProcess, broker_fixture  # noqa: E402

pytestmark = pytest.mark.own_broker  # never uses the broker under test (conftest.py)

QUEUE = "persistence.q"

# a data dir each, a new port each start, its log at info level
broker_process = broker_fixture(start=False, fresh_port=True, log_level="info", management=True)


@contextlib.contextmanager
def connection(bp: BrokerProcess) -> Iterator[pika.BlockingConnection]:
    conn = connect(bp)
    try:
        yield conn
    finally:
        with contextlib.suppress(Exception):
            if conn.is_open:
                conn.close()


class Ledger:
    """What the test knows about every message id across kills."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.attempted: set[int] = set()
        self.confirmed: set[int] = set()
        self.acked: set[int] = set()
        self.delivered: set[int] = set()  # delivered at least once (acked or not)
        self.errors: list[str] = []

    def check_delivery(self, msg_id: int, redelivered: bool, where: str) -> None:
        if msg_id not in self.attempted:
            self.errors.append(f"{where}: id {msg_id} was never published")
        if msg_id in self.acked:
            self.errors.append(f"{where}: id {msg_id} was acked before a kill and came back")
        if msg_id in self.delivered and not redelivered:
            self.errors.append(f"{where}: id {msg_id} delivered again without redelivered")
        self.delivered.add(msg_id)


def publish_until_killed(bp: BrokerProcess, ledger: Ledger, first_id: int,
                         started: threading.Event) -> None:
    """Publish persistent messages with confirms, one id after the other, until the broker
    goes away; every id whose confirm arrived goes into ``ledger.confirmed``."""
    msg_id = first_id
    try:
        conn = connect(bp)
        ch = conn.channel()
        ch.confirm_delivery()
        started.set()
        while True:
            with ledger.lock:
                ledger.attempted.add(msg_id)
            ch.basic_publish(
                "", QUEUE, str(msg_id).encode(),
                pika.BasicProperties(delivery_mode=2, message_id=str(msg_id)),
                mandatory=True)
            with ledger.lock:
                ledger.confirmed.add(msg_id)
            msg_id += 1
    except (pika_exc.UnroutableError, pika_exc.NackError) as exc:
        ledger.errors.append(f"publisher: id {msg_id} refused: {exc!r}")
    except (pika_exc.AMQPError, OSError):
        return  # the broker was killed
    except Exception as exc:  # anything else is a finding
        ledger.errors.append(f"publisher: {type(exc).__name__}: {exc}")
    finally:
        started.set()


def consume_some(bp: BrokerProcess, ledger: Ledger, ack: int, hold: int, where: str
                 ) -> pika.BlockingConnection:
    """Basic.Get and ack up to ``ack`` messages (each ack confirmed processed by a round
    trip), then take up to ``hold`` more without acking them. Returns the open connection,
    so the held deliveries stay unacked until the broker is killed."""
    conn = connect(bp)
    ch = conn.channel()
    for _ in range(ack):
        method, _props, body = ch.basic_get(QUEUE, auto_ack=False)
        if method is None:
            break
        msg_id = int(body)
        ledger.check_delivery(msg_id, method.redelivered, where)
        ch.basic_ack(method.delivery_tag)
        ch.queue_declare(QUEUE, passive=True)  # round trip: the ack was processed
        ledger.acked.add(msg_id)
    for _ in range(hold):
        method, _props, body = ch.basic_get(QUEUE, auto_ack=False)
        if method is None:
            break
        ledger.check_delivery(int(body), method.redelivered, where)
    ch.queue_declare(QUEUE, passive=True)  # the deliveries were logged before the kill
    return conn


def run_kill_loop(bp: BrokerProcess, kills: int, seed: int,
                  prefill: Callable[[BrokerProcess, Ledger], int] | None = None) -> Ledger:
    """``kills`` rounds of: consume a little, publish with confirms, kill -9 mid-stream,
    restart. ``prefill(bp, ledger)``: called once the queue exists, puts a backlog of ids
    1..n in it (recorded in the ledger) and returns n."""
    rnd = random.Random(seed)
    ledger = Ledger()
    bp.start()
    with connection(bp) as conn:
        conn.channel().queue_declare(QUEUE, durable=True)
    next_id = 1 + (prefill(bp, ledger) if prefill is not None else 0)
    for cycle in range(kills):
        held = None
        if cycle:  # consume a little of what survived the previous kill
            held = consume_some(bp, ledger, ack=rnd.randrange(0, 40), hold=rnd.randrange(0, 5),
                                where=f"cycle {cycle}")
        started = threading.Event()
        publisher = threading.Thread(target=publish_until_killed,
                                     args=(bp, ledger, next_id, started), daemon=True)
        publisher.start()
        assert started.wait(10), "publisher did not start"
        time.sleep(rnd.uniform(0.2, 1.2))  # mid-stream, at a random moment
        bp.kill()
        publisher.join(10)
        assert not publisher.is_alive(), "publisher hangs after the broker was killed"
        if held is not None:
            with contextlib.suppress(Exception):
                held.close()
        with ledger.lock:
            next_id = max(ledger.attempted) + 1
        bp.start()
    return ledger


def drain_by_get(bp: BrokerProcess, ledger: Ledger) -> list[int]:
    """Every message left, by Basic.Get, acked: their ids in delivery order."""
    final: list[int] = []
    with connection(bp) as conn:
        ch = conn.channel()
        while True:
            method, _props, body = ch.basic_get(QUEUE, auto_ack=False)
            if method is None:
                break
            msg_id = int(body)
            ledger.check_delivery(msg_id, method.redelivered, "final drain")
            final.append(msg_id)
            ch.basic_ack(method.delivery_tag)
        ch.queue_declare(QUEUE, passive=True)
    return final


def final_check(bp: BrokerProcess, ledger: Ledger, seed: int,
                drain: Callable[[BrokerProcess, Ledger], list[int]] = drain_by_get) -> None:
    final = drain(bp, ledger)
    context = f"(seed {seed}; {len(ledger.confirmed)} confirmed, {len(ledger.acked)} acked)"
    assert ledger.errors == [], f"{context}\n" + "\n".join(ledger.errors[:20])
    assert len(final) == len(set(final)), f"duplicates in the final drain {context}"
    expected = ledger.confirmed - ledger.acked
    missing = sorted(expected - set(final))
    assert not missing, f"confirmed ids lost: {missing[:20]} {context}\n{bp.log()}"
    assert set(final) <= ledger.attempted
    # what a single publisher sent in order comes back in order (ids increase)
    assert final == sorted(final), f"order changed {context}"


@pytest.mark.timeout(90)
def test_kill_9_during_confirmed_publishing_loses_nothing(broker_process: BrokerProcess
                                                          ) -> None:
    seed = random.randrange(1 << 30)
    ledger = run_kill_loop(broker_process, kills=3, seed=seed)
    assert len(ledger.confirmed) > 0, broker_process.log()
    final_check(broker_process, ledger, seed)
    assert broker_process.stop() == 0


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_kill_9_during_confirmed_publishing_loses_nothing_soak(broker_process: BrokerProcess
                                                               ) -> None:
    seed = random.randrange(1 << 30)
    ledger = run_kill_loop(broker_process, kills=20, seed=seed)
    assert len(ledger.confirmed) > 0, broker_process.log()
    final_check(broker_process, ledger, seed)
    assert broker_process.stop() == 0


@pytest.mark.timeout(60)
def test_sigterm_closes_clients_with_320_and_restart_recovers(
        broker_process: BrokerProcess) -> None:
    bp = broker_process
    bp.start()
    conn = connect(bp)
    ch = conn.channel()
    ch.queue_declare(QUEUE, durable=True)
    ch.confirm_delivery()
    for i in range(10):
        ch.basic_publish("", QUEUE, f"m{i}".encode(), pika.BasicProperties(delivery_mode=2))
    ch.basic_publish("", QUEUE, b"transient", pika.BasicProperties(delivery_mode=1))
    method, _props, body = ch.basic_get(QUEUE, auto_ack=False)
    assert body == b"m0"  # delivered, not acked at shutdown
    bp.proc.send_signal(signal.SIGTERM)
    with pytest.raises(pika_exc.ConnectionClosedByBroker) as info:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.2)
    assert info.value.reply_code == 320
    assert "CONNECTION_FORCED" in info.value.reply_text
    assert bp.proc.wait(timeout=10) == 0, bp.log()
    bp.start()
    got = []
    with connection(bp) as conn2:
        ch2 = conn2.channel()
        ok = ch2.queue_declare(QUEUE, durable=True, passive=True)
        assert ok.method.message_count == 10
        while True:
            method, _props, body = ch2.basic_get(QUEUE, auto_ack=True)
            if method is None:
                break
            got.append((body, method.redelivered))
    assert got == [(b"m0", True)] + [(f"m{i}".encode(), False) for i in range(1, 10)]
    assert bp.stop() == 0
