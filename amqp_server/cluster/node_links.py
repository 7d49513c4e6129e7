"""The node link: the worker link of :mod:`amqp_server.workers.links` over TCP (TLS when
configured) between cluster nodes, opened by a challenge-response on the cluster secret.

Every node listens on its ``--cluster-port`` and opens one TCP link to each other running
node, so each direction between two nodes is one ordered byte stream of the worker link's
records (:mod:`amqp_server.workers.link_codec`: ``length:u32 kind:u8 body``); records flow
from the node that opened the link (the *dialler*, D) to the one that accepted it (the
*acceptor*, A), and A's answers go on A's own link to D.

**The hello.** Before anything else, three CONTROL records (tagged JSON tuples,
:mod:`amqp_server.workers.link_values`)::

    D -> A   ("hello", d, a, nd)
    A -> D   ("challenge", na, mac_a)    mac_a = HMAC-SHA256(secret, "amqpq-node-link/accept/<d>/<a>/<nd>/<na>")
    D -> A   ("proof", mac_d)            mac_d = HMAC-SHA256(secret, "amqpq-node-link/dial/<d>/<a>/<nd>/<na>")

``d`` and ``a`` are the two nodes' indexes (integers, :meth:`Membership.connect`), ``nd`` and
``na`` 16 random bytes each as 32 lower-case hex digits, drawn for this link by D and by A;
MACs are 64 lower-case hex digits. A closes the link (one log line) when the hello names
another node as ``a``, or ``d`` is its own, when any record is malformed or out of turn, or
when ``mac_d`` does not check; D closes it when ``mac_a`` does not check (mutual: D sends
its records only to a node that knows the secret). From the record after the proof on, A
takes D's records as node ``d``'s. A proof is good for one challenge: A's nonce is new on
every link, so a hello captured on one link and replayed on another fails.

Before the proof, a link is held short (:mod:`amqp_server.workers.links`): each hello record
at most 4 KiB (``HELLO_MAX``; a longer length prefix closes the link after its 4-byte
header), the hello complete within 5 s (``HELLO_TIMEOUT``; the environment variable
``AMQPQ_NODE_HELLO_TIMEOUT`` sets it, for tests), at most 64 inbound links waiting for theirs
(``MAX_PENDING``). The records a peer may send are the peers' kinds only: the hub's
(``apply``, ``synced``, ``peer_up``) come from etcd, and a node drops them from a link
(:meth:`WorkerRuntime._on_control`).

The secret is RabbitMQ's Erlang cookie: ``--cluster-secret-file`` (the file's first line),
else one generated once and kept in etcd (``/amqpq/<cluster>/secret``). No log line holds the
secret, a MAC or a nonce.

**TLS** (``--cluster-tls-cert``, ``--cluster-tls-key``, ``--cluster-tls-cacert``: PEM files,
the same on every node or each node its own certificate from one CA): both ways, TLS 1.2 at
least, each side presents its certificate and requires the other's to be signed by the CA
(CERT_REQUIRED on the listening side too). Host names are not checked: nodes are reached at
the addresses they registered in etcd (IPs, often), so a node's identity is its certificate's
CA and then the cluster secret's hello, which still runs inside TLS. A peer without a good
certificate fails the TLS handshake; the dialling side logs it (``cannot link to node N``).
Without TLS the hello proves who opened a link but the records after it are plaintext and
not authenticated one by one: use TLS between machines.

Source: RabbitMQ inter-node communication (https://www.rabbitmq.com/docs/clustering#erlang-cookie,
https://www.rabbitmq.com/docs/clustering-ssl); the Erlang distribution handshake
(https://www.erlang.org/doc/apps/erts/erl_dist_protocol.html#distribution-handshake).
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from amqp_server.cluster.link_hello import NONCE_BYTES, Acceptor, Dialler, HelloError
from amqp_server.cluster.membership import ClusterError
from amqp_server.workers.link_codec import CONTROL, LinkError, read_control
from amqp_server.workers.links import HELLO_TIMEOUT, Links, LinkStream, Records

if TYPE_CHECKING:
    from amqp_server.cluster.metadata import EtcdHub
    from broker.config import ClusterTLSConfig

log = logging.getLogger("amqpq.cluster")

TIMEOUT_ENV = "AMQPQ_NODE_HELLO_TIMEOUT"  # seconds; tests shorten the hello timeout with it


def tls_contexts(tls: ClusterTLSConfig) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(listening, dialling) contexts for the node links: TLS 1.2+, this node's certificate
    on both, the peer's required and checked against the CA, host names not checked (module
    docstring).

    Raises:
        ClusterError: a file unreadable or not PEM, or the key not the certificate's.
    """
    contexts = []
    for purpose in (ssl.Purpose.CLIENT_AUTH, ssl.Purpose.SERVER_AUTH):
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if purpose is ssl.Purpose.CLIENT_AUTH
                                 else ssl.PROTOCOL_TLS_CLIENT)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.check_hostname = False  # nodes are reached by address: the CA vouches
        context.verify_mode = ssl.CERT_REQUIRED
        try:
            context.load_verify_locations(cafile=tls.cacertfile)
            context.load_cert_chain(tls.certfile or "", tls.keyfile)
        except (OSError, ssl.SSLError) as exc:
            reason = (exc.reason if isinstance(exc, ssl.SSLError) else exc.strerror) or str(exc)
            raise ClusterError("cannot use --cluster-tls-cacert/-cert/-key for the node "
                               f"links: {reason}") from None
        contexts.append(context)
    return contexts[0], contexts[1]


