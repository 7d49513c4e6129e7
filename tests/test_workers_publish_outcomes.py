"""``--workers 2``: what a publish did is its own, explicit outcome (issue #29 item 1).

A publish carries its publisher and the answers it waits for in a context of its own
(:class:`queue_store.outcomes.PublishContext`), never in flags on the worker's runtime. So:

- a message dead-lettered while a publish is routed (``reject-publish-dlx``, ``drop-head``,
  a TTL of 0) is a publish of its own, to a dead-letter queue on the other worker: the
  publisher's confirm or nack is the one it gets on one worker, whatever that queue answers;
- a dead letter made later by a timer (a message's TTL) has no publisher: when the link to
  its target queue's worker is full it holds back no client (before, the last connection
  that published on that worker stopped being read), and once the publisher's connection
  is closed, expiries still dead-letter and nothing goes wrong in the log.

Semantics: https://www.rabbitmq.com/docs/maxlength#overflow-behaviour (reject-publish-dlx:
the publisher is nacked and the message dead-lettered), /docs/confirms, /docs/dlx.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import pika
import pytest
from pika.exceptions import NackError

from tests.support.broker_process import BrokerProcess, broker_fixture, free_port
from tests.support.workers import PIN, WAIT, connected_pair, qname, worker_pid

broker = broker_fixture(scope="module", management=free_port(), log_level="info",
                        args=("--workers", "2"))


@pytest.fixture()
def pair(broker: BrokerProcess) -> Iterator[tuple[pika.BlockingConnection,
                                                  pika.BlockingConnection]]:
    yield from connected_pair(broker)


def _dlx(dlq: str) -> dict[str, object]:
    return {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}


def _get(ch: pika.adapters.blocking_connection.BlockingChannel, q: str) -> tuple:
    """The next message of ``q`` (waits up to WAIT s for it), as ``(properties, body)``."""
    deadline = time.monotonic() + WAIT
    while True:
        method, props, body = ch.basic_get(q, auto_ack=True)
        if method is not None:
            return props, body
        assert time.monotonic() < deadline, f"nothing in {q}"
        time.sleep(0.05)


def _count(ch: pika.adapters.blocking_connection.BlockingChannel, q: str) -> int:
    return ch.queue_declare(q, passive=True).method.message_count


@pytest.mark.parametrize("publisher_worker", [0, 1], ids=["publisher-with-queue",
                                                          "publisher-with-dlq"])
def test_reject_publish_dlx_nacks_the_publisher_and_dead_letters_on_the_other_worker(
        pair: tuple, publisher_worker: int) -> None:
    """The full queue (worker 0) nacks the publish and dead-letters the message to a queue
    on worker 1, the publisher on either worker: as on one worker, and as RabbitMQ does."""
    a, b = pair
    q, dlq = qname(), qname()
    cb = b.channel()
    cb.queue_declare(dlq, arguments=PIN)  # home: worker 1
    ca = a.channel()
    ca.queue_declare(q, arguments={**PIN, "x-max-length": 1, "x-overflow": "reject-publish-dlx",
                                   **_dlx(dlq)})  # home: worker 0
    pub = (a, b)[publisher_worker].channel()
    pub.confirm_delivery()
    pub.basic_publish("", q, b"fits")  # confirmed
    with pytest.raises(NackError):
        pub.basic_publish("", q, b"refused")
    props, body = _get(cb, dlq)
    assert body == b"refused"
    death = props.headers["x-death"][0]
    assert (death["queue"], death["reason"]) == (q, "maxlen")
    assert _count(ca, q) == 1
    with pytest.raises(NackError):  # the next one is answered for itself: still full
        pub.basic_publish("", q, b"refused again")
    assert _get(cb, dlq)[1] == b"refused again"
    ca.queue_purge(q)
    pub.basic_publish("", q, b"room again")  # confirmed: nothing left over from the nacks
    assert _count(ca, q) == 1
    assert _count(cb, dlq) == 0
    ca.queue_delete(q)
    cb.queue_delete(dlq)


@pytest.mark.parametrize("mode", ["confirm", "tx"])
@pytest.mark.parametrize("arguments", [{"x-max-length": 1, "x-overflow": "drop-head"},
                                       {"x-message-ttl": 0}], ids=["drop-head", "ttl-0"])
def test_a_dead_letter_made_during_a_publish_is_not_part_of_its_confirm(
        pair: tuple, arguments: dict[str, object], mode: str) -> None:
    """A persistent publish to a durable queue (confirmed after its fsync) that pushes out
    (drop-head) or expires at once (TTL 0) a message whose dead-letter queue, on the other
    worker, refuses it (full, reject-publish): the publisher is confirmed (its transaction
    commits), as on one worker; the refusal is the dead letter's own. (Before, the dead
    letter's answer joined the publisher's confirm: a nack.)"""
    a, b = pair
    q, dlq = qname(), qname()
    cb = b.channel()
    cb.queue_declare(dlq, arguments={**PIN, "x-max-length": 1, "x-overflow": "reject-publish"})
    cb.basic_publish("", dlq, b"filler")  # dlq (worker 1) now refuses every message
    ca = a.channel()
    ca.queue_declare(q, durable=True, arguments={**arguments, **_dlx(dlq)})  # worker 0
    pub = a.channel()
    if mode == "confirm":
        pub.confirm_delivery()
    else:
        pub.tx_select()
    persistent = pika.BasicProperties(delivery_mode=2)
    for i in range(3):  # each (but the first with drop-head) dead-letters one, refused
        pub.basic_publish("", q, b"m%d" % i, persistent)  # confirmed: no NackError
    if mode == "tx":
        pub.tx_commit()
    assert _count(cb, dlq) == 1
    assert _get(cb, dlq)[1] == b"filler"
    ca.queue_delete(q)
    cb.queue_delete(dlq)


def test_timer_dead_letters_hold_back_no_stale_publisher(broker: BrokerProcess,
                                                         pair: tuple) -> None:
    """Expired messages dead-lettered to a queue on worker 1 while worker 1 is stopped
    (SIGSTOP) fill the link to it. The connection that published them on worker 0 is still
    read meanwhile (it opens a channel), since expiry is no publish of its; once it closed,
    the rest still dead-letter, all of them arrive when worker 1 runs again, and the log
    has no error."""
    a, b = pair
    q, dlq = qname(), qname()
    cb = b.channel()
    cb.queue_declare(dlq, arguments=PIN)  # home: worker 1
    ca = a.channel()
    ca.queue_declare(q, arguments={**PIN, "x-message-ttl": 1000, **_dlx(dlq)})  # home: worker 0
    log_from = len(broker.log_text())
    body = b"x" * (1 << 20)
    n = 24  # 24 MB of dead letters: over the 8 MB a link buffers before it is full
    worker1 = worker_pid(broker, 1)
    os.kill(worker1, signal.SIGSTOP)
    try:
        for _ in range(n):
            ca.basic_publish("", q, body)
            a.process_data_events(time_limit=0.02)  # spread their expiries over turns
        time.sleep(1.0 + 0.5)  # most expired and dead-lettered: the link is full
        opened: list[object] = []
        probe = threading.Thread(target=lambda: opened.append(a.channel()), daemon=True)
        probe.start()
        probe.join(5.0)
        responsive = bool(opened)
        if responsive:
            a.close()  # the publisher goes; the last expiries come after
            time.sleep(0.5)
    finally:
        os.kill(worker1, signal.SIGCONT)
    probe.join(WAIT)
    assert responsive, "the publisher's connection was held back by timer dead letters"
    deadline = time.monotonic() + 3 * WAIT
    while _count(cb, dlq) < n and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _count(cb, dlq) == n
    assert _count(cb, q) == 0
    cb.queue_delete(dlq)
    cb.queue_delete(q)
    log = broker.log_text()[log_from:]
    assert "Traceback" not in log and " ERROR " not in log, log[-4000:]
