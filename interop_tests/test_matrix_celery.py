"""Celery (on kombu/py-amqp, the ``amqp://`` broker transport) end to end against the broker:
an embedded worker (``celery.contrib.testing.worker.start_worker``, solo pool, in a thread)
runs tasks sent by the same app.

* with the ``rpc://`` result backend: a result comes back, and a task's exception is raised by
  ``AsyncResult.get`` on the caller side;
* with no result backend (``ignore_result``): the task runs (seen through a threading.Event);
* a task that retries once (the retry is a new message published by the worker).

Every queue is unique to the test (``task_default_queue``), remote control and events are off,
so the worker declares nothing shared. Everything is bounded by timeouts.
"""

from __future__ import annotations

import threading

import pytest

celery = pytest.importorskip("celery")
from celery.contrib.testing.worker import start_worker  # noqa: E402

pytestmark = pytest.mark.timeout(90)

RESULT_TIMEOUT = 20.0


@pytest.fixture
def app(broker_url, unique_name, cleanup):
    queue = cleanup.queue(unique_name("celery"))
    cleanup.exchange(queue)  # the default exchange of task_default_queue is named after it
    app = celery.Celery(f"amqpq-matrix-{queue}", broker=broker_url, backend="rpc://",
                        set_as_current=False)
    app.conf.update(
        task_default_queue=queue,
        task_default_exchange=queue,
        task_default_routing_key=queue,
        worker_enable_remote_control=False,
        worker_send_task_events=False,
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=False,
        broker_connection_timeout=5,
        broker_heartbeat=0,
        result_expires=60,
        task_acks_late=True,
    )
    yield app
    app.close()


def test_celery_worker_runs_tasks_end_to_end(app):
    ran_without_result = threading.Event()
    attempts: list[int] = []

    @app.task(name="matrix.add")
    def add(x: int, y: int) -> int:
        return x + y

    @app.task(name="matrix.fail")
    def fail(text: str) -> None:
        raise ValueError(text)

    @app.task(name="matrix.side_effect", ignore_result=True)
    def side_effect() -> None:
        ran_without_result.set()

    @app.task(name="matrix.flaky", bind=True, max_retries=3, default_retry_delay=0)
    def flaky(self) -> str:
        attempts.append(self.request.retries)
        if self.request.retries == 0:
            raise self.retry(countdown=0)
        return f"done after {self.request.retries} retry"

    with start_worker(app, pool="solo", concurrency=1, perform_ping_check=False,
                      shutdown_timeout=20, loglevel="WARNING"):
        assert add.delay(2, 3).get(timeout=RESULT_TIMEOUT) == 5
        results = [add.delay(i, i) for i in range(10)]
        assert [r.get(timeout=RESULT_TIMEOUT) for r in results] == [2 * i for i in range(10)]

        failed = fail.delay("boom")
        with pytest.raises(ValueError, match="boom"):
            failed.get(timeout=RESULT_TIMEOUT)
        assert failed.state == "FAILURE"

        side_effect.delay()
        assert ran_without_result.wait(RESULT_TIMEOUT), "the ignore_result task did not run"

        assert flaky.delay().get(timeout=RESULT_TIMEOUT) == "done after 1 retry"
        assert attempts == [0, 1]


def test_celery_worker_on_a_quorum_queue_with_countdown(app, cleanup, broker_url):
    """Celery >= 5.5 on a quorum queue: the worker detects it (no global QoS) and, for a
    countdown, uses native delayed delivery (its celery_delayed_* quorum queues with
    x-dead-letter-strategy/x-overflow reject-publish, topic exchanges)."""
    import kombu
    from kombu import Exchange, Queue

    name = app.conf.task_default_queue
    app.conf.task_queues = [Queue(name, Exchange(name), routing_key=name,
                                  queue_arguments={"x-queue-type": "quorum"})]
    app.conf.broker_transport_options = {"confirm_publish": True}
    for level in range(28):  # what native delayed delivery declares, deleted afterwards
        cleanup.queue(f"celery_delayed_{level}")
        cleanup.exchange(f"celery_delayed_{level}")
    cleanup.exchange("celery_delayed_delivery")

    @app.task(name="matrix.quorum_add")
    def add(x: int, y: int) -> int:
        return x + y

    with start_worker(app, pool="solo", concurrency=1, perform_ping_check=False,
                      shutdown_timeout=20, loglevel="WARNING"):
        assert add.delay(20, 22).get(timeout=RESULT_TIMEOUT) == 42
        assert add.apply_async((1, 2), countdown=1).get(timeout=RESULT_TIMEOUT) == 3
        with kombu.Connection(broker_url) as conn:  # the worker set delayed delivery up
            declared = conn.default_channel.queue_declare("celery_delayed_0", passive=True)
            assert declared.queue == "celery_delayed_0"
