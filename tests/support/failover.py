"""Traffic and checks of the cluster failover loops (``tests/test_cluster_failover.py``,
``tests/test_cluster_mixed_faults.py``, ``tests/test_cluster_rolling_restart.py``): a
publisher with confirms and a consumer with manual acks as pika threads, on one node or
:class:`Roaming` over the cluster's nodes, the fault injectors (kill -9, SIGSTOP/SIGCONT, a node link cut with
``ss -K``), and :func:`check_history`, the loop's verdict.

Message bodies are ``<tag>-<n>``: a publisher's tag and its sequence number."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field

import pika

from tests.support.broker_process import BrokerProcess
from tests.support.cluster import api, connect

ACK_GRACE = 1.0  # s: an ack sent this close to a fault may not have reached the followers


def queue_state(node: BrokerProcess, name: str) -> dict[str, object]:
    """The management API's object of queue ``name`` in ``/`` as ``node`` sees it."""
    return api(node, f"/api/queues/%2F/{name}")  # type: ignore[no-any-return]


def leader_of(nodes: dict[str, BrokerProcess], queue: str) -> tuple[str, int]:
    """``(leader's name, epoch)`` of ``queue`` as the first live node sees it."""
    for node in nodes.values():
        if node.alive():
            state = queue_state(node, queue)
            return str(state["leader"]), int(state["epoch"])  # type: ignore[call-overload]
    raise AssertionError("no node is up")


class Roaming:
    """A blocking pika connection to the first node of ``nodes`` that accepts one,
    starting after the node used last (a client's list of cluster addresses);
    ``reconnects`` counts the connections opened."""

    def __init__(self, nodes: list[BrokerProcess]) -> None:
        self.nodes = nodes
        self.at = -1
        self.reconnects = 0

    def connect(self) -> pika.BlockingConnection:
        while True:
            for _ in self.nodes:
                self.at = (self.at + 1) % len(self.nodes)
                node = self.nodes[self.at]
                try:
                    conn = pika.BlockingConnection(pika.ConnectionParameters(
                        "127.0.0.1", node.port, heartbeat=0, connection_attempts=1,
                        socket_timeout=2, blocked_connection_timeout=30))
                except (pika.exceptions.AMQPError, OSError):
                    continue
                self.reconnects += 1
                return conn
            time.sleep(0.2)


def _open(node: BrokerProcess | Roaming) -> pika.BlockingConnection:
    return node.connect() if isinstance(node, Roaming) else connect(node)


@dataclass(eq=False)
class Publisher(threading.Thread):
    """Publishes ``tag-0``, ``tag-1``... one at a time with confirms through ``node`` (or
    the nodes of a :class:`Roaming`) with ``properties`` (e.g. persistent); a nacked or
    unanswered message is sent again (same body) until confirmed. ``confirmed_at`` holds
    each confirm's time (monotonic) for the longest pause in the confirms. Pauses (s):
    ``pace`` after each confirm, ``nack_pause`` after a nack, ``retry_pause`` before
    connecting again."""

    node: BrokerProcess | Roaming
    queue: str
    tag: str
    properties: pika.BasicProperties | None = None
    pace: float = 0.0
    nack_pause: float = 0.05
    retry_pause: float = 0.2
    confirmed: list[str] = field(default_factory=list)
    confirmed_at: list[float] = field(default_factory=list)
    nacked: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        threading.Thread.__init__(self, daemon=True)

    def run(self) -> None:
        seq = 0
        conn = None
        while not self.stop.is_set():
            try:
                if conn is None:
                    conn = _open(self.node)
                    ch = conn.channel()
                    ch.confirm_delivery()
                body = f"{self.tag}-{seq}"
                ch.basic_publish("", self.queue, body.encode(), self.properties,
                                 mandatory=True)
                self.confirmed.append(body)
                self.confirmed_at.append(time.monotonic())
                seq += 1
                if self.pace:
                    time.sleep(self.pace)
            except pika.exceptions.NackError:
                self.nacked += 1
                if self.nack_pause:
                    time.sleep(self.nack_pause)
            except (pika.exceptions.AMQPError, OSError):
                conn = None
                if self.retry_pause:
                    time.sleep(self.retry_pause)
        if conn is not None and conn.is_open:
            conn.close()

    def longest_pause(self, after: float) -> float:
        """The longest time (s) without a confirm from ``after`` (monotonic) on."""
        times = [after] + [t for t in self.confirmed_at if t > after]
        return max((b - a for a, b in zip(times, times[1:], strict=False)), default=0.0)

    def longest_gap(self, since: float, until: float) -> float:
        """The longest time (s) without a confirm from ``since`` to ``until`` (monotonic)."""
        times = [since, *(t for t in self.confirmed_at if since <= t <= until), until]
        return max(b - a for a, b in zip(times, times[1:], strict=False))


