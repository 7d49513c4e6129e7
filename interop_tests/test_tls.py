"""AMQPS with pika: PLAIN over TLS, EXTERNAL by client certificate, refusal without one.

Certificates (a CA, a server certificate for 127.0.0.1, a client certificate with CN=guest)
are made at test time with the ``openssl`` command; the test skips without it. The broker runs
as its own process with ``--ssl-*`` options on free ports.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from interop_tests.conftest import cluster_size, running_cluster, worker_args
from tests.support.broker_process import BrokerProcess

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl command not found"),
]


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _make_certs(d: Path) -> None:
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
             "/CN=amqpq-test-ca", "-keyout", "ca.key", "-out", "ca.pem", cwd=d)
    for name, cn, ext in (("server", "127.0.0.1", "subjectAltName=IP:127.0.0.1"),
                          ("client", "guest", "extendedKeyUsage=clientAuth")):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={cn}",
                 "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)
        (d / f"{name}.ext").write_text(ext + "\n")
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "1", "-extfile", f"{name}.ext",
                 "-out", f"{name}.pem", cwd=d)


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    d = tmp_path_factory.mktemp("tls")
    _make_certs(d)
    tls = ("--ssl-port", "0", "--ssl-cert", str(d / "server.pem"), "--ssl-key",
           str(d / "server.key"), "--ssl-cacert", str(d / "ca.pem"), "--ssl-verify-peer")
    size = cluster_size()  # AMQPQ_TEST_CLUSTER: every node has TLS, the tests use n1
    with (running_cluster(d, size, *tls) if size else
          BrokerProcess(d / "data", d / "broker.log", args=(*tls, *worker_args()))
          ) as broker:  # waits for amqps:// too
        yield broker.tls_port, d


def _params(port: int, d: Path, client_cert: bool,
            credentials: pika.credentials.PlainCredentials | pika.credentials.ExternalCredentials,
            ) -> pika.ConnectionParameters:
    ctx = ssl.create_default_context(cafile=str(d / "ca.pem"))
    if client_cert:
        ctx.load_cert_chain(str(d / "client.pem"), str(d / "client.key"))
    return pika.ConnectionParameters("127.0.0.1", port, credentials=credentials,
                                     ssl_options=pika.SSLOptions(ctx, "127.0.0.1"),
                                     connection_attempts=1, socket_timeout=5)


def _round_trip(conn: pika.BlockingConnection) -> bytes | None:
    ch = conn.channel()
    queue = ch.queue_declare("", exclusive=True).method.queue
    ch.basic_publish("", queue, b"over tls")
    _, _, body = ch.basic_get(queue, auto_ack=True)
    return body


def test_plain_login_over_tls(tls_broker: tuple[int, Path]) -> None:
    port, d = tls_broker
    conn = pika.BlockingConnection(
        _params(port, d, False, pika.PlainCredentials("guest", "guest")))
    try:
        assert _round_trip(conn) == b"over tls"
    finally:
        conn.close()


def test_external_login_by_certificate_cn(tls_broker: tuple[int, Path]) -> None:
    port, d = tls_broker
    conn = pika.BlockingConnection(
        _params(port, d, True, pika.credentials.ExternalCredentials()))
    try:
        assert _round_trip(conn) == b"over tls"
    finally:
        conn.close()


def test_external_without_certificate_is_refused(tls_broker: tuple[int, Path]) -> None:
    port, d = tls_broker
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        pika.BlockingConnection(
            _params(port, d, False, pika.credentials.ExternalCredentials()))
