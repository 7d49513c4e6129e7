"""Differences between amqpq and the reference RabbitMQ that are accepted, each with its reason.

An entry matches a difference by client, scenario and observation path (``fnmatch`` patterns,
e.g. ``"*"``, ``"connect_*"``, ``".server_property_keys"``). Keep every entry narrow and
commented: a difference that matches no entry fails ``test_matrix_vs_reference.py``, and the
report shows which entry accepted each of the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase


@dataclass(frozen=True)
class Allowed:
    client: str
    scenario: str
    path: str
    reason: str

    def matches(self, client: str, scenario: str, path: str) -> bool:
        return (fnmatchcase(client, self.client) and fnmatchcase(scenario, self.scenario)
                and fnmatchcase(path, self.path))


ALLOWED: list[Allowed] = [
    # Connection.Start server-properties "product": amqpq announces itself as "amqpq" (the
    # suites use it to tell the brokers apart, e.g. to mark known differences), RabbitMQ as
    # "RabbitMQ". Capabilities, platform, version keys etc. are compared and must match.
    Allowed("*", "connect_*", ".product",
            "amqpq names itself 'amqpq' in Connection.Start server properties by design"),
]


def allowed(client: str, scenario: str, path: str) -> Allowed | None:
    for entry in ALLOWED:
        if entry.matches(client, scenario, path):
            return entry
    return None
