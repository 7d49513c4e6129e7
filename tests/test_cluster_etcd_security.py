"""etcd is not a back door (issue #28): a cluster whose etcd runs TLS with client certificates
and etcd's auth (``tests.support.etcd``), two nodes sharing a ``--cluster-secret-file``.

* Without the credentials (plain http, no client certificate, a CA that did not sign etcd's
  certificate, no user, a wrong password) nothing under ``/amqpq/`` can be read or written.
* With ``--cluster-secret-file`` the secret is in no key of etcd.
* A wrong, missing or empty password file stops the node with one line (no password in it);
  so do a CA, certificate or key that is not PEM or a key that is not the certificate's.
* The node authenticates again when etcd forgot its token (``--auth-token-ttl 2``: the node
  stopped 3 s; etcd restarted), and keeps applying records.
* By design, the ``amqpq`` user can write records every node applies (an administrator made
  by one etcd put): write access to etcd is administrator access to the cluster.

Skipped without etcd (``make etcd-deps``) or the ``aetcd`` client.
"""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

from tests.support.broker_process import REPO_ROOT, BrokerProcess
from tests.support.certs import make_ca
from tests.support.cluster import api, cluster_node, connect, wait_until
from tests.support.etcd import ETCD, Etcd, certificates, running_etcd, write_secret

aetcd = pytest.importorskip("aetcd")
pytestmark = pytest.mark.skipif(ETCD is None, reason="etcd not installed (make etcd-deps)")

from amqp_server.cluster.etcd_client import AuthenticationFailed, open_client  # noqa: E402
from amqp_server.workers import link_values  # noqa: E402
from broker.config import EtcdOptions  # noqa: E402

ROOT = b"/amqpq/default/"
SECRET = "node-link-secret-" + os.urandom(8).hex()


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Etcd]:
    with running_etcd(tmp_path_factory.mktemp("etcd"), token_ttl=2) as running:
        yield running


@pytest.fixture(scope="module")
def nodes(etcd: Etcd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[BrokerProcess]]:
    base = tmp_path_factory.mktemp("cluster")
    write_secret(base / "secret", SECRET)
    started = []
    try:
        for name in ("n1", "n2"):
            started.append(cluster_node(base, name, etcd, "--cluster-secret-file",
                                        str(base / "secret")).start())
        wait_until(lambda: all(n["running"] for n in api(started[0], "/api/nodes"))
                   and len(api(started[0], "/api/nodes")) == 2, "both nodes running")
        yield started
    finally:
        for node in started:
            node.close()


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 20))


def options(etcd: Etcd, cert: bool = True, user: str | None = None,
            password_file: Path | None = None, cacert: Path | None = None) -> EtcdOptions:
    c = etcd.certs
    return EtcdOptions(etcd.url, str(cacert or c / "ca.pem"),
                       str(c / "client.pem") if cert else None,
                       str(c / "client.key") if cert else None, user, password_file)


def as_root(etcd: Etcd, tmp: Path) -> EtcdOptions:
    write_secret(tmp / "root.password", etcd.root_password)
    return options(etcd, user="root", password_file=tmp / "root.password")


async def attempt(opts: EtcdOptions | None, etcd: Etcd) -> list[str]:
    """What a client with ``opts`` (None: plain http to the https port) gets when it reads
    the cluster's keys and writes a log record: each refusal's text, or "read"/"wrote"."""
    client = aetcd.Client("127.0.0.1", etcd.port, timeout=3) if opts is None \
        else open_client(opts)
    out = []
    try:
        for action in (lambda: client.get_prefix(ROOT),
                       lambda: client.put(ROOT + b"log/zz-intruder", b"{}")):
            try:
                await action()
                out.append("done")
            except aetcd.exceptions.ClientError as exc:
                out.append(f"{type(exc).__name__}: {exc}")
    finally:
        await client.close()
    return out


