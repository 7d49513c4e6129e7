"""Access changes over HTTP in a cluster are deltas ordered through etcd (issue #31 item 3):
two changes made at once on two nodes both survive on every node, the answers keep their
status codes, and neither etcd nor a log holds a plain password. Real etcd (TLS, auth) and
three real nodes; skipped without etcd (``make etcd-deps``)."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pika
import pytest

from broker.config import EtcdOptions
from tests.support.broker_process import BrokerProcess
from tests.support.cluster import api, wait_until
from tests.support.cluster_fixtures import on_the_shared_cluster
from tests.support.etcd import ETCD, Etcd

pytest.importorskip("aetcd")
pytestmark = pytest.mark.skipif(ETCD is None, reason="etcd not installed (make etcd-deps)")


# the cluster test_cluster.py and test_cluster_access.py share (tests/support/
# cluster_fixtures.py): every name here is the module's own, no node is stopped
etcd, nodes = on_the_shared_cluster()


def call(node: BrokerProcess, path: str, method: str = "GET", body: Any = None
         ) -> tuple[int, Any]:
    """``(status, JSON body or None)`` of a management API request as guest."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{node.management_port}{path}", data=data,
                                 method=method)
    req.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    req.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=15) as resp:
            raw, status = resp.read(), resp.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read(), exc.code
    return status, json.loads(raw) if raw else None


def at_once(*requests: tuple[BrokerProcess, str, str, Any]) -> list[int]:
    """Send the requests from one thread each, released together; their statuses."""
    barrier = threading.Barrier(len(requests))
    statuses: list[int] = [0] * len(requests)

    def run(i: int) -> None:
        node, path, method, body = requests[i]
        barrier.wait()
        statuses[i] = call(node, path, method, body)[0]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return statuses


def users(node: BrokerProcess) -> set[str]:
    return {u["name"] for u in api(node, "/api/users")}


def test_two_users_created_at_once_on_two_nodes_both_survive_everywhere(
        nodes: list[BrokerProcess]) -> None:
    n1, n2, _ = nodes
    expected: set[str] = set()
    for round_ in range(10):
        a, b = f"alice{round_}", f"bob{round_}"
        statuses = at_once((n1, f"/api/users/{a}", "PUT", {"password": "pw", "tags": ""}),
                           (n2, f"/api/users/{b}", "PUT", {"password": "pw", "tags": ""}))
        assert statuses == [201, 201]
        expected |= {a, b}
        # answered once the asking node applied it: already there on the node asked
        assert {a} <= users(n1) and {b} <= users(n2)
    for node in nodes:
        wait_until(lambda node=node: expected <= users(node), f"every user on {node}")


def test_a_permission_on_one_node_and_a_user_on_another_at_once_both_survive(
        nodes: list[BrokerProcess]) -> None:
    n1, n2, n3 = nodes
    assert call(n1, "/api/vhosts/shop", "PUT", {})[0] == 201
    assert call(n1, "/api/users/carol", "PUT", {"password": "pw", "tags": ""})[0] == 201
    statuses = at_once(
        (n1, "/api/permissions/shop/carol", "PUT",
         {"configure": ".*", "write": ".*", "read": ".*"}),
        (n2, "/api/users/dave", "PUT", {"password": "pw", "tags": "management"}),
        (n3, "/api/policies/shop/ttl", "PUT", {"pattern": ".*", "definition":
                                               {"message-ttl": 1000}}))
    assert statuses == [201, 201, 201]
    for node in nodes:
        wait_until(lambda node=node: call(node, "/api/permissions/shop/carol")[0] == 200
                   and "dave" in users(node)
                   and call(node, "/api/policies/shop/ttl")[0] == 200,
                   f"the permission, the user and the policy on {node}")
    conn = pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", n3.port, "shop", pika.PlainCredentials("carol", "pw")))
    conn.close()  # the permission and the password work on a third node