class NodeLinks(Links):
    """A node's links: TCP (or TLS) from and to every other node, its hub being etcd.

    Args:
        hub: the node's :class:`~amqp_server.cluster.metadata.EtcdHub`.
        host, port: where to listen for the other nodes (port 0: a free one, see
            :attr:`port`).
        secret: the cluster secret.
        index: this node's index; ``on_records``, ``on_peer_lost``, ``on_full`` as
            :class:`~amqp_server.workers.links.Links`.
        tls: (listening, dialling) contexts from :func:`tls_contexts`; None: plain TCP.
        hello_timeout: seconds an inbound link has to complete its hello (default
            ``$AMQPQ_NODE_HELLO_TIMEOUT``, else 5).
    """

    def __init__(self, hub: EtcdHub, host: str, port: int, secret: bytes, index: int,
                 on_records: Callable[[int, Records], None],
                 on_peer_lost: Callable[[int], None],
                 on_full: Callable[[bool], None] | None = None,
                 tls: tuple[ssl.SSLContext, ssl.SSLContext] | None = None,
                 hello_timeout: float | None = None) -> None:
        super().__init__(Path("."), index, on_records, on_peer_lost, on_full)
        self.hub_link = hub
        self.host = host
        self.port = port
        self.secret = secret
        self.tls = tls
        self.label = "node link"
        self.hello_timeout = hello_timeout if hello_timeout is not None else float(
            os.environ.get(TIMEOUT_ENV) or HELLO_TIMEOUT)
        self.addresses: dict[int, tuple[str, int]] = {}

    async def listen(self) -> int:
        """Listen for the other nodes; returns the port."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._inbound_stream, self.host, self.port,
            ssl=self.tls[0] if self.tls else None,
            ssl_handshake_timeout=self.hello_timeout if self.tls else None)
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
        """A TCP (TLS) connection to node ``peer``, at the address it registered.

        Raises:
            OSError: it cannot be reached, or its certificate does not check
                (ssl.SSLError); KeyError: its address is unknown.
        """
        host, port = self.addresses[peer]
        _, stream = await asyncio.get_running_loop().create_connection(
            factory, host, port, ssl=self.tls[1] if self.tls else None,
            server_hostname="" if self.tls else None)
        return stream  # type: ignore[return-value]

    async def _hello(self, stream: LinkStream) -> None:
        """The dialler's part of the hello (module docstring); returns once the proof is
        on its way (records may follow it).

        Raises:
            ConnectionError: the link closed, or the acceptor did not prove the secret
                (logged).
        """
        dialler = Dialler(self.secret, self.index, stream.peer, os.urandom(NONCE_BYTES).hex())
        waiting: asyncio.Future[Records] = asyncio.get_running_loop().create_future()
        stream.hello = waiting
        stream.outbox.control(dialler.opening())
        stream.schedule()
        records = await waiting
        stream.hello = None
        try:
            kind, body = records[0]
            if kind != CONTROL:
                raise HelloError(f"record kind {kind} instead of a challenge")
            proof = dialler.answer(read_control(body))
        except LinkError as exc:
            log.error("node link to node %d refused: %s", stream.peer, exc)
            raise ConnectionError(f"hello refused: {exc}") from None
        stream.outbox.control(proof)
        stream.schedule()

    def _acceptor(self) -> Any:
        return Acceptor(self.secret, self.index, os.urandom(NONCE_BYTES).hex())

    def close(self) -> None:
        self.hub_link.close()
        super().close()
