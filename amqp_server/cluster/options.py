"""``amqpq-server``'s cluster options: the node's name, etcd (URL, TLS, auth), the node
links' port, address, secret and TLS.

Source: https://www.rabbitmq.com/docs/clustering, https://www.rabbitmq.com/docs/clustering-ssl,
etcd's security model (https://etcd.io/docs/v3.4/op-guide/security/,
https://etcd.io/docs/v3.4/op-guide/authentication/).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from amqp_server.cluster.membership import parse_etcd_url
from broker.config import ClusterTLSConfig, EtcdOptions

#: ``--queue-leader-locator`` / ``queue_leader_locator``: RabbitMQ 3.13's values, then the
#: older ones it reads as ``balanced``
LOCATOR_VALUES = ("client-local", "balanced", "random", "least-leaders", "min-masters")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``--node-name`` and ``--cluster-*`` command-line options."""
    p.add_argument("--node-name", default=None, metavar="NAME",
                   help="this node's name in a cluster and the API (default amqpq@<host>)")
    p.add_argument("--cluster-etcd", default=None, metavar="URL",
                   help="join (or form) the cluster whose membership is in this etcd "
                        "(http://HOST:PORT or https://HOST:PORT; default: a single node, "
                        "no etcd)")
    p.add_argument("--cluster-etcd-cacert", default=None, metavar="FILE",
                   help="CA certificates that sign etcd's server certificate (PEM, https)")
    p.add_argument("--cluster-etcd-cert", default=None, metavar="FILE",
                   help="this node's client certificate for etcd (PEM, https)")
    p.add_argument("--cluster-etcd-key", default=None, metavar="FILE",
                   help="the key of --cluster-etcd-cert (PEM)")
    p.add_argument("--cluster-etcd-user", default=None, metavar="NAME",
                   help="etcd user (etcd auth enabled; with --cluster-etcd-password-file)")
    p.add_argument("--cluster-etcd-password-file", default=None, metavar="FILE",
                   help="file whose first line is the etcd user's password")
    p.add_argument("--cluster-lease", type=int, default=5, metavar="SECONDS",
                   help="seconds without a refresh before etcd forgets a node (its lease): "
                        "a dead leader's quorum queues fail over this long after it died "
                        "(default 5, at least 2)")
    p.add_argument("--cluster-port", type=int, default=25672,
                   help="port other nodes reach this one on (default 25672; 0: a free one)")
    p.add_argument("--cluster-host", default=None, metavar="ADDRESS",
                   help="address the node links listen on and other nodes reach this one at "
                        "(default: the first --host)")
    p.add_argument("--cluster-secret-file", default=None, metavar="FILE",
                   help="the cluster's shared secret (first line; default: one kept in etcd)")
    p.add_argument("--cluster-tls-cert", default=None, metavar="FILE",
                   help="this node's certificate for the node links (PEM); enables TLS on "
                        "them, both ways, with --cluster-tls-key and --cluster-tls-cacert")
    p.add_argument("--cluster-tls-key", default=None, metavar="FILE",
                   help="the key of --cluster-tls-cert (PEM)")
    p.add_argument("--cluster-tls-cacert", default=None, metavar="FILE",
                   help="CA certificates that sign every node's certificate (PEM)")
    p.add_argument("--queue-leader-locator", default=None, choices=LOCATOR_VALUES,
                   help="where new quorum queue leaders go when no policy or argument says: "
                        "client-local (the declaring client's node, default) or balanced "
                        "(the node leading the fewest; random, least-leaders: balanced)")
    p.add_argument("--quorum-target-group-size", type=int, default=0, metavar="N",
                   help="add running nodes to quorum queues with fewer than N members, "
                        "every 10 s (default 0: never)")


def from_args(a: argparse.Namespace, p: argparse.ArgumentParser) -> dict[str, Any]:
    """The :class:`~broker.config.BrokerConfig` fields of the cluster options (exits with
    one line, via ``p.error``, on a bad or inconsistent set)."""
    tls_files = a.cluster_etcd_cacert or a.cluster_etcd_cert or a.cluster_etcd_key
    if a.cluster_etcd:
        try:
            _, _, secure = parse_etcd_url(a.cluster_etcd)
        except ValueError as exc:
            p.error(str(exc))
        if tls_files and not secure:
            p.error("--cluster-etcd-cacert, --cluster-etcd-cert and --cluster-etcd-key need "
                    "an https:// --cluster-etcd")
    elif tls_files or a.cluster_etcd_user or a.cluster_etcd_password_file:
        p.error("the --cluster-etcd-* options need --cluster-etcd")
    if a.cluster_lease < 2:
        p.error(f"--cluster-lease must be at least 2 (seconds), got {a.cluster_lease}")
    if not 0 <= a.cluster_port <= 65535:
        p.error(f"--cluster-port must be 0..65535, got {a.cluster_port}")
    tls = ClusterTLSConfig(a.cluster_tls_cert, a.cluster_tls_key, a.cluster_tls_cacert)
    if tls.enabled and not (tls.keyfile and tls.cacertfile):
        p.error("--cluster-tls-cert needs --cluster-tls-key and --cluster-tls-cacert")
    if not tls.enabled and (tls.keyfile or tls.cacertfile):
        p.error("--cluster-tls-key and --cluster-tls-cacert need --cluster-tls-cert")
    if a.quorum_target_group_size < 0:
        p.error(f"--quorum-target-group-size must be >= 0, got {a.quorum_target_group_size}")
    target = a.quorum_target_group_size
    enabled = getattr(a, "quorum_reconciliation", None)  # rabbitmq.conf's .enabled
    if enabled is False:
        target = 0
    elif enabled and not target:
        target = 3  # the default group size
    locator = a.queue_leader_locator
    if locator in ("random", "least-leaders", "min-masters"):
        locator = "balanced"  # RabbitMQ 3.13 reads the older values so
    etcd = EtcdOptions(
        a.cluster_etcd, a.cluster_etcd_cacert, a.cluster_etcd_cert, a.cluster_etcd_key,
        a.cluster_etcd_user,
        Path(a.cluster_etcd_password_file) if a.cluster_etcd_password_file else None,
        a.cluster_lease)
    if bool(etcd.cert) != bool(etcd.key):
        p.error("--cluster-etcd-cert and --cluster-etcd-key go together")
    if bool(etcd.user) != bool(etcd.password_file):
        p.error("--cluster-etcd-user and --cluster-etcd-password-file go together")
    return {
        "node_name": a.node_name, "cluster_etcd": a.cluster_etcd,
        "cluster_port": a.cluster_port, "cluster_host": a.cluster_host,
        "cluster_secret_file": Path(a.cluster_secret_file) if a.cluster_secret_file else None,
        "cluster_tls": tls, "etcd": etcd, "queue_leader_locator": locator,
        "quorum_target_group_size": target,
    }
