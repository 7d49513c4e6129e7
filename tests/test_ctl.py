"""``amqpqctl`` (the installed console script) against a broker subprocess on free ports.

The "done when" scenario and the error reporting run ``amqpqctl`` as a subprocess
(``python -m amqpqctl`` from this checkout, the console script's ``main``):
with amqpqctl alone create a vhost, a user with permissions, an exchange, a queue and a
binding, see them listed, publish through them with pika as that user, and export the
definitions; errors are one line on stderr, without a traceback. The other command tests
run the same click group in-process (``CliRunner``), against the same broker subprocess, to
keep the suite fast.

Source: https://www.rabbitmq.com/docs/man/rabbitmqctl.8.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pika
import pytest

from tests.support.broker_process import BrokerProcess, free_port
from tests.support.shared_fixtures import shared_while_consecutive

REPO = Path(__file__).resolve().parent.parent
CTL = Path(sys.executable).parent / "amqpqctl"
FIXTURE = Path(__file__).parent / "data" / "rabbitmq-3.10-definitions.json"

pytestmark = pytest.mark.skipif(not CTL.exists(), reason="amqpqctl is not installed "
                                "(pip install -e '.[test,fast]')")


@dataclass
class Node:
    amqp_port: int
    http_port: int
    process: BrokerProcess


def start_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """A broker subprocess with its management API, for a module's ``node`` fixture."""
    http = free_port()
    data = tmp_path_factory.mktemp("ctl-broker")
    # no --host: both loopbacks, as amqpq-server runs by default; management API on ``http``
    with BrokerProcess(data / "data", data / "broker.log", hosts=None,
                       management=http) as broker:
        yield Node(broker.port, http, broker)


#: one broker for test_ctl.py, test_ctl_listing.py, test_ctl_settings.py and
#: test_ctl_super_streams.py (run one after another): tests/support/shared_fixtures.py
ctl_node = shared_while_consecutive("ctl_node", contextlib.contextmanager(start_node))


@pytest.fixture
def node(ctl_node: Node) -> Node:
    """The test_ctl*.py modules' broker (``ctl_node``): names of each test's own."""
    return ctl_node


#: ``amqpqctl`` as a process, from this checkout (the installed script may import another)
CTL_CMD = [sys.executable, "-m", "amqpqctl"]


