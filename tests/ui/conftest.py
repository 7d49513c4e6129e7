"""A broker process with its management listener (the web UI) for the UI tests; helpers in
:mod:`tests.ui.support`. The browser tests' screenshots are listed in pytest's summary.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.broker_process import BrokerProcess, free_port
from tests.ui.support import SCREENSHOTS, Http, taken


@pytest.fixture(scope="package")
def ui_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker (AMQP on a free port, management on another) for the UI tests."""
    base = tmp_path_factory.mktemp("amqpq-ui")
    broker = BrokerProcess(base / "data", base / "broker.log", management=free_port())
    try:
        broker.start()
        yield broker
    finally:
        broker.close()


@pytest.fixture(scope="package")
def http(ui_broker: BrokerProcess) -> Http:
    assert ui_broker.management_port is not None
    return Http(ui_broker.management_port)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if taken:
        terminalreporter.write_line(f"web UI screenshots ({len(taken)}): {SCREENSHOTS}")
