"""Cells where amqpq is known to misbehave (the broker is not fixed from the matrix).

``KNOWN_BUGS[(client, scenario)] = "bug: ..."``; ``client`` may be ``"*"``. Such a cell is
marked ``xfail(strict=True)`` when the broker under test is amqpq (not when ``AMQPQ_TEST_URL``
points at RabbitMQ), in the matrix and in the differential mode alike, so the day the bug is
fixed the strict xfail fails and the entry must go.
"""

from __future__ import annotations

KNOWN_BUGS: dict[tuple[str, str], str] = {
    # Every client sees it (a 405 RESOURCE_LOCKED text quoting a 100-character queue name):
    # RabbitMQ sends the first 252 bytes + "...", amqpq the first 255 bytes, no ellipsis.
    ("*", "long_reply_text"): (
        "bug: a reply text longer than 255 bytes is cut at 255 bytes; RabbitMQ cuts it at 252 "
        "and appends '...'"),
    # RabbitMQ's validated user-ID: a publish whose user_id property is not the connection's
    # user closes the channel with 406; amqpq accepts and delivers it (only the management
    # API's publish checks user_id).
    ("*", "publish_user_id"): (
        "bug: a message whose user_id property differs from the authenticated user is accepted "
        "and delivered; RabbitMQ closes the channel with 406 PRECONDITION_FAILED - user_id "
        "property set to 'X' but authenticated user was 'guest'"),
    # py-amqp (kombu, Celery) writes ints outside int32 in field tables with the 'L' tag;
    # RabbitMQ 3.10 accepts and delivers such headers unchanged.
    ("kombu", "header_types"): (
        "bug: a header table with py-amqp's 'L' (64-bit int) field type closes the connection "
        "with 502 SYNTAX_ERROR - malformed content properties: unknown field type 'L'; "
        "RabbitMQ accepts and delivers it"),
}


def known_bug(client: str, scenario: str) -> str | None:
    return KNOWN_BUGS.get((client, scenario)) or KNOWN_BUGS.get(("*", scenario))