def test_status_codes_are_those_of_one_node(nodes: list[BrokerProcess]) -> None:
    n1, n2, n3 = nodes
    assert call(n1, "/api/users/erin", "PUT", {"password": "pw", "tags": ""})[0] == 201
    assert call(n2, "/api/users/erin", "PUT", {"password": "pw2", "tags": "x"})[0] == 204
    assert call(n3, "/api/permissions/%2F/nobody", "PUT",
                {"configure": "", "write": "", "read": ""}) == \
        (400, {"error": "bad_request", "reason": "vhost_or_user_not_found"})
    assert call(n3, "/api/permissions/%2F/erin", "PUT",
                {"configure": "(", "write": "", "read": ""})[0] == 400
    assert call(n1, "/api/users/erin", "DELETE")[0] == 204
    wait_until(lambda: "erin" not in users(n2), "erin gone from n2")
    assert call(n2, "/api/users/erin", "DELETE")[0] == 404
    assert call(n2, "/api/vhosts/tmp", "PUT", {"description": "d"})[0] == 201
    assert call(n1, "/api/vhosts/tmp", "PUT", {"description": "e"})[0] == 204
    wait_until(lambda: api(n3, "/api/vhosts/tmp")["description"] == "e", "description on n3")
    assert call(n3, "/api/vhosts/tmp", "DELETE")[0] == 204
    assert call(n3, "/api/vhosts/tmp", "DELETE")[0] == 404


def test_deltas_carry_no_plain_password(nodes: list[BrokerProcess], etcd: Etcd) -> None:
    secret = "Plain-Sekrit-7731"
    assert call(nodes[0], "/api/users/frank", "PUT", {"password": secret, "tags": ""})[0] \
        == 201
    assert call(nodes[1], "/api/permissions/%2F/frank", "PUT",
                {"configure": "", "write": "", "read": ".*"})[0] == 201
    wait_until(lambda: call(nodes[2], "/api/permissions/%2F/frank")[0] == 200, "frank on n3")

    async def values() -> list[bytes]:
        from amqp_server.cluster.etcd_client import open_client

        args = dict(zip(etcd.args[::2], etcd.args[1::2], strict=True))
        client = open_client(EtcdOptions(
            etcd.url, args["--cluster-etcd-cacert"], args["--cluster-etcd-cert"],
            args["--cluster-etcd-key"], args["--cluster-etcd-user"],
            Path(args["--cluster-etcd-password-file"]), 5))
        await client.connect()
        try:
            return [bytes(kv.value) for kv in await client.get_prefix(b"/amqpq/")]
        finally:
            await client.close()

    stored = asyncio.run(values())
    assert any(b"frank" in v and b"put_user" in v for v in stored)  # the delta is there
    assert not any(secret.encode() in v for v in stored)
    for node in nodes:
        assert secret not in node.log_path.read_text()
    conn = pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", nodes[2].port, "/", pika.PlainCredentials("frank", secret)))
    conn.close()


def test_a_vhost_limit_and_a_user_limit_at_once_both_survive(
        nodes: list[BrokerProcess]) -> None:
    n1, n2, n3 = nodes
    assert call(n1, "/api/vhosts/limited", "PUT", {})[0] == 201
    assert call(n1, "/api/users/gina", "PUT", {"password": "pw", "tags": ""})[0] == 201
    statuses = at_once((n1, "/api/vhost-limits/limited/max-queues", "PUT", {"value": 7}),
                       (n2, "/api/user-limits/gina/max-connections", "PUT", {"value": 3}))
    assert statuses == [204, 204]
    for node in nodes:
        wait_until(lambda node=node: api(node, "/api/vhost-limits/limited")
                   == [{"vhost": "limited", "value": {"max-queues": 7}}]
                   and api(node, "/api/user-limits/gina")
                   == [{"user": "gina", "value": {"max-connections": 3}}],
                   f"both limits on {node}")
    assert call(n3, "/api/vhost-limits/limited/max-queues", "PUT", {"value": "x"})[0] == 400
    assert call(n3, "/api/user-limits/nobody/max-connections", "PUT", {"value": 1}) == \
        (400, {"error": "bad_request", "reason": ["no_such_user", "nobody"]})
    assert call(n2, "/api/vhost-limits/limited/max-queues", "DELETE")[0] == 204
    wait_until(lambda: api(n1, "/api/vhost-limits/limited") == [], "limit cleared on n1")