def test_without_the_credentials_nothing_can_be_read_or_written(
        etcd: Etcd, nodes: list[BrokerProcess], tmp_path: Path) -> None:
    other_ca = make_ca(tmp_path / "other")
    write_secret(tmp_path / "wrong", "not-the-password")
    refusals = {
        "plain http": run(attempt(None, etcd)),
        "no client certificate": run(attempt(options(etcd, cert=False), etcd)),
        "etcd's certificate not signed by our CA": run(attempt(options(etcd, cacert=other_ca),
                                                               etcd)),
        "no user": run(attempt(options(etcd), etcd)),
        "wrong password": run(attempt(options(etcd, user="amqpq",
                                              password_file=tmp_path / "wrong"), etcd)),
    }
    for who, got in refusals.items():
        assert len(got) == 2 and "done" not in got, (who, got)
    assert all("permission denied" in r for r in refusals["no user"]), refusals["no user"]
    assert all(r.startswith(f"{AuthenticationFailed.__name__}: etcdserver: authentication "
                            "failed") for r in refusals["wrong password"])

    async def everything() -> dict[bytes, bytes]:
        client = open_client(as_root(etcd, tmp_path))
        try:
            return {kv.key: kv.value for kv in await client.get_prefix(ROOT)}
        finally:
            await client.close()

    keys = run(everything())
    assert ROOT + b"nodes/n1" in keys  # there was something to read
    assert ROOT + b"log/zz-intruder" not in keys  # and nothing was written


def test_with_a_secret_file_no_key_in_etcd_holds_the_secret(
        etcd: Etcd, nodes: list[BrokerProcess], tmp_path: Path) -> None:
    ch = connect(nodes[0]).channel()  # the node link works: the cluster formed on the file
    ch.queue_declare("on-n1", durable=True)
    pub = connect(nodes[1]).channel()
    pub.confirm_delivery()
    pub.basic_publish("", "on-n1", b"through n2", pika.BasicProperties(delivery_mode=2))

    async def everything() -> list[tuple[bytes, bytes]]:
        client = open_client(as_root(etcd, tmp_path))
        try:
            return [(kv.key, kv.value) for kv in await client.get_all()]
        finally:
            await client.close()

    keys = run(everything())
    assert any(key.startswith(ROOT + b"log/") for key, _ in keys)
    assert ROOT + b"secret" not in dict(keys)
    secret = SECRET.encode()
    assert not [key for key, value in keys if secret in key or secret in value
                or base64.b64encode(secret) in value or secret.hex().encode() in value]


