"""Users and their password hashes, RabbitMQ's way.

Passwords are stored as RabbitMQ's ``rabbit_password_hashing_sha256`` hashes: base64 of a
4-byte random salt followed by SHA-256(salt + UTF-8 password), so hashes exported from
RabbitMQ's definitions verify here and ours verify there.

Source: https://www.rabbitmq.com/docs/passwords#computing-password-hash
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import os
from dataclasses import dataclass, field

HASHING_ALGORITHM = "rabbit_password_hashing_sha256"


def hash_password(password: str, salt: bytes | None = None) -> str:
    """RabbitMQ sha256 password hash (base64 str) of ``password`` with a 4-byte salt."""
    salt = os.urandom(4) if salt is None else salt
    return base64.b64encode(salt + hashlib.sha256(salt + password.encode()).digest()).decode()


def check_password(password: str, password_hash: str) -> bool:
    """True when ``password`` matches a RabbitMQ sha256 ``password_hash``."""
    try:
        raw = base64.b64decode(password_hash, validate=True)
    except ValueError:
        return False
    if len(raw) != 36:  # 4-byte salt + 32-byte SHA-256
        return False
    salt, digest = raw[:4], raw[4:]
    return hmac.compare_digest(digest, hashlib.sha256(salt + password.encode()).digest())


def is_loopback(address: str | None) -> bool:
    """True for 127.0.0.0/8, ::1 and IPv4-mapped loopback addresses."""
    if not address:
        return False
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


@dataclass
class User:
    """A broker user: name, RabbitMQ sha256 password hash, tags (``administrator``...)."""

    name: str
    password_hash: str
    tags: list[str] = field(default_factory=list)


class UserStore:
    """Users by name, with RabbitMQ's ``loopback_users`` rule.

    Args:
        loopback_users: users that may log in only from a loopback address (default guest).
    """

    def __init__(self, loopback_users: tuple[str, ...] = ("guest",)) -> None:
        self.users: dict[str, User] = {}
        self.loopback_users = set(loopback_users)

    def add(self, name: str, password: str | None, tags: list[str] | None = None,
            password_hash: str | None = None) -> User:
        """Add or replace a user from a clear password (hashed here) or an existing RabbitMQ
        sha256 ``password_hash``; with neither, the user cannot log in with a password."""
        if password is not None:
            password_hash = hash_password(password)
        user = User(name, password_hash or "", list(tags or []))
        self.users[name] = user
        return user

    def delete(self, name: str) -> bool:
        return self.users.pop(name, None) is not None

    def change_password(self, name: str, password: str) -> None:
        """Raises KeyError for an unknown user."""
        self.users[name].password_hash = hash_password(password)

    def authenticate_external(self, name: str, peer_host: str | None) -> User | None:
        """EXTERNAL (TLS client certificate) login: the user must exist; no password."""
        user = self.users.get(name)
        if user is None or (name in self.loopback_users and not is_loopback(peer_host)):
            return None
        return user

    def update_state(self, name: str, new_secret: str) -> User | None:
        """Connection.UpdateSecret for a logged-in user: the user, or None when refused.

        The internal backend's credentials never expire, so, as RabbitMQ's
        ``rabbit_access_control:update_state/2`` (which skips backends whose
        ``state_can_expire()`` is false), the new secret is accepted without being checked
        against the password: client test suites send arbitrary secrets ("new-secret") to
        RabbitMQ's internal users and expect Update-Secret-Ok. A user deleted since login is
        refused (its connections are closed with 320 when it is deleted, so this is a race).
        """
        del new_secret  # not a credential of this backend (an OAuth2 token would be)
        return self.users.get(name)

    def authenticate(self, name: str, password: str, peer_host: str | None) -> User | None:
        """The user when the password matches and the loopback rule allows ``peer_host``."""
        user = self.users.get(name)
        if user is None or not check_password(password, user.password_hash):
            return None
        if name in self.loopback_users and not is_loopback(peer_host):
            return None
        return user
