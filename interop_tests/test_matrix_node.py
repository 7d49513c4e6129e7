"""Interop matrix, Node.js amqplib (channel and confirm channel), through
``interop_tests/matrix/node/driver.js``: every scenario of ``interop_tests/matrix/scenarios.py``.

Skipped when ``node`` or the amqplib module (``make interop-deps`` runs ``npm install`` in
``interop_tests/matrix/node``) is missing. Marked ``slow``: ``make interop`` runs it.
"""

from __future__ import annotations

import pytest

from interop_tests.matrix.harness import cells, check_cell

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.mark.parametrize(("client", "scenario"), cells(["amqplib"]))
def test_cell(request, broker_url, client, scenario):
    check_cell(request, client, scenario, broker_url)
