"""The management API over HTTPS (``--management-ssl-cert/-key``, rabbitmq.conf
``management.ssl.*``): a broker process serves the API and the web UI with TLS only on that
listener; amqpqctl reaches it with ``--ssl``. Certificates from tests/support/certs.py.
Source: https://www.rabbitmq.com/docs/management#single-listener-https.
"""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.broker_process import REPO_ROOT, BrokerProcess, free_port
from tests.support.certs import OPENSSL, make_ca, make_leaf

pytestmark = [pytest.mark.timeout(60),
              pytest.mark.skipif(OPENSSL is None, reason="openssl command not found")]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("mgmt-tls")
    make_ca(d)
    make_leaf(d, "server", "127.0.0.1")
    return d


@pytest.fixture(scope="module")
def https_broker(certs: Path, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[BrokerProcess]:
    d = tmp_path_factory.mktemp("mgmt-tls-broker")
    conf = d / "amqpq.conf"  # the rabbitmq.conf keys, as a RabbitMQ operator writes them
    conf.write_text(f"management.ssl.port = {free_port()}\n"
                    f"management.ssl.certfile = {certs / 'server.pem'}\n"
                    f"management.ssl.keyfile = {certs / 'server.key'}\n")
    with BrokerProcess(d / "data", d / "broker.log", management=True, log_level="info",
                       args=("--config", str(conf))) as b:
        yield b


def _port(b: BrokerProcess) -> int:
    line = next(x for x in b.log_text().splitlines() if "management API listening" in x)
    return int(line.split(" port ")[1].split()[0])


def _get(url: str, context: ssl.SSLContext | None = None) -> Any:
    req = urllib.request.Request(url)
    req.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    with urllib.request.urlopen(req, timeout=10, context=context) as resp:
        return json.loads(resp.read())


def test_the_api_answers_over_https_only(https_broker: BrokerProcess, certs: Path) -> None:
    port = _port(https_broker)
    ctx = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    overview = _get(f"https://127.0.0.1:{port}/api/overview", ctx)
    assert {"protocol": "https", "port": port} in [
        {"protocol": x["protocol"], "port": x["port"]} for x in overview["listeners"]]
    assert _get(f"https://127.0.0.1:{port}/api/health/checks/protocol-listener/https",
                ctx) == {"status": "ok", "protocol": "https"}
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        _get(f"http://127.0.0.1:{port}/api/overview")  # plain HTTP gets no answer
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        _get(f"https://127.0.0.1:{port}/api/overview", ssl.create_default_context())


def test_amqpqctl_over_https(https_broker: BrokerProcess, certs: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "amqpqctl", "--port", str(_port(https_broker)), "--ssl",
         "--ssl-ca-cert-file", str(certs / "ca.pem"), "list_vhosts", "-q", "-s"],
        capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert (out.returncode, out.stdout.split()) == (0, ["/"]), out.stderr


def test_a_key_without_its_certificate_is_one_line(tmp_path: Path, certs: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "amqp_server", "--port", "0", "--data-dir", str(tmp_path),
         "--management-ssl-key", str(certs / "server.key")],
        capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1] == (
        "amqpq-server: error: --management-ssl-cert and --management-ssl-key go together")
