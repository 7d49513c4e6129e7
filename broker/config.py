"""Broker settings, with RabbitMQ's defaults.

Source: https://www.rabbitmq.com/docs/configure (frame_max, channel_max, heartbeat,
default_user, default_vhost, loopback_users), https://www.rabbitmq.com/docs/management
(management listener, ``load_definitions``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class ManagementOptions:
    """The management HTTP API (``--management-port``, ``--no-management``,
    ``--definitions``; :mod:`management.options` parses and acts on them).

    Attributes:
        enabled: serve the API (off for a config made in code; the command line turns it
            on unless ``--no-management``).
        port: TCP port; None: 15672, or 0 (a free one) when the AMQP port is 0.
        definitions: a definitions JSON file imported at every start (None: none).
        host: listen address (rabbitmq.conf ``management.tcp.ip``; None: the AMQP ones).
        certfile, keyfile: serve HTTPS with this certificate and key (PEM) instead of HTTP
            (``--management-ssl-cert/-key``, rabbitmq.conf ``management.ssl.certfile/
            keyfile``; None: plain HTTP).
    """

    enabled: bool = False
    port: int | None = None
    definitions: Path | None = None
    host: str | None = None
    certfile: str | None = None
    keyfile: str | None = None


@dataclass
class PrometheusOptions:
    """The Prometheus listener (``--prometheus-port``, ``--no-prometheus``; rabbitmq.conf
    ``prometheus.tcp.port``), as RabbitMQ's ``rabbitmq_prometheus`` plugin serves it.

    Attributes:
        enabled: serve ``/metrics`` (off for a config made in code; the command line turns
            it on unless ``--no-prometheus``).
        port: TCP port; None: 15692, or 0 (a free one) when the AMQP port is 0.
    """

    enabled: bool = False
    port: int | None = None


@dataclass
class LogOptions:
    """Where and how the broker logs (``--log-level``, ``--log-file``, ``--log-format``;
    rabbitmq.conf ``log.console.level``, ``log.file``, ``log.file.level``,
    ``log.file.rotation.size``, ``log.file.rotation.count``, ``log.<category>.level``).

    Attributes:
        level: console level (RabbitMQ's names: debug, info, notice, warning, error,
            critical, alert, emergency; none: no console output).
        file: log file (None: console only).
        file_level: level of the file (None: ``level``, or info when the console is off).
        format: ``text`` or ``json`` (one JSON object per line).
        rotation_size: bytes after which the file is rotated (0: never).
        rotation_count: rotated files kept.
        categories: per-category levels, e.g. {"connection": "warning"} (logger
            ``amqpq.connection``).
    """

    level: str = "info"
    file: Path | None = None
    file_level: str | None = None
    format: str = "text"
    rotation_size: int = 0
    rotation_count: int = 5
    categories: dict[str, str] = field(default_factory=dict)


# Both loopbacks: the listen addresses when no --host is given (broker.listeners).
DEFAULT_HOSTS: tuple[str, ...] = ("127.0.0.1", "::1")


@dataclass
class TLSConfig:
    """Settings of the TLS listener (all paths to PEM files)."""

    port: int = 5671
    certfile: str | None = None
    keyfile: str | None = None
    cacertfile: str | None = None
    verify_peer: bool = False
    fail_if_no_peer_cert: bool = False

    @property
    def enabled(self) -> bool:
        return self.certfile is not None


@dataclass
class ClusterTLSConfig:
    """TLS on the node links (all paths to PEM files): each node presents ``certfile`` and
    checks the other's certificate against ``cacertfile`` both ways (mutual). Off unless a
    certificate is set. Source: https://www.rabbitmq.com/docs/clustering-ssl."""

    certfile: str | None = None
    keyfile: str | None = None
    cacertfile: str | None = None

    @property
    def enabled(self) -> bool:
        return self.certfile is not None


@dataclass
class EtcdOptions:
    """How a node reaches etcd (``--cluster-etcd`` and the ``--cluster-etcd-*`` options).

    Attributes:
        url: ``http://HOST:PORT`` or ``https://HOST:PORT`` (None: a single node, no etcd).
        cacert: CA certificates to verify etcd's server certificate (PEM; https only).
        cert, key: this node's client certificate and key for etcd (PEM; https only).
        user: etcd user name (etcd's auth; None: no auth).
        password_file: file whose first line is that user's password.
        lease_ttl: seconds without a refresh before etcd forgets the node (its lease, >= 2):
            how long a dead node's queues wait for failover (``--cluster-lease``;
            RabbitMQ's etcd peer discovery ``cluster_formation.etcd.node_ttl``).
    """

    url: str | None = None
    cacert: str | None = None
    cert: str | None = None
    key: str | None = None
    user: str | None = None
    password_file: Path | None = None
    lease_ttl: int = 5


