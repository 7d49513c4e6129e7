"""The web UI's Nodes page and a node's page, in Chromium (Playwright) against a three-node
cluster of real processes and a real etcd (the ``nodes`` fixture): from n1's UI, every node
shows its file descriptors, memory, disk and uptime, the overview's Nodes table links to a
node's page, which lists the quorum queues it leads and holds replicas of, and the Queues
page shows the Node column with the leader and "+2" for the other members.

Skipped without Playwright, Chromium (``make ui-deps``) or etcd (``make etcd-deps``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pika
import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.cluster import api, connect, wait_until
from tests.support.etcd import ETCD
from tests.ui.support import Http
from tests.ui.test_ui_browser import CHROMIUM, LAUNCH_ARGS, WAIT_MS, log_in, shoot, sync_api

pytest.importorskip("aetcd")
pytestmark = pytest.mark.skipif(ETCD is None, reason="etcd not installed (make etcd-deps)")

NAMES = ["n1", "n2", "n3"]


@pytest.fixture(scope="module")
def n1_page(nodes: list[BrokerProcess]) -> Iterator[tuple[Any, Http]]:
    """A Chromium tab logged in as guest on n1's web UI; no error in the page."""
    http = Http(nodes[0].management_port or 0)
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        tab = chromium.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        tab.on("pageerror", lambda exc: errors.append(str(exc)))
        tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        tab.set_default_timeout(WAIT_MS)
        tab.goto(http.base + "/")
        tab.wait_for_selector("#login")
        log_in(tab, "guest", "guest")
        tab.wait_for_selector("#nav a")
        try:
            yield tab, http
        finally:
            chromium.close()
        assert not errors, f"errors in the page: {errors}"


@pytest.fixture(scope="module")
def quorum_queue(nodes: list[BrokerProcess]) -> dict[str, Any]:
    """``ui.qq``, a quorum queue on the three nodes, as n1's API shows it once all are online."""
    conn = connect(nodes[1])
    try:
        ch = conn.channel()
        ch.queue_declare("ui.qq", durable=True, arguments={"x-queue-type": "quorum"})
        ch.basic_publish("", "ui.qq", b"x", pika.BasicProperties(delivery_mode=2))
    finally:
        conn.close()

    def online() -> dict[str, Any] | None:
        q = api(nodes[0], "/api/queues/%2F/ui.qq")
        return q if sorted(q.get("online", [])) == NAMES else None
    return wait_until(online, "ui.qq online on three nodes")


def _row(tab: Any, table: str, name: str) -> Any:
    return tab.locator(f"#{table} tbody tr", has=tab.locator("td", has_text=re.compile(
        f"^{re.escape(name)}$")))


def _filled(cells: list[str]) -> list[str] | None:
    """A nodes-table row's cells once they are drawn with the node running, else None."""
    return cells if len(cells) > 6 and cells[2] == "yes" and cells[3] else None


def test_overview_nodes_table_fills_every_node_and_links_to_its_page(
        n1_page: tuple[Any, Http], nodes: list[BrokerProcess],
        quorum_queue: dict[str, Any]) -> None:
    tab, http = n1_page
    # every node has sent its figures (once a second) before the page is read
    wait_until(lambda: all(n.get("fd_used") for n in api(nodes[0], "/api/nodes")),
               "every node's figures on n1")
    tab.goto(f"{http.base}/#/")
    tab.wait_for_selector("#nodes-table")
    for name in NAMES:
        # the tab may still show a table drawn before the figures came (it is on "#/" since
        # logging in, and redraws every 5 s): wait for a drawing with the node running
        cells = wait_until(
            lambda name=name: _filled(_row(tab, "nodes-table", name).locator("td")
                                      .all_inner_texts()), f"{name}'s row filled on n1's UI")
        assert cells[2] == "yes", cells
        assert re.fullmatch(r"[\d,]+ / [\d,]+", cells[3]), cells  # file descriptors
        assert "high watermark" in cells[4] and not cells[4].startswith(" /"), cells
        assert re.match(r"[\d.]+ \w+ \(", cells[5]), cells  # disk free (limit)
        assert re.fullmatch(r"(\d+d \d+h|\d+h \d+m|\d+m \d+s)", cells[6]), cells
    shoot(tab, "cluster-overview-nodes")
    _row(tab, "nodes-table", "n2").locator("a").click()
    tab.wait_for_selector("#node-name")
    assert tab.inner_text("#node-name") == "n2"
    assert tab.locator("#nav a.active").inner_text() == "Overview"


