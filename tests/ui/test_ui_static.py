"""The web UI's files as the management listener serves them (no browser): the page at
``/``, every ES module it imports (followed from ``js/app.js``), the style sheet and icon,
with their content types; and the API's own answers unchanged beside them (unknown
``/api/...`` paths are still RabbitMQ's JSON 404).
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import PurePosixPath

from tests.support.broker_process import REPO_ROOT
from tests.ui.support import Http

_IMPORT = re.compile(r'^import\s[^;]*?from\s+"(\.[^"]+)";', re.MULTILINE | re.DOTALL)


def test_index_at_root_loads_the_app_module(http: Http) -> None:
    status, headers, body = http.call("GET", "/", auth=False)
    assert status == 200
    assert headers["Content-Type"].startswith("text/html")
    assert "default-src 'self'" in headers["Content-Security-Policy"]
    page = body.decode()
    assert '<script type="module" src="js/app.js">' in page
    assert 'href="css/ui.css"' in page
    assert http.call("GET", "/index.html", auth=False)[2] == body


def test_every_imported_module_is_served_as_javascript(http: Http) -> None:
    seen: set[str] = set()
    todo = ["js/app.js"]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        status, headers, body = http.call("GET", "/" + path, auth=False)
        assert status == 200, path
        assert "javascript" in headers["Content-Type"], (path, headers["Content-Type"])
        for target in _IMPORT.findall(body.decode()):
            resolved = PurePosixPath(path).parent / target
            parts: list[str] = []
            for part in resolved.parts:
                if part == "..":
                    parts.pop()
                elif part != ".":
                    parts.append(part)
            todo.append("/".join(parts))
    assert {"js/app.js", "js/api.js", "js/dom.js", "js/chart.js",
            "js/pages/queues.js", "js/pages/overview.js"} <= seen


def test_style_sheet_and_icon(http: Http) -> None:
    status, headers, _ = http.call("GET", "/css/ui.css", auth=False)
    assert status == 200 and headers["Content-Type"].startswith("text/css")
    status, headers, _ = http.call("GET", "/img/favicon.svg", auth=False)
    assert status == 200 and headers["Content-Type"].startswith("image/svg+xml")


def test_api_paths_keep_their_json_answers(http: Http) -> None:
    status, headers, body = http.call("GET", "/api/no-such-thing")
    assert status == 404 and headers["Content-Type"].startswith("application/json")
    assert json.loads(body) == {"error": "Object Not Found", "reason": "Not Found"}
    status, _, body = http.call("GET", "/js/no-such-module.js", auth=False)
    assert status == 404 and json.loads(body)["error"] == "Object Not Found"
    status, _, _ = http.call("GET", "/api/overview", auth=False)
    assert status == 401  # the UI's files need no login, the API still does
    assert "management_version" in http.json("GET", "/api/overview")


def test_no_path_escapes_the_ui_folder(http: Http) -> None:
    status, _, body = http.call("GET", "/js/../../app.py", auth=False)
    assert status == 404
    assert b"aiohttp" not in body


def test_every_ui_file_ships_as_package_data() -> None:
    """pyproject's package-data globs cover every file of management/ui (a non-editable
    install serves the same UI)."""
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    globs = config["tool"]["setuptools"]["package-data"]["management"]
    package = REPO_ROOT / "management"
    files = {p.relative_to(package).as_posix() for p in (package / "ui").rglob("*")
             if p.is_file()}
    shipped = {p.relative_to(package).as_posix() for g in globs for p in package.glob(g)}
    assert files and files <= shipped, sorted(files - shipped)
