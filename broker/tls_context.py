"""The server side of TLS, shared by every TLS listener of a node: AMQPS
(:mod:`amqp_server.tls`) and the management API over HTTPS (:mod:`management.options`).

Source: https://www.rabbitmq.com/docs/ssl (TLS 1.2 at least; peer verification options).
"""

from __future__ import annotations

import ssl

from broker.config import TLSConfig


def make_context(cfg: TLSConfig) -> ssl.SSLContext:
    """The server-side SSLContext: TLS 1.2 or newer, ``cfg``'s certificate and key, client
    certificates asked for (``verify_peer``) or required (``fail_if_no_peer_cert``) against
    ``cacertfile``.

    Raises:
        OSError / ssl.SSLError: unreadable or mismatched certificate, key or CA file.
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cfg.certfile or "", cfg.keyfile)
    if cfg.cacertfile:
        ctx.load_verify_locations(cfg.cacertfile)
    if cfg.fail_if_no_peer_cert:
        ctx.verify_mode = ssl.CERT_REQUIRED
    elif cfg.verify_peer:
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx
