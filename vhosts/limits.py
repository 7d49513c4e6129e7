"""Virtual host and user limits: how many connections, queues and channels they may have.

Vhost limits: ``max-connections`` (Connection.Open into the vhost), ``max-queues`` (declaring
a new queue). User limits: ``max-connections`` (Connection.Open by the user, any vhost),
``max-channels`` (Channel.Open across all the user's connections). A negative value means no
limit; 0 refuses everything. The checks and their 530/406 texts are RabbitMQ's
(``rabbit_reader``, ``rabbit_channel``; checked against RabbitMQ 3.10.8).

Source: https://www.rabbitmq.com/docs/vhosts#limits, /docs/user-limits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

VHOST_LIMITS = ("max-connections", "max-queues")
USER_LIMITS = ("max-connections", "max-channels")


class LimitsError(ValueError):
    """A limits document that cannot be applied (the management API answers 400)."""


def _term(key: str, value: Any) -> str:
    shown = value if isinstance(value, int | float) and not isinstance(value, bool) else (
        f'<<"{value}">>')
    return f'{{<<"{key}">>,{shown}}}'


def validate_limits(kind: str, limits: Any) -> dict[str, int]:
    """The limits of a vhost (``kind`` "vhost") or user ("user") as ``{name: int}``.

    Raises:
        LimitsError: not an object, an unknown limit, or a value that is not an integer
            (RabbitMQ's texts: ``Unrecognised terms [{<<"max-foo">>,1}] in limits``,
            ``max-queues should be a number, actually was <<"x">>``).
    """
    if not isinstance(limits, dict):
        raise LimitsError("limits must be a JSON object")
    known = VHOST_LIMITS if kind == "vhost" else USER_LIMITS
    unknown = [(k, v) for k, v in limits.items() if k not in known]
    if unknown:
        terms = ",".join(_term(k, v) for k, v in unknown)
        where = "limits" if kind == "vhost" else "user-limits"
        raise LimitsError(f"Unrecognised terms [{terms}] in {where}")
    out: dict[str, int] = {}
    for key, value in limits.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or (
                isinstance(value, float) and not value.is_integer()):
            shown = value if isinstance(value, int | float) else f'<<"{value}">>'
            raise LimitsError(f"{key} should be a number, actually was {shown}")
        out[key] = int(value)
    return out


@dataclass
class Limits:
    """The limits set on vhosts and users: ``{name: {limit: int}}`` each."""

    vhosts: dict[str, dict[str, int]] = field(default_factory=dict)
    users: dict[str, dict[str, int]] = field(default_factory=dict)

    def vhost(self, vhost: str, name: str) -> int | None:
        """The vhost's ``name`` limit, or None when unset or negative (no limit)."""
        return _effective(self.vhosts.get(vhost), name)

    def user(self, user: str, name: str) -> int | None:
        """The user's ``name`` limit, or None when unset or negative (no limit)."""
        return _effective(self.users.get(user), name)

    def set(self, kind: str, owner: str, limits: dict[str, Any]) -> None:
        """Merge validated ``limits`` into ``owner``'s (``kind`` "vhost" or "user").

        Raises:
            LimitsError: see :func:`validate_limits`.
        """
        table = self.vhosts if kind == "vhost" else self.users
        table.setdefault(owner, {}).update(validate_limits(kind, limits))

    def clear(self, kind: str, owner: str, name: str | None = None) -> bool:
        """Remove ``owner``'s limit ``name`` (every limit when None); False if none was set."""
        table = self.vhosts if kind == "vhost" else self.users
        current = table.get(owner)
        if not current:
            return False
        if name is None:
            del table[owner]
            return True
        found = current.pop(name, None) is not None
        if not current:
            del table[owner]
        return found


def _effective(limits: dict[str, int] | None, name: str) -> int | None:
    if not limits:
        return None
    value = limits.get(name)
    return None if value is None or value < 0 else value