def test_node_page_lists_its_figures_and_quorum_leaders_and_replicas(
        n1_page: tuple[Any, Http], quorum_queue: dict[str, Any]) -> None:
    tab, http = n1_page
    leader = quorum_queue["leader"]
    follower = next(n for n in NAMES if n != leader)
    tab.goto(f"{http.base}/#/nodes/{leader}")
    tab.wait_for_selector("#node-leaders-table")
    assert _row(tab, "node-leaders-table", "ui.qq").count() == 1
    assert _row(tab, "node-replicas-table", "ui.qq").count() == 1
    assert "high watermark" in tab.inner_text("#node-memory")
    assert re.fullmatch(r"[\d,]+ / [\d,]+", tab.inner_text("#node-fds"))
    assert "low watermark" in tab.inner_text("#node-disk")
    assert tab.inner_text("#node-alarms") == "none"
    shoot(tab, "cluster-node-leader")
    tab.goto(f"{http.base}/#/nodes/{follower}")
    tab.wait_for_selector("#node-replicas-table")
    assert tab.inner_text("#node-name") == follower
    assert _row(tab, "node-replicas-table", "ui.qq").count() == 1
    assert tab.locator("#node-leaders-table tbody tr", has_text="ui.qq").count() == 0
    # the Nodes page counts them per node
    tab.goto(f"{http.base}/#/nodes")
    tab.wait_for_selector("#nodes-table")
    for name in NAMES:
        cells = wait_until(lambda name=name: _row(tab, "nodes-table", name).locator("td")
                           .all_inner_texts(), f"{name}'s row on the Nodes page")
        assert int(cells[-1]) >= 1, cells  # replicas on it: ui.qq
        if name == leader:
            assert int(cells[-2]) >= 1, cells  # leaders: ui.qq on its leader


def test_queues_page_shows_the_leader_and_other_members(
        n1_page: tuple[Any, Http], quorum_queue: dict[str, Any]) -> None:
    tab, http = n1_page
    tab.goto(f"{http.base}/#/queues")
    tab.wait_for_selector("#queues-table")
    headers = tab.locator("#queues-table thead th").all_inner_texts()
    assert "Node" in headers
    cell = _row(tab, "queues-table", "ui.qq").locator("td").nth(headers.index("Node"))
    assert cell.inner_text().split() == [quorum_queue["leader"], "+2"]
    shoot(tab, "cluster-queues")
    tab.goto(f"{http.base}/#/queues/%2F/ui.qq")
    tab.wait_for_selector("#queue-leader")
    assert tab.inner_text("#queue-leader") == quorum_queue["leader"]
    assert sorted(tab.inner_text("#queue-online").split(", ")) == NAMES


def test_connections_and_channels_pages_show_other_nodes_clients(
        n1_page: tuple[Any, Http], nodes: list[BrokerProcess]) -> None:
    tab, http = n1_page
    conn = connect(nodes[2])
    try:
        ch = conn.channel()
        ch.queue_declare("ui.n3")
        ch.basic_publish("", "ui.n3", b"x")
        wait_until(lambda: any(c["node"] == "n3" for c in api(nodes[0], "/api/channels")),
                   "n3's channel on n1")
        tab.goto(f"{http.base}/#/connections")
        tab.wait_for_selector("#connections-table")
        headers = tab.locator("#connections-table thead th").all_inner_texts()
        assert headers[1] == "Node"
        n3_cells = tab.locator("#connections-table tbody tr", has=tab.locator(
            "td", has_text=re.compile("^n3$"))).locator("td")
        n3_conn = wait_until(lambda: n3_cells.all_inner_texts(), "n3's connection row")
        for title in ("From client", "To client"):  # n3's byte rates, as RabbitMQ's UI
            assert re.fullmatch(r"[\d.]+ [KMG]?i?B/s", n3_conn[headers.index(title)]), n3_conn
        row = tab.locator("#connections-table tbody tr", has=tab.locator(
            "td", has_text=re.compile("^n3$")))
        row.locator("a").click()  # the connection's page, served from n1
        tab.wait_for_selector("#connection-node")
        assert tab.inner_text("#connection-node") == "n3"
        tab.goto(f"{http.base}/#/channels")
        tab.wait_for_selector("#channels-table")
        headers = tab.locator("#channels-table thead th").all_inner_texts()
        assert "Publish" in headers and "Node" in headers
        n3_row = tab.locator("#channels-table tbody tr", has=tab.locator(
            "td", has_text=re.compile("^n3$"))).locator("td")
        cells = wait_until(lambda: n3_row.all_inner_texts(), "n3's channel row on n1's UI")
        assert re.fullmatch(r"[\d.]+/s", cells[headers.index("Publish")]), cells
        shoot(tab, "cluster-channels")
    finally:
        conn.close()
