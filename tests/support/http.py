"""A management HTTP API request for tests and benchmarks (the broker's or RabbitMQ's)."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from typing import Any

GUEST = "Basic " + base64.b64encode(b"guest:guest").decode()


def http(base: str, method: str, path: str, body: Any = None, auth: str = GUEST,
         timeout: float = 10) -> tuple[int, Any]:
    """``(status, decoded JSON body or None)`` of ``method base+path`` with ``body`` as JSON;
    an HTTP error status is returned, not raised (its JSON body decoded when there is one)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Authorization": auth,
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            return exc.code, json.loads(raw) if raw else None
        except ValueError:
            return exc.code, None
