"""Differential mode of the interop matrix: every cell (client x scenario) against amqpq and
against the reference RabbitMQ, with the two observations compared.

* Reference: ``AMQPQ_REFERENCE_URL`` (default ``amqp://guest:guest@127.0.0.1:5672/%2F``);
  every cell is skipped when it does not answer, or when the broker under test is not amqpq
  (``AMQPQ_TEST_URL`` pointing at RabbitMQ: nothing to compare).
* amqpq's observation is the one the matrix test of the same session made, if any.
* A difference fails the cell unless ``interop_tests/differential/allow_list.py`` accepts it.
* The report (``differential/report.txt`` and ``report.json`` under the pytest tmp dir) lists
  every difference; its path is printed at the end of the session.

Marked ``slow`` (doubles the matrix; ``make interop`` runs it) and ``reference``.
"""

from __future__ import annotations

import json
import os

import pytest

from interop_tests.differential.report import Report
from interop_tests.matrix.clients import CLIENTS
from interop_tests.matrix.harness import broker_product, cells, mark_known_bug, observe

REFERENCE_ENV = "AMQPQ_REFERENCE_URL"
DEFAULT_REFERENCE = "amqp://guest:guest@127.0.0.1:5672/%2F"

pytestmark = [pytest.mark.slow, pytest.mark.reference, pytest.mark.timeout(240)]


@pytest.fixture(scope="session")
def reference_url(broker_url: str) -> str:
    url = os.environ.get(REFERENCE_ENV) or DEFAULT_REFERENCE
    try:
        product = broker_product(url)
    except Exception as exc:
        pytest.skip(f"reference broker {url} ({REFERENCE_ENV}) is not reachable: {exc!r}")
    if broker_product(broker_url) != "amqpq":
        pytest.skip(f"the broker under test ({broker_url}) is not amqpq: nothing to compare")
    if product == "amqpq":
        pytest.skip(f"{REFERENCE_ENV}={url} is amqpq, not the reference RabbitMQ")
    return url


@pytest.fixture(scope="session")
def differential_report(request, tmp_path_factory, broker_url, reference_url):
    report = Report(tmp_path_factory.getbasetemp() / "differential", broker_url, reference_url)
    yield report
    compared = [c for c in report.cells if c.skipped is None]
    total = sum(len(c.differences) for c in compared)
    bad = sum(len(c.not_allowed) for c in compared)
    bugs = sum(len(c.not_allowed) for c in compared if c.known_bug)
    message = (f"differential report ({len(compared)} cells, {total} differences, {bad} not "
               f"allowed, {bugs} of them known amqpq bugs): {report.text_path}")
    # This teardown runs under pytest's output capture: lift it to reach the terminal.
    capman = request.config.pluginmanager.get_plugin("capturemanager")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if capman is not None and reporter is not None:
        with capman.global_and_fixture_disabled():
            reporter.write_line("")
            reporter.write_line(message)
    else:
        print(message)


@pytest.mark.parametrize(("client", "scenario"), cells(list(CLIENTS)))
def test_same_as_reference(request, broker_url, reference_url, differential_report, client,
                           scenario):
    reason = CLIENTS[client].unavailable()
    if reason:
        differential_report.skip(client, scenario, reason)
        pytest.skip(reason)
    bug = mark_known_bug(request, client, scenario, broker_url)
    try:
        ours = observe(client, scenario, broker_url)
        theirs = observe(client, scenario, reference_url)
    except pytest.skip.Exception as exc:
        differential_report.skip(client, scenario, str(exc))
        raise
    cell = differential_report.compare(client, scenario, ours, theirs, known_bug=bug)
    assert not cell.not_allowed, (
        f"{client} x {scenario}: amqpq and the reference RabbitMQ differ "
        f"(not on interop_tests/differential/allow_list.py):\n"
        + "\n".join(f"  {d['path']}: amqpq={json.dumps(d['amqpq'])} "
                    f"reference={json.dumps(d['reference'])}" for d in cell.not_allowed)
        + f"\nreport: {differential_report.text_path}")
