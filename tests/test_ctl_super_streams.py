"""``amqpqctl add_super_stream`` / ``delete_super_stream`` (rabbitmq-streams' commands)
against a broker subprocess: the exchange, the partition streams and their bindings (with
``x-stream-partition-order``), publishing through the exchange into the partitions, the
options' errors, all-or-nothing creation, and deletion."""

from __future__ import annotations

import json
import time
import urllib.request
from base64 import b64encode
from typing import Any

import pika
import pytest

from tests import test_ctl
from tests.test_ctl import Node, run

# fixtures: the broker of the test_ctl*.py modules in a row (tests/support/shared_fixtures.py)
ctl_node, node = test_ctl.ctl_node, test_ctl.node


def api(node: Node, path: str) -> Any:
    req = urllib.request.Request(f"http://127.0.0.1:{node.http_port}/api/{path}", headers={
        "Authorization": "Basic " + b64encode(b"guest:guest").decode()})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.load(resp)


def test_partitions_are_streams_bound_in_order_and_receive_by_key(node: Node) -> None:
    run(node, "add_super_stream", "orders", "--partitions", "3", "--max-age", "1D")
    exchange = api(node, "exchanges/%2F/orders")
    assert (exchange["type"], exchange["arguments"]) == ("direct", {"x-super-stream": True})
    bindings = api(node, "exchanges/%2F/orders/bindings/source")
    assert sorted((b["arguments"]["x-stream-partition-order"], b["routing_key"],
                   b["destination"]) for b in bindings) == [
        (0, "0", "orders-0"), (1, "1", "orders-1"), (2, "2", "orders-2")]
    q = api(node, "queues/%2F/orders-1")
    assert q["type"] == "stream" and q["arguments"]["x-max-age"] == "1D"
    conn = pika.BlockingConnection(pika.URLParameters(
        f"amqp://guest:guest@127.0.0.1:{node.amqp_port}/%2F"))
    ch = conn.channel()
    ch.confirm_delivery()
    for key in ("0", "1", "1", "2", "2", "2"):
        ch.basic_publish("orders", key, key.encode(), mandatory=True)
    conn.close()
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        counts = [api(node, f"queues/%2F/orders-{i}")["messages"] for i in range(3)]
        if counts == [1, 2, 3]:
            break
        time.sleep(0.1)
    assert counts == [1, 2, 3]
    run(node, "delete_super_stream", "orders")
    names = {q["name"] for q in api(node, "queues/%2F")}
    assert not any(n.startswith("orders") for n in names)


def test_routing_keys_name_the_partitions(node: Node) -> None:
    run(node, "add_super_stream", "regions", "--routing-keys", "eu,us")
    bindings = api(node, "exchanges/%2F/regions/bindings/source")
    assert sorted((b["routing_key"], b["destination"]) for b in bindings) == [
        ("eu", "regions-eu"), ("us", "regions-us")]
    run(node, "delete_super_stream", "regions")


@pytest.mark.parametrize("args,message", [
    (["--partitions", "2", "--routing-keys", "a"], "Specify --partitions or --routing-keys"),
    (["--partitions", "0"], "--partitions must be a positive number"),
    (["--routing-keys", "a,a"], "--routing-keys must be distinct"),
    (["--max-age", "5X"], "invalid_max_age"),
])
def test_bad_options_fail_in_one_line_and_leave_nothing(node: Node, args: list[str],
                                                        message: str) -> None:
    res = run(node, "add_super_stream", "bad", *args, check=False)
    assert res.returncode != 0 and message in res.stderr and res.stderr.count("\n") == 1
    assert not any(e["name"] == "bad" for e in api(node, "exchanges/%2F"))
    assert not any(q["name"].startswith("bad-") for q in api(node, "queues/%2F"))


def test_delete_of_something_else_is_refused(node: Node) -> None:
    res = run(node, "delete_super_stream", "amq.direct", check=False)
    assert res.returncode != 0 and "is not a super stream" in res.stderr
    res = run(node, "delete_super_stream", "nothing-here", check=False)
    assert res.returncode != 0 and "nothing-here" in res.stderr


def test_an_existing_name_is_refused_and_kept(node: Node) -> None:
    run(node, "declare_exchange", "taken", "direct")
    res = run(node, "add_super_stream", "taken", "--partitions", "2", check=False)
    assert res.returncode != 0 and "exchange 'taken' in vhost '/' already exists" in res.stderr
    assert any(e["name"] == "taken" for e in api(node, "exchanges/%2F"))  # not rolled back
    assert not any(q["name"].startswith("taken-") for q in api(node, "queues/%2F"))
    run(node, "delete_exchange", "taken")
