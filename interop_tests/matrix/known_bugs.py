"""Cells where amqpq is known to misbehave (the broker is not fixed from the matrix).

``KNOWN_BUGS[(client, scenario)] = "bug: ..."``; ``client`` may be ``"*"``. Such a cell is
marked ``xfail(strict=True)`` when the broker under test is amqpq (not when ``AMQPQ_TEST_URL``
points at RabbitMQ), in the matrix and in the differential mode alike, so the day the bug is
fixed the strict xfail fails and the entry must go.
"""

from __future__ import annotations

KNOWN_BUGS: dict[tuple[str, str], str] = {
    # empty: the long reply text (252 bytes + "..."), validated user_id (406) and py-amqp's
    # 'L' header type found by the matrix are fixed; their cells stay as regressions
}


def known_bug(client: str, scenario: str) -> str | None:
    return KNOWN_BUGS.get((client, scenario)) or KNOWN_BUGS.get(("*", scenario))
