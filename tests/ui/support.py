"""Helpers of the web UI tests: an HTTP client of the management listener and the
screenshot folder (``test-output/ui-screenshots/`` in the repository, git-ignored)."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.support.broker_process import REPO_ROOT

SCREENSHOTS = REPO_ROOT / "test-output" / "ui-screenshots"
taken: list[Path] = []  # this session's screenshots, for the summary line

class Http:
    """Requests to the management listener: ``call("GET", "/api/overview")`` ->
    (status, headers, body bytes); ``json(...)`` -> parsed JSON (raises on status >= 400)."""

    def __init__(self, port: int, user: str = "guest", password: str = "guest") -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    def call(self, method: str, path: str, body: Any = None,
             auth: bool = True) -> tuple[int, dict[str, str], bytes]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        if auth:
            request.add_header("Authorization", self.auth)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as err:
            return err.code, dict(err.headers), err.read()

    def json(self, method: str, path: str, body: Any = None) -> Any:
        status, _, raw = self.call(method, path, body)
        assert status < 400, f"{method} {path}: {status} {raw!r}"
        return json.loads(raw) if raw else None


def screenshot_path(name: str) -> Path:
    """Where the screenshot ``name`` goes (the folder is made; noted for the summary)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    taken.append(path)
    return path