@pytest.mark.parametrize("case", ["wrong", "missing", "empty"])
def test_a_bad_password_file_is_one_line_and_exit_1(etcd: Etcd, tmp_path: Path,
                                                    case: str) -> None:
    password = "wrong-" + os.urandom(6).hex()
    file = tmp_path / "password"
    if case != "missing":
        write_secret(file, password if case == "wrong" else "")
    args = list(etcd.args)
    args[args.index("--cluster-etcd-password-file") + 1] = str(file)
    out = subprocess.run(
        [sys.executable, "-m", "amqp_server", "--port", "0", "--data-dir", str(tmp_path / "d"),
         "--no-management", "--no-prometheus", "--node-name", "bad", *args],
        capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert out.returncode == 1
    last = out.stderr.strip().splitlines()[-1]
    expected = {
        "wrong": f"amqpq-server: etcd at {etcd.url} refused user amqpq: etcdserver: "
                 "authentication failed, invalid user ID or password",
        "missing": f"amqpq-server: cannot read --cluster-etcd-password-file {file}: "
                   "No such file or directory",
        "empty": f"amqpq-server: --cluster-etcd-password-file {file} is empty",
    }[case]
    assert last.startswith(expected), out.stderr
    assert password not in out.stderr + out.stdout


@pytest.mark.parametrize(("args", "message"), [
    (("--cluster-etcd", "ftp://127.0.0.1:2379"), "must be http://HOST:PORT or https://"),
    (("--cluster-etcd", "https://amqpq:pw@127.0.0.1:2379"), "must not carry credentials"),
    (("--cluster-etcd", "http://127.0.0.1:2379", "--cluster-etcd-cacert", "ca.pem"),
     "need an https:// --cluster-etcd"),
    (("--cluster-etcd", "https://127.0.0.1:2379", "--cluster-etcd-user", "amqpq"),
     "--cluster-etcd-user and --cluster-etcd-password-file go together"),
])
def test_bad_etcd_options_are_one_line(args: tuple[str, ...], message: str,
                                       tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "amqp_server", "--port", "0", "--data-dir", str(tmp_path), *args],
        capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert out.returncode != 0
    assert message in out.stderr.strip().splitlines()[-1]
    assert "pw@" not in out.stderr


@pytest.mark.parametrize(("files", "reason"), [
    (("not-pem", "client.pem", "client.key"), "NO_CERTIFICATE_OR_CRL_FOUND"),
    (("ca.pem", "client.pem", "server.key"), "KEY_VALUES_MISMATCH"),
    (("ca.pem", "not-pem", "client.key"), "not a PEM certificate or key"),
])
def test_a_bad_tls_file_is_one_line_and_exit_1(files: tuple[str, str, str], reason: str,
                                               tmp_path: Path) -> None:
    (tmp_path / "not-pem").write_text("not a certificate\n")
    ca, cert, key = (tmp_path / f if f == "not-pem" else certificates() / f for f in files)
    out = subprocess.run(
        [sys.executable, "-m", "amqp_server", "--port", "0", "--data-dir", str(tmp_path / "d"),
         "--no-management", "--no-prometheus", "--cluster-etcd", "https://127.0.0.1:1",
         "--cluster-etcd-cacert", str(ca), "--cluster-etcd-cert", str(cert),
         "--cluster-etcd-key", str(key)],
        capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert out.returncode == 1
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("amqpq-server: cannot use --cluster-etcd-") and reason in last, \
        out.stderr


def declared_everywhere(nodes: list[BrokerProcess], through: BrokerProcess, name: str) -> None:
    """``name`` declared through ``through`` and seen by a passive declare on every node."""
    conn = connect(through)
    conn.channel().exchange_declare(name, "fanout")
    conn.close()
    for node in nodes:
        def seen(node: BrokerProcess = node) -> bool:
            c = connect(node)
            try:
                c.channel().exchange_declare(name, "fanout", passive=True)
                return True
            finally:
                c.close()

        wait_until(seen, f"{name} on {node.log_path.stem}")


def test_a_node_authenticates_again_once_its_token_expired(
        etcd: Etcd, nodes: list[BrokerProcess]) -> None:
    n2 = nodes[1]
    os.kill(n2.pid, signal.SIGSTOP)  # 3 s: longer than the token's 2 s, less than the lease
    try:
        time.sleep(3)
    finally:
        os.kill(n2.pid, signal.SIGCONT)
    wait_until(lambda: "etcd: authenticated again as amqpq (etcdserver: invalid auth token)"
               in n2.log_path.read_text(), "n2 authenticated again")
    declared_everywhere(nodes, n2, "after-expiry")


def test_nodes_go_on_after_etcd_restarted(etcd: Etcd, nodes: list[BrokerProcess]) -> None:
    # etcd forgets every token and the watches break: the watches are created again with a
    # new token, calls refused for the old one are sent again (with aetcd's authentication
    # once at connect, neither declare is ever answered)
    etcd.restart()
    declared_everywhere(nodes, nodes[0], "after-restart-1")
    declared_everywhere(nodes, nodes[1], "after-restart-2")
    assert [n["running"] for n in api(nodes[0], "/api/nodes")] == [True, True]
    password = etcd.password_file.read_text().strip()
    for node in nodes:  # after authenticating again and again: no password, no secret
        text = node.log_path.read_text()
        assert password not in text and SECRET not in text


def test_the_amqpq_user_can_write_records_every_node_applies(
        etcd: Etcd, nodes: list[BrokerProcess], tmp_path: Path) -> None:
    """By design (docs/cluster.md): write access to etcd is administrator access."""
    api(nodes[0], "/api/users/template", "PUT", {"password": "t3mpl4te",
                                                 "tags": "administrator"})

    async def forge() -> None:
        client = open_client(options(etcd, user="amqpq", password_file=etcd.password_file))
        try:
            for kv in await client.get_prefix(ROOT + b"log/"):
                rec = link_values.decode(kv.value)
                if "template" in repr(rec[3]):
                    op = renamed(rec[3], "template", "intruder")
                    await client.put(ROOT + b"log/zz-forged",
                                     link_values.encode(("apply", -1, 0, op, "")))
                    return
            raise AssertionError("no record of user template")
        finally:
            await client.close()

    run(forge())
    req = urllib.request.Request(f"http://127.0.0.1:{nodes[1].management_port}/api/whoami")
    req.add_header("Authorization", "Basic " + base64.b64encode(b"intruder:t3mpl4te").decode())

    def logged_in() -> Any:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status == 200

    wait_until(logged_in, "the forged administrator logs in on n2")
    assert "administrator" in str(api(nodes[1], "/api/users/intruder")["tags"])


def renamed(value: Any, old: str, new: str) -> Any:
    """``value`` with every string equal to ``old`` replaced by ``new`` (tuples, lists, dicts
    walked)."""
    if isinstance(value, str):
        return new if value == old else value
    if isinstance(value, tuple | list):
        return type(value)(renamed(v, old, new) for v in value)
    if isinstance(value, dict):
        return {renamed(k, old, new): renamed(v, old, new) for k, v in value.items()}
    return value
