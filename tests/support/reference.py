"""The reference RabbitMQ 3.10.8 of the ``-m reference`` tests (``make reference-rabbitmq``:
127.0.0.1:5672, HTTP API on :15672, guest/guest, the shovel and federation plugins).

``require_reference(path, plugin)`` skips the calling test (or a module-scoped autouse
fixture's whole module) when ``GET path`` does not answer 200 there, so the tests skip
cleanly without it.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.http import http

REFERENCE_HTTP = "http://127.0.0.1:15672"
REFERENCE_AMQP = "amqp://guest:guest@127.0.0.1:5672/%2F"


def ref_api(method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """A call to the reference's HTTP API: (status, decoded JSON body or None)."""
    return http(REFERENCE_HTTP, method, path, body)


def require_reference(path: str, plugin: str) -> None:
    """Skip unless the reference answers ``GET path`` with 200 (e.g. ``/api/shovels``,
    which only ``plugin``, e.g. ``rabbitmq_shovel_management``, serves)."""
    try:
        status, _ = ref_api("GET", path)
    except OSError:
        status = 0
    if status != 200:
        pytest.skip(f"reference RabbitMQ with {plugin} not reachable at {REFERENCE_HTTP} "
                    f"(make reference-rabbitmq)")
