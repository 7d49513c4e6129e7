"""The Spark sink loses nothing silently (issue 14): what ``save(path)`` means, unroutable rows,
``amqps://``, dropped connections, and one-line errors.

Each test runs a real amqpq broker process (management API on, for closing connections) and
the shared local SparkSession of tests/spark_support.py; the last one repeats the checks
against the reference RabbitMQ on 127.0.0.1:5672 and skips cleanly when it is not running.
"""

from __future__ import annotations

import base64
import json
import shutil
import socket
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

pytest.importorskip("pyspark", reason="pyspark not installed (pip install '.[spark]')")
pytest.importorskip("pyarrow", reason="pyarrow not installed (pip install '.[spark]')")
pika = pytest.importorskip("pika")

import spark_sink  # noqa: E402
from spark_sink import frames  # noqa: E402
from spark_sink.options import AmqpqOptionError  # noqa: E402
from spark_sink.retry import ReliablePublisher  # noqa: E402
from spark_sink.uri import parse_uri  # noqa: E402
from spark_sink.writer import summary_line  # noqa: E402
from tests import spark_support  # noqa: E402
from tests.spark_support import BrokerProcess, _df, drain, start_broker  # noqa: E402

spark = spark_support.spark  # fixture: the shared SparkSession

SINK_CLIENT = "spark amqpq sink"  # start of the sink's connection_name
REFERENCE = ("127.0.0.1", 5672)
REFERENCE_HTTP = "http://127.0.0.1:15672"


broker = spark_support.broker  # fixture: one broker with its management API


