"""The matrix scenarios, written once against the driver API, and their expected observations.

Each scenario takes a fresh driver and a cell context and returns an observation dict (see
``cell.normalize`` for how names are replaced by placeholders afterwards). ``EXPECTED`` holds,
per scenario, the part of the observation every client must show against a correct broker;
the observation may hold more (negotiated values, server capabilities): the differential mode
compares those with the reference RabbitMQ. A field observed as ``NA`` is skipped by the check.
"""

from __future__ import annotations

import hashlib
import random
import time
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from interop_tests.matrix.cell import Ctx
from interop_tests.matrix.driver import (
    NA,
    WAIT,
    ChannelError,
    Driver,
    Unsupported,
    describe_refusal,
)

#: Heartbeat interval the heartbeat scenario negotiates (s), and how long it then stays idle.
HEARTBEAT = 1
IDLE = 3.0
#: Size of the large message: 10 MiB, split into ~80 body frames at frame_max 131072.
LARGE_SIZE = 10 * 1024 * 1024
EXCHANGE_KINDS = ("direct", "fanout", "topic", "headers")

Scenario = Callable[[Driver, Ctx], dict]
SCENARIOS: dict[str, Scenario] = {}


def scenario(func: Scenario) -> Scenario:
    SCENARIOS[func.__name__] = func
    return func


def large_body() -> bytes:
    return random.Random(20240607).randbytes(LARGE_SIZE)


def drain(d: Driver, queue: str, limit: int = 1000) -> list[bytes]:
    """Bodies of every message left in ``queue``, by Basic.Get with no-ack."""
    bodies = []
    for _ in range(limit):
        m = d.get(queue, no_ack=True)
        if m is None:
            break
        bodies.append(m["body"])
    return bodies


def settle(ctx: Ctx, queue: str, messages: int) -> None:
    """Wait (admin connection, at most 3 s) until ``queue`` holds ``messages`` ready messages.

    Publishes without confirms are asynchronous: RabbitMQ routes them through other processes
    than the ones that answer Basic.Get or Queue.Declare on the same channel, so a get right
    after a publish may not see it yet. This wait is not part of the observation; if the count
    never comes, the scenario goes on and observes whatever is there."""
    ctx.admin.wait_counts(queue, messages=messages, timeout=3.0)


def get_view(m: dict | None) -> dict | None:
    if m is None:
        return None
    return {key: m[key] for key in ("body", "delivery_tag", "redelivered", "exchange",
                                     "routing_key", "message_count")}


# --- connect -----------------------------------------------------------------------------------


def _connect(d: Driver, ctx: Ctx, mechanism: str) -> dict:
    if mechanism not in d.mechanisms:
        raise Unsupported(f"{d.name} logs in with {' and '.join(d.mechanisms)} only, "
                          f"not {mechanism}")
    d.connect(ctx.url, mechanism=mechanism)
    negotiated = d.negotiated()
    props = d.server_properties()
    if props is None:
        capabilities: Any = NA
        product: Any = NA
        property_keys: Any = NA
    else:
        capabilities = sorted(k for k, v in (props.get("capabilities") or {}).items() if v)
        product = props.get("product")
        property_keys = sorted(props)
    name, _, _ = d.queue_declare("", exclusive=True)
    open_before = d.is_open()
    d.close()
    return {
        "mechanism": mechanism,
        "frame_max": negotiated["frame_max"],
        "channel_max": negotiated["channel_max"],
        "heartbeat": negotiated["heartbeat"],
        "product": product,
        "capabilities": capabilities,
        "server_property_keys": property_keys,
        "server_named_queue": name,
        "open_before_close": open_before,
        "open_after_close": d.is_open(),
    }


@scenario
def connect_plain(d: Driver, ctx: Ctx) -> dict:
    return _connect(d, ctx, "PLAIN")


@scenario
def connect_amqplain(d: Driver, ctx: Ctx) -> dict:
    return _connect(d, ctx, "AMQPLAIN")


@scenario
def connect_refused(d: Driver, ctx: Ctx) -> dict:
    """A wrong password (403 ACCESS_REFUSED) and an unknown vhost (530 NOT_ALLOWED)."""
    p = ctx.params
    vhost = ctx.names.literal("vhost", f"mx-missing-{uuid.uuid4().hex[:8]}")
    base = f"amqp://{quote(p.user, safe='')}:{{password}}@{p.host}:{p.port}/{{vhost}}"
    bad_password = base.format(password="wrong-" + uuid.uuid4().hex[:8],
                               vhost=quote(p.vhost, safe=""))
    bad_vhost = base.format(password=quote(p.password, safe=""), vhost=vhost)
    return {"bad_password": d.connect_refusal(bad_password),
            "unknown_vhost": d.connect_refusal(bad_vhost)}


# --- declare -----------------------------------------------------------------------------------


def _error(exc: ChannelError) -> dict:
    return {"code": exc.code, "text": exc.text}


def _probe(d: Driver, action: Callable[[], object]) -> Any:
    """Run ``action``; the channel error it causes as {"code", "text"} (then a new channel),
    or "ok"."""
    try:
        action()
    except ChannelError as exc:
        d.open_channel()
        return _error(exc)
    return "ok"


def _probe_async(d: Driver, action: Callable[[], object]) -> Any:
    """``_probe`` of an asynchronous error (a publish or an ack, then a synchronous call
    through :meth:`Driver.observe_async_error`): run it, but observe ``NA`` where the client
    does not report such errors reliably."""
    result = _probe(d, action)
    return result if d.async_errors_reliable else NA


