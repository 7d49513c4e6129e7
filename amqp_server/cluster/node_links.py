"""The node link: the worker link of :mod:`amqp_server.workers.links` over TCP between
cluster nodes, authenticated by a shared cluster secret.

Every node listens on its ``--cluster-port`` and opens one TCP link to each other running
node, so each direction between two nodes is one ordered byte stream of the worker link's
records (:mod:`amqp_server.workers.link_codec`). The first record on a link is ``hello``::

    ("hello", index, nonce, mac)    mac = HMAC-SHA256(secret, "amqpq-node-link:<index>:<nonce>")

and the accepting node closes a link whose ``mac`` does not check (logged), or that says
anything before its hello: only a node that knows the secret is heard. The secret is RabbitMQ's
Erlang cookie: ``--cluster-secret-file`` (the file's first line), else one generated once and
kept in etcd (``/amqpq/<cluster>/secret``), so a cluster whose etcd is trusted needs no
file. Control records are tagged JSON (:mod:`amqp_server.workers.link_values`): a peer's
bytes never choose what code runs. TLS on the link is not there yet.

Source: RabbitMQ inter-node communication (https://www.rabbitmq.com/docs/clustering#erlang-cookie).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from amqp_server.workers.links import Links, LinkStream, Records

if TYPE_CHECKING:
    from amqp_server.cluster.metadata import EtcdHub

log = logging.getLogger("amqpq.cluster")


def link_mac(secret: bytes, index: int, nonce: str) -> str:
    """The hello's proof that node ``index`` knows ``secret`` (hex HMAC-SHA256)."""
    return hmac.new(secret, f"amqpq-node-link:{index}:{nonce}".encode(),
                    hashlib.sha256).hexdigest()


class NodeLinks(Links):
    """A node's links: TCP from and to every other node, its hub being etcd.

    Args:
        hub: the node's :class:`~amqp_server.cluster.metadata.EtcdHub`.
        host, port: where to listen for the other nodes (port 0: a free one, see
            :attr:`port`).
        secret: the cluster secret.
        index: this node's index; ``on_records``, ``on_peer_lost``, ``on_full`` as
            :class:`~amqp_server.workers.links.Links`.
    """

    def __init__(self, hub: EtcdHub, host: str, port: int, secret: bytes, index: int,
                 on_records: Callable[[int, Records], None],
                 on_peer_lost: Callable[[int], None],
                 on_full: Callable[[bool], None] | None = None) -> None:
        super().__init__(Path("."), index, on_records, on_peer_lost, on_full)
        self.hub_link = hub
        self.host = host
        self.port = port
        self.secret = secret
        self.addresses: dict[int, tuple[str, int]] = {}

    async def listen(self) -> int:
        """Listen for the other nodes; returns the port."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: LinkStream(self._inbound_records, self._inbound_lost), self.host, self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    async def start(self) -> None:
        """Read the cluster's log and start following it (listening already)."""
        if self._server is None:
            await self.listen()
        await self.hub_link.hello()

    def send_hub(self, record: tuple[object, ...]) -> None:
        self.hub_link.send(record)

    def set_address(self, index: int, host: str, port: int) -> None:
        self.addresses[index] = (host, port)

    async def _dial(self, peer: int, factory: Callable[[], LinkStream]) -> LinkStream:
        """A TCP connection to node ``peer``, at the address it registered.

        Raises:
            OSError: it cannot be reached; KeyError: its address is unknown.
        """
        host, port = self.addresses[peer]
        _, stream = await asyncio.get_running_loop().create_connection(factory, host, port)
        return stream  # type: ignore[return-value]

    def _hello(self) -> tuple[object, ...]:
        nonce = os.urandom(12).hex()
        return ("hello", self.index, nonce, link_mac(self.secret, self.index, nonce))

    def _hello_peer(self, hello: tuple[object, ...]) -> int | None:
        """The node a hello names, None (the link is closed, logged) when its MAC does not
        prove the cluster secret."""
        if len(hello) != 4 or hello[0] != "hello" or not hmac.compare_digest(
                str(hello[3]), link_mac(self.secret, int(hello[1]), str(hello[2]))):  # type: ignore[call-overload]
            return None
        return int(hello[1])  # type: ignore[call-overload]

    def close(self) -> None:
        self.hub_link.close()
        super().close()