def ctl_env(**extra: str) -> dict[str, str]:
    """The environment of an ``amqpqctl`` process: this checkout first on the path, no
    ``AMQPQCTL_*`` variables or configuration file of the user's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AMQPQCTL_")}
    return {**env, "PYTHONWARNINGS": "ignore", "HOME": str(REPO / "tests" / "data"),
            "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", ""))
                                          if p), **extra}


def ctl(node: Node, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    res = subprocess.run([*CTL_CMD, "--port", str(node.http_port), *args], capture_output=True,
                         text=True, timeout=30, env=ctl_env())
    if check:
        assert res.returncode == 0, (args, res.stdout, res.stderr)
    return res


class Result:
    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def run(node: Node, *args: str, check: bool = True,
        env: dict[str, str | None] | None = None) -> Result:
    """``amqpqctl --port HTTP ARGS`` in-process (click's CliRunner); ``env``: environment
    variables to set (None: unset) for the run."""
    from click.testing import CliRunner

    from amqpqctl.cli import cli

    res = CliRunner().invoke(cli, ["--port", str(node.http_port), *args],
                             env={"HOME": str(REPO / "tests" / "data"), **(env or {})})
    out = Result(res.exit_code, res.stdout, res.stderr)
    if check:
        assert res.exit_code == 0, (args, res.stdout, res.stderr, res.exception)
    return out


def table(out: str) -> list[list[str]]:
    """Rows of a table output (after the "Listing ..." line and the header)."""
    lines = [line for line in out.splitlines() if line and not line.startswith("Listing")]
    return [line.split("\t") for line in lines[1:]]


def test_done_when_scenario(node: Node, tmp_path: Path) -> None:
    vh = f"shop-{uuid.uuid4().hex[:6]}"
    ctl(node, "add_vhost", vh)
    ctl(node, "add_user", "shopper", "s3cret", "--tags", "management")
    ctl(node, "set_permissions", "-p", vh, "shopper", ".*", ".*", ".*")
    ctl(node, "declare_exchange", "-p", vh, "orders", "topic")
    ctl(node, "declare_queue", "-p", vh, "orders.eu")
    ctl(node, "bind", "-p", vh, "orders", "orders.eu", "--routing-key", "eu.#")

    assert [vh] in table(ctl(node, "list_vhosts").stdout)
    assert ["shopper", "[management]"] in table(ctl(node, "list_users").stdout)
    assert ["shopper", ".*", ".*", ".*"] in table(ctl(node, "list_permissions", "-p",
                                                      vh).stdout)
    assert ["orders", "topic"] in table(ctl(node, "list_exchanges", "-p", vh).stdout)
    assert ["exchange", "queue", "eu.#"] == table(ctl(
        node, "-p", vh, "list_bindings", "source_kind", "destination_kind", "routing_key"
    ).stdout)[-1]

    params = pika.ConnectionParameters("127.0.0.1", node.amqp_port, vh,
                                       pika.PlainCredentials("shopper", "s3cret"))
    with pika.BlockingConnection(params) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("orders", "eu.paris", b"order-1")
        ch.basic_publish("orders", "us.nyc", b"order-2")  # no binding: dropped

    out = ctl(node, "list_queues", "-p", vh, "name", "messages", "consumers").stdout
    assert out.splitlines()[0] == f"Listing queues for vhost {vh} ..."
    assert out.splitlines()[1] == "name\tmessages\tconsumers"
    assert ["orders.eu", "1", "0"] in table(out)

    target = tmp_path / "defs.json"
    ctl(node, "export_definitions", str(target))
    doc = json.loads(target.read_text())
    assert {"name": vh, "limits": {}, "metadata": {"description": "", "tags": []}} \
        in doc["vhosts"]
    assert "shopper" in [u["name"] for u in doc["users"]]
    assert {"name": "orders.eu", "vhost": vh, "durable": True, "auto_delete": False,
            "arguments": {}} in doc["queues"]
    assert {"source": "orders", "vhost": vh, "destination": "orders.eu",
            "destination_type": "queue", "routing_key": "eu.#", "arguments": {}} \
        in doc["bindings"]
    ctl(node, "delete_vhost", vh)
    ctl(node, "delete_user", "shopper")


def test_json_format_and_quiet(node: Node) -> None:
    rows = json.loads(run(node, "list_queues", "--format", "json", "name", "messages").stdout)
    assert isinstance(rows, list)
    rows = json.loads(run(node, "--format", "json", "list_vhosts", "name", "tags").stdout)
    assert {"name": "/", "tags": []} in rows
    out = run(node, "-q", "list_vhosts").stdout
    assert out.splitlines()[0] == "name"


def test_errors_are_one_line(node: Node) -> None:
    res = ctl(node, "delete_vhost", "no-such-vhost", check=False)
    assert res.returncode == 1
    assert res.stderr == "Error: vhost 'no-such-vhost' does not exist\n"
    res = ctl(node, "list_queues", "-p", "no-such-vhost", check=False)
    assert (res.returncode, res.stderr) == (1, "Error: vhost 'no-such-vhost' does not exist\n")
    res = ctl(node, "delete_queue", "missing-q", check=False)
    assert res.stderr == "Error: queue 'missing-q' in vhost '/' does not exist\n"
    res = ctl(node, "declare_exchange", "bad-x", "nope", check=False)
    assert res.stderr == "Error: unknown exchange type 'nope'\n"
    res = ctl(node, "--password", "wrong", "list_vhosts", check=False)
    assert (res.returncode, res.stderr) == (
        1, "Error: login failed for user 'guest' (HTTP 401): check --user and --password\n")
    res = ctl(node, "list_queues", "bogus", check=False)
    assert res.returncode == 64 and res.stderr.startswith("Error: unknown column(s): bogus;")
    dead = free_port()
    res = subprocess.run([*CTL_CMD, "--port", str(dead), "list_vhosts"], capture_output=True,
                         text=True, timeout=30, env=ctl_env())
    assert (res.returncode, res.stderr) == (
        69, f"Error: nothing listens on port {dead} on 127.0.0.1 (connection refused): is the "
            "broker running? the management port is 15672 by default\n")
    for r in (res,):
        assert "Traceback" not in r.stderr


def test_queue_exchange_policy_commands(node: Node) -> None:
    vh = f"ops-{uuid.uuid4().hex[:6]}"
    run(node, "add_vhost", vh, "--description", "ops")
    run(node, "-p", vh, "declare_queue", "q", "--arguments", '{"x-max-length": 5}')
    run(node, "-p", vh, "declare_exchange", "fx", "fanout", "--transient")
    run(node, "-p", vh, "bind", "fx", "q")
    run(node, "-p", vh, "set_policy", "lim", "^q$", '{"max-length": 3}', "--apply-to",
        "queues", "--priority", "2")
    assert [vh, "lim", "^q$", "queues", '{"max-length":3}', "2"] in table(
        run(node, "list_policies", "-p", vh).stdout)
    for _ in range(2):
        urllib.request.urlopen(urllib.request.Request(
            f"http://127.0.0.1:{node.http_port}/api/exchanges/{vh}/fx/publish",
            data=json.dumps({"properties": {}, "routing_key": "", "payload": "m",
                             "payload_encoding": "string"}).encode(), method="POST",
            headers={"Authorization": "Basic Z3Vlc3Q6Z3Vlc3Q=",
                     "Content-Type": "application/json"})).read()
    assert ["q", "2", "lim"] in table(run(node, "-p", vh, "list_queues", "name", "messages",
                                          "policy").stdout)
    run(node, "-p", vh, "purge_queue", "q")
    assert ["q", "0"] in table(run(node, "-p", vh, "list_queues").stdout)
    run(node, "-p", vh, "clear_policy", "lim")
    run(node, "-p", vh, "unbind", "fx", "q")
    res = run(node, "-p", vh, "unbind", "fx", "q", check=False)
    assert res.stderr.startswith("Error: no binding from exchange 'fx' to queue 'q'")
    run(node, "-p", vh, "delete_exchange", "fx")
    run(node, "-p", vh, "delete_queue", "q")
    assert table(run(node, "-p", vh, "list_queues").stdout) == []
    run(node, "delete_vhost", vh)


def test_user_commands(node: Node) -> None:
    user = f"u{uuid.uuid4().hex[:6]}"
    run(node, "add_user", user, "one")
    run(node, "set_user_tags", user, "monitoring", "policymaker")
    run(node, "change_password", user, "two")
    assert [user, "[monitoring, policymaker]"] in table(run(node, "list_users").stdout)
    whoami = run(node, "--user", user, "--password", "two", "--format", "json", "status")
    assert json.loads(whoami.stdout)["rabbitmq_version"] == "3.10.8"
    run(node, "set_permissions", user, "^x", "", ".*")
    assert [user, "^x", "", ".*"] in table(run(node, "list_permissions").stdout)
    run(node, "clear_permissions", user)
    res = run(node, "clear_permissions", user, check=False)
    assert res.stderr == f"Error: user '{user}' has no permissions in vhost '/'\n"
    run(node, "delete_user", user)
    res = run(node, "delete_user", user, check=False)
    assert res.stderr == f"Error: user '{user}' does not exist\n"


def test_connections_consumers_close(node: Node) -> None:
    params = pika.ConnectionParameters("127.0.0.1", node.amqp_port)
    conn = pika.BlockingConnection(params)
    try:
        ch = conn.channel()
        ch.queue_declare("ctl-consumed", exclusive=True)
        ch.basic_consume("ctl-consumed", lambda *a: None, consumer_tag="ctl-tag")
        conn.process_data_events(0.1)
        port = conn._impl._transport._sock.getsockname()[1]
        rows = table(run(node, "list_connections", "name", "user", "peer_port", "state").stdout)
        name = f"127.0.0.1:{port} -> 127.0.0.1:{node.amqp_port}"
        assert [name, "guest", str(port), "running"] in rows
        consumers = table(run(node, "list_consumers", "queue_name", "consumer_tag").stdout)
        assert ["ctl-consumed", "ctl-tag"] in consumers
        run(node, "close_connection", name, "go away")
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
            for _ in range(50):
                conn.process_data_events(0.05)
        assert info.value.reply_text == "CONNECTION_FORCED - go away"
    finally:
        if conn.is_open:
            conn.close()


def test_import_definitions_and_status(node: Node, tmp_path: Path) -> None:
    run(node, "import_definitions", str(FIXTURE))
    assert ["fixture-vh"] in table(run(node, "list_vhosts").stdout)
    params = pika.ConnectionParameters("127.0.0.1", node.amqp_port, "/",
                                       pika.PlainCredentials("narrow", "narrowpw"))
    with pika.BlockingConnection(params) as conn:
        conn.channel().queue_declare("n-ctl", auto_delete=True)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"vhosts": [{"name": "never"}],
                               "queues": [{"name": "q", "vhost": "nowhere"}]}))
    res = run(node, "import_definitions", str(bad), check=False)
    assert (res.returncode, res.stderr) == (
        1, "Error: queues[0] (name 'q' in vhost 'nowhere'): no vhost 'nowhere'\n")
    assert ["never"] not in table(run(node, "list_vhosts").stdout)
    out = run(node, "status").stdout
    assert f"amqp: 127.0.0.1:{node.amqp_port}" in out and "queues:" in out
    run(node, "delete_vhost", "fixture-vh")
    for user in ("fx-admin", "fx-app", "narrow", "noperm"):
        run(node, "delete_user", user)


def test_module_entry_point_runs() -> None:
    res = subprocess.run([sys.executable, "-m", "amqpqctl", "--help"],
                         capture_output=True, text=True, timeout=30, cwd=REPO)
    assert res.returncode == 0 and "list_queues" in res.stdout
    assert shutil.which(str(CTL))


def test_vhost_and_user_limit_commands(node: Node) -> None:
    vh = f"lim-{uuid.uuid4().hex[:6]}"
    run(node, "add_vhost", vh)
    run(node, "set_vhost_limits", "-p", vh, '{"max-connections": 10, "max-queues": 2}')
    out = json.loads(run(node, "--format", "json", "list_vhost_limits", "-p", vh).stdout)
    assert out == [{"vhost": vh, "limits": {"max-connections": 10, "max-queues": 2}}]
    assert any(r["vhost"] == vh for r in json.loads(
        run(node, "--format", "json", "list_vhost_limits", "--global").stdout))
    run(node, "clear_vhost_limits", "-p", vh)
    assert json.loads(run(node, "--format", "json", "list_vhost_limits", "-p", vh).stdout) == []

    user = f"lu-{uuid.uuid4().hex[:6]}"
    run(node, "add_user", user, "pw")
    run(node, "set_user_limits", user, '{"max-channels": 3, "max-connections": 1}')
    out = json.loads(run(node, "--format", "json", "list_user_limits", "--user", user).stdout)
    assert out == [{"user": user, "limits": {"max-channels": 3, "max-connections": 1}}]
    run(node, "clear_user_limits", user, "max-channels")
    out = json.loads(run(node, "--format", "json", "list_user_limits", "--user", user).stdout)
    assert out == [{"user": user, "limits": {"max-connections": 1}}]
    run(node, "clear_user_limits", user, "all")
    assert json.loads(run(node, "--format", "json", "list_user_limits", "--user",
                          user).stdout) == []
    run(node, "delete_user", user)
    run(node, "delete_vhost", vh)


@pytest.mark.parametrize(("args", "message"), [
    (("set_vhost_limits", "{not json"), "Error: limits is not valid JSON: {not json"),
    (("set_vhost_limits", "[1]"), "Error: limits must be a non-empty JSON object, got: [1]"),
    (("set_vhost_limits", '{"max-foo": 1}'),
     'Error: Validation failed Unrecognised terms [{<<"max-foo">>,1}] in limits'),
    (("set_user_limits", "nobody-here", '{"max-channels": 1}'),
     "Error: user 'nobody-here' does not exist"),
])
def test_limit_command_errors_are_one_line(node: Node, args: tuple[str, ...],
                                           message: str) -> None:
    res = ctl(node, *args, check=False)
    assert res.returncode == 1
    assert res.stderr.strip().splitlines() == [message]


def test_operator_policy_commands(node: Node) -> None:
    vh = f"opp-{uuid.uuid4().hex[:6]}"
    run(node, "add_vhost", vh)
    run(node, "-p", vh, "set_operator_policy", "cap", "^q", '{"max-length": 2}')
    assert [vh, "cap", "^q", "queues", '{"max-length":2}', "0"] in table(
        run(node, "list_operator_policies", "-p", vh).stdout)
    run(node, "-p", vh, "declare_queue", "q1", "--arguments", '{"x-max-length": 9}')
    got = json.loads(run(node, "--format", "json", "-p", vh, "list_queues", "name",
                         "operator_policy").stdout)
    assert got == [{"name": "q1", "operator_policy": "cap"}]
    res = ctl(node, "-p", vh, "set_operator_policy", "bad", ".*", '{"foo": 1}', check=False)
    assert res.returncode == 1
    assert res.stderr.strip() == ('Error: Validation failed [{<<"foo">>,1}] are not '
                                  'recognised policy settings')
    run(node, "-p", vh, "clear_operator_policy", "cap")
    res = ctl(node, "-p", vh, "clear_operator_policy", "cap", check=False)
    assert res.stderr.strip() == f"Error: operator policy 'cap' in vhost '{vh}' does not exist"
    run(node, "delete_vhost", vh)


# ---- failures reaching the API: one line on stderr, naming what was reached --------------


def bare_ctl(*args: str) -> subprocess.CompletedProcess[str]:
    """The installed ``amqpqctl ARGS``, no ``--port`` added."""
    res = subprocess.run([*CTL_CMD, *args], capture_output=True, text=True, timeout=30,
                         env=ctl_env())
    assert res.stdout == "" and res.stderr.count("\n") == 1, res.stderr
    return res


@contextmanager
def raw_server(reply: bytes | None) -> Iterator[int]:
    """A TCP port that reads a request, then sends ``reply`` and closes (None: never
    answers, keeping the connection open)."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        conns = []
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            conn.recv(65536)
            if reply is None:
                conns.append(conn)
                continue
            conn.sendall(reply)
            conn.close()
        for c in conns:
            c.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def test_the_amqp_port_by_mistake(node: Node) -> None:
    res = bare_ctl("--port", str(node.amqp_port), "list_queues")
    assert (res.returncode, res.stderr) == (
        69, f"Error: port {node.amqp_port} on 127.0.0.1 speaks AMQP, not HTTP: the management "
            "port is 15672 by default\n")


@pytest.mark.parametrize(("reply", "message"), [
    (b"AMQP\x00\x00\x09\x01", "speaks AMQP, not HTTP: the management port is 15672 by "
                                "default"),
    (b"SSH-2.0-OpenSSH_9.6\r\n", "does not speak HTTP (it answered 'SSH-2.0-OpenSSH_9.6\\r\\n'): "
                                 "the management port is 15672 by default"),
    (b"", "closed the connection without an HTTP answer (an AMQP or other non-HTTP port?): "
          "the management port is 15672 by default"),
])
def test_a_port_that_does_not_speak_http(reply: bytes, message: str) -> None:
    with raw_server(reply) as port:
        res = bare_ctl("--port", str(port), "list_vhosts")
    assert (res.returncode, res.stderr) == (69, f"Error: port {port} on 127.0.0.1 {message}\n")


def test_no_answer_within_the_timeout() -> None:
    with raw_server(None) as port:
        res = bare_ctl("--port", str(port), "--timeout", "0.5", "list_vhosts")
    assert (res.returncode, res.stderr) == (
        69, f"Error: no answer from http://127.0.0.1:{port} within 0.5s (--timeout): is the "
            "broker busy, or is this not its management port? (15672 by default)\n")


def test_an_answer_that_is_not_json() -> None:
    page = b"<html>hello</html>"
    reply = (b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: "
             + str(len(page)).encode() + b"\r\nConnection: close\r\n\r\n" + page)
    with raw_server(reply) as port:
        res = bare_ctl("--port", str(port), "list_vhosts")
    assert (res.returncode, res.stderr) == (
        1, f"Error: http://127.0.0.1:{port}/api/vhosts answered HTTP 200 with text/html, not "
           f"JSON: is http://127.0.0.1:{port} the management API? (port 15672 by default)\n")


def test_an_unknown_host() -> None:
    res = bare_ctl("--url", "http://no-such-host.invalid:15672", "list_vhosts")
    assert res.returncode == 69
    assert res.stderr.startswith("Error: cannot resolve host 'no-such-host.invalid': ")


@pytest.mark.parametrize(("args", "message"), [
    (("--port", "abc", "list_queues"),
     "Error: Invalid value for '-P' / '--port': 'abc' is not a valid integer. (see 'amqpqctl "
     "--help')"),
    (("no_such_command",), "Error: No such command 'no_such_command'. (see 'amqpqctl --help')"),
    (("list_queues", "--vhost"),
     "Error: Option '--vhost' requires an argument. (see 'amqpqctl list_queues --help')"),
])
def test_usage_errors_are_one_line(args: tuple[str, ...], message: str) -> None:
    res = bare_ctl(*args)
    assert (res.returncode, res.stderr) == (64, message + "\n")


@pytest.mark.parametrize(("command", "definition", "message"), [
    ("set_policy", '{"max-lenght": 5}',
     'Error: Validation failed [{<<"max-lenght">>,5}] are not recognised policy settings'),
    ("set_operator_policy", '{"max-length": 5, "ha-mode": "all"}',
     'Error: Validation failed [{<<"ha-mode">>,<<"all">>}] are not recognised policy settings'),
    ("set_policy", "{}", "Error: Validation failed no policy provided"),
])
def test_policy_with_an_unknown_key_is_refused(node: Node, command: str, definition: str,
                                               message: str) -> None:
    res = ctl(node, "-q", command, "p-unknown", ".*", definition, check=False)
    assert (res.returncode, res.stderr) == (1, message + "\n")
    kind = "operator_policies" if "operator" in command else "policies"
    assert "p-unknown" not in run(node, "-q", f"list_{kind}").stdout


def test_a_reader_that_leaves_early_is_not_an_error(node: Node) -> None:
    """``amqpqctl list_... | head``: the closed pipe ends the command quietly (no
    traceback, no error line; exit 1 as every click program)."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before anything is written
    try:
        res = subprocess.run([*CTL_CMD, "--port", str(node.http_port), "list_exchanges"],
                             stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=30,
                             env=ctl_env())
    finally:
        os.close(write_end)
    assert (res.returncode, res.stderr) == (1, "")


def test_await_startup_and_await_online_nodes(node: Node) -> None:
    """rabbitmqctl's await commands: at once when the node is up (one running node, itself,
    without a cluster); exit 75 (EX_TEMPFAIL) naming the last reason when time is up. That
    they wait for a node still starting is docs/operations.md's run
    (tests/test_operations_guide.py, make runbook)."""
    assert run(node, "await_startup").stdout == ""
    res = run(node, "await_online_nodes", "1")
    assert res.stdout == (f"Will wait for at least 1 nodes to join the cluster of "
                          f"http://127.0.0.1:{node.http_port}. Timeout: 300 seconds.\n")
    res = run(node, "-q", "await_online_nodes", "2", "-t", "0.5", check=False)
    assert res.returncode == 75
    assert res.stderr == (f"Error: operation await_online_nodes on node "
                          f"http://127.0.0.1:{node.http_port} timed out. Timeout value used: "
                          "500\n")
    nothing = free_port()
    res = bare_ctl("--port", str(nothing), "await_startup", "-t", "0.5")
    assert res.returncode == 75
    assert res.stderr.startswith(f"Error: operation await_startup on node "
                                 f"http://127.0.0.1:{nothing} timed out. Timeout value used: "
                                 f"500 (last: nothing listens on port {nothing}"), res.stderr
