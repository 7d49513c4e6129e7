"""``amqpqctl`` list commands as rabbitmqctl prints them: ``list_channels`` and
``list_consumers`` with rabbitmqctl's columns, the ``--formatter`` values (table,
pretty_table, csv, json), ``--no-table-headers``, ``-q``, ``-s``, whole API objects in JSON,
any field of the API's queue object as a ``list_queues`` column, and one vhost's
definitions (``export_definitions -p``, ``import_definitions -p``).

Against a broker subprocess, with pika holding channels and consumers open; the commands
run in-process (click's CliRunner) as in ``test_ctl.py``.

Source: https://www.rabbitmq.com/docs/man/rabbitmqctl.8 (compared with rabbitmqctl 3.10.8).
"""

from __future__ import annotations

import csv
import io
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from tests import test_ctl
from tests.test_ctl import Node, run, table

# fixtures: the broker of the test_ctl*.py modules in a row (tests/support/shared_fixtures.py)
ctl_node, node = test_ctl.ctl_node, test_ctl.node


@dataclass
class Client:
    """A pika connection with three channels: 1 consumes (prefetch 7, one message
    unacknowledged), 2 is in confirm mode, 3 in a transaction."""

    conn: pika.BlockingConnection
    name: str  # the connection's name in the management API
    queue: str
    consuming: BlockingChannel


@pytest.fixture
def client(node: Node) -> Iterator[Client]:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", node.amqp_port))
    queue = f"ctl-list-{uuid.uuid4().hex[:6]}"
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=7)
        ch.queue_declare(queue, exclusive=True)
        ch.basic_publish("", queue, b"held")
        ch.basic_consume(queue, lambda *a: None, consumer_tag="list-tag",
                         arguments={"x-priority": 3})
        conn.channel().confirm_delivery()
        conn.channel().tx_select()
        conn.process_data_events(0.2)
        port = conn._impl._transport._sock.getsockname()[1]
        yield Client(conn, f"127.0.0.1:{port} -> 127.0.0.1:{node.amqp_port}", queue, ch)
    finally:
        if conn.is_open:
            conn.close()


def rows_of(out: str, key: str) -> list[list[str]]:
    """Table rows (after the banner and header) whose first cell contains ``key``."""
    return [r for r in table(out) if key in r[0]]


def test_list_channels_default_columns_as_rabbitmqctl(node: Node, client: Client) -> None:
    out = run(node, "list_channels").stdout
    lines = out.splitlines()
    assert lines[:2] == ["Listing channels ...",
                         "pid\tuser\tconsumer_count\tmessages_unacknowledged"]
    assert rows_of(out, client.name) == [[f"{client.name} (1)", "guest", "1", "1"],
                                         [f"{client.name} (2)", "guest", "0", "0"],
                                         [f"{client.name} (3)", "guest", "0", "0"]]


def test_list_channels_every_rabbitmqctl_column(node: Node, client: Client) -> None:
    columns = ["pid", "connection", "name", "number", "user", "vhost", "transactional",
               "confirm", "consumer_count", "messages_unacknowledged", "messages_uncommitted",
               "acks_uncommitted", "messages_unconfirmed", "prefetch_count",
               "global_prefetch_count"]
    got = json.loads(run(node, "list_channels", "--formatter", "json", *columns).stdout)
    mine = [c for c in got if c["connection"] == client.name]
    assert [list(c) for c in mine] == [columns] * 3
    first, confirm, tx = mine
    assert (first["pid"], first["name"], first["number"], first["prefetch_count"]) == (
        f"{client.name} (1)", f"{client.name} (1)", 1, 7)
    assert (first["vhost"], first["confirm"], first["transactional"]) == ("/", False, False)
    assert (confirm["confirm"], confirm["transactional"]) == (True, False)
    assert (tx["confirm"], tx["transactional"]) == (False, True)


