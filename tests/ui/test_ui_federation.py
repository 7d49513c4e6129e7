"""The web UI's Federation pages (Admin: Federation Status, Federation Upstreams, as
rabbitmq_federation_management adds them) in a real browser, against the UI tests' broker:
an upstream added with the form federates an exchange (the broker federating from itself,
``amqp://``) and a message moves; the status row shows ``running``, Restart restarts the link;
an unreachable upstream shows ``error`` with ``econnrefused``; Delete removes the upstream.
Skipped as tests/ui/test_ui_browser.py is (its browser fixtures are shared).
"""

from __future__ import annotations

import time
from typing import Any

from tests.ui.support import Http
from tests.ui.test_ui_browser import (  # noqa: F401 - pytest fixtures used by name
    WAIT_MS,
    amqp,
    browser,
    go,
    page,
    shoot,
    sync_api,
)


def test_federation_pages(page: Any, http: Http, amqp: Any) -> None:  # noqa: F811
    go(page, http, "#/federation-upstreams")
    assert page.locator("#nav a.active").inner_text() == "Federation Upstreams"
    page.fill("#add-upstream-name", "ui-up")
    page.fill("#add-upstream-uri", "amqp://")
    page.fill("#add-upstream-exchange", "ui-fed-src")
    page.fill("#add-upstream-reconnect_delay", "1")
    page.click("#add-upstream button[type=submit]")
    page.wait_for_selector("#add-upstream .note.ok")
    page.locator("#federation-upstreams-table tr", has_text="ui-up").wait_for()
    value = http.json("GET", "/api/parameters/federation-upstream/%2F/ui-up")["value"]
    assert value == {"uri": "amqp://", "ack-mode": "on-confirm", "trust-user-id": False,
                     "exchange": "ui-fed-src", "reconnect-delay": 1}
    shoot(page, "federation-upstreams")

    amqp.exchange_declare("ui-fed-src", "direct", durable=True)
    amqp.exchange_declare("ui-fed-x", "direct", durable=True)
    amqp.queue_declare("ui-fed-q", durable=True)
    amqp.queue_bind("ui-fed-q", "ui-fed-x", "k")
    http.json("PUT", "/api/policies/%2F/ui-fed", {"pattern": "^ui-fed-x$", "definition": {
        "federation-upstream": "ui-up"}, "apply-to": "exchanges"})
    go(page, http, "#/federation")
    assert page.locator("#nav a.active").inner_text() == "Federation Status"
    row = page.locator("#federation-links-table tr", has_text="ui-up")
    sync_api.expect(row).to_contain_text("running", timeout=WAIT_MS)
    assert "exchange: ui-fed-x" in row.inner_text() and "from ui-fed-src" in row.inner_text()
    shoot(page, "federation-running")

    def moved(body: bytes) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            amqp.basic_publish("ui-fed-src", "k", body)
            got = amqp.basic_get("ui-fed-q", auto_ack=True)[2]
            if got == body:
                return
            time.sleep(0.2)  # the upstream binding may not be there yet: publish again
        raise AssertionError(f"{body!r} never reached ui-fed-q")

    moved(b"federated once")
    with page.expect_response(lambda r: r.request.method == "DELETE"
                              and "/api/federation-links/vhost/%2F/" in r.url
                              and r.url.endswith("/restart")) as restarted:
        row.locator("button", has_text="Restart").click()
    assert restarted.value.status == 204
    sync_api.expect(row).to_contain_text("running", timeout=WAIT_MS)
    amqp.queue_purge("ui-fed-q")
    moved(b"federated after the restart")

    # an upstream that refuses connections: an error row with RabbitMQ's word
    http.json("PUT", "/api/parameters/federation-upstream/%2F/ui-up", {"value": {
        "uri": "amqp://guest:secret@127.0.0.1:1", "reconnect-delay": 1}})
    go(page, http, "#/federation")
    row = page.locator("#federation-links-table tr", has_text="ui-up")
    sync_api.expect(row.locator(".reason")).to_have_text("econnrefused", timeout=WAIT_MS)
    assert "secret" not in row.inner_text()
    shoot(page, "federation-error")

    go(page, http, "#/federation-upstreams")
    page.locator("#federation-upstreams-table tr", has_text="ui-up").locator(
        "button", has_text="Delete").click()
    sync_api.expect(page.locator("#federation-upstreams-table tr", has_text="ui-up")
                    ).to_have_count(0, timeout=WAIT_MS)
    assert http.call("GET", "/api/parameters/federation-upstream/%2F/ui-up")[0] == 404
    http.json("DELETE", "/api/policies/%2F/ui-fed")
