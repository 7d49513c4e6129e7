"""``/api/health/checks/*`` against the in-process management API: statuses and bodies as
RabbitMQ 3.10.8 answers them (copied with curl from the reference), and a comparison with the
reference's answers when it runs on 127.0.0.1:15672 (skipped otherwise).

Reference: https://www.rabbitmq.com/docs/monitoring#health-checks.
"""

from __future__ import annotations

import datetime
import subprocess
from pathlib import Path

import pytest
import test_management_api
from test_management_api import REFERENCE, InProcessBroker, _reference_up, http

from broker.alarms import Alarms

BASE = "/api/health/checks"
node = test_management_api.node  # fixture: this module's own in-process broker
BAD_UNIT = "Time unit not recognised. Supported units: days, weeks, months, years."


def get(node: InProcessBroker, path: str, auth: tuple[str, str] = ("guest", "guest")
        ) -> tuple[int, object]:
    r = http(node.url, "GET", BASE + path, auth=auth)
    return r.status, r.json


def test_alarms_ok(node: InProcessBroker) -> None:
    assert get(node, "/alarms") == (200, {"status": "ok"})
    assert get(node, "/local-alarms") == (200, {"status": "ok"})


def test_alarms_in_effect(node: InProcessBroker) -> None:
    assert node.server is not None
    alarms = node.server.broker.alarms
    assert isinstance(alarms, Alarms)
    limit = alarms.limit

    def set_both() -> None:
        alarms.limit = 1  # the periodic check keeps the memory alarm on
        alarms.write_failed(True)  # and the disk alarm, until the writes succeed
        alarms.check()

    def clear() -> None:
        alarms.limit = limit
        alarms.write_failed(False)
        alarms.check()

    node.run(set_both)
    try:
        both = [{"node": _node_name(node), "resource": "disk space"},
                {"node": _node_name(node), "resource": "memory"}]
        assert get(node, "/alarms") == (503, {
            "alarms": both, "reason": "There are alarms in effect in the cluster",
            "status": "failed"})
        assert get(node, "/local-alarms") == (503, {
            "alarms": both, "reason": "There are alarms in effect on the node",
            "status": "failed"})
    finally:
        node.run(clear)
    assert get(node, "/alarms") == (200, {"status": "ok"})


def _node_name(node: InProcessBroker) -> str:
    return str(http(node.url, "GET", "/api/overview").json["node"])


def test_port_listener(node: InProcessBroker) -> None:
    assert get(node, f"/port-listener/{node.amqp_port}") == (
        200, {"status": "ok", "port": node.amqp_port})
    assert get(node, f"/port-listener/0{node.http_port}") == (
        200, {"status": "ok", "port": node.http_port})
    assert get(node, "/port-listener/1") == (503, {
        "status": "failed", "reason": "No active listener", "missing": 1,
        "ports": [node.http_port, node.amqp_port]})
    assert get(node, "/port-listener/abc") == (
        400, {"error": "bad_request", "reason": "Invalid port"})


@pytest.mark.parametrize("name,normalised", [
    ("amqp", "amqp"), ("AMQP", "amqp"), ("amqp091", "amqp"), ("amqp0-9-1", "amqp"),
    ("amqp1.0", "amqp"), ("http", "http"), ("management", "http"), ("http1.1", "http"),
])
def test_protocol_listener_ok(node: InProcessBroker, name: str, normalised: str) -> None:
    assert get(node, f"/protocol-listener/{name}") == (
        200, {"status": "ok", "protocol": normalised})


@pytest.mark.parametrize("name,missing", [
    ("amqps", "amqp/ssl"), ("https", "https"), ("mqtt", "mqtt"), ("foo", "foo"),
    ("amqp+tls", "amqp+tls"), ("cli", "clustering"),
])
def test_protocol_listener_missing(node: InProcessBroker, name: str, missing: str) -> None:
    assert get(node, f"/protocol-listener/{name}") == (503, {
        "status": "failed", "reason": "No active listener", "missing": missing,
        "protocols": ["http", "amqp"]})


def test_virtual_hosts(node: InProcessBroker) -> None:
    assert get(node, "/virtual-hosts") == (200, {"status": "ok"})