@scenario
def declare(d: Driver, ctx: Ctx) -> dict:
    q = ctx.names.queue("q")
    missing = ctx.names.queue("missing")
    # short enough for the RESOURCE_LOCKED text to fit a shortstr (see long_reply_text)
    locked = ctx.names.sized_queue("locked", 20)
    missing_x = ctx.names.exchange("missing")
    reserved = ctx.names.custom_exchange("reserved", "amq.matrix")
    d.connect(ctx.url)
    obs: dict[str, Any] = {}
    obs["declare_ok"] = list(d.queue_declare(q)[1:])
    for i in range(3):
        d.publish("", q, f"m{i}".encode())
    settle(ctx, q, 3)
    obs["passive_ok"] = list(d.queue_declare(q, passive=True)[1:])
    obs["redeclare_ok"] = list(d.queue_declare(q)[1:])
    obs["exchanges"] = {}
    for kind in EXCHANGE_KINDS:
        x = ctx.names.exchange(kind)
        d.exchange_declare(x, kind)
        d.exchange_declare(x, kind, passive=True)
        obs["exchanges"][kind] = "declared"
    ctx.admin.declare_queue(locked, exclusive=True)  # held by the admin connection
    obs["errors"] = {
        "passive_missing_queue": _probe(d, lambda: d.queue_declare(missing, passive=True)),
        "passive_missing_exchange": _probe(
            d, lambda: d.exchange_declare(missing_x, "direct", passive=True)),
        "exchange_other_type": _probe(
            d, lambda: d.exchange_declare(ctx.names.exchange("direct"), "fanout")),
        "queue_other_durable": _probe(d, lambda: d.queue_declare(q, durable=True)),
        "reserved_exchange_name": _probe(d, lambda: d.exchange_declare(reserved, "direct")),
        "exclusive_of_other_connection": _probe(
            d, lambda: d.queue_declare(locked, passive=True)),
        # an asynchronous error: seen by the next synchronous method on the channel (a
        # declare of a new queue: aio-pika's robust channel answers passive ones from a cache)
        "publish_to_missing_exchange": _probe_async(
            d, lambda: (d.publish(missing_x, "k", b"x"), d.observe_async_error(
                lambda: d.queue_declare(ctx.names.queue("sync1"))))),
        "delete_if_empty": _probe(d, lambda: d.queue_delete(q, if_empty=True)),
    }
    obs["server_named"] = d.queue_declare("", exclusive=True)[0]
    obs["passive_after_errors"] = list(d.queue_declare(q, passive=True)[1:])
    obs["purge_ok"] = d.queue_purge(q)
    obs["delete_ok"] = d.queue_delete(q)
    d.close()
    return obs


#: Length of the queue name that makes RESOURCE_LOCKED's reply text longer than a shortstr.
LONG_NAME = 100


@scenario
def long_reply_text(d: Driver, ctx: Ctx) -> dict:
    """A reply text longer than 255 bytes (a shortstr) must be cut the way RabbitMQ cuts it."""
    locked = ctx.names.sized_queue("locked", LONG_NAME)
    ctx.admin.declare_queue(locked, exclusive=True)  # held by the admin connection
    d.connect(ctx.url)
    try:
        d.queue_declare(locked, passive=True)
        obs: dict[str, Any] = {"error": "declare-ok"}
    except ChannelError as exc:
        obs = {"error": _error(exc), "text_bytes": len(exc.text.encode())}
    d.close()
    return obs


# --- routing through each exchange type --------------------------------------------------------

#: kind -> (bindings [(queue label, routing key, arguments)], publishes [(key, body, headers)])
ROUTES: dict[str, tuple[list[tuple[str, str, dict | None]], list[tuple[str, str, dict | None]]]]
ROUTES = {
    "direct": (
        [("a", "ka", None), ("a", "kc", None), ("b", "kb", None), ("b", "kc", None)],
        [("ka", "ka", None), ("kb", "kb", None), ("kc", "kc", None), ("kz", "kz", None)],
    ),
    "fanout": (
        [("a", "", None), ("b", "ignored", None)],
        [("k1", "k1", None), ("", "k2", None)],
    ),
    "topic": (
        [("a", "a.*", None), ("b", "a.#", None), ("c", "*.c", None)],
        [(key, key, None) for key in ("a", "a.b", "a.b.c", "a.c", "x.c", "b")],
    ),
    "headers": (
        [("all", "", {"x-match": "all", "h1": "v1", "h2": "v2"}),
         ("any", "", {"x-match": "any", "h1": "v1", "h2": "v2"})],
        [("", "m1", {"h1": "v1", "h2": "v2"}), ("", "m2", {"h1": "v1"}),
         ("", "m3", {"h2": "v2", "h3": "v3"}), ("", "m4", {"h1": "other"}), ("", "m5", None)],
    ),
}
ROUTED = {
    "direct": {"a": ["ka", "kc"], "b": ["kb", "kc"]},
    "fanout": {"a": ["k1", "k2"], "b": ["k1", "k2"]},
    "topic": {"a": ["a.b", "a.c"], "b": ["a", "a.b", "a.b.c", "a.c"], "c": ["a.c", "x.c"]},
    "headers": {"all": ["m1"], "any": ["m1", "m2", "m3"]},
}


