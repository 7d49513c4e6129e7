"""guest logs in from loopback only, whatever the state of the client's socket.

The client runs in a network namespace of its own, joined to the broker's by a veth pair
(made here with ``ip netns`` / ``ip link``, as root; the tests skip where that is not
possible), so its address is really not loopback. The attack of issue #28: a client that
pipelines a whole session (Start-Ok as guest/guest, Open, Channel.Open, Queue.Declare) and
resets its connection (SO_LINGER 0) before the broker accept()s it; the accepted socket then
has no peer address. The broker is stopped (SIGSTOP) while the client does this, so the
reset always comes first. Source: https://www.rabbitmq.com/docs/access-control#loopback-users.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pika
import pytest

from tests.support.broker_process import BrokerProcess, free_port
from tests.support.cluster import api, wait_until

pytestmark = pytest.mark.timeout(60)

BROKER_IP = "10.213.7.1"
CLIENT_IP = "10.213.7.2"

# Runs inside the namespace: writes a whole pipelined session, then resets (or reads the
# broker's answer when told not to reset). Prints what the broker answered, if anything.
CLIENT = textwrap.dedent("""
    import socket, struct, sys
    from pamqp import commands, frame
    host, port, user, password, queue, reset = sys.argv[1:7]
    s = socket.create_connection((host, int(port)), timeout=5)
    data = b"AMQP\\x00\\x00\\x09\\x01"
    for ch, m in ((0, commands.Connection.StartOk(
                        client_properties={"capabilities": {"authentication_failure_close": True}},
                        mechanism="PLAIN",
                        response=f"\\x00{user}\\x00{password}")),
                  (0, commands.Connection.TuneOk(channel_max=10, frame_max=131072,
                                                 heartbeat=0)),
                  (0, commands.Connection.Open(virtual_host="/")),
                  (1, commands.Channel.Open()),
                  (1, commands.Queue.Declare(queue=queue, durable=True))):
        data += frame.marshal(m, ch)
    s.sendall(data)
    if reset == "reset":
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
        sys.exit(0)
    got = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    except OSError:
        pass
    # the answer's method frames, by class/method id (10,40 Connection.Close)
    ids, i = [], 0
    while i + 7 <= len(got):
        kind, _, size = struct.unpack(">BHI", got[i:i + 7])
        if kind == 1:
            ids.append(struct.unpack(">HH", got[i + 7:i + 11]))
            if ids[-1] == (10, 50):
                ids.append(struct.unpack(">H", got[i + 11:i + 13])[0])
        i += 8 + size
    print(ids)
""")


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@pytest.fixture(scope="module")
def netns() -> Iterator[str]:
    """A network namespace whose ``CLIENT_IP`` reaches ``BROKER_IP`` on this host over a
    veth pair; removed after."""
    name, veth = f"amqpq-t{os.getpid()}", f"vq{os.getpid() % 100000}"
    try:
        _ip("netns", "add", name)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot make a network namespace (root and iproute2 needed): {exc}")
    try:
        _ip("link", "add", veth + "a", "type", "veth", "peer", "name", veth + "b")
        _ip("link", "set", veth + "b", "netns", name)
        _ip("addr", "add", f"{BROKER_IP}/30", "dev", veth + "a")
        _ip("link", "set", veth + "a", "up")
        _ip("-n", name, "addr", "add", f"{CLIENT_IP}/30", "dev", veth + "b")
        _ip("-n", name, "link", "set", veth + "b", "up")
        _ip("-n", name, "link", "set", "lo", "up")
        yield name
    finally:
        subprocess.run(["ip", "link", "del", veth + "a"], capture_output=True)
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


@pytest.fixture(scope="module")
def broker(netns: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker listening on loopback and on the veth address; a second user, ``remote``,
    may log in from anywhere (it proves the namespace's client really reaches the broker)."""
    d = tmp_path_factory.mktemp("remote-guest")
    with BrokerProcess(d / "data", d / "broker.log", hosts=("127.0.0.1", BROKER_IP),
                       management=free_port(), log_level="info") as b:
        api(b, "/api/users/remote", "PUT", {"password": "secret", "tags": ""})
        api(b, "/api/permissions/%2F/remote", "PUT",
            {"configure": ".*", "write": ".*", "read": ".*"})
        yield b


def _client(netns: str, b: BrokerProcess, user: str, password: str, queue: str,
            reset: bool) -> str:
    out = subprocess.run(
        ["ip", "netns", "exec", netns, sys.executable, "-c", CLIENT, BROKER_IP, str(b.port),
         user, password, queue, "reset" if reset else "read"],
        capture_output=True, text=True, timeout=30, env={**os.environ})
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _queue_exists(b: BrokerProcess, name: str) -> bool:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port))
    try:
        conn.channel().queue_declare(name, passive=True)
        return True
    except pika.exceptions.ChannelClosedByBroker:
        return False
    finally:
        if conn.is_open:
            conn.close()


def test_guest_from_another_host_is_refused_and_other_users_are_not(
        netns: str, broker: BrokerProcess) -> None:
    # Connection.Close 403 (ACCESS_REFUSED) after Start-Ok, nothing declared
    assert _client(netns, broker, "guest", "guest", "q-guest", reset=False) == \
        "[(10, 10), (10, 50), 403]"
    assert not _queue_exists(broker, "q-guest")
    # the same session as a user without the loopback rule runs: the namespace works
    answer = _client(netns, broker, "remote", "secret", "q-remote", reset=False)
    assert answer.startswith("[(10, 10), (10, 30), (10, 41), (20, 11), (50, 11)"), answer
    assert _queue_exists(broker, "q-remote")


def test_guest_whose_connection_reset_before_accept_is_refused(
        netns: str, broker: BrokerProcess) -> None:
    os.kill(broker.pid, signal.SIGSTOP)  # the reset reaches the kernel before accept()
    try:
        _client(netns, broker, "guest", "guest", "q-reset", reset=True)
    finally:
        os.kill(broker.pid, signal.SIGCONT)
    wait_until(lambda: "client's address is unknown" in broker.log_text(),
               "the refused login in the log")
    assert "user 'guest' can only connect via localhost" in broker.log_text()
    assert not _queue_exists(broker, "q-reset")
    # the control: a non-guest user's reset session is still carried out (the attack
    # path itself works, so the refusal above is the loopback rule's doing)
    os.kill(broker.pid, signal.SIGSTOP)
    try:
        _client(netns, broker, "remote", "secret", "q-reset-remote", reset=True)
    finally:
        os.kill(broker.pid, signal.SIGCONT)
    wait_until(lambda: _queue_exists(broker, "q-reset-remote"),
               "the reset session of 'remote' carried out")

