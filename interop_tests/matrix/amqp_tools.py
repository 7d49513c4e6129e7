"""rabbitmq-c's command line tools (Debian ``amqp-tools``) in the matrix.

Each tool is one connection doing one thing, so these scenarios are written per tool rather
than against the driver API, and produce the same observation keys (``NA`` where a tool shows
nothing, e.g. delivery tags or redelivered flags). What the tools can do:

* ``amqp-declare-queue -q NAME`` declares a non-durable queue, prints its name (no counts).
* ``amqp-publish`` publishes one message (``-b``, or stdin; ``-l`` makes one per line, each
  keeping its newline, so it is not used here), with
  ``-C`` content type, ``-p`` persistent, ``-H "k: v"`` string headers. No confirms, no
  mandatory flag, no message id/priority.
* ``amqp-consume -q Q [-e X -r k1,k2] [-p N] [-c N] [--heartbeat S] CMD`` declares Q as an
  auto-delete queue and binds it when ``-e`` is given (routing keys comma-separated, no binding
  arguments), consumes, pipes each body into CMD and acks after CMD exits 0 (a failing CMD
  leaves the delivery unacked until the connection closes).
* ``amqp-get -q Q`` gets one message with no-ack and prints its body; exit 2 when empty.
* ``amqp-delete-queue -q Q`` prints the Delete-Ok message count.
* A channel error is printed as ``server channel error 404, message: NOT_FOUND - ...``.

Not possible with these tools (the cells are skipped): AMQPLAIN, confirms, nack/reject,
mandatory returns, consumer cancel notifications (rabbitmq-c does not advertise
``consumer_cancel_notify`` and amqp-consume ignores methods other than Basic.Deliver),
unbinding, Connection.UpdateSecret and channels other than 1.
Exchanges are declared, and headers bindings made, through the admin connection (pika).
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

from interop_tests.matrix.cell import Ctx
from interop_tests.matrix.driver import NA, WAIT, Unsupported
from interop_tests.matrix.scenarios import (
    DECLARE_ERRORS,
    HEARTBEAT,
    IDLE,
    LONG_NAME,
    N_CONSUME,
    N_PUBLISH,
    PREFETCH,
    ROUTED,
    ROUTES,
    large_body,
    settle,
)

TOOL_TIMEOUT = 30.0
SEPARATOR = "--amqpq-matrix-end-of-message--"
ERROR = re.compile(r"server (?:channel|connection) error (?P<code>\d+), message: (?P<text>.*)")

UNSUPPORTED = {
    "connect_amqplain": "rabbitmq-c logs in with PLAIN (or EXTERNAL over TLS) only",
    "publish_confirm": "amqp-publish has no publisher confirms",
    "nack_requeue": "the amqp-tools cannot nack or reject a delivery",
    "mandatory_return": "amqp-publish has no mandatory flag (no Basic.Return to observe)",
    "consumer_cancel_notify": "rabbitmq-c does not advertise consumer_cancel_notify and "
                              "amqp-consume ignores any method but Basic.Deliver",
    "publish_user_id": "amqp-publish cannot set the user_id property",
    "recover": "the amqp-tools have no basic.recover",
    "header_types": "amqp-publish sets string headers only",
    "tx_commit_rollback": "the amqp-tools have no transactions",
    "unbind_missing": "the amqp-tools have no queue.unbind or exchange.unbind (amqp-consume "
                      "binds, nothing unbinds)",
    "update_secret": "the amqp-tools have no connection.update_secret",
    "high_channel_number": "the amqp-tools always use channel 1",
}

#: What these cells must show, where the tools observe less than the driver clients.
EXPECTED: dict[str, dict] = {
    "connect_plain": {"mechanism": "PLAIN", "server_named_queue": "amq.gen-*",
                      "open_after_close": False},
    "declare": {
        "declared": "<queue:q>", "redeclared": "<queue:q>", "server_named": "amq.gen-*",
        "get_missing_queue": {
            "code": 404, "text": "NOT_FOUND - no queue '<queue:missing>' in vhost '/'"},
        "messages_after_publish": 3,
        "errors": DECLARE_ERRORS,
        "delete_ok": 3,
    },
    "publish_no_confirm": {
        "bodies": [f"p{i}" for i in range(N_PUBLISH)],
        "first_properties": {"content_type": "text/plain", "delivery_mode": 2, "priority": None,
                             "message_id": None, "correlation_id": None,
                             "headers": {"k": "v", "n": "7"}},
    },
    "consume_prefetch_ack": {
        "first_batch": PREFETCH,
        "bodies": [f"c{i}" for i in range(N_CONSUME)],
        "exit_code": 0,
        "declare_ok_after_cancel": [0, 0],
    },
    "basic_get": {"empty_first": True, "gets": [{"body": f"g{i}"} for i in range(3)],
                  "empty_last": True},
    "heartbeat_idle": {"open_after_idle": True, "roundtrip": "after-idle", "exit_code": 0},
    "graceful_close": {
        "delivered": [["a", NA], ["b", NA]],
        "after_channel_close": [["a", NA], ["b", NA]],
        "exit_code": 0,
        "queue_after_close": [0, 0],
    },
}


def _url_args(ctx: Ctx) -> list[str]:
    return ["--url", ctx.url]


def tool(ctx: Ctx, name: str, *args: str, stdin: bytes | None = None,
         timeout: float = TOOL_TIMEOUT) -> subprocess.CompletedProcess:
    return subprocess.run([name, *_url_args(ctx), *args], input=stdin, capture_output=True,
                          timeout=timeout)


def error_of(proc: subprocess.CompletedProcess) -> dict | None:
    match = ERROR.search(proc.stderr.decode(errors="replace"))
    return {"code": int(match.group("code")), "text": match.group("text").strip()} if match \
        else None


def publish_each(ctx: Ctx, exchange: str, routing_key: str, bodies: list[str],
                 *extra: str) -> None:
    """One amqp-publish per body (``-l`` would keep each line's newline in the body)."""
    for body in bodies:
        proc = tool(ctx, "amqp-publish", "-e", exchange, "-r", routing_key, "-b", body, *extra)
        if proc.returncode != 0:
            raise AssertionError(f"amqp-publish failed ({proc.returncode}): {proc.stderr!r}")


def get_body(ctx: Ctx, queue: str) -> bytes | None:
    """amqp-get: the body, or None when the queue is empty (exit 2)."""
    proc = tool(ctx, "amqp-get", "-q", queue)
    if proc.returncode == 2:
        return None
    if proc.returncode != 0:
        raise AssertionError(f"amqp-get failed ({proc.returncode}): {proc.stderr!r}")
    return proc.stdout


class Consumer:
    """``amqp-consume`` in the background; each body is appended to a file with a separator.

    ``gate``: the per-message command waits until that file exists (holds deliveries unacked).
    ``fail``: the command exits 1, so amqp-consume does not ack.
    """

    def __init__(self, ctx: Ctx, workdir: Path, label: str, args: list[str], *,
                 gate: bool = False, fail: bool = False) -> None:
        self.out = workdir / f"{label}.out"
        self.gate = workdir / f"{label}.go" if gate else None
        self.err = open(workdir / f"{label}.err", "wb")  # closed in stop()
        script = workdir / f"{label}.sh"
        lines = ["#!/bin/sh", f'cat >> "{self.out}"', f'printf "\\n{SEPARATOR}\\n" >> "{self.out}"']
        if self.gate is not None:
            lines.append(f'while [ ! -e "{self.gate}" ]; do sleep 0.02; done')
        lines.append("exit 1" if fail else "exit 0")
        script.write_text("\n".join(lines) + "\n")
        script.chmod(0o755)
        self.out.touch()
        self.proc = subprocess.Popen(["amqp-consume", *_url_args(ctx), *args, str(script)],
                                     stdout=subprocess.DEVNULL, stderr=self.err)

    def bodies(self) -> list[bytes]:
        data = self.out.read_bytes()
        parts = data.split(f"\n{SEPARATOR}\n".encode())
        return parts[:-1]

    def wait_bodies(self, n: int, timeout: float = WAIT) -> list[bytes]:
        deadline = time.monotonic() + timeout
        while len(self.bodies()) < n and time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        return self.bodies()

    def open_gate(self) -> None:
        assert self.gate is not None
        self.gate.touch()

    def wait_exit(self, timeout: float = WAIT) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.err.close()

    def stderr(self) -> str:
        return (self.out.parent / f"{self.out.stem}.err").read_text(errors="replace")


def _delete_server_named(ctx: Ctx, name: str) -> None:
    if name.startswith("amq.gen-"):
        ctx.admin.delete_queue(name)


# --- scenarios --------------------------------------------------------------------------------


def connect_plain(ctx: Ctx, workdir: Path) -> dict:
    proc = tool(ctx, "amqp-declare-queue", "-q", "")
    name = proc.stdout.decode().strip()
    _delete_server_named(ctx, name)
    return {"mechanism": "PLAIN", "frame_max": NA, "channel_max": NA, "product": NA,
            "capabilities": NA, "server_named_queue": name, "open_before_close": NA,
            "open_after_close": False if proc.returncode == 0 else f"exit {proc.returncode}"}


def declare(ctx: Ctx, workdir: Path) -> dict:
    q = ctx.names.queue("q")
    missing = ctx.names.queue("missing")
    missing_x = ctx.names.exchange("missing")
    obs: dict[str, Any] = {"declare_ok": NA, "passive_ok": NA, "redeclare_ok": NA,
                           "exchanges": NA, "passive_after_errors": NA}
    obs["declared"] = tool(ctx, "amqp-declare-queue", "-q", q).stdout.decode().strip()
    publish_each(ctx, "", q, ["m0", "m1", "m2"])
    settle(ctx, q, 3)
    counts = ctx.admin.counts(q)
    obs["messages_after_publish"] = counts[0] if counts else None
    obs["redeclared"] = tool(ctx, "amqp-declare-queue", "-q", q).stdout.decode().strip()
    obs["get_missing_queue"] = error_of(tool(ctx, "amqp-get", "-q", missing))
    obs["errors"] = {key: NA for key in DECLARE_ERRORS}
    obs["errors"]["publish_to_missing_exchange"] = error_of(
        tool(ctx, "amqp-publish", "-e", missing_x, "-r", "k", "-b", "x"))
    locked = ctx.names.sized_queue("locked", 20)
    ctx.admin.declare_queue(locked, exclusive=True)  # held by the admin connection
    # amqp-get (not a passive declare, which the tools lack) meets the same lock
    obs["errors"]["exclusive_of_other_connection"] = error_of(tool(ctx, "amqp-get", "-q", locked))
    name = tool(ctx, "amqp-declare-queue", "-q", "").stdout.decode().strip()
    obs["server_named"] = name
    _delete_server_named(ctx, name)
    obs["errors"]["delete_if_empty"] = error_of(
        tool(ctx, "amqp-delete-queue", "-q", q, "--if-empty"))
    deleted = tool(ctx, "amqp-delete-queue", "-q", q).stdout.decode().strip()
    obs["delete_ok"] = int(deleted) if deleted.isdigit() else deleted
    return obs


def connect_refused(ctx: Ctx, workdir: Path) -> dict:
    p = ctx.params
    vhost = ctx.names.literal("vhost", f"mx-missing-{uuid.uuid4().hex[:8]}")
    out = {}
    for key, password, vh in (("bad_password", "wrong-" + uuid.uuid4().hex[:8], p.vhost),
                              ("unknown_vhost", p.password, vhost)):
        url = (f"amqp://{quote(p.user, safe='')}:{quote(password, safe='')}@{p.host}:{p.port}/"
               f"{quote(vh, safe='')}")
        proc = subprocess.run(["amqp-declare-queue", "--url", url, "-q", ""],
                              capture_output=True, timeout=TOOL_TIMEOUT)
        if proc.returncode == 0:
            _delete_server_named(ctx, proc.stdout.decode().strip())
            out[key] = {"refused": False}
        else:
            out[key] = {"refused": True, **(error_of(proc) or {"code": NA, "text": NA})}
    return out


def long_reply_text(ctx: Ctx, workdir: Path) -> dict:
    locked = ctx.names.sized_queue("locked", LONG_NAME)
    ctx.admin.declare_queue(locked, exclusive=True)  # held by the admin connection
    proc = tool(ctx, "amqp-get", "-q", locked)
    error = error_of(proc)
    return {"error": error, "text_bytes": len(error["text"].encode()) if error else None}


def _route(ctx: Ctx, workdir: Path, kind: str) -> dict:
    bindings, publishes = ROUTES[kind]
    x = ctx.names.exchange(kind)
    ctx.admin.declare_exchange(x, kind)
    labels = sorted({label for label, _, _ in bindings})
    consumers = {}
    try:
        for label in labels:
            q = ctx.names.queue(label)
            if kind == "headers":  # amqp-consume binds without arguments: the admin binds
                ctx.admin.declare_queue(q, auto_delete=True)
                for lab, key, arguments in bindings:
                    if lab == label:
                        ctx.admin.bind(q, x, key, arguments)
                args = ["-q", q]
            else:
                # amqp-consume declares the queue (auto-delete) and binds each comma-separated
                # key; an empty key binds nothing, so the fanout binding gets a dummy key.
                keys = [key or "any" for lab, key, _ in bindings if lab == label]
                args = ["-q", q, "-e", x, "-r", ",".join(keys)]
            consumers[label] = Consumer(ctx, workdir, label, args)
        for label in labels:
            ctx.admin.wait_counts(ctx.names.queue(label), consumers=1)
        for key, body, headers in publishes:
            extra = [arg for k, v in (headers or {}).items() for arg in ("-H", f"{k}: {v}")]
            publish_each(ctx, x, key, [body], *extra)
        for label, consumer in consumers.items():
            consumer.wait_bodies(len(ROUTED[kind][label]))
        time.sleep(0.2)  # room for a message routed where it should not be
        return {label: consumer.bodies() for label, consumer in consumers.items()}
    finally:
        for consumer in consumers.values():
            consumer.stop()


def publish_no_confirm(ctx: Ctx, workdir: Path) -> dict:
    q = ctx.names.queue("q")
    props_q = ctx.names.queue("props")
    tool(ctx, "amqp-declare-queue", "-q", q)
    tool(ctx, "amqp-declare-queue", "-q", props_q)
    publish_each(ctx, "", q, [f"p{i}" for i in range(N_PUBLISH)])
    settle(ctx, q, N_PUBLISH)
    bodies = []
    for _ in range(N_PUBLISH + 1):
        body = get_body(ctx, q)
        if body is None:
            break
        bodies.append(body)
    # The properties amqp-publish can set, as the broker hands them on (read by the admin).
    publish_each(ctx, "", props_q, ["props"], "-C", "text/plain", "-p", "-H", "k: v",
                  "-H", "n: 7")
    settle(ctx, props_q, 1)
    method, props, _ = ctx.admin.channel.basic_get(props_q, auto_ack=True)
    first = None
    if method is not None:
        first = {name: getattr(props, name) for name in
                 ("content_type", "delivery_mode", "priority", "message_id", "correlation_id",
                  "headers")}
    return {"bodies": bodies, "message_ids": NA, "redelivered": NA, "first_properties": first}


def consume_prefetch_ack(ctx: Ctx, workdir: Path) -> dict:
    q = ctx.names.queue("q")
    tool(ctx, "amqp-declare-queue", "-q", q)
    publish_each(ctx, "", q, [f"c{i}" for i in range(N_CONSUME)])
    settle(ctx, q, N_CONSUME)
    consumer = Consumer(ctx, workdir, "c", ["-q", q, "-p", str(PREFETCH), "-c",
                                            str(N_CONSUME)], gate=True)
    try:
        consumer.wait_bodies(1)
        # The command holds the first delivery: the prefetch window is what left the queue.
        counts = ctx.admin.wait_counts(q, messages=N_CONSUME - PREFETCH, timeout=2.0)
        time.sleep(0.3)
        counts = ctx.admin.counts(q)
        first_batch = N_CONSUME - counts[0] if counts else None
        consumer.open_gate()
        code = consumer.wait_exit(4 * WAIT)
        bodies = consumer.bodies()
    finally:
        consumer.stop()
    after = ctx.admin.wait_counts(q, messages=0, consumers=0)
    return {"first_batch": first_batch, "max_unacked": NA, "bodies": bodies,
            "redelivered": NA, "delivery_tags": NA, "own_consumer_tag": NA,
            "declare_ok_while_consuming": NA, "exit_code": code,
            "declare_ok_after_cancel": list(after) if after else None}


def basic_get(ctx: Ctx, workdir: Path) -> dict:
    q = ctx.names.queue("q")
    tool(ctx, "amqp-declare-queue", "-q", q)
    obs: dict[str, Any] = {"empty_first": get_body(ctx, q) is None}
    publish_each(ctx, "", q, ["g0", "g1", "g2"])
    settle(ctx, q, 3)
    obs["gets"] = [{"body": get_body(ctx, q), "delivery_tag": NA, "redelivered": NA,
                    "exchange": NA, "routing_key": NA, "message_count": NA} for _ in range(3)]
    obs["empty_last"] = get_body(ctx, q) is None
    return obs


def heartbeat_idle(ctx: Ctx, workdir: Path) -> dict:
    q = ctx.names.queue("q")
    tool(ctx, "amqp-declare-queue", "-q", q)
    consumer = Consumer(ctx, workdir, "hb", ["--heartbeat", str(HEARTBEAT), "-q", q, "-c", "1"])
    try:
        ctx.admin.wait_counts(q, consumers=1)
        time.sleep(IDLE)  # amqp-consume idles in its frame wait, sending heartbeats
        counts = ctx.admin.counts(q)
        alive = consumer.proc.poll() is None and counts is not None and counts[1] == 1
        ctx.admin.publish("", q, b"after-idle")
        bodies = consumer.wait_bodies(1)
        code = consumer.wait_exit()
    finally:
        consumer.stop()
    return {"heartbeat": NA, "open_after_idle": alive,
            "roundtrip": bodies[0] if bodies else None, "exit_code": code}


def graceful_close(ctx: Ctx, workdir: Path) -> dict:
    q = ctx.names.queue("q")
    tool(ctx, "amqp-declare-queue", "-q", q)
    publish_each(ctx, "", q, ["a", "b"])
    settle(ctx, q, 2)
    # The command fails, so amqp-consume does not ack; after 2 deliveries it closes the channel
    # and the connection, and the broker requeues both.
    consumer = Consumer(ctx, workdir, "gc", ["-q", q, "-c", "2"], fail=True)
    try:
        code = consumer.wait_exit(2 * WAIT)
        delivered = consumer.bodies()
    finally:
        consumer.stop()
    settle(ctx, q, 2)
    after = [get_body(ctx, q) for _ in range(2)]
    counts = ctx.admin.wait_counts(q, messages=0, consumers=0)
    return {"delivered": [[b, NA] for b in delivered],
            "after_channel_close": [[b, NA] for b in after], "exit_code": code,
            "open_after_close": NA, "queue_after_close": list(counts) if counts else None}


def large_message(ctx: Ctx, workdir: Path) -> dict:
    q = ctx.names.queue("q")
    body = large_body()
    tool(ctx, "amqp-declare-queue", "-q", q)
    proc = tool(ctx, "amqp-publish", "-r", q, stdin=body, timeout=60)
    assert proc.returncode == 0, proc.stderr
    settle(ctx, q, 1)
    got = get_body(ctx, q)
    return {"bytes": len(got) if got is not None else None,
            "sha256_matches": hashlib.sha256(got).digest() == hashlib.sha256(body).digest()
            if got is not None else None,
            "frames_needed": NA}


SCENARIOS = {
    "connect_plain": connect_plain,
    "connect_refused": connect_refused,
    "declare": declare,
    "long_reply_text": long_reply_text,
    "route_direct": lambda ctx, wd: _route(ctx, wd, "direct"),
    "route_fanout": lambda ctx, wd: _route(ctx, wd, "fanout"),
    "route_topic": lambda ctx, wd: _route(ctx, wd, "topic"),
    "route_headers": lambda ctx, wd: _route(ctx, wd, "headers"),
    "publish_no_confirm": publish_no_confirm,
    "consume_prefetch_ack": consume_prefetch_ack,
    "basic_get": basic_get,
    "heartbeat_idle": heartbeat_idle,
    "graceful_close": graceful_close,
    "large_message": large_message,
}


def run(scenario: str, ctx: Ctx) -> dict:
    if scenario in UNSUPPORTED:
        raise Unsupported(UNSUPPORTED[scenario])
    with tempfile.TemporaryDirectory(prefix="amqp-tools-") as tmp:
        return SCENARIOS[scenario](ctx, Path(tmp))
