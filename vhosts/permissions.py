"""Per-user, per-vhost permissions: configure/write/read regular expressions, and topic
permissions on routing keys.

A user may open a vhost only if it has a permission entry there (else 530 NOT_ALLOWED at
Connection.Open). Every method then checks one of the three regexes against the resource name
(``re.search``, unanchored, as RabbitMQ's ``re:run``); the empty pattern matches nothing. The
default exchange is checked under the name ``amq.default``. A refusal is 403
ACCESS_REFUSED: ``access to exchange 'x' in vhost '/' refused for user 'u'``.

Which method needs which permission follows RabbitMQ's access-control guide:
declare/delete -> configure; publish -> write on the exchange; queue.bind -> write on the
queue and read on the exchange; exchange.bind -> write on the destination and read on the
source; consume/get/purge -> read on the queue.

Source: https://www.rabbitmq.com/docs/access-control
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from amqp_common.errors import AccessRefused, rs

Perm = Literal["configure", "write", "read"]


def _compile(pattern: str) -> re.Pattern[str] | None:
    """None for the empty pattern, which matches nothing (RabbitMQ)."""
    return re.compile(pattern) if pattern else None


@dataclass
class Permission:
    """One user's configure/write/read patterns in one vhost."""

    configure: str = ".*"
    write: str = ".*"
    read: str = ".*"
    _compiled: dict[str, re.Pattern[str] | None] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._compiled = {p: _compile(getattr(self, p)) for p in ("configure", "write", "read")}

    def allows(self, perm: Perm, name: str) -> bool:
        regex = self._compiled[perm]
        return regex is not None and regex.search(name) is not None


@dataclass
class TopicPermission:
    """Write/read patterns on routing keys for one topic exchange."""

    exchange: str
    write: str = ".*"
    read: str = ".*"

    def allows(self, perm: Perm, routing_key: str) -> bool:
        pattern = self.write if perm == "write" else self.read
        regex = _compile(pattern)
        return regex is not None and regex.search(routing_key) is not None


def validate_pattern(pattern: str, what: str) -> None:
    """Raises ValueError naming ``what`` when ``pattern`` is not a valid regex."""
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid {what} pattern '{pattern}': {exc}") from None


class PermissionStore:
    """Permissions and topic permissions of every (user, vhost)."""

    def __init__(self) -> None:
        self.permissions: dict[tuple[str, str], Permission] = {}
        self.topic_permissions: dict[tuple[str, str], dict[str, TopicPermission]] = {}
        self.version = 0  # bumped on every change, so channels can cache positive checks

    def set(self, user: str, vhost: str, configure: str, write: str, read: str) -> Permission:
        """Raises ValueError for an invalid regex (nothing changes)."""
        for what, pattern in (("configure", configure), ("write", write), ("read", read)):
            validate_pattern(pattern, what)
        self.version += 1
        perm = Permission(configure, write, read)
        self.permissions[(user, vhost)] = perm
        return perm

    def clear(self, user: str, vhost: str) -> bool:
        self.version += 1
        return self.permissions.pop((user, vhost), None) is not None

    def get(self, user: str, vhost: str) -> Permission | None:
        return self.permissions.get((user, vhost))

    def set_topic(self, user: str, vhost: str, exchange: str, write: str, read: str) -> None:
        """Raises ValueError for an invalid regex (nothing changes)."""
        validate_pattern(write, "write")
        validate_pattern(read, "read")
        self.version += 1
        self.topic_permissions.setdefault((user, vhost), {})[exchange] = TopicPermission(
            exchange, write, read)

    def clear_topic(self, user: str, vhost: str, exchange: str | None = None) -> bool:
        self.version += 1
        entries = self.topic_permissions.get((user, vhost))
        if not entries:
            return False
        if exchange is None:
            del self.topic_permissions[(user, vhost)]
            return True
        return entries.pop(exchange, None) is not None

    def forget_user(self, user: str) -> None:
        self.version += 1
        for key in [k for k in self.permissions if k[0] == user]:
            del self.permissions[key]
        for key in [k for k in self.topic_permissions if k[0] == user]:
            del self.topic_permissions[key]

    def forget_vhost(self, vhost: str) -> None:
        self.version += 1
        for key in [k for k in self.permissions if k[1] == vhost]:
            del self.permissions[key]
        for key in [k for k in self.topic_permissions if k[1] == vhost]:
            del self.topic_permissions[key]

    def check(self, user: str, vhost: str, perm: Perm, kind: str, name: str) -> None:
        """Raises AccessRefused (403) unless ``user`` has ``perm`` on resource ``kind``
        (``"queue"``/``"exchange"``) ``name`` in ``vhost``."""
        if kind == "exchange" and name == "":
            name = "amq.default"
        entry = self.permissions.get((user, vhost))
        if entry is None or not entry.allows(perm, name):
            raise AccessRefused(
                f"access to {rs(kind, name, vhost)} refused for user '{user}'")

    def check_topic(self, user: str, vhost: str, perm: Perm, exchange: str,
                    routing_key: str) -> None:
        """Raises AccessRefused (403) when a topic permission for ``exchange`` exists and its
        ``perm`` pattern does not match ``routing_key`` (no entry: allowed, as RabbitMQ)."""
        entries = self.topic_permissions.get((user, vhost))
        if not entries or exchange not in entries:
            return
        if not entries[exchange].allows(perm, routing_key):
            raise AccessRefused(
                f"{perm} access to topic '{routing_key}' in exchange '{exchange}' in vhost "
                f"'{vhost}' refused for user '{user}'")