def test_list_channels_of_one_vhost(node: Node, client: Client) -> None:
    vh = f"chv-{uuid.uuid4().hex[:6]}"
    run(node, "add_vhost", vh)
    try:
        assert run(node, "list_channels", "-q", "-p", vh).stdout.splitlines() == [
            "pid\tuser\tconsumer_count\tmessages_unacknowledged"]
        assert len(rows_of(run(node, "-p", "/", "list_channels").stdout, client.name)) == 3
    finally:
        run(node, "delete_vhost", vh)
    res = run(node, "list_channels", "-p", "no-such-vh", check=False)
    assert (res.returncode, res.stderr) == (1, "Error: vhost 'no-such-vh' does not exist\n")


def test_list_consumers_columns_as_rabbitmqctl(node: Node, client: Client) -> None:
    out = run(node, "list_consumers").stdout
    assert out.splitlines()[:2] == [
        "Listing consumers in vhost / ...",
        "queue_name\tchannel_pid\tconsumer_tag\tack_required\tprefetch_count\tactive\targuments"]
    assert [client.queue, f"{client.name} (1)", "list-tag", "true", "7", "true",
            '{"x-priority":3}'] in table(out)
    out = run(node, "list_consumers", "queue_name", "activity_status", "channel_pid").stdout
    assert [client.queue, "up", f"{client.name} (1)"] in table(out)


def test_formatters(node: Node, client: Client) -> None:
    args = ("list_consumers", "queue_name", "consumer_tag", "ack_required")
    mine = [client.queue, "list-tag", "true"]

    got = list(csv.reader(io.StringIO(run(node, "--formatter", "csv", *args).stdout)))
    assert got[0] == ["queue_name", "consumer_tag", "ack_required"] and mine in got
    raw = run(node, *args, "--formatter", "csv").stdout
    assert f'"{client.queue}","list-tag","true"' in raw.splitlines()  # every cell quoted

    pretty = run(node, *args, "--formatter", "pretty_table").stdout.splitlines()
    assert pretty[0] == "Listing consumers in vhost / ..."
    assert pretty[1].startswith("┌") and pretty[-1].startswith("└")
    assert [c.strip() for c in pretty[2].strip("│").split("│")] == [
        "queue_name", "consumer_tag", "ack_required"]
    assert f"│ {client.queue} │ list-tag     │ true         │" in pretty

    got = json.loads(run(node, "--format", "json", *args).stdout)
    assert {"queue_name": client.queue, "consumer_tag": "list-tag",
            "ack_required": True} in got

    res = run(node, *args, "--formatter", "xml", check=False)
    assert res.returncode != 0 and "'xml' is not one of" in res.stderr


def test_json_without_columns_gives_whole_objects(node: Node, client: Client) -> None:
    consumers = json.loads(run(node, "list_consumers", "--formatter", "json").stdout)
    mine = next(c for c in consumers if c["queue_name"] == client.queue)
    assert mine["queue"] == {"name": client.queue, "vhost": "/"}
    assert mine["channel_details"]["connection_name"] == client.name
    assert mine["arguments"] == {"x-priority": 3} and mine["exclusive"] is False
    queues = json.loads(run(node, "--formatter", "json", "list_queues").stdout)
    q = next(q for q in queues if q["name"] == client.queue)
    assert (q["exclusive"], q["durable"], q["consumers"], q["messages_unacknowledged"]) == (
        True, False, 1, 1)
    channels = json.loads(run(node, "list_channels", "--formatter", "json").stdout)
    ch = next(c for c in channels if c["pid"] == f"{client.name} (1)")
    assert ch["connection_details"]["name"] == client.name and ch["state"] == "running"
    users = json.loads(run(node, "list_users", "--formatter", "json").stdout)
    assert {"user": "guest", "name": "guest", "tags": ["administrator"]}.items() <= \
        users[0].items()
    assert "password_hash" not in users[0]


