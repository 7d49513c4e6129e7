"""Interop matrix, C: rabbitmq-c's command line tools (Debian ``amqp-tools``: amqp-declare-queue,
amqp-publish, amqp-consume, amqp-get), scenario by scenario (``interop_tests/matrix/amqp_tools.py``
says what each tool can and cannot show; cells the tools cannot do are skipped with the reason).

Skipped when the binaries are missing (``make interop-deps`` installs them with apt). Marked
``slow``: ``make interop`` runs it.
"""

from __future__ import annotations

import pytest

from interop_tests.matrix.harness import cells, check_cell

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.mark.parametrize(("client", "scenario"), cells(["amqp_tools"]))
def test_cell(request, broker_url, client, scenario):
    check_cell(request, client, scenario, broker_url)
