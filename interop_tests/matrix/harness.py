"""What the ``test_matrix_*`` modules share: run a cell as a pytest test.

``check_cell`` skips a cell whose client is not installed or cannot do the scenario, marks a
known amqpq bug ``xfail(strict=True)``, runs the cell, keeps the observation (the differential
test reuses observations of the broker under test made earlier in the session) and asserts it
against the expected observation.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache

import pytest

from interop_tests.conftest import pika_parameters
from interop_tests.matrix.clients import CLIENTS, run_cell
from interop_tests.matrix.driver import Unsupported
from interop_tests.matrix.known_bugs import known_bug
from interop_tests.matrix.scenarios import SCENARIOS, mismatches

#: (client, scenario, url) -> normalised observation, for this pytest session.
OBSERVED: dict[tuple[str, str, str], dict] = {}


def cells(clients: tuple[str, ...] | list[str],
          slow: Callable[[str, str], bool] = lambda client, scenario: False) -> list:
    """pytest params (client, scenario) with readable ids; ``slow(client, scenario)`` marks a
    cell ``slow`` (left to ``make interop``)."""
    return [pytest.param(client, scenario, id=f"{client}-{scenario}",
                         marks=[pytest.mark.slow] if slow(client, scenario) else [])
            for client in clients for scenario in SCENARIOS]


@cache
def broker_product(url: str) -> str:
    """The ``product`` the broker at ``url`` announces in Connection.Start."""
    import pika

    conn = pika.BlockingConnection(pika_parameters(url))
    try:
        product = conn._impl.server_properties.get("product")
    finally:
        conn.close()
    return product.decode() if isinstance(product, bytes) else str(product)


def mark_known_bug(request: pytest.FixtureRequest, client: str, scenario: str,
                   url: str) -> str | None:
    """Mark the test xfail(strict) for a known amqpq bug (only when the broker is amqpq);
    returns the reason, or None."""
    reason = known_bug(client, scenario)
    if reason and broker_product(url) == "amqpq":
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
        return reason
    return None


def observe(client: str, scenario: str, url: str) -> dict:
    """The cell's observation (cached per session); skips an unsupported cell."""
    key = (client, scenario, url)
    if key not in OBSERVED:
        reason = CLIENTS[client].unavailable()
        if reason:
            pytest.skip(reason)
        try:
            OBSERVED[key] = run_cell(client, scenario, url)
        except Unsupported as exc:
            pytest.skip(f"{client} cannot run {scenario}: {exc}")
    return OBSERVED[key]


def check_cell(request: pytest.FixtureRequest, client: str, scenario: str, url: str) -> None:
    reason = CLIENTS[client].unavailable()
    if reason:
        pytest.skip(reason)
    mark_known_bug(request, client, scenario, url)
    OBSERVED.pop((client, scenario, url), None)  # a matrix test always runs the cell itself
    observation = observe(client, scenario, url)
    problems = mismatches(CLIENTS[client].expected(scenario), observation)
    assert not problems, (
        f"{client} x {scenario}: the observation differs from the expected one:\n  "
        + "\n  ".join(problems)
        + "\nobservation:\n" + json.dumps(observation, indent=1, sort_keys=True))