def _route(d: Driver, ctx: Ctx, kind: str) -> dict:
    bindings, publishes = ROUTES[kind]
    x = ctx.names.exchange(kind)
    d.connect(ctx.url)
    d.exchange_declare(x, kind)
    labels = sorted({label for label, _, _ in bindings})
    for label in labels:
        d.queue_declare(ctx.names.queue(label))
    for label, key, arguments in bindings:
        d.queue_bind(ctx.names.queue(label), x, key, arguments)
    for key, body, headers in publishes:
        d.publish(x, key, body.encode(), properties={"headers": headers} if headers else None)
    for label in labels:
        settle(ctx, ctx.names.queue(label), len(ROUTED[kind][label]))
    obs = {label: drain(d, ctx.names.queue(label)) for label in labels}
    d.close()
    return obs


@scenario
def route_direct(d: Driver, ctx: Ctx) -> dict:
    return _route(d, ctx, "direct")


@scenario
def route_fanout(d: Driver, ctx: Ctx) -> dict:
    return _route(d, ctx, "fanout")


@scenario
def route_topic(d: Driver, ctx: Ctx) -> dict:
    return _route(d, ctx, "topic")


@scenario
def route_headers(d: Driver, ctx: Ctx) -> dict:
    return _route(d, ctx, "headers")


# --- publishing --------------------------------------------------------------------------------

N_PUBLISH = 20
N_CONFIRM = 50


#: Header values every driver client encodes the same way: str, 32-bit int, bool, nested table,
#: array (no float: pika cannot encode one; 64-bit ints are in header_types).
HEADERS = {"k": "v", "n": 7, "neg": -3, "yes": True, "nested": {"a": 1, "b": "x"},
           "list": [1, "x"]}

#: Header values for header_types: what each client encodes with its own field type tags
#: (64-bit ints: 'l' in pika and pamqp, 'L' in py-amqp; amqplib picks its own).
HEADER_TYPES = {"int32": 2**31 - 1, "int64": 2**40, "neg64": -(2**40), "no": False,
                "utf8": "h\u00e9", "empty": "", "nested": {"deep": {"list": [1, [2, "x"]]}},
                "empty_list": []}


def publish_properties(i: int) -> dict:
    return {"content_type": "text/plain", "delivery_mode": 2, "priority": 5,
            "message_id": f"id-{i}", "correlation_id": "corr-1", "headers": HEADERS}


@scenario
def publish_no_confirm(d: Driver, ctx: Ctx) -> dict:
    q = ctx.names.queue("q")
    d.connect(ctx.url)
    d.queue_declare(q)
    for i in range(N_PUBLISH):
        d.publish("", q, f"p{i}".encode(), properties=publish_properties(i))
    settle(ctx, q, N_PUBLISH)
    got = []
    for _ in range(N_PUBLISH + 1):
        m = d.get(q)
        if m is None:
            break
        d.ack(m["delivery_tag"])
        got.append(m)
    d.close()
    return {
        "bodies": [m["body"] for m in got],
        "message_ids": [m["properties"]["message_id"] for m in got],
        "redelivered": sorted({m["redelivered"] for m in got}, key=str),
        "first_properties": got[0]["properties"] if got else None,
    }


@scenario
def header_types(d: Driver, ctx: Ctx) -> dict:
    """Header field types round trip through the broker as each client encodes them."""
    q = ctx.names.queue("q")
    extra = d.extra_header_values()
    d.connect(ctx.url)
    d.queue_declare(q)
    obs: dict[str, Any] = {}
    try:
        d.publish("", q, b"h", properties={"headers": {**HEADER_TYPES, **extra}})
        settle(ctx, q, 1)
        m = d.get(q, no_ack=True)
    except Exception as exc:  # e.g. the broker closed the connection on the header table
        return {"error": {"type": type(exc).__name__, **describe_refusal(exc)}}
    headers = (m["properties"]["headers"] or {}) if m else None
    if headers is None:
        return {"error": "no message"}
    obs["portable"] = {key: headers.get(key, "<missing>") for key in HEADER_TYPES}
    obs["extra"] = {key: headers.get(key, "<missing>") for key in extra}
    d.close()
    return obs


