"""AMQPS: the TLS listener's settings, and the EXTERNAL mechanism's user name.

A TLS listener (default port 5671) is opened when a certificate and key are given. With
``--ssl-verify-peer`` the client's certificate is checked against ``--ssl-cacert``;
``--ssl-fail-if-no-peer-cert`` refuses clients without one. A client that presents a valid
certificate may log in with the EXTERNAL SASL mechanism as the user named by the
certificate's subject CN (RabbitMQ's ``rabbitmq_auth_mechanism_ssl`` with
``ssl_cert_login_from = common_name``).

Source: https://www.rabbitmq.com/docs/ssl, https://www.rabbitmq.com/docs/access-control
(certificate-based authentication).
"""

from __future__ import annotations

import argparse
from typing import Any

from broker.config import TLSConfig
from broker.tls_context import make_context

__all__ = ["add_arguments", "from_args", "make_context", "peer_common_name"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--ssl-*`` command-line options."""
    parser.add_argument("--ssl-port", type=int, default=5671, help="AMQPS port (0: free port)")
    parser.add_argument("--ssl-cert", help="server certificate (PEM); enables AMQPS")
    parser.add_argument("--ssl-key", help="server private key (PEM)")
    parser.add_argument("--ssl-cacert", help="CA certificates to verify clients (PEM)")
    parser.add_argument("--ssl-verify-peer", action="store_true",
                        help="ask clients for a certificate and verify it")
    parser.add_argument("--ssl-fail-if-no-peer-cert", action="store_true",
                        help="refuse clients without a valid certificate")


def from_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> TLSConfig:
    """TLSConfig from parsed options (exits with one line on an inconsistent set)."""
    cfg = TLSConfig(args.ssl_port, args.ssl_cert, args.ssl_key, args.ssl_cacert,
                    args.ssl_verify_peer or args.ssl_fail_if_no_peer_cert,
                    args.ssl_fail_if_no_peer_cert)
    if cfg.certfile and not cfg.keyfile:
        parser.error("--ssl-cert needs --ssl-key")
    if cfg.verify_peer and not cfg.cacertfile:
        parser.error("--ssl-verify-peer needs --ssl-cacert")
    if not 0 <= cfg.port <= 65535:
        parser.error(f"--ssl-port must be 0..65535, got {cfg.port}")
    return cfg


def peer_common_name(transport: Any) -> str | None:
    """The subject CN of the client's verified certificate, or None."""
    cert = transport.get_extra_info("peercert") if transport is not None else None
    if not cert:
        return None
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None
