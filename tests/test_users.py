"""Users: RabbitMQ-compatible password hashes, the loopback-only rule, authentication.

Reference: https://www.rabbitmq.com/docs/passwords#computing-password-hash
(``rabbit_password_hashing_sha256``: base64(salt + sha256(salt + utf8 password)), 4-byte salt).
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest

from vhosts.users import UserStore, check_password, hash_password, is_loopback

DATA = Path(__file__).parent / "data"


def reference_hash(password: str, salt: bytes) -> str:
    """The documented algorithm, written out independently of the broker's code."""
    digest = hashlib.sha256(salt + password.encode("utf-8")).digest()
    return base64.b64encode(salt + digest).decode("ascii")


def test_rabbitmq_docs_vector() -> None:
    # the worked example of the RabbitMQ passwords guide: salt 908D C60A, password "test12"
    salt = bytes.fromhex("908DC60A")
    expected = "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR"
    assert reference_hash("test12", salt) == expected
    assert hash_password("test12", salt) == expected
    assert check_password("test12", expected)
    assert not check_password("test13", expected)


def test_hash_exported_by_rabbitmq_verifies() -> None:
    # a definitions export of RabbitMQ 3.10.8, whose guest user still has password "guest"
    defs = json.loads((DATA / "rabbitmq-3.10-definitions.json").read_text())
    (guest,) = [u for u in defs["users"] if u["name"] == "guest"]
    assert guest["hashing_algorithm"] == "rabbit_password_hashing_sha256"
    assert check_password("guest", guest["password_hash"])
    assert not check_password("Guest", guest["password_hash"])


@pytest.mark.parametrize("password", ["guest", "", "pässwörd ✓", "x" * 1000])
def test_round_trip(password: str) -> None:
    h = hash_password(password)
    raw = base64.b64decode(h)
    assert len(raw) == 36
    assert h == reference_hash(password, raw[:4])
    assert check_password(password, h)
    assert not check_password(password + "!", h)


def test_salts_are_random() -> None:
    assert len({hash_password("same") for _ in range(20)}) == 20


@pytest.mark.parametrize("bad", ["", "not base64!", base64.b64encode(b"short").decode(),
                                 base64.b64encode(b"x" * 37).decode()])
def test_malformed_hashes_never_match(bad: str) -> None:
    assert check_password("", bad) is False
    assert check_password("guest", bad) is False


@pytest.mark.parametrize(("address", "loopback"), [
    ("127.0.0.1", True),
    ("127.0.0.2", True),
    ("127.255.255.254", True),
    ("::1", True),
    ("::ffff:127.0.0.1", True),
    ("10.0.0.1", False),
    ("192.168.0.1", False),
    ("::ffff:10.0.0.1", False),
    ("2001:db8::1", False),
    ("0.0.0.0", False),
    ("localhost", False),  # a name, not an address
    ("", False),
    (None, False),
])
def test_is_loopback(address: str | None, loopback: bool) -> None:
    assert is_loopback(address) is loopback


def test_authenticate() -> None:
    store = UserStore()
    store.add("guest", "guest", ["administrator"])
    store.add("alice", "pw")
    assert store.authenticate("guest", "guest", "127.0.0.1").name == "guest"
    assert store.authenticate("guest", "guest", "::1") is not None
    assert store.authenticate("guest", "guest", "10.0.0.1") is None  # loopback-only user
    assert store.authenticate("guest", "wrong", "127.0.0.1") is None
    assert store.authenticate("alice", "pw", "10.0.0.1").name == "alice"
    assert store.authenticate("bob", "pw", "127.0.0.1") is None


def test_existing_hash_and_password_change() -> None:
    store = UserStore(loopback_users=())
    store.add("u", None, password_hash=reference_hash("secret", b"\x01\x02\x03\x04"))
    assert store.authenticate("u", "secret", "10.1.1.1") is not None
    store.change_password("u", "new")
    assert store.authenticate("u", "secret", "10.1.1.1") is None
    assert store.authenticate("u", "new", "10.1.1.1") is not None
    store.add("nopw", None)
    assert store.authenticate("nopw", "", "127.0.0.1") is None
    assert store.delete("u") and not store.delete("u")