def test_headers_quiet_silent(node: Node, client: Client) -> None:
    header = "pid\tuser\tconsumer_count\tmessages_unacknowledged"
    full = run(node, "list_channels").stdout.splitlines()
    assert full[:2] == ["Listing channels ...", header]
    for args, expected in [
        (("list_channels", "--no-table-headers"), ["Listing channels ...", *full[2:]]),
        (("--no-table-headers", "list_channels"), ["Listing channels ...", *full[2:]]),
        (("list_channels", "-q"), [header, *full[2:]]),
        (("-q", "list_channels"), [header, *full[2:]]),
        (("list_channels", "--quiet"), [header, *full[2:]]),
        (("list_channels", "-s"), full[2:]),
        (("--silent", "list_channels"), full[2:]),
    ]:
        assert run(node, *args).stdout.splitlines() == expected, args
    csv_silent = run(node, "list_channels", "-s", "--formatter", "csv").stdout.splitlines()
    assert len(csv_silent) == len(full) - 2 and not csv_silent[0].startswith('"pid"')
    # quiet/silent also drop progress lines
    vh = f"q-{uuid.uuid4().hex[:6]}"
    assert run(node, "add_vhost", vh).stdout == f'Adding vhost "{vh}" ...\n'
    assert run(node, "delete_vhost", vh, "-s").stdout == ""


def test_list_queues_takes_any_field_of_the_api(node: Node, client: Client) -> None:
    """rabbitmqctl's columns, the API's newer ones (messages_paged_out), any other key of
    the API's queue object (messages_details) and dotted paths into nested ones."""
    columns = ["name", "messages", "messages_ram", "messages_paged_out",
               "message_bytes_paged_out", "messages_unacknowledged", "messages_details",
               "message_stats.publish", "pid"]
    got = json.loads(run(node, "list_queues", "--formatter", "json", *columns).stdout)
    q = next(r for r in got if r["name"] == client.queue)
    assert list(q) == columns
    assert (q["messages"], q["messages_unacknowledged"], q["messages_paged_out"],
            q["message_bytes_paged_out"], q["message_stats.publish"]) == (1, 1, 0, 0, 1)
    assert q["messages_ram"] == 1 and "rate" in q["messages_details"]
    assert q["pid"] is None  # an Erlang process id: amqpq has none
    out = run(node, "list_queues", "name", "messages_paged_out", "message_stats.publish").stdout
    assert [client.queue, "0", "1"] in table(out)
    res = run(node, "list_queues", "name", "no_such_field", check=False)
    assert res.returncode == 64
    assert res.stderr.startswith("Error: unknown column(s): no_such_field; known: ")


def test_definitions_of_one_vhost(node: Node, tmp_path: Path) -> None:
    src, dst = f"exp-{uuid.uuid4().hex[:6]}", f"imp-{uuid.uuid4().hex[:6]}"
    for vh in (src, dst):
        run(node, "add_vhost", vh)
    try:
        run(node, "-p", src, "declare_queue", "only-here")
        run(node, "-p", src, "declare_exchange", "x-here", "fanout")
        run(node, "-p", src, "bind", "x-here", "only-here")
        run(node, "declare_queue", "in-default-vhost", "--transient")
        doc = json.loads(run(node, "export_definitions", "-", "-p", src).stdout)
        assert "vhosts" not in doc and "users" not in doc and "permissions" not in doc
        assert [q["name"] for q in doc["queues"]] == ["only-here"]
        assert [x["name"] for x in doc["exchanges"]] == ["x-here"]
        assert [(b["source"], b["destination"]) for b in doc["bindings"]] == [
            ("x-here", "only-here")]
        # -p before the command name scopes it too
        assert json.loads(run(node, "-p", src, "export_definitions", "-").stdout) == doc
        # without -p: the whole broker
        everything = json.loads(run(node, "export_definitions", "-").stdout)
        assert {src, dst} <= {v["name"] for v in everything["vhosts"]}

        path_ = tmp_path / f"{src}.json"
        path_.write_text(json.dumps(doc))
        out = run(node, "import_definitions", str(path_), "-p", dst).stdout
        assert out == f'Importing definitions in JSON from a file at "{path_}" ...\n'
        assert ["only-here", "0"] in table(run(node, "list_queues", "-p", dst).stdout)
        assert ["x-here", "fanout"] in table(run(node, "list_exchanges", "-p", dst).stdout)
        res = run(node, "export_definitions", "-", "-p", "no-such-vh", check=False)
        assert (res.returncode, res.stderr) == (1, "Error: vhost 'no-such-vh' does not exist\n")
    finally:
        for vh in (src, dst):
            run(node, "delete_vhost", vh)
        run(node, "delete_queue", "in-default-vhost")