@dataclass
class BrokerConfig:
    """Settings of one broker process.

    Attributes:
        hosts: listen addresses (IPv4 or IPv6); None: both loopbacks, 127.0.0.1 and ::1
            (::1 skipped with a warning where the machine has no IPv6).
        port: TCP port (5672) on every listen address.
        data_dir: where the broker keeps its state.
        frame_max: largest frame offered in Connection.Tune (bytes, 131072).
        channel_max: highest channel number offered (2047).
        heartbeat: heartbeat interval offered (seconds, 60; 0 disables).
        default_user, default_pass, default_vhost: created at start (guest/guest, "/").
        loopback_users: users that may log in only from loopback (guest).
        consumer_timeout: ms an unacknowledged delivery may wait before its channel is
            closed with 406 (RabbitMQ's consumer_timeout; 0 = never).
        max_connections: open connections allowed (0 = no limit; beyond: 530 at open).
        memory_high_watermark: memory alarm threshold, fraction of RAM (<= 1) or bytes.
        disk_free_limit: disk alarm threshold (bytes free in the data dir's file system).
        queue_index_embed_msgs_below: persistent messages with a smaller body (bytes) are
            kept in their queue's index, not the shared message store (RabbitMQ's setting
            of that name, 4096; 0 embeds none).
        tls: the AMQPS listener (off unless a certificate is set).
        management: the management HTTP API (off unless enabled).
        prometheus: the Prometheus listener (off unless enabled).
        log: logging destinations, levels and format.
        product, version: reported in Connection.Start server properties.
        config_files: the ``--config`` file read (absolute), for ``/api/nodes``.
        workers: worker processes of the broker (``--workers``; 1: this process alone).
        worker_index: this process's index among them (None: not a worker of several).
        worker_run_dir: the supervisor's Unix-socket directory (workers only).
        worker_handoff_fd: the socket on which the supervisor hands accepted client
            connections to this worker (workers only).
        node_name: this node's name (``--node-name``; None: ``amqpq@<host>``).
        cluster_etcd: etcd URL of the cluster this node joins (None: a single node).
        cluster_port: the port other nodes reach this one on (node links; 0: a free one).
        cluster_host: the address the node links listen on (None: the first listen host).
        cluster_secret_file: the node links' shared secret (None: the one kept in etcd).
        cluster_tls: TLS on the node links (off unless a certificate is set).
        etcd: how the node reaches etcd (TLS, auth); ``etcd.url`` is ``cluster_etcd``.
        queue_leader_locator: where new quorum queue leaders go unless a policy or argument
            says: ``client-local`` (None: the default) or ``balanced`` (RabbitMQ's
            ``queue_leader_locator``; ``--queue-leader-locator``).
        quorum_target_group_size: grow quorum queues with fewer members onto running nodes
            up to this many (0: never; ``--quorum-target-group-size``, RabbitMQ 4's
            ``quorum_queue.continuous_membership_reconciliation.*``).
    """

    hosts: tuple[str, ...] | None = None
    port: int = 5672
    data_dir: Path = field(default_factory=lambda: Path("var"))
    frame_max: int = 131072
    channel_max: int = 2047
    heartbeat: int = 60
    default_user: str = "guest"
    default_pass: str = "guest"
    default_vhost: str = "/"
    loopback_users: tuple[str, ...] = ("guest",)
    consumer_timeout: int = 1_800_000
    max_connections: int = 0
    memory_high_watermark: float = 0.4
    disk_free_limit: int = 50_000_000
    queue_index_embed_msgs_below: int = 4096
    tls: TLSConfig = field(default_factory=TLSConfig)
    management: ManagementOptions = field(default_factory=ManagementOptions)
    prometheus: PrometheusOptions = field(default_factory=PrometheusOptions)
    log: LogOptions = field(default_factory=LogOptions)
    product: str = "amqpq"
    version: str = "0.1.0"
    config_files: tuple[str, ...] = ()
    workers: int = 1
    worker_index: int | None = None
    worker_run_dir: Path | None = None
    worker_handoff_fd: int | None = None
    node_name: str | None = None
    cluster_etcd: str | None = None
    cluster_port: int = 25672
    cluster_host: str | None = None
    cluster_secret_file: Path | None = None
    cluster_tls: ClusterTLSConfig = field(default_factory=ClusterTLSConfig)
    etcd: EtcdOptions = field(default_factory=EtcdOptions)
    queue_leader_locator: str | None = None
    quorum_target_group_size: int = 0

    @property
    def listen_hosts(self) -> tuple[str, ...]:
        """The addresses to listen on: the given ones or both loopbacks."""
        return self.hosts or DEFAULT_HOSTS

    @property
    def optional_hosts(self) -> tuple[str, ...]:
        """Addresses whose bind may fail with a warning: ::1 when defaulted, :: beside
        0.0.0.0 (a machine without IPv6)."""
        if self.hosts:
            return ("::",) if "0.0.0.0" in self.hosts else ()
        return DEFAULT_HOSTS[1:]

    @property
    def host(self) -> str:
        """The first listen address, for URLs and connection names."""
        return self.listen_hosts[0]
