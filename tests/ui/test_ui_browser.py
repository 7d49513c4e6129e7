"""The management web UI in a real browser: Playwright (Python, sync API) driving Debian's
Chromium (``/usr/bin/chromium``, or ``$AMQPQ_CHROMIUM``) against a broker process.

What a person does: log in as guest, see a queue a pika client declared appear in the list,
publish from an exchange's page and get the message back on the queue's page (requeued, so
it stays), move messages to another queue, close a connection with a reason, import a
definitions file and see its objects; and a user without a management tag is refused.
Every page is screenshotted to ``test-output/ui-screenshots/`` (printed in pytest's summary).

Skipped, with the reason, when Playwright or Chromium is missing (``make ui-deps``).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

from tests.support.broker_process import BrokerProcess
from tests.ui.support import Http, screenshot_path

CHROMIUM = os.environ.get("AMQPQ_CHROMIUM", "/usr/bin/chromium")
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install -e '.[test]')")
if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
    pytest.skip(f"Chromium not found at {CHROMIUM}: run `make ui-deps` "
                "(apt-get install chromium) to run the web UI browser tests",
                allow_module_level=True)

LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run"]
WAIT_MS = 8000  # a list refreshes every 5 s


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="module")
def page(browser: Any, http: Http) -> Iterator[Any]:
    """A tab logged in as guest."""
    tab = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    tab.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" and
           "status of 40" not in msg.text else None)  # 4xx the tests provoke are logged too
    tab.set_default_timeout(WAIT_MS)
    tab.goto(http.base + "/")
    tab.wait_for_selector("#login")
    shoot(tab, "login")
    log_in(tab, "guest", "guest")
    tab.wait_for_selector("#nav a")
    yield tab
    tab.close()
    assert not errors, f"errors in the page (uncaught, CSP, ...): {errors}"


@pytest.fixture(scope="module")
def amqp(ui_broker: BrokerProcess) -> Iterator[Any]:
    conn = pika.BlockingConnection(pika.URLParameters(
        ui_broker.url + "?client_properties={'connection_name':'ui-test-client'}"))
    yield conn.channel()
    if conn.is_open:
        conn.close()


def log_in(tab: Any, user: str, password: str) -> None:
    tab.fill("#login-username", user)
    tab.fill("#login-password", password)
    tab.click("#login button[type=submit]")


def go(tab: Any, http: Http, hash_: str) -> None:
    tab.goto(f"{http.base}/{hash_}")
    tab.wait_for_selector("main h1")


def shoot(tab: Any, name: str) -> None:
    tab.screenshot(path=str(screenshot_path(name)), full_page=True)


def test_user_without_management_tag_is_refused(browser: Any, http: Http) -> None:
    http.json("PUT", "/api/users/ui-plain", {"password": "secret", "tags": ""})
    tab = browser.new_page()
    try:
        tab.goto(http.base + "/")
        log_in(tab, "ui-plain", "secret")
        note = tab.locator("#login .note.error")
        note.wait_for()
        assert note.inner_text() == "Not management user"
        assert tab.locator("#nav a").count() == 0
        shoot(tab, "login-refused")
        log_in(tab, "guest", "wrong")
        # a locator assertion, not wait_for_function: the page's CSP (no 'unsafe-eval')
        # refuses a string predicate whenever Playwright has to poll it
        sync_api.expect(note).to_have_text("Login failed", timeout=WAIT_MS)
    finally:
        tab.close()


def test_tabs_follow_the_users_tags(browser: Any, http: Http) -> None:
    http.json("PUT", "/api/users/ui-manager", {"password": "secret", "tags": "management"})
    http.json("PUT", "/api/permissions/%2F/ui-manager",
              {"configure": ".*", "write": ".*", "read": ".*"})
    tab = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        tab.goto(http.base + "/")
        log_in(tab, "ui-manager", "secret")
        tab.wait_for_selector("#nav a")
        tabs = tab.locator("#nav a").all_inner_texts()
        assert tabs == ["Overview", "Connections", "Channels", "Exchanges", "Queues",
                        "Bindings"]
        tab.wait_for_selector("#nodes p.empty")  # /api/nodes needs monitoring
        assert tab.locator("#import").count() == 0  # definitions: administrators only
        shoot(tab, "overview-management-user")
        tab.click("#logout")
        tab.wait_for_selector("#login")
    finally:
        tab.close()


def test_queue_declared_by_pika_appears(page: Any, http: Http, amqp: Any) -> None:
    go(page, http, "#/queues")
    assert page.locator("#queues-table", has_text="ui-orders").count() == 0
    amqp.queue_declare("ui-orders", durable=True)
    # the open list refreshes by itself
    row = page.locator("#queues-table tr", has_text="ui-orders")
    row.wait_for(timeout=WAIT_MS)
    assert "classic" in row.inner_text()


def test_publish_from_exchange_page_then_get_it_back(page: Any, http: Http, amqp: Any) -> None:
    amqp.queue_declare("ui-orders", durable=True)
    amqp.queue_bind("ui-orders", "amq.direct", "ui-key")
    go(page, http, "#/exchanges/%2F/amq.direct")
    page.fill("#publish-routing_key", "ui-key")
    page.fill("#publish-headers", "origin=browser")
    page.fill("#publish-payload", "hello from the UI")
    page.click("#publish button[type=submit]")
    page.wait_for_selector("#publish .note.ok")
    shoot(page, "exchange-amq.direct-published")

    go(page, http, "#/queues/%2F/ui-orders")
    assert page.input_value("#get-messages-ackmode") == "ack_requeue_true"
    page.click("#get-messages button[type=submit]")
    message = page.locator("#messages .message").first
    message.wait_for()
    text = message.inner_text()
    assert "hello from the UI" in text and "ui-key" in text and "origin: browser" in text
    shoot(page, "queue-get-message")
    # requeued, as RabbitMQ's UI default does: a client still gets it
    method, _, body = amqp.basic_get("ui-orders", auto_ack=True)
    assert body == b"hello from the UI" and method.redelivered
    # the queue page publishes through the default exchange
    page.fill("#queue-publish-payload", "aGk=")
    page.select_option("#queue-publish-encoding", "base64")
    page.select_option("#queue-publish-delivery_mode", "2")
    page.click("#queue-publish button[type=submit]")
    page.wait_for_selector("#queue-publish .note.ok")
    method, props, body = amqp.basic_get("ui-orders", auto_ack=True)
    assert (body, method.exchange, method.routing_key, props.delivery_mode) == \
        (b"hi", "", "ui-orders", 2)


def test_move_messages_to_another_queue(page: Any, http: Http, amqp: Any) -> None:
    amqp.queue_declare("ui-move-src")
    amqp.queue_declare("ui-move-dst")
    for i in range(3):
        amqp.basic_publish("", "ui-move-src", f"m{i}".encode())
    go(page, http, "#/queues/%2F/ui-move-src")
    page.fill("#move-messages-destination", "ui-move-dst")
    page.click("#move-messages button[type=submit]")
    note = page.locator("#move-messages .note.ok")
    note.wait_for()
    assert note.inner_text() == "Moved 3 message(s); 0 left."
    bodies = [amqp.basic_get("ui-move-dst", auto_ack=True)[2] for _ in range(3)]
    assert bodies == [b"m0", b"m1", b"m2"]
    assert amqp.queue_declare("ui-move-src", passive=True).method.message_count == 0


def test_import_definitions_file(page: Any, http: Http, tmp_path: Path) -> None:
    http.call("PUT", "/api/queues/%2F/ui-orders", {"durable": True})
    doc = {"vhosts": [{"name": "ui-imported"}],
           "permissions": [{"user": "guest", "vhost": "ui-imported", "configure": ".*",
                            "write": ".*", "read": ".*"}],
           "exchanges": [{"name": "ui-events", "vhost": "ui-imported", "type": "topic",
                          "durable": True, "auto_delete": False, "internal": False,
                          "arguments": {}}],
           "queues": [{"name": "ui-audit", "vhost": "ui-imported", "durable": True,
                       "auto_delete": False, "arguments": {"x-max-length": 100}}],
           "bindings": [{"source": "ui-events", "vhost": "ui-imported",
                         "destination": "ui-audit", "destination_type": "queue",
                         "routing_key": "#", "arguments": {}}]}
    file = tmp_path / "definitions.json"
    file.write_text(json.dumps(doc))
    go(page, http, "#/")
    page.set_input_files("#import-file", str(file))
    with page.expect_request(lambda r: r.method == "POST"
                             and r.url.endswith("/api/definitions")) as posted:
        page.click("#import button[type=submit]")
    note = page.locator("#import .note")
    page.wait_for_selector("#import .note.ok, #import .note.error")
    assert note.inner_text() == "Your definitions were imported successfully."
    # the page reads the file and posts its JSON: a multipart or text/plain POST is 415
    assert posted.value.headers["content-type"] == "application/json"
    assert json.loads(posted.value.post_data or "") == doc
    with page.expect_download() as download:
        page.click("#export button[type=submit]")
    exported = json.loads(Path(download.value.path()).read_text())
    assert {"name": "ui-audit", "vhost": "ui-imported"}.items() <= next(
        q for q in exported["queues"] if q["name"] == "ui-audit").items()
    assert download.value.suggested_filename == "amqpq-definitions.json"
    go(page, http, "#/queues")
    row = page.locator("#queues-table tr", has_text="ui-audit")
    row.wait_for()
    assert "ui-imported" in row.inner_text()
    go(page, http, "#/bindings")
    page.locator("#bindings tr", has_text="ui-events").wait_for()
    # the header's virtual host filter narrows the lists
    go(page, http, "#/queues")
    page.select_option("#vhost-filter", "ui-imported")
    page.locator("#queues-table tr", has_text="ui-audit").wait_for()
    assert page.locator("#queues-table tr", has_text="ui-orders").count() == 0
    shoot(page, "queues-filtered-by-vhost")
    page.select_option("#vhost-filter", "")
    page.locator("#queues-table tr", has_text="ui-orders").wait_for()
    page.fill("#queues-filter", "AUDIT")  # the name filter: case-insensitive substring
    assert page.locator("#queues-table tbody tr").all_inner_texts()[0].count("ui-audit") == 1
    assert page.locator("#queues-table tbody tr").count() == 1


def test_close_connection_with_reason(page: Any, http: Http, ui_broker: BrokerProcess) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(
        ui_broker.url + "?client_properties={'connection_name':'ui-doomed'}"))
    go(page, http, "#/connections")
    page.locator("#connections a", has_text="->").first.wait_for()
    page.locator("#connections tr", has_text="ui-doomed").locator("a").click()
    page.wait_for_selector("#close-connection")
    shoot(page, "connection")
    page.fill("#close-connection-reason", "bye from the UI")
    page.click("#close-connection button[type=submit]")
    page.wait_for_url("**/#/connections")
    with pytest.raises(pika.exceptions.ConnectionClosed) as closed:
        conn.process_data_events(time_limit=2)
        conn.channel()
    assert closed.value.reply_code == 320
    assert closed.value.reply_text == "CONNECTION_FORCED - bye from the UI"


PAGES = ["#/", "#/connections", "#/channels", "#/exchanges", "#/queues", "#/bindings",
         "#/users", "#/vhosts", "#/permissions", "#/policies", "#/limits",
         "#/shovels", "#/dynamic-shovels",
         "#/queues/%2F/ui-orders", "#/exchanges/%2F/amq.direct", "#/exchanges/%2F/"]


def test_every_page_renders(page: Any, http: Http, amqp: Any) -> None:
    amqp.queue_declare("ui-orders", durable=True)
    amqp.basic_publish("", "ui-orders", b"kept for the screenshots")
    http.json("PUT", "/api/policies/%2F/ui-ttl", {"pattern": "^ui-", "definition":
                                                  {"message-ttl": 60000}, "apply-to": "queues"})
    http.json("PUT", "/api/vhost-limits/%2F/max-queues", {"value": 500})
    for hash_ in PAGES:
        go(page, http, hash_)
        page.wait_for_load_state("networkidle")
        assert page.locator("main .error").count() == 0, page.inner_text("main")
        assert page.locator("#nav a.active").count() == 1
        name = (hash_.strip("#/").replace("/%2F/", "-").replace("/%2F", "-amq.default")
                .replace("/", "-") or "overview")
        shoot(page, name)
    go(page, http, "#/")
    page.locator("#chart-rates svg path").first.wait_for()
    assert int(page.inner_text("#count-queues")) >= 1


def test_shovel_pages_add_restart_and_delete_a_real_shovel(page: Any, http: Http,
                                                            amqp: Any) -> None:
    """Shovel Management's form sets a dynamic shovel that the broker runs (messages move);
    Shovel Status lists it running with its ends, restarts it and deletes it; the
    management list deletes a shovel too."""
    amqp.queue_declare("ui-shovel-src", durable=True)
    go(page, http, "#/dynamic-shovels")
    page.fill("#add-shovel-name", "ui-shovel")
    page.fill("#add-shovel-src_name", "ui-shovel-src")
    page.fill("#add-shovel-dest_name", "ui-shovel-dst")
    page.click("#add-shovel button[type=submit]")
    page.wait_for_selector("#add-shovel .note.ok")
    page.locator("#dynamic-shovels-table tr", has_text="ui-shovel").wait_for()
    value = http.json("GET", "/api/parameters/shovel/%2F/ui-shovel")["value"]
    assert value == {"src-protocol": "amqp091", "src-uri": "amqp://", "src-queue": "ui-shovel-src",
                     "dest-protocol": "amqp091", "dest-uri": "amqp://",
                     "dest-queue": "ui-shovel-dst", "ack-mode": "on-confirm",
                     "src-delete-after": "never", "dest-add-forward-headers": False}
    shoot(page, "dynamic-shovels-added")

    def moved(body: bytes) -> None:
        amqp.basic_publish("", "ui-shovel-src", body)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            got = amqp.basic_get("ui-shovel-dst", auto_ack=True)[2]
            if got is not None:
                assert got == body
                return
            time.sleep(0.1)
        raise AssertionError(f"{body!r} never reached ui-shovel-dst")

    moved(b"shovelled once")
    go(page, http, "#/shovels")
    row = page.locator("#shovels-table tr", has_text="ui-shovel")
    sync_api.expect(row).to_contain_text("running", timeout=WAIT_MS)
    assert "queue: ui-shovel-src" in row.inner_text()
    assert "queue: ui-shovel-dst" in row.inner_text()
    shoot(page, "shovels-running")
    with page.expect_response(lambda r: r.request.method == "DELETE"
                              and r.url.endswith("/api/shovels/vhost/%2F/ui-shovel/restart")
                              ) as restarted:
        row.locator("button", has_text="Restart").click()
    assert restarted.value.status == 204
    moved(b"shovelled after the restart")
    row = page.locator("#shovels-table tr", has_text="ui-shovel")
    row.locator("button", has_text="Delete").click()
    sync_api.expect(page.locator("#shovels-table tr", has_text="ui-shovel")).to_have_count(
        0, timeout=WAIT_MS)
    assert http.call("GET", "/api/parameters/shovel/%2F/ui-shovel")[0] == 404

    http.json("PUT", "/api/parameters/shovel/%2F/ui-shovel-2", {"value": {
        "src-uri": "amqp://", "src-exchange": "amq.topic", "src-exchange-key": "ui.#",
        "dest-uri": "amqp://guest:secret@127.0.0.1:1/%2F", "dest-queue": "ui-shovel-dst"}})
    # a destination that refuses connections: a status with the reason, never a crash
    go(page, http, "#/shovels")
    row = page.locator("#shovels-table tr", has_text="ui-shovel-2")
    sync_api.expect(row.locator(".state")).to_have_text("terminated", timeout=WAIT_MS)
    sync_api.expect(row.locator(".reason")).to_contain_text(
        "could not connect to destination", timeout=WAIT_MS)
    shoot(page, "shovels-terminated")
    go(page, http, "#/dynamic-shovels")
    row = page.locator("#dynamic-shovels-table tr", has_text="ui-shovel-2")
    row.wait_for()
    text = row.inner_text()
    assert "exchange: amq.topic (key: ui.#)" in text and "secret" not in text
    row.locator("button", has_text="Delete").click()
    sync_api.expect(row).to_have_count(0, timeout=WAIT_MS)
    assert http.call("GET", "/api/parameters/shovel/%2F/ui-shovel-2")[0] == 404


def test_shovel_pages_follow_the_users_tags(browser: Any, http: Http) -> None:
    """As rabbitmq_shovel_management: Shovel Status for monitoring, Shovel Management for
    policymakers; adding, restarting and deleting shovels stays with administrators (amqpq
    lets only them set shovel parameters), so a policymaker sees the list without them."""
    http.json("PUT", "/api/users/ui-policymaker",
              {"password": "secret", "tags": "policymaker,monitoring"})
    http.json("PUT", "/api/permissions/%2F/ui-policymaker",
              {"configure": ".*", "write": ".*", "read": ".*"})
    http.json("PUT", "/api/parameters/shovel/%2F/ui-shovel-seen", {"value": {
        "src-uri": "amqp://", "src-queue": "ui-seen-src", "dest-uri": "amqp://",
        "dest-queue": "ui-seen-dst"}})
    tab = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        tab.goto(http.base + "/")
        log_in(tab, "ui-policymaker", "secret")
        tab.wait_for_selector("#nav a")
        assert tab.locator("#nav a").all_inner_texts()[-5:] == [
            "Policies", "Shovel Status", "Shovel Management", "Federation Status",
            "Federation Upstreams"]  # the federation pages follow the same rights
        go(tab, http, "#/dynamic-shovels")
        row = tab.locator("#dynamic-shovels-table tr", has_text="ui-shovel-seen")
        row.wait_for()
        assert row.locator("button").count() == 0 and tab.locator("#add-shovel").count() == 0
        go(tab, http, "#/shovels")
        row = tab.locator("#shovels-table tr", has_text="ui-shovel-seen")
        row.wait_for()
        assert row.locator("button").count() == 0
    finally:
        tab.close()
        http.call("DELETE", "/api/parameters/shovel/%2F/ui-shovel-seen")
