"""The node link's hello as a state machine (sans-IO): which record comes next, what it must
hold, which MAC checks. :mod:`amqp_server.cluster.node_links` is the asyncio shell around it
and its docstring is the protocol's description; the records are CONTROL records
(:mod:`amqp_server.workers.link_values` tuples)::

    dialler D -> acceptor A   ("hello", d, a, nd)
    A -> D                    ("challenge", na, mac_a)
    D -> A                    ("proof", mac_d)

    mac_a = HMAC-SHA256(secret, "amqpq-node-link/accept/<d>/<a>/<nd>/<na>")  hex
    mac_d = HMAC-SHA256(secret, "amqpq-node-link/dial/<d>/<a>/<nd>/<na>")    hex

``d``, ``a``: the node indexes of D and A; ``nd``, ``na``: 16 random bytes each, hex, chosen
fresh per link by D and by A. A proof answers one challenge only (``na`` is A's, new for
every link), so a captured exchange replayed on another link fails; the role in the MAC
keeps one side's MAC from serving as the other's; A's MAC names ``a`` and D's ``nd``, so D
knows it reached a node with the secret (mutual) before it sends anything else.

Errors are :class:`HelloError`, whose text names what was wrong and never holds a secret, a
MAC or a nonce (it is logged as it is).

Source: challenge-response as in RFC 2104 (HMAC) and RabbitMQ's Erlang distribution
handshake (https://www.erlang.org/doc/apps/erts/erl_dist_protocol.html#distribution-handshake),
whose challenge digests the cookie with the other side's challenge.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from typing import Any

from amqp_server.workers.link_codec import LinkError

NONCE_BYTES = 16
_NONCE = re.compile(r"[0-9a-f]{32}")
_MAC = re.compile(r"[0-9a-f]{64}")
MAX_INDEX = 1 << 31


class HelloError(LinkError):
    """A hello record that is not the expected one, malformed, or whose MAC does not check;
    the link is closed. The text is safe to log."""


def link_mac(secret: bytes, role: str, dialler: int, acceptor: int, dialler_nonce: str,
             acceptor_nonce: str) -> str:
    """Hex HMAC-SHA256 of the secret over the role (``dial`` or ``accept``), both node
    indexes and both nonces (see the module docstring)."""
    text = f"amqpq-node-link/{role}/{dialler}/{acceptor}/{dialler_nonce}/{acceptor_nonce}"
    return hmac.new(secret, text.encode(), hashlib.sha256).hexdigest()


def _index(value: Any, what: str) -> int:
    if type(value) is not int or not 0 <= value < MAX_INDEX:
        raise HelloError(f"{what} is not a node index")
    return value


def _token(value: Any, pattern: re.Pattern[str], what: str) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise HelloError(f"{what} is malformed")
    return value


def _record(record: tuple[Any, ...], kind: str, length: int) -> None:
    if not record or record[0] != kind:
        name = record[0] if record and isinstance(record[0], str) else "?"
        raise HelloError(f"expected {kind!r}, got {name[:20]!r}")
    if len(record) != length:
        raise HelloError(f"{kind!r} has {len(record)} items, not {length}")


def _check(given: str, expected: str, who: str) -> None:
    if not hmac.compare_digest(given.encode(), expected.encode()):
        raise HelloError(f"{who} did not prove the cluster secret (MAC mismatch)")


class Dialler:
    """The side that opened the link: node ``index`` dialling node ``peer``.

    Args:
        secret: the cluster secret; nonce: ``NONCE_BYTES`` random bytes, hex (fresh per link).
    """

    def __init__(self, secret: bytes, index: int, peer: int, nonce: str) -> None:
        self.secret, self.index, self.peer, self.nonce = secret, index, peer, nonce

    def opening(self) -> tuple[Any, ...]:
        """The first record: ``("hello", d, a, nd)``."""
        return ("hello", self.index, self.peer, self.nonce)

    def answer(self, challenge: tuple[Any, ...]) -> tuple[Any, ...]:
        """``("proof", mac_d)`` for the acceptor's ``("challenge", na, mac_a)``.

        Raises:
            HelloError: not a challenge, or ``mac_a`` does not check (not a node of this
                cluster, or not node ``peer``).
        """
        _record(challenge, "challenge", 3)
        na = _token(challenge[1], _NONCE, "the challenge's nonce")
        mac = _token(challenge[2], _MAC, "the challenge's MAC")
        args = (self.index, self.peer, self.nonce, na)
        _check(mac, link_mac(self.secret, "accept", *args), f"node {self.peer}")
        return ("proof", link_mac(self.secret, "dial", *args))


class Acceptor:
    """The side that accepted the link: node ``index``, nonce ``nonce`` (fresh per link).

    Feed it the dialler's records with :meth:`receive` until :attr:`peer` is set (the
    dialler's index: the link is trusted from the next record on).
    """

    records = 2  # records the dialler sends before it is trusted (hello, proof)

    def __init__(self, secret: bytes, index: int, nonce: str) -> None:
        self.secret, self.index, self.nonce = secret, index, nonce
        self.peer: int | None = None
        self._hello: tuple[int, str] | None = None  # (d, nd) once the hello came

    def receive(self, record: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """The answer to send (the challenge), or None.

        Raises:
            HelloError: a record out of turn or malformed, a hello meant for another node,
                or a proof whose MAC does not check.
        """
        if self.peer is not None:
            raise HelloError("the hello is over")
        if self._hello is None:
            _record(record, "hello", 4)
            d = _index(record[1], "the dialler")
            a = _index(record[2], "the node dialled")
            if a != self.index:
                raise HelloError(f"the link is meant for node {a}, this is node {self.index}")
            if d == self.index:
                raise HelloError("the dialler claims this node's own index")
            self._hello = (d, _token(record[3], _NONCE, "the hello's nonce"))
            return ("challenge", self.nonce,
                    link_mac(self.secret, "accept", d, self.index, self._hello[1], self.nonce))
        _record(record, "proof", 2)
        d, nd = self._hello
        _check(_token(record[1], _MAC, "the proof"),
               link_mac(self.secret, "dial", d, self.index, nd, self.nonce), f"node {d}")
        self.peer = d
        return None
