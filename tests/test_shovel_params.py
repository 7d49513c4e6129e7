"""Shovel parameter validation: RabbitMQ 3.10.8's texts (recorded with curl against the
reference broker with rabbitmq_shovel), sans-IO through :mod:`shovel.params`, over amqpq's
HTTP API, and the same requests against the reference RabbitMQ when it runs with the shovel
plugin (skipped otherwise: ``make reference-rabbitmq``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shovel.params import ShovelParamError, endpoint, mask_uri, parse, validate
from tests.support.broker_process import BrokerProcess, free_port
from tests.support.http import http

REFERENCE_HTTP = "http://127.0.0.1:15672"
OK = {"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://", "dest-queue": "b"}

#: (parameter value, 400 reason after "Validation failed\n\n", HTML-escaped as sent)
CASES: list[tuple[Any, str]] = [
    ({}, "Must specify 'src-exchange' or 'src-queue'\nKey \"dest-uri\" not found in s\n"
         "Key \"src-uri\" not found in s\n"),
    ({"src-uri": "amqp://", "dest-uri": "amqp://"},
     "Must specify 'src-exchange' or 'src-queue'\n"),
    ({**OK, "ack-mode": "bogus"},
     "ack-mode should be one of [&lt;&lt;\"no-ack\"&gt;&gt;,&lt;&lt;\"on-publish\"&gt;&gt;,"
     "&lt;&lt;\"on-confirm\"&gt;&gt;], actually was &lt;&lt;\"bogus\"&gt;&gt;\n"),
    ({**OK, "src-uri": "foo://x"},
     "\"foo://x\" not a valid URI: {{unexpected_uri_scheme,\"foo\"},\"foo://x\"}\n"),
    ({**OK, "src-exchange": "x"}, "Cannot specify 'src-exchange' and 'src-queue'\n"),
    ({**OK, "dest-exchange": "x"}, "Cannot specify 'dest-exchange' and 'dest-queue'\n"),
    ({**OK, "src-prefetch-count": "x", "reconnect-delay": "y"},
     "src-prefetch-count should be a number, actually was &lt;&lt;\"x\"&gt;&gt;\n"
     "reconnect-delay should be a number, actually was &lt;&lt;\"y\"&gt;&gt;\n"),
    ({**OK, "src-delete-after": "sometimes"},
     "src-delete-after should be a number greater than or equal to 0, \"never\" or "
     "\"queue-length\", actually was &lt;&lt;\"sometimes\"&gt;&gt;\n"),
    ({**OK, "dest-add-forward-headers": "yes", "dest-publish-properties": 5, "foo": 1},
     "Unrecognised terms [{&lt;&lt;\"foo\"&gt;&gt;,1}] in s\n"
     "dest-publish-properties not a list 5\n"
     "dest-add-forward-headers should be boolean, actually was &lt;&lt;\"yes\"&gt;&gt;\n"),
    ({**OK, "src-delete-after": -1, "dest-add-timestamp-header": 1},
     "dest-add-timestamp-header should be boolean, actually was 1\n"
     "src-delete-after should be a number greater than or equal to 0, \"never\" or "
     "\"queue-length\", actually was -1\n"),
    ({**OK, "src-queue": 5}, "src-queue should be binary, actually was 5\n"),
    ({**OK, "ack-mode": "no-ack", "src-delete-after": 5},
     "Cannot specify 'no-ack' and numerical 'delete-after'\n"),
    ({**OK, "src-uri": 5}, "src-uri should be list, actually was 5\n"),
    ({"src-uri": "amqp://", "src-exchange-key": "k", "dest-uri": "amqp://", "dest-queue": "b"},
     "Must specify 'src-exchange' or 'src-queue'\n"),
]

#: values RabbitMQ accepts (201)
ACCEPTED: list[dict[str, Any]] = [
    OK,
    {"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://"},
    {"src-uri": [], "src-queue": "a", "dest-uri": "amqp://", "dest-queue": "b"},
    {"src-uri": "amqp://", "src-exchange": "amq.direct", "dest-uri": "amqp://",
     "dest-exchange": "amq.fanout", "dest-exchange-key": "k", "src-prefetch-count": -3},
    {**OK, "src-delete-after": 1000, "ack-mode": "on-publish", "reconnect-delay": 1.5,
     "dest-publish-properties": {"delivery_mode": 2}, "src-protocol": "amqp091"},
]


@pytest.mark.parametrize(("value", "reason"), CASES)
def test_texts(value: Any, reason: str) -> None:
    with pytest.raises(ShovelParamError) as caught:
        parse("/", "s", value)
    assert caught.value.reason == "Validation failed\n\n" + reason


@pytest.mark.parametrize("value", ACCEPTED)
def test_accepted(value: dict[str, Any]) -> None:
    assert validate("s", value) == []


def test_defaults_and_uris() -> None:
    spec = parse("v", "s", OK)
    assert (spec.prefetch, spec.ack_mode, spec.reconnect_delay) == (1000, "on-confirm", 5.0)
    assert spec.delete_after == "never" and spec.src_exchange_key == "#"
    assert mask_uri("amqp://u:p%40ss@host:5673/v?heartbeat=5") == "amqp://host:5673/v?heartbeat=5"
    assert mask_uri("amqp://") == "amqp://"
    ep = endpoint("amqps://u:p%2F@h/%2Fx")
    assert (ep.user, ep.password, ep.host, ep.port, ep.vhost, ep.local) == (
        "u", "p/", "h", 5671, "/x", False)
    assert endpoint("amqp://").local and endpoint("amqp://").vhost == "/"
    assert endpoint("amqp:///other").vhost == "other"


@pytest.fixture(scope="module")
def amqpq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp: Path = tmp_path_factory.mktemp("shovel_params")
    http = free_port()
    with BrokerProcess(tmp / "data", tmp / "broker.log", management=http):
        yield f"http://127.0.0.1:{http}"


def _reference() -> str:
    try:
        status, _ = http(REFERENCE_HTTP, "GET", "/api/shovels")
    except OSError:
        status = 0
    if status != 200:
        pytest.skip(f"reference RabbitMQ with rabbitmq_shovel_management not reachable at "
                    f"{REFERENCE_HTTP} (make reference-rabbitmq)")
    return REFERENCE_HTTP


def _check_all(base: str) -> None:
    for value, reason in CASES:
        status, body = http(base, "PUT", "/api/parameters/shovel/%2F/s", {"value": value})
        assert (status, body) == (400, {"error": "bad_request",
                                        "reason": "Validation failed\n\n" + reason}), value
    for i, value in enumerate(ACCEPTED):
        assert http(base, "PUT", f"/api/parameters/shovel/%2F/ok{i}",
                     {"value": value})[0] == 201, value
        assert http(base, "GET", f"/api/parameters/shovel/%2F/ok{i}")[1]["value"] == value
        assert http(base, "DELETE", f"/api/parameters/shovel/%2F/ok{i}")[0] == 204
    status, body = http(base, "PUT", "/api/parameters/shovel/%2F/s",
                         {"value": {**OK, "dest-uri": "amqp:///nosuchvhost"}})
    assert (status, body["reason"]) == (
        400, 'Validation failed\n\nuser "guest" may not connect to vhost "nosuchvhost"\n')


def test_http_api(amqpq: str) -> None:
    _check_all(amqpq)
    assert http(amqpq, "PUT", "/api/parameters/shovel/nosuch/s", {"value": OK})[0] == 404


@pytest.mark.reference
def test_http_api_reference() -> None:
    """The same requests against RabbitMQ 3.10.8 answer the same."""
    _check_all(_reference())


IMPORT_BAD = {"parameters": [{"vhost": "/", "component": "shovel", "name": "bad",
                              "value": {"src-uri": "amqp://"}}]}
IMPORT_REASON = ("Validation failed\n\nMust specify 'src-exchange' or 'src-queue'\n"
                 "Key \"dest-uri\" not found in bad\n (//shovel/bad)")


def test_definitions_import_validates_shovels(amqpq: str) -> None:
    status, body = http(amqpq, "POST", "/api/definitions", IMPORT_BAD)
    assert (status, body["reason"]) == (400, IMPORT_REASON)
    assert http(amqpq, "GET", "/api/parameters/shovel")[1] == []  # nothing imported


@pytest.mark.reference
def test_definitions_import_validates_shovels_reference() -> None:
    base = _reference()
    status, body = http(base, "POST", "/api/definitions", IMPORT_BAD)
    assert (status, body["reason"]) == (400, IMPORT_REASON)