@dataclass(eq=False)
class Consumer(threading.Thread):
    """Consumes ``queue`` through ``node`` (or the nodes of a :class:`Roaming`) with manual
    acks (``prefetch``), subscribing again after a consumer-cancel notification or a closed
    channel, on a new connection (after ``retry_pause`` s) once the old one failed."""

    node: BrokerProcess | Roaming
    queue: str
    prefetch: int = 20
    retry_pause: float = 0.2
    delivered: list[tuple[str, bool]] = field(default_factory=list)
    acked_at: dict[str, float] = field(default_factory=dict)
    cancels: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        threading.Thread.__init__(self, daemon=True)

    def run(self) -> None:
        conn = None
        consuming = False
        while not self.stop.is_set():
            try:
                if conn is None:
                    conn = _open(self.node)
                    ch = conn.channel()
                    ch.basic_qos(prefetch_count=self.prefetch)
                    ch.add_on_cancel_callback(self._cancelled)
                    consuming = False
                if not consuming or not ch.consumer_tags:
                    ch.basic_consume(self.queue, self._got)
                    consuming = True
                conn.process_data_events(0.05)
            except (pika.exceptions.AMQPError, OSError):
                if conn is not None and conn.is_open:
                    conn.close()
                conn = None
                if self.retry_pause:
                    time.sleep(self.retry_pause)
        if conn is not None and conn.is_open:
            conn.close()

    def _cancelled(self, _frame: object) -> None:
        self.cancels += 1

    def _got(self, ch: object, method: object, _props: object, body: bytes) -> None:
        text = body.decode()
        self.delivered.append((text, bool(method.redelivered)))  # type: ignore[attr-defined]
        ch.basic_ack(method.delivery_tag)  # type: ignore[attr-defined]
        self.acked_at[text] = time.monotonic()


@dataclass
class Verdict:
    """What :func:`check_history` found: confirmed messages never delivered (``lost``),
    messages delivered again (flagged redelivered) though acked ≥ ACK_GRACE before every
    fault after the ack (``acked_came_back``), publishers whose confirmed messages were first
    delivered out of order (``out_of_order``), and copies of an acked message delivered as
    new (``duplicates``: a publish sent again after its node's link went, at-least-once)."""

    lost: list[str]
    acked_came_back: list[str]
    out_of_order: list[str]
    duplicates: int

    @property
    def ok(self) -> bool:
        return not (self.lost or self.acked_came_back or self.out_of_order)


def check_history(consumers: list[Consumer], publishers: list[Publisher],
                  faults: list[float]) -> Verdict:
    """Nothing confirmed lost; no message acked (≥ ACK_GRACE before a fault) delivered again;
    each publisher's confirmed messages first delivered in the order published."""
    acked: dict[str, float] = {}
    first_seen: dict[str, None] = {}
    came_back: list[str] = []
    duplicates = 0
    for c in consumers:
        for body, redelivered in c.delivered:
            if body in acked:
                if not redelivered:
                    duplicates += 1
                    continue
                t = acked[body]
                if not any(0 <= k - t < ACK_GRACE for k in faults):
                    came_back.append(body)
            elif body not in first_seen:
                first_seen[body] = None
        acked.update(c.acked_at)
    confirmed = {m for p in publishers for m in p.confirmed}
    lost = sorted(confirmed - set(first_seen))
    out_of_order = []
    for p in publishers:
        order = [int(m.rsplit("-", 1)[1]) for m in first_seen if m.startswith(p.tag + "-")]
        mine = [n for n in order if f"{p.tag}-{n}" in confirmed]
        if mine != sorted(mine):
            out_of_order.append(p.tag)
    return Verdict(lost, came_back, out_of_order, duplicates)


# ---- faults --------------------------------------------------------------------------------

SS = shutil.which("ss")
_PID = re.compile(r"pid=(\d+)")


def _sockets(pid: int) -> list[tuple[int, int]]:
    """``(local port, peer port)`` of every established TCP socket of process ``pid``."""
    out = subprocess.run([SS or "ss", "-tnpH", "state", "established"], capture_output=True,
                         text=True, timeout=10).stdout
    found = []
    for line in out.splitlines():
        if str(pid) not in _PID.findall(line):
            continue
        cols = line.split()
        local, peer = cols[2], cols[3]
        found.append((int(local.rsplit(":", 1)[1]), int(peer.rsplit(":", 1)[1])))
    return found


def cut_link(a: BrokerProcess, b: BrokerProcess) -> int:
    """Cut the node links between ``a`` and ``b`` with ``ss -K`` (loopback; needs
    CAP_NET_ADMIN: root, or ``sudo -n``): both ends get a reset, as when a network path
    breaks; the nodes open them again a second later. Returns the sockets destroyed (0:
    ``ss -K`` is not available here)."""
    if SS is None:
        return 0
    mine = _sockets(a.pid)
    theirs = {local for local, _ in _sockets(b.pid)}
    links = [(local, peer) for local, peer in mine if peer in theirs]
    if not links:
        return 0
    filt = " or ".join(f"( sport = :{lp} and dport = :{pp} ) or ( sport = :{pp} and "
                       f"dport = :{lp} )" for lp, pp in links)
    cmd = [SS, "-K", "-tn", "state", "established", f"( {filt} )"]
    if os.geteuid() != 0:
        cmd = ["sudo", "-n", *cmd]
    try:
        subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=True)
    except (subprocess.SubprocessError, OSError):
        return 0
    left = {s for s in _sockets(a.pid) if s in links}
    return len(links) - len(left)


def pause(node: BrokerProcess) -> None:
    """SIGSTOP: the node stops answering, its sockets stay open (a stalled VM, a GC pause)."""
    os.kill(node.pid, signal.SIGSTOP)


def resume(node: BrokerProcess) -> None:
    """SIGCONT after :func:`pause`."""
    os.kill(node.pid, signal.SIGCONT)