@scenario
def publish_confirm(d: Driver, ctx: Ctx) -> dict:
    q = ctx.names.queue("q")
    rq = ctx.names.queue("max1")
    d.connect(ctx.url, confirms=True)
    d.queue_declare(q)
    for i in range(N_CONFIRM):
        d.publish("", q, f"c{i}".encode())
    obs: dict[str, Any] = {"confirms": d.wait_confirms(N_CONFIRM)}
    obs["in_queue"] = d.queue_declare(q, passive=True)[1]
    d.queue_declare(rq, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    d.publish("", rq, b"first")
    d.publish("", rq, b"second")
    obs["confirms_with_reject_publish"] = d.wait_confirms(N_CONFIRM + 2)
    obs["reject_publish_queue"] = drain(d, rq)
    d.close()
    return obs


@scenario
def publish_user_id(d: Driver, ctx: Ctx) -> dict:
    """Validated user-ID: user_id must be the connection's user, else 406."""
    q = ctx.names.queue("q")
    user = ctx.names.literal("user", ctx.params.user)
    d.connect(ctx.url)
    d.queue_declare(q)
    d.publish("", q, b"own", properties={"user_id": user})
    settle(ctx, q, 1)
    m = d.get(q, no_ack=True)
    obs: dict[str, Any] = {"own_user_id": m["properties"]["user_id"] if m else None}
    obs["other_user_id"] = _probe_async(
        d, lambda: (d.publish("", q, b"other", properties={"user_id": "not-" + user}),
                    d.observe_async_error(lambda: d.queue_declare(ctx.names.queue("sync")))))
    counts = ctx.admin.counts(q)
    obs["left_in_queue"] = counts[0] if counts else None
    d.close()
    return obs


# --- consuming ---------------------------------------------------------------------------------

N_CONSUME = 10
PREFETCH = 3


@scenario
def consume_prefetch_ack(d: Driver, ctx: Ctx) -> dict:
    q = ctx.names.queue("q")
    d.connect(ctx.url)
    d.queue_declare(q)
    for i in range(N_CONSUME):
        d.publish("", q, f"c{i}".encode())
    d.qos(PREFETCH)
    tag = d.consume(q)
    d.wait_deliveries(PREFETCH)
    d.pump(0.3)  # room for a delivery beyond the prefetch window, which must not come
    first_batch = len(d.deliveries)
    acked = 0
    max_unacked = first_batch
    deadline = time.monotonic() + 4 * WAIT
    while acked < N_CONSUME and time.monotonic() < deadline:
        d.wait_deliveries(acked + 1)
        if len(d.deliveries) <= acked:
            break
        max_unacked = max(max_unacked, len(d.deliveries) - acked)
        d.ack(d.deliveries[acked]["delivery_tag"])
        acked += 1
    while_consuming = list(d.queue_declare(q, passive=True)[1:])
    d.cancel(tag)
    after_cancel = list(d.queue_declare(q, passive=True)[1:])
    delivered = list(d.deliveries)
    d.close()
    return {
        "first_batch": first_batch,
        "max_unacked": max_unacked,
        "bodies": [m["body"] for m in delivered],
        "redelivered": [m["redelivered"] for m in delivered],
        "delivery_tags": [m["delivery_tag"] for m in delivered],
        "own_consumer_tag": sorted({m["consumer_tag"] == tag if m["consumer_tag"] != NA else NA
                                    for m in delivered}, key=str),
        "declare_ok_while_consuming": while_consuming,
        "declare_ok_after_cancel": after_cancel,
    }


UNKNOWN_TAG = 999


@scenario
def basic_get(d: Driver, ctx: Ctx) -> dict:
    q = ctx.names.queue("q")
    d.connect(ctx.url)
    d.queue_declare(q)
    obs: dict[str, Any] = {"empty_first": d.get(q) is None, "gets": []}
    for i in range(3):
        d.publish("", q, f"g{i}".encode())
    settle(ctx, q, 3)
    m = d.get(q)
    obs["gets"].append(get_view(m))
    d.ack(m["delivery_tag"])
    obs["gets"].append(get_view(d.get(q, no_ack=True)))
    m = d.get(q)
    obs["gets"].append(get_view(m))
    d.reject(m["delivery_tag"], requeue=True)
    m = d.get(q)
    obs["gets"].append(get_view(m))
    d.ack(m["delivery_tag"])
    obs["empty_last"] = d.get(q) is None
    obs["ack_unknown_tag"] = _probe_async(
        d, lambda: (d.ack(UNKNOWN_TAG),
                    d.observe_async_error(lambda: d.queue_declare(ctx.names.queue("sync")))))
    d.close()
    return obs


@scenario
def nack_requeue(d: Driver, ctx: Ctx) -> dict:
    q = ctx.names.queue("q")
    d.connect(ctx.url)
    d.queue_declare(q)
    d.publish("", q, b"a")
    d.publish("", q, b"b")
    settle(ctx, q, 2)
    seq = []

    def get() -> dict:
        m = d.get(q)
        seq.append([m["body"], m["redelivered"]] if m else None)
        return m

    d.nack(get()["delivery_tag"], requeue=True)  # a back at the head
    d.nack(get()["delivery_tag"], requeue=False)  # a dropped
    d.reject(get()["delivery_tag"], requeue=True)  # b back
    d.ack(get()["delivery_tag"])
    obs: dict[str, Any] = {"get_sequence": seq, "empty_after_gets": d.get(q) is None}

    for body in (b"c", b"d", b"e"):
        d.publish("", q, body)
    tag = d.consume(q)
    d.wait_deliveries(3)
    try:
        d.nack(d.deliveries[-1]["delivery_tag"], multiple=True, requeue=True)
    except Unsupported as exc:  # the client cannot nack multiple: that half is not observed
        obs["consume_sequence"] = NA
        obs["consume_sequence_skipped"] = str(exc)
    else:
        d.wait_deliveries(6)
        d.pump(0.1)
        d.ack(d.deliveries[-1]["delivery_tag"], multiple=True)
        obs["consume_sequence"] = [[m["body"], m["redelivered"]] for m in d.deliveries]
    d.cancel(tag)
    obs["left_in_queue"] = d.queue_declare(q, passive=True)[1]
    d.close()
    return obs


@scenario
def recover(d: Driver, ctx: Ctx) -> dict:
    """Basic.Recover(requeue): unacked deliveries come again, redelivered."""
    q = ctx.names.queue("q")
    d.connect(ctx.url)
    d.queue_declare(q)
    d.publish("", q, b"a")
    d.publish("", q, b"b")
    settle(ctx, q, 2)
    d.qos(10)
    tag = d.consume(q)
    d.wait_deliveries(2)
    d.recover()
    d.wait_deliveries(4)
    d.pump(0.1)
    d.ack(d.deliveries[-1]["delivery_tag"], multiple=True)
    obs = {"sequence": [[m["body"], m["redelivered"]] for m in d.deliveries]}
    d.cancel(tag)
    d.close()
    counts = ctx.admin.wait_counts(q, messages=0, consumers=0)
    obs["queue_after_close"] = list(counts) if counts else None
    return obs


@scenario
def tx_commit_rollback(d: Driver, ctx: Ctx) -> dict:
    """Transactions: a rolled back publish never arrives, a committed one does; a rolled back
    ack leaves the delivery unacked (the close then requeues it)."""
    q = ctx.names.queue("q")
    d.connect(ctx.url)
    d.queue_declare(q)
    d.tx_select()
    obs: dict[str, Any] = {}
    d.publish("", q, b"rolled-back")
    d.tx_rollback()
    d.publish("", q, b"committed")
    d.tx_commit()  # Commit-Ok: the publish is enqueued
    counts = ctx.admin.counts(q)
    obs["ready_after_commit"] = counts[0] if counts else None
    m = d.get(q)
    obs["got"] = get_view(m)
    d.tx_commit()
    d.ack(m["delivery_tag"])
    d.tx_rollback()  # the ack is discarded: the delivery stays unacked
    obs["get_after_ack_rollback"] = d.get(q)
    d.tx_commit()
    d.close()
    counts = ctx.admin.wait_counts(q, messages=1)
    obs["ready_after_close"] = counts[0] if counts else None
    return obs


@scenario
def mandatory_return(d: Driver, ctx: Ctx) -> dict:
    x = ctx.names.exchange("x")
    absent = ctx.names.queue("absent")
    d.connect(ctx.url, confirms=True)
    d.exchange_declare(x, "direct")
    d.publish(x, "nowhere", b"r1", mandatory=True, properties={"message_id": "r1"})
    d.publish("", absent, b"r2", mandatory=True, properties={"message_id": "r2"})
    d.publish(x, "nowhere", b"r3", mandatory=False, properties={"message_id": "r3"})
    confirms = d.wait_confirms(3)
    d.wait_returns(2)
    d.pump(0.1)
    obs = {"returns": list(d.returns), "confirms": confirms, "open": d.is_open()}
    d.close()
    return obs


@scenario
def consumer_cancel_notify(d: Driver, ctx: Ctx) -> dict:
    q = ctx.names.queue("q")
    d.connect(ctx.url)
    d.queue_declare(q)
    tag = d.consume(q, no_ack=True)
    ctx.admin.wait_counts(q, consumers=1)
    ctx.admin.delete_queue(q)
    cancels = d.wait_server_cancels(1)
    d.pump(0.1)
    obs = {
        "server_cancels": ["own consumer tag" if c == tag else c for c in cancels],
        "open": d.is_open(),
        "channel_usable": d.queue_declare("", exclusive=True)[0],
    }
    d.close()
    return obs


@scenario
def heartbeat_idle(d: Driver, ctx: Ctx) -> dict:
    q = ctx.names.queue("q")
    d.connect(ctx.url, heartbeat=HEARTBEAT)
    negotiated = d.negotiated()["heartbeat"]
    d.pump(IDLE)  # idle: only heartbeats cross the socket, for more than two intervals
    obs: dict[str, Any] = {"heartbeat": negotiated, "open_after_idle": d.is_open()}
    d.queue_declare(q)
    d.publish("", q, b"after-idle")
    settle(ctx, q, 1)
    m = d.get(q, no_ack=True)
    obs["roundtrip"] = m["body"] if m else None
    d.close()
    return obs


@scenario
def graceful_close(d: Driver, ctx: Ctx) -> dict:
    q = ctx.names.queue("q")
    d.connect(ctx.url)
    d.queue_declare(q)
    d.publish("", q, b"a")
    d.publish("", q, b"b")
    d.qos(10)
    d.consume(q)
    delivered = d.wait_deliveries(2)
    obs: dict[str, Any] = {"delivered": [[m["body"], m["redelivered"]] for m in delivered]}
    d.close_channel()  # unacked deliveries go back to the queue
    d.open_channel()
    after = []
    for _ in range(2):
        m = d.get(q)
        after.append([m["body"], m["redelivered"]] if m else None)
        if m:
            d.ack(m["delivery_tag"])
    obs["after_channel_close"] = after
    d.close()
    obs["open_after_close"] = d.is_open()
    counts = ctx.admin.wait_counts(q, messages=0, consumers=0)
    obs["queue_after_close"] = list(counts) if counts else None
    return obs


@scenario
def large_message(d: Driver, ctx: Ctx) -> dict:
    q = ctx.names.queue("q")
    body = large_body()
    digest = hashlib.sha256(body).hexdigest()
    d.connect(ctx.url)
    frame_max = d.negotiated()["frame_max"]
    d.queue_declare(q)
    d.publish("", q, body)
    d.consume(q)
    got = d.wait_deliveries(1, timeout=60)
    m = got[0] if got else None
    if m:
        d.ack(m["delivery_tag"])
    d.close()
    return {
        "bytes": len(m["body"]) if m else None,
        "sha256_matches": hashlib.sha256(m["body"]).hexdigest() == digest if m else None,
        "frames_needed": (len(body) + frame_max - 9) // (frame_max - 8)
        if isinstance(frame_max, int) and frame_max > 8 else NA,
    }


# --- unbinding, secret updates, channel numbers ------------------------------------------------


@scenario
def unbind_missing(d: Driver, ctx: Ctx) -> dict:
    """Queue.Unbind and Exchange.Unbind are idempotent in RabbitMQ: unbinding a missing queue, a
    missing exchange or a missing binding answers Unbind-Ok, the channel stays open; a real
    unbind stops the routing. Bind to a missing queue/exchange stays 404, unbinding from the
    default exchange 403."""
    q = ctx.names.queue("q")
    missing_q = ctx.names.queue("missing")
    x = ctx.names.exchange("x")
    x2 = ctx.names.exchange("x2")
    missing_x = ctx.names.exchange("missing")
    d.connect(ctx.url)
    d.exchange_declare(x, "direct")
    d.exchange_declare(x2, "fanout")
    d.queue_declare(q)
    d.queue_bind(q, x, "k")
    d.queue_bind(q, x, "k2")
    d.queue_bind(q, x2, "")
    ctx.admin.bind_exchange(x2, x, "e")  # x -"e"-> x2 -> q
    obs: dict[str, Any] = {"queue_unbind": {
        "missing_queue": _probe(d, lambda: d.queue_unbind(missing_q, x, "k")),
        "missing_exchange": _probe(d, lambda: d.queue_unbind(q, missing_x, "k")),
        "missing_binding": _probe(d, lambda: d.queue_unbind(q, x, "no-such-key")),
        "existing_binding": _probe(d, lambda: d.queue_unbind(q, x, "k")),
        "same_binding_again": _probe(d, lambda: d.queue_unbind(q, x, "k")),
    }}
    try:
        obs["exchange_unbind"] = {
            "missing_source": _probe(d, lambda: d.exchange_unbind(x2, missing_x, "e")),
            "missing_destination": _probe(d, lambda: d.exchange_unbind(missing_x, x, "e")),
            "missing_binding": _probe(d, lambda: d.exchange_unbind(x2, x, "no-such-key")),
            "existing_binding": _probe(d, lambda: d.exchange_unbind(x2, x, "e")),
        }
    except Unsupported as exc:  # the client lacks exchange.unbind: that half is not observed
        obs["exchange_unbind"] = NA
        obs["exchange_unbind_skipped"] = str(exc)
        d.queue_unbind(q, x2, "")  # so that "e" does not reach q through x2 either
    obs["open_after_unbinds"] = d.is_open()
    # Only "k2" still routes to q: "k" and x2 were unbound. Messages of one channel reach
    # one queue in order, so once via-k2 is in, the other two would be in before it.
    for key in ("k", "e", "k2"):
        d.publish(x, key, f"via-{key}".encode())
    settle(ctx, q, 1)
    obs["routed_after_unbind"] = drain(d, q)
    obs["bind_missing"] = {
        "queue": _probe(d, lambda: d.queue_bind(missing_q, x, "k")),
        "exchange": _probe(d, lambda: d.queue_bind(q, missing_x, "k")),
    }
    obs["unbind_default_exchange"] = _probe(d, lambda: d.queue_unbind(q, "", q))
    obs["channel_usable"] = list(d.queue_declare(q, passive=True)[1:])
    d.close()
    return obs


#: The secret update_secret sets first (then the real password again): RabbitMQ's internal
#: users accept any secret.
NEW_SECRET = "new-secret"


def _update_secret(d: Driver, secret: str) -> Any:
    """``d.update_secret(secret)``: "ok", or how the broker refused it."""
    try:
        d.update_secret(secret, "interop matrix")
    except Unsupported:
        raise
    except Exception as exc:
        return {"refused": True, **describe_refusal(exc)}
    return "ok"


@scenario
def update_secret(d: Driver, ctx: Ctx) -> dict:
    """Connection.UpdateSecret is answered with UpdateSecret-Ok; the connection and its
    channels stay open and usable."""
    q = ctx.names.queue("q")
    d.connect(ctx.url)
    d.queue_declare(q)
    obs: dict[str, Any] = {"new_secret": _update_secret(d, NEW_SECRET)}
    obs["same_password"] = _update_secret(d, ctx.params.password) if d.is_open() else NA
    obs["open"] = d.is_open()
    if not obs["open"]:
        return obs
    # the channel opened before the updates
    obs["declare_after"] = d.queue_declare(ctx.names.queue("after"))[0]
    d.publish("", q, b"after-update")
    settle(ctx, q, 1)
    m = d.get(q, no_ack=True)
    obs["roundtrip"] = m["body"] if m else None
    d.open_channel()
    obs["new_channel_declare"] = d.queue_declare(ctx.names.queue("new-channel"))[0]
    d.close()
    obs["open_after_close"] = d.is_open()
    return obs


#: A channel number above the channel_max RabbitMQ (and amqpq) negotiate (2047): valid, as
#: only the count of open channels is limited.
HIGH_CHANNEL = 65535


@scenario
def high_channel_number(d: Driver, ctx: Ctx) -> dict:
    """A channel numbered above the negotiated channel_max opens and works."""
    q = ctx.names.queue("q")
    d.connect(ctx.url)
    channel_max = d.negotiated()["channel_max"]
    number = d.open_numbered_channel(HIGH_CHANNEL)
    obs: dict[str, Any] = {
        "channel_max": channel_max,
        "channel_number": number,
        "above_channel_max": number > channel_max
        if isinstance(channel_max, int) and channel_max and isinstance(number, int) else NA,
    }
    obs["declared"] = d.queue_declare(q)[0]
    d.publish("", q, b"on-high-channel")
    settle(ctx, q, 1)
    m = d.get(q, no_ack=True)
    obs["roundtrip"] = m["body"] if m else None
    d.close_channel()
    obs["open_after_channel_close"] = d.is_open()
    d.close()
    obs["open_after_close"] = d.is_open()
    return obs


# --- expectations ------------------------------------------------------------------------------

LOCKED_TEXT = (
    "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{queue}' in vhost '/'. "
    "It could be originally declared on another connection or the exclusive property value "
    "does not match that of the original declaration.")


def _cut_like_rabbitmq(template: str, placeholder: str) -> str:
    """The text RabbitMQ sends for a LONG_NAME queue (first 252 bytes + "..."), with the queue
    name replaced by its placeholder."""
    name = "n" * LONG_NAME
    return (template.format(queue=name)[:252] + "...").replace(name, placeholder)


DECLARE_ERRORS = {
    "passive_missing_queue": {
        "code": 404, "text": "NOT_FOUND - no queue '<queue:missing>' in vhost '/'"},
    "passive_missing_exchange": {
        "code": 404, "text": "NOT_FOUND - no exchange '<exchange:missing>' in vhost '/'"},
    "exchange_other_type": {
        "code": 406,
        "text": "PRECONDITION_FAILED - inequivalent arg 'type' for exchange "
                "'<exchange:direct>' in vhost '/': received 'fanout' but current is 'direct'"},
    "queue_other_durable": {
        "code": 406,
        "text": "PRECONDITION_FAILED - inequivalent arg 'durable' for queue '<queue:q>' in "
                "vhost '/': received 'true' but current is 'false'"},
    "reserved_exchange_name": {
        "code": 403,
        "text": "ACCESS_REFUSED - exchange name '<exchange:reserved>' contains reserved "
                "prefix 'amq.*'"},
    "exclusive_of_other_connection": {
        "code": 405, "text": LOCKED_TEXT.format(queue="<queue:locked>")},
    "publish_to_missing_exchange": {
        "code": 404, "text": "NOT_FOUND - no exchange '<exchange:missing>' in vhost '/'"},
    "delete_if_empty": {
        "code": 406, "text": "PRECONDITION_FAILED - queue '<queue:q>' in vhost '/' not empty"},
}

_OK_CLOSED = {"open_before_close": True, "open_after_close": False,
              "server_named_queue": "amq.gen-*"}

EXPECTED: dict[str, dict] = {
    "connect_plain": {"mechanism": "PLAIN", **_OK_CLOSED},
    "connect_amqplain": {"mechanism": "AMQPLAIN", **_OK_CLOSED},
    "connect_refused": {
        "bad_password": {
            "refused": True, "code": 403,
            "text": "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. "
                    "For details see the broker logfile."},
        "unknown_vhost": {"refused": True, "code": 530,
                          "text": "NOT_ALLOWED - vhost <vhost> not found"},
    },
    "declare": {
        "declare_ok": [0, 0],
        "passive_ok": [3, 0],
        "redeclare_ok": [3, 0],
        "exchanges": {kind: "declared" for kind in EXCHANGE_KINDS},
        "errors": DECLARE_ERRORS,
        "server_named": "amq.gen-*",
        "passive_after_errors": [3, 0],
        "purge_ok": 3,
        "delete_ok": 0,
    },
    # RabbitMQ cuts a reply text longer than a shortstr to 252 bytes and appends "...".
    "long_reply_text": {
        "error": {"code": 405, "text": _cut_like_rabbitmq(LOCKED_TEXT, "<queue:locked>")},
        "text_bytes": 255,
    },
    **{f"route_{kind}": routed for kind, routed in ROUTED.items()},
    "publish_no_confirm": {
        "bodies": [f"p{i}" for i in range(N_PUBLISH)],
        "message_ids": [f"id-{i}" for i in range(N_PUBLISH)],
        "redelivered": [False],
        "first_properties": {"content_type": "text/plain", "delivery_mode": 2, "priority": 5,
                             "message_id": "id-0", "correlation_id": "corr-1",
                             "headers": HEADERS},
    },
    "header_types": {"portable": HEADER_TYPES},
    "publish_confirm": {
        "confirms": {"acked": N_CONFIRM, "nacked": 0},
        "in_queue": N_CONFIRM,
        "confirms_with_reject_publish": {"acked": N_CONFIRM + 1, "nacked": 1},
        "reject_publish_queue": ["first"],
    },
    "publish_user_id": {
        "own_user_id": "<user>",
        "other_user_id": {"code": 406,
                          "text": "PRECONDITION_FAILED - user_id property set to 'not-<user>' "
                                  "but authenticated user was '<user>'"},
        "left_in_queue": 0,
    },
    "consume_prefetch_ack": {
        "first_batch": PREFETCH,
        "max_unacked": PREFETCH,
        "bodies": [f"c{i}" for i in range(N_CONSUME)],
        "redelivered": [False] * N_CONSUME,
        "delivery_tags": list(range(1, N_CONSUME + 1)),
        "own_consumer_tag": [True],
        "declare_ok_while_consuming": [0, 1],
        "declare_ok_after_cancel": [0, 0],
    },
    "basic_get": {
        "empty_first": True,
        "gets": [
            {"body": "g0", "delivery_tag": 1, "redelivered": False, "exchange": "",
             "routing_key": "<queue:q>", "message_count": 2},
            {"body": "g1", "delivery_tag": 2, "redelivered": False, "exchange": "",
             "routing_key": "<queue:q>", "message_count": 1},
            {"body": "g2", "delivery_tag": 3, "redelivered": False, "exchange": "",
             "routing_key": "<queue:q>", "message_count": 0},
            {"body": "g2", "delivery_tag": 4, "redelivered": True, "exchange": "",
             "routing_key": "<queue:q>", "message_count": 0},
        ],
        "empty_last": True,
        "ack_unknown_tag": {"code": 406,
                            "text": f"PRECONDITION_FAILED - unknown delivery tag {UNKNOWN_TAG}"},
    },
    "nack_requeue": {
        "get_sequence": [["a", False], ["a", True], ["b", False], ["b", True]],
        "empty_after_gets": True,
        "consume_sequence": [["c", False], ["d", False], ["e", False],
                             ["c", True], ["d", True], ["e", True]],
        "left_in_queue": 0,
    },
    "recover": {
        "sequence": [["a", False], ["b", False], ["a", True], ["b", True]],
        "queue_after_close": [0, 0],
    },
    "tx_commit_rollback": {
        "ready_after_commit": 1,
        "got": {"body": "committed", "delivery_tag": 1, "redelivered": False, "exchange": "",
                "routing_key": "<queue:q>", "message_count": 0},
        "get_after_ack_rollback": None,
        "ready_after_close": 1,
    },
    "mandatory_return": {
        "returns": [
            {"reply_code": 312, "reply_text": "NO_ROUTE", "exchange": "<exchange:x>",
             "routing_key": "nowhere", "body": "r1"},
            {"reply_code": 312, "reply_text": "NO_ROUTE", "exchange": "",
             "routing_key": "<queue:absent>", "body": "r2"},
        ],
        "confirms": {"acked": 3, "nacked": 0},
        "open": True,
    },
    "consumer_cancel_notify": {
        "server_cancels": ["own consumer tag"],
        "open": True,
        "channel_usable": "amq.gen-*",
    },
    "heartbeat_idle": {"heartbeat": HEARTBEAT, "open_after_idle": True,
                       "roundtrip": "after-idle"},
    "graceful_close": {
        "delivered": [["a", False], ["b", False]],
        "after_channel_close": [["a", True], ["b", True]],
        "open_after_close": False,
        "queue_after_close": [0, 0],
    },
    "large_message": {"bytes": LARGE_SIZE, "sha256_matches": True},
    "unbind_missing": {
        "queue_unbind": {"missing_queue": "ok", "missing_exchange": "ok",
                         "missing_binding": "ok", "existing_binding": "ok",
                         "same_binding_again": "ok"},
        "exchange_unbind": {"missing_source": "ok", "missing_destination": "ok",
                            "missing_binding": "ok", "existing_binding": "ok"},
        "open_after_unbinds": True,
        "routed_after_unbind": ["via-k2"],
        "bind_missing": {
            "queue": {"code": 404, "text": "NOT_FOUND - no queue '<queue:missing>' in vhost '/'"},
            "exchange": {"code": 404,
                         "text": "NOT_FOUND - no exchange '<exchange:missing>' in vhost '/'"},
        },
        "unbind_default_exchange": {
            "code": 403, "text": "ACCESS_REFUSED - operation not permitted on the default "
                                 "exchange"},
        "channel_usable": [0, 0],
    },
    "update_secret": {
        "new_secret": "ok",
        "same_password": "ok",
        "open": True,
        "declare_after": "<queue:after>",
        "roundtrip": "after-update",
        "new_channel_declare": "<queue:new-channel>",
        "open_after_close": False,
    },
    "high_channel_number": {
        "channel_number": HIGH_CHANNEL,
        "above_channel_max": True,
        "declared": "<queue:q>",
        "roundtrip": "on-high-channel",
        "open_after_channel_close": True,
        "open_after_close": False,
    },
}

assert set(EXPECTED) == set(SCENARIOS), set(EXPECTED) ^ set(SCENARIOS)


def mismatches(expected: Any, observed: Any, path: str = "") -> list[str]:
    """Where ``observed`` differs from ``expected`` (fields observed as NA are skipped)."""
    where = path or "<observation>"
    if observed == NA:
        return []
    if isinstance(expected, dict):
        if not isinstance(observed, dict):
            return [f"{where}: expected {expected!r}, observed {observed!r}"]
        out = []
        for key, value in expected.items():
            if key not in observed:
                out.append(f"{path}.{key}: missing from the observation")
            else:
                out += mismatches(value, observed[key], f"{path}.{key}")
        return out
    if isinstance(expected, list) and isinstance(observed, list) and len(expected) == len(
            observed):
        out = []
        for i, (e, o) in enumerate(zip(expected, observed, strict=True)):
            out += mismatches(e, o, f"{path}[{i}]")
        return out
    if expected != observed:
        return [f"{where}: expected {expected!r}, observed {observed!r}"]
    return []