# ================================================================================ helpers
def http(base: str, method: str, path: str, body: Any = None) -> Any:
    """One management API call as guest (``body`` sent as JSON); the decoded JSON reply
    (None when empty)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, method=method, data=data)
    req.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=10) as resp:
        body = resp.read()
    return json.loads(body) if body else None


def close_sink_connections(base: str) -> list[str]:
    """Close (DELETE /api/connections/{name}) every connection of the sink; the names of
    those closed (a partition that finished between the list and the DELETE is gone: 404)."""
    names = [c["name"] for c in http(base, "GET", "/api/connections")
             if str(c.get("client_properties", {}).get("connection_name", "")).startswith(
                 SINK_CLIENT)]
    closed = []
    for name in names:
        try:
            http(base, "DELETE", "/api/connections/" + quote(name, safe=""))
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise
            continue
        closed.append(name)
    return closed


def consume_all(host: str, port: int, queue: str, idle: float = 1.5) -> list[tuple[Any, bytes]]:
    """Every message of ``queue`` (auto-ack) until it stays empty ``idle`` seconds."""
    conn = pika.BlockingConnection(pika.ConnectionParameters(host, port))
    ch = conn.channel()
    out: list[tuple[Any, bytes]] = []
    for method, props, body in ch.consume(queue, auto_ack=True, inactivity_timeout=idle):
        if method is None:
            break
        out.append((props, body))
    ch.cancel()
    conn.close()
    return out


def slow_df(spark: Any, n: int, millis: int) -> Any:
    """``n`` rows (2 partitions) that Spark produces ``millis`` ms apart per partition
    (``Thread.sleep`` through ``reflect``), so a task is still publishing when we act."""
    return spark.range(n, numPartitions=2).selectExpr(
        "id", f"reflect('java.lang.Thread', 'sleep', cast({millis} as bigint)) as pause")


def when_queue_reaches(port: int, queue: str, depth: int,
                       action: Callable[[], list[str]]) -> tuple[threading.Thread, list[str]]:
    """Run ``action`` (in a thread) once ``queue`` holds ``depth`` messages; its result lands in
    the returned list. The write itself must run in the main thread (Spark looks the format up
    through the thread's active session)."""
    done: list[str] = []

    def watch() -> None:
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
        ch = conn.channel()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if ch.queue_declare(queue, passive=True).method.message_count >= depth:
                done.extend(action() or ["(none)"])
                break
            time.sleep(0.02)
        conn.close()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread, done


def first_line_with(text: str, needle: str) -> str:
    return next((line for line in text.splitlines() if needle in line), "")


# ===================================================================== unit: the summary
def test_summary_line_never_claims_rows_no_queue_took() -> None:
    base = {"status": "committed", "published": 10, "confirmed": 10, "unroutable": 0,
            "republished": 0, "reconnects": 0, "partitions": 2, "failed_partitions": 0}
    assert summary_line(_config("amqp://h", routingKey="q"), base) == (
        "amqpq sink: job (stream): 10 rows published, 10 confirmed, 0 unroutable, from 2 "
        "partitions to the default exchange")
    blind = summary_line(_config("amqp://h", mandatory="false"), {**base, "unroutable": None})
    assert "unroutable rows not detected (mandatory=false)" in blind
    retried = summary_line(_config("amqp://h", exchange="ex"),
                           {**base, "reconnects": 2, "republished": 7})
    assert "2 reconnects, 7 rows republished (at-least-once: duplicates possible)" in retried
    aborted = summary_line(_config("amqp://h"), {**base, "status": "aborted",
                                                  "failed_partitions": 1, "confirmed": 4})
    assert "ABORTED: 1 of 2 partitions failed" in aborted
    assert all("all confirmed" not in x for x in (blind, retried, aborted))


# ==================================================================== publisher: reconnect
def test_publisher_republishes_unconfirmed_messages_after_a_forced_close(
        broker: BrokerProcess) -> None:
    """The broker closes the connection (management DELETE, 320): the publisher reconnects
    and every message arrives; the only duplicates are republished ones."""
    ch = broker.channel()
    ch.queue_declare("pub-drop")
    base = f"http://127.0.0.1:{broker.management_port}"
    p = ReliablePublisher([parse_uri(broker.uri)], timeout=10,
                          client_name=f"{SINK_CLIENT} unit")
    p.connect()
    enc = frames.PublishEncoder("", True, p.frame_max)

    def chunk(first: int, n: int) -> bytearray:
        out = bytearray()
        flags, props = frames.property_lists({}, n)
        enc.encode(out, [str(i).encode() for i in range(first, first + n)],
                   frames.shortstr("pub-drop", ""), flags, props)
        return out

    p.send(chunk(0, 500), 500)
    assert close_sink_connections(base)
    deadline = time.monotonic() + 10
    while close_sink_connections(base) and time.monotonic() < deadline:
        time.sleep(0.05)  # until the broker has really closed it
    p.send(chunk(500, 500), 500)
    p.wait_for_confirms()
    p.close()
    assert (p.sent, p.reconnects, p.unroutable) == (1000, 1, 0)
    assert p.republished >= 500  # at least the second chunk, written to a dead socket
    bodies = [int(b) for _, b in consume_all("127.0.0.1", broker.port, "pub-drop")]
    assert set(bodies) == set(range(1000))
    assert len(bodies) - 1000 <= p.republished


# ====================================================================== Spark: the target
def test_spark_save_path_names_the_queue(spark: Any, broker: BrokerProcess) -> None:
    """save("q") publishes to queue q; save("exchange/key") through that exchange; a path that
    contradicts an option, or a missing queue, fails before any task with the option on the
    error's first line."""
    ch = broker.channel()
    ch.queue_declare("sink-orders")
    ch.queue_declare("sink-orders-fr")
    ch.queue_bind("sink-orders-fr", "amq.direct", "FR")
    df = _df(spark, 60)
    df.write.format("amqpq").option("uri", broker.uri).mode("append").save("sink-orders")
    rows = [json.loads(b) for _, b in drain(broker.port, "sink-orders", 60)]
    assert sorted(r["id"] for r in rows) == list(range(60))

    summary = spark_sink.write(df.where("country = 'FR'"), uri=broker.uri, path="amq.direct/FR")
    assert (summary["published"], summary["confirmed"], summary["unroutable"]) == (20, 20, 0)
    assert len(drain(broker.port, "sink-orders-fr", 20)) == 20

    cases = [
        (lambda: df.write.format("amqpq").option("uri", broker.uri)
         .option("exchange", "amq.direct").mode("append").save("sink-orders"),
         "option 'path' 'sink-orders' means queue 'sink-orders' through the default exchange, "
         "but option 'exchange' is 'amq.direct'"),
        (lambda: df.write.format("amqpq").option("uri", broker.uri).mode("append")
         .save("sink-no-such-queue"),
         "option 'path' targets queue 'sink-no-such-queue', which does not exist"),
        (lambda: df.write.format("amqpq").option("uri", broker.uri).option("timeout", "soon")
         .mode("append").save("sink-orders"),
         "option 'timeout' must be a number of seconds, got 'soon'"),
    ]
    for run, message in cases:
        with pytest.raises(Exception) as err:
            run()
        assert message in str(err.value).splitlines()[0], str(err.value)[:2000]
    with pytest.raises(AmqpqOptionError, match="option 'path'"):  # the helper: no Spark trace
        spark_sink.write(df, uri=broker.uri, path="sink-orders", routingKey="other")
    assert ch.queue_declare("sink-orders", passive=True).method.message_count == 0


# ================================================================ Spark: unroutable rows
def test_spark_unroutable_row_fails_the_job_naming_exchange_and_key(
        spark: Any, broker: BrokerProcess, tmp_path: Path) -> None:
    ch = broker.channel()
    ch.exchange_declare("sink-unbound-ex", "direct")
    summary_file = tmp_path / "summary.json"
    with pytest.raises(Exception) as err:
        _df(spark, 100).write.format("amqpq").option("uri", broker.uri) \
            .option("exchange", "sink-unbound-ex").option("routingKey", "nobody") \
            .option("summaryPath", str(summary_file)).mode("append").save()
    line = first_line_with(str(err.value), "unroutable row")
    assert "exchange 'sink-unbound-ex' has no binding for routing key 'nobody'" in line, \
        str(err.value)[:3000]
    assert "312 NO_ROUTE" in line and "onUnroutable=drop" in line
    summary = json.loads(summary_file.read_text())
    assert summary["status"] == "aborted" and summary["confirmed"] == 0


def test_spark_on_unroutable_drop_counts_unroutable_rows(spark: Any,
                                                         broker: BrokerProcess) -> None:
    ch = broker.channel()
    ch.exchange_declare("sink-drop-ex", "direct")
    ch.queue_declare("sink-drop-fr")
    ch.queue_bind("sink-drop-fr", "sink-drop-ex", "FR")
    summary = spark_sink.write(_df(spark, 300), uri=broker.uri, exchange="sink-drop-ex",
                               routingKeyColumn="country", onUnroutable="drop")
    assert summary["status"] == "committed"
    assert (summary["published"], summary["confirmed"], summary["unroutable"]) == (300, 100, 200)
    assert summary["rows"] == 100
    rows = [json.loads(b) for _, b in drain(broker.port, "sink-drop-fr", 100)]
    assert {r["country"] for r in rows} == {"FR"}
    line = summary_line(_config(broker.uri, exchange="sink-drop-ex"), summary)
    assert "300 rows published, 100 confirmed, 200 unroutable" in line
    assert "all confirmed" not in line


def _config(uri: str, **options: str) -> Any:
    from spark_sink.options import parse_options

    return parse_options({"uri": uri, **options})


# ============================================================================ Spark: amqps
@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess,
                                                                          int, Path]]:
    """A broker with an AMQPS listener asking for client certificates; (broker, TLS port,
    folder with ca.pem, client.pem, client.key)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl command not found")
    from interop_tests.test_tls import _make_certs

    d = tmp_path_factory.mktemp("spark-tls")
    _make_certs(d)
    b = start_broker("--ssl-port", "0", "--ssl-cert", str(d / "server.pem"),
                     "--ssl-key", str(d / "server.key"), "--ssl-cacert", str(d / "ca.pem"),
                     "--ssl-verify-peer")  # waits for the amqps:// listener too
    yield b, b.tls_port, d
    b.close()


def test_spark_amqps_write_delivers_every_row(spark: Any,
                                              tls_broker: tuple[BrokerProcess, int, Path]) -> None:
    b, tls_port, d = tls_broker
    b.channel().queue_declare("sink-tls")
    uri = f"amqps://guest:guest@127.0.0.1:{tls_port}/%2F"
    tls = {"sslCacert": str(d / "ca.pem"), "sslCert": str(d / "client.pem"),
           "sslKey": str(d / "client.key")}
    summary = spark_sink.write(_df(spark, 2000), uri=uri, routingKey="sink-tls", **tls)
    assert (summary["published"], summary["confirmed"]) == (2000, 2000)
    assert {p["broker"] for p in summary["per_partition"]} == {
        f"amqps://guest@127.0.0.1:{tls_port}/%2F"}
    rows = [json.loads(body) for _, body in drain(b.port, "sink-tls", 2000)]
    assert sorted(r["id"] for r in rows) == list(range(2000))

    # the broker's certificate names 127.0.0.1, not this name: refused before any task
    with pytest.raises(Exception) as err:
        _df(spark, 10).write.format("amqpq").option("uri", uri).option("routingKey", "sink-tls") \
            .option("sslServerName", "elsewhere.example").options(**tls).mode("append").save()
    first = str(err.value).splitlines()[0]
    assert "option 'uri' reaches no broker" in first and "certificate" in first, first


# ================================================================= Spark: dropped connection
def test_spark_dropped_connection_is_retried_and_every_row_arrives(
        spark: Any, broker: BrokerProcess) -> None:
    """Mid-write, the broker force-closes every sink connection (management DELETE): each task
    reconnects and republishes what was unconfirmed; no Spark task retry, no row missing."""
    ch = broker.channel()
    ch.queue_declare("sink-dropped")
    base = f"http://127.0.0.1:{broker.management_port}"
    thread, closed = when_queue_reaches(broker.port, "sink-dropped", 300,
                                        lambda: close_sink_connections(base))
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "50")
    try:  # 1,200 rows per partition, 1 ms apart, in Arrow batches of 50
        summary = spark_sink.write(slow_df(spark, 2400, 1), uri=broker.uri,
                                   routingKey="sink-dropped", confirmBatchSize="25",
                                   timeout="10")
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    thread.join(5)
    assert closed and closed != ["(none)"], "no sink connection was closed"
    assert summary["status"] == "committed" and summary["reconnects"] >= 1
    assert (summary["published"], summary["confirmed"]) == (2400, 2400)
    assert all(p["attempt"] == 0 for p in summary["per_partition"])  # retried inside the task
    got = consume_all("127.0.0.1", broker.port, "sink-dropped")
    ids = [json.loads(body)["id"] for _, body in got]
    assert set(ids) == set(range(2400))
    assert len(ids) - 2400 <= summary["republished"]  # duplicates only from republishing


# ====================================================================== reference RabbitMQ
def _reference_up() -> bool:
    try:
        socket.create_connection(REFERENCE, timeout=1).close()
        return True
    except OSError:
        return False


@pytest.fixture
def reference_queue() -> Iterator[tuple[str, str, Any]]:
    """A fresh queue and direct exchange on the reference RabbitMQ (deleted afterwards):
    (queue, exchange, pika channel); skips when RabbitMQ is not running."""
    if not _reference_up():
        pytest.skip("reference RabbitMQ not reachable at 127.0.0.1:5672")
    tag = uuid.uuid4().hex[:8]
    queue, exchange = f"sink-ref-{tag}", f"sink-ref-ex-{tag}"
    conn = pika.BlockingConnection(pika.ConnectionParameters(*REFERENCE))
    ch = conn.channel()
    ch.queue_declare(queue)
    ch.exchange_declare(exchange, "direct")
    try:
        yield queue, exchange, ch
    finally:
        ch.queue_delete(queue)
        ch.exchange_delete(exchange)
        conn.close()


REFERENCE_URI = "amqp://guest:guest@127.0.0.1:5672/%2F"


@pytest.mark.reference
def test_spark_sink_against_reference_rabbitmq(spark: Any,
                                               reference_queue: tuple[str, str, Any]) -> None:
    """The same behaviour against RabbitMQ: save(queue), an unroutable row failing the job,
    onUnroutable=drop counting."""
    queue, exchange, ch = reference_queue
    uri = REFERENCE_URI
    _df(spark, 60).write.format("amqpq").option("uri", uri).mode("append").save(queue)
    assert len(drain(REFERENCE[1], queue, 60)) == 60

    with pytest.raises(Exception) as err:
        _df(spark, 30).write.format("amqpq").option("uri", uri) \
            .option("exchange", exchange).option("routingKey", "nobody") \
            .mode("append").save()
    assert f"exchange '{exchange}' has no binding for routing key 'nobody'" in \
        first_line_with(str(err.value), "unroutable row")

    ch.queue_bind(queue, exchange, "FR")
    summary = spark_sink.write(_df(spark, 300), uri=uri, exchange=exchange,
                               routingKeyColumn="country", onUnroutable="drop")
    assert (summary["published"], summary["confirmed"], summary["unroutable"]) == (
        300, 100, 200)
    assert len(drain(REFERENCE[1], queue, 100)) == 100


@pytest.mark.reference
def test_spark_reconnects_to_reference_rabbitmq(spark: Any,
                                                reference_queue: tuple[str, str, Any]) -> None:
    """RabbitMQ force-closes the sink's connections mid-write (its management API deletes the
    sink's user: 320 CONNECTION_FORCED; the user comes back at once, so the first reconnection
    attempts may be refused): each task reconnects and every row arrives."""
    queue, _, _ = reference_queue
    user = f"sink-ref-{uuid.uuid4().hex[:8]}"
    try:
        make_user(REFERENCE_HTTP, user)
    except OSError:
        pytest.skip(f"RabbitMQ management API not reachable at {REFERENCE_HTTP}")

    def drop_connections() -> list[str]:
        http(REFERENCE_HTTP, "DELETE", f"/api/users/{user}")  # closes its connections
        make_user(REFERENCE_HTTP, user)
        return [user]

    thread, closed = when_queue_reaches(REFERENCE[1], queue, 300, drop_connections)
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "50")
    try:
        summary = spark_sink.write(slow_df(spark, 2400, 1), uri=REFERENCE_URI, username=user,
                                   password="sink-pw", routingKey=queue,
                                   confirmBatchSize="25", timeout="10")
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
        thread.join(5)
        http(REFERENCE_HTTP, "DELETE", f"/api/users/{user}")
    assert closed == [user], "the sink's connections were not closed"
    assert summary["reconnects"] >= 1 and summary["confirmed"] == 2400
    assert all(p["attempt"] == 0 for p in summary["per_partition"])
    ids = [json.loads(b)["id"] for _, b in consume_all(*REFERENCE, queue)]
    assert set(ids) == set(range(2400))
    assert len(ids) - 2400 <= summary["republished"]


def make_user(base: str, user: str) -> None:
    """Create ``user`` (password ``sink-pw``) with every permission on vhost /."""
    http(base, "PUT", f"/api/users/{user}", {"password": "sink-pw", "tags": ""})
    http(base, "PUT", f"/api/permissions/%2F/{user}",
         {"configure": ".*", "write": ".*", "read": ".*"})