@pytest.mark.parametrize("path,status,body", [
    ("/1/weeks", 200, {"status": "ok"}),
    ("/1/DAYS", 200, {"status": "ok"}),
    ("/-1/days", 200, {"status": "ok"}),
    ("/3/months", 200, {"status": "ok"}),
    ("/1/years", 200, {"status": "ok"}),
    ("/1/fortnights", 400, {"error": "bad_request", "reason": BAD_UNIT}),
    ("/1/day", 400, {"error": "bad_request", "reason": BAD_UNIT}),
    ("/abc/days", 400, {"error": "bad_request", "reason": "Invalid expiration value."}),
    ("/abc/fortnights", 400, {"error": "bad_request", "reason": "Invalid expiration value."}),
    ("/1.5/days", 400, {"error": "bad_request", "reason": "Invalid expiration value."}),
])
def test_certificate_expiration_without_tls(node: InProcessBroker, path: str, status: int,
                                            body: dict[str, str]) -> None:
    assert get(node, "/certificate-expiration" + path) == (status, body)


def test_certificate_expiry_date(tmp_path: Path) -> None:
    from management.routes.health import certificate_not_after

    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    try:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days",
                        "10", "-subj", "/CN=t", "-keyout", str(key), "-out", str(cert)],
                       check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("openssl not available")
    left = certificate_not_after(str(cert)) - datetime.datetime.now(datetime.UTC)
    assert datetime.timedelta(days=9) < left <= datetime.timedelta(days=10)


def test_authorisation(node: InProcessBroker) -> None:
    def add(name: str, tags: str) -> None:
        r = http(node.url, "PUT", f"/api/users/{name}", {"password": "pw", "tags": tags})
        assert r.status in (201, 204)

    add("hc_none", "")
    add("hc_mgmt", "management")
    assert get(node, "/alarms", ("hc_none", "pw")) == (
        401, {"error": "not_authorised", "reason": "Not management user"})
    assert get(node, "/alarms", ("hc_mgmt", "pw")) == (200, {"status": "ok"})
    assert get(node, "/alarms", ("guest", "wrong")) == (
        401, {"error": "not_authorized", "reason": "Login failed"})


def test_one_node_is_never_quorum_critical(node: InProcessBroker) -> None:
    """RabbitMQ 3.10.8's answer on a single node (cluster nodes:
    tests/test_cluster_membership.py); rebalancing has nothing to move: 204 as RabbitMQ."""
    assert get(node, "/node-is-quorum-critical") == (
        200, {"status": "ok", "reason": "single node cluster"})
    assert http(node.url, "POST", "/api/rebalance/queues", {}).status == 204


# ---- against the reference RabbitMQ ------------------------------------------------------


@pytest.mark.reference
@pytest.mark.parametrize("path", [
    "/alarms", "/local-alarms", "/virtual-hosts", "/port-listener/abc", "/port-listener/1",
    "/protocol-listener/amqp", "/protocol-listener/amqp091", "/protocol-listener/http",
    "/protocol-listener/amqps", "/protocol-listener/foo", "/certificate-expiration/1/weeks",
    "/certificate-expiration/1/fortnights", "/certificate-expiration/abc/days",
    "/node-is-quorum-critical",
])
def test_same_answers_as_rabbitmq(node: InProcessBroker, path: str) -> None:
    if not _reference_up():
        pytest.skip("reference RabbitMQ not reachable at " + REFERENCE)
    ours, theirs = http(node.url, "GET", BASE + path), http(REFERENCE, "GET", BASE + path)
    assert ours.status == theirs.status
    mine, ref = dict(ours.json), dict(theirs.json)
    if "ports" in ref:  # the listeners differ: RabbitMQ's 25672 and its fixed ports
        assert set(ref["ports"]) >= {5672, 15672}
        mine.pop("ports"), ref.pop("ports")
    if "protocols" in ref:  # RabbitMQ also lists "clustering" (25672), which amqpq has not
        assert [p for p in ref.pop("protocols") if p != "clustering"] == mine.pop("protocols")
    assert mine == ref
