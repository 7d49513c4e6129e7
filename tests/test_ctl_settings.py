"""Where ``amqpqctl`` finds the broker: command line > ``AMQPQCTL_*`` environment variables >
a rabbitmqadmin-style configuration file (``--config``/``-c``, ``--node``/``-N``,
``~/.amqpqctl.conf``, ``~/.rabbitmqadmin.conf``) > defaults; one-line errors for a bad file,
section, setting or argument; click's shell completion.

``amqpqctl`` runs as a process (``python -m amqpqctl``, this checkout) with a controlled
environment and ``HOME``, against a broker subprocess.

Source: https://www.rabbitmq.com/docs/management-cli (configuration file),
https://click.palletsprojects.com/en/stable/shell-completion/.
"""

from __future__ import annotations

import http.server
import json
import ssl
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import test_ctl
from tests.support.broker_process import free_port
from tests.test_ctl import CTL_CMD, Node, ctl_env, run, table

# fixtures: the broker of the test_ctl*.py modules in a row (tests/support/shared_fixtures.py)
ctl_node, node = test_ctl.ctl_node, test_ctl.node


@pytest.fixture(scope="module")
def dead_port() -> int:
    return free_port()


def amqpqctl(*args: str, home: Path | None = None,
             **env: str) -> subprocess.CompletedProcess[str]:
    """``amqpqctl ARGS`` with only ``env``'s ``AMQPQCTL_*`` variables and ``HOME``."""
    extra = dict(env)
    if home is not None:
        extra["HOME"] = str(home)
    return subprocess.run([*CTL_CMD, *args], capture_output=True, text=True, timeout=30,
                          env=ctl_env(**extra))


def refused(port: int) -> str:
    return (f"Error: nothing listens on port {port} on 127.0.0.1 (connection refused): is the "
            "broker running? the management port is 15672 by default\n")


def test_environment_variables(node: Node) -> None:
    vh = f"env-{uuid.uuid4().hex[:6]}"
    user = f"envu-{uuid.uuid4().hex[:6]}"
    run(node, "add_vhost", vh)
    run(node, "add_user", user, "pw-env", "--tags", "administrator")
    run(node, "set_permissions", "-p", vh, user, ".*", ".*", ".*")
    run(node, "-p", vh, "declare_queue", "env-q")
    try:
        res = amqpqctl("list_queues", AMQPQCTL_PORT=str(node.http_port),
                       AMQPQCTL_USERNAME=user, AMQPQCTL_PASSWORD="pw-env",
                       AMQPQCTL_VHOST=vh, AMQPQCTL_FORMATTER="json")
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout)[0]["name"] == "env-q"
        res = amqpqctl("list_queues", AMQPQCTL_URL=f"http://127.0.0.1:{node.http_port}",
                       AMQPQCTL_USERNAME=user, AMQPQCTL_PASSWORD="wrong")
        assert (res.returncode, res.stderr) == (
            1, f"Error: login failed for user '{user}' (HTTP 401): check --user and "
               "--password\n")
        # a vhost from the environment is a default for vhost commands, it does not
        # narrow a broker-wide export
        res = amqpqctl("export_definitions", "-", AMQPQCTL_PORT=str(node.http_port),
                       AMQPQCTL_VHOST=vh)
        assert vh in {v["name"] for v in json.loads(res.stdout)["vhosts"]}
    finally:
        run(node, "delete_vhost", vh)
        run(node, "delete_user", user)


def test_command_line_wins_over_environment(node: Node, dead_port: int) -> None:
    res = amqpqctl("--port", str(dead_port), "list_vhosts",
                   AMQPQCTL_PORT=str(node.http_port))
    assert (res.returncode, res.stderr) == (69, refused(dead_port))
    res = amqpqctl("--port", str(node.http_port), "list_vhosts", "--formatter", "csv",
                   AMQPQCTL_PORT=str(dead_port), AMQPQCTL_FORMATTER="json")
    assert res.returncode == 0 and res.stdout.splitlines()[:2] == ['"name"', '"/"']


def test_configuration_file_sections_and_precedence(node: Node, dead_port: int,
                                                   tmp_path: Path) -> None:
    conf = tmp_path / "admin.conf"
    conf.write_text(f"""# as rabbitmqadmin's example file
[default]
hostname = 127.0.0.1
port = {node.http_port}
username = guest
password = guest
vhost = /         # used as default for declare / delete / list
declare_vhost = / # a rabbitmqadmin setting amqpqctl has no use for

[broken_port]
port = {dead_port}

[as_json]
port = {node.http_port}
formatter = json
""")
    res = amqpqctl("--config", str(conf), "list_vhosts")
    assert res.returncode == 0, res.stderr
    assert ["/"] in table(res.stdout)
    res = amqpqctl("-c", str(conf), "-N", "broken_port", "list_vhosts")
    assert (res.returncode, res.stderr) == (69, refused(dead_port))
    res = amqpqctl("-c", str(conf), "--node", "as_json", "list_vhosts", "name")
    assert {"name": "/"} in json.loads(res.stdout)
    # the environment wins over the file, the command line over both
    res = amqpqctl("-N", "broken_port", "list_vhosts", AMQPQCTL_CONFIG=str(conf),
                   AMQPQCTL_PORT=str(node.http_port))
    assert res.returncode == 0, res.stderr
    res = amqpqctl("-c", str(conf), "-P", str(dead_port), "list_vhosts",
                   AMQPQCTL_PORT=str(node.http_port))
    assert (res.returncode, res.stderr) == (69, refused(dead_port))
    res = amqpqctl("-c", str(conf), "list_vhosts", AMQPQCTL_NODE="broken_port")
    assert (res.returncode, res.stderr) == (69, refused(dead_port))


def test_default_configuration_files(node: Node, dead_port: int, tmp_path: Path) -> None:
    (tmp_path / ".rabbitmqadmin.conf").write_text(f"[default]\nport = {node.http_port}\n")
    res = amqpqctl("list_vhosts", home=tmp_path)
    assert res.returncode == 0 and ["/"] in table(res.stdout), res.stderr
    (tmp_path / ".amqpqctl.conf").write_text(f"[default]\nport = {dead_port}\n")
    res = amqpqctl("list_vhosts", home=tmp_path)  # ~/.amqpqctl.conf first
    assert (res.returncode, res.stderr) == (69, refused(dead_port))
    empty = tmp_path / "empty"
    empty.mkdir()
    res = amqpqctl("-N", "prod", "list_vhosts", home=empty)
    assert (res.returncode, res.stderr) == (
        1, "Error: --node prod: no configuration file (--config FILE, or ~/.amqpqctl.conf or "
           "~/.rabbitmqadmin.conf)\n")


@pytest.mark.parametrize(("text", "args", "message"), [
    (None, (), "cannot read configuration file '{conf}': No such file or directory"),
    ("port = 1\n", (), "configuration file '{conf}' is not valid INI: File contains no "
                       "section headers."),
    ("[default]\nport = 1\n", ("-N", "prod"),
     "no section [prod] in configuration file '{conf}' (sections: default)"),
    ("[default]\nhost = h\n", (),
     "configuration file '{conf}', section [default]: unknown setting 'host' (known: "
     "base_uri, hostname, password, path_prefix, port, request_timeout, ssl, "
     "ssl_ca_cert_file, ssl_cert_file, ssl_disable_hostname_verification, ssl_insecure, "
     "ssl_key_file, username, vhost, formatter)"),
    ("[default]\nport = fifteen\n", (),
     "configuration file '{conf}', section [default]: port must be a number, got 'fifteen'"),
    ("[default]\nssl = maybe\n", (),
     "configuration file '{conf}', section [default]: ssl must be true or false, got "
     "'maybe'"),
    ("[default]\nformatter = xml\n", (),
     "configuration file '{conf}', section [default]: formatter must be one of table, "
     "pretty_table, csv, json, got 'xml'"),
])
def test_a_bad_configuration_is_one_line(tmp_path: Path, text: str | None,
                                         args: tuple[str, ...], message: str) -> None:
    conf = tmp_path / "bad.conf"
    if text is not None:
        conf.write_text(text)
    res = amqpqctl("-c", str(conf), *args, "list_vhosts")
    assert (res.returncode, res.stdout, res.stderr) == (
        1, "", "Error: " + message.format(conf=conf) + "\n")


def test_https_settings(tmp_path: Path, dead_port: int) -> None:
    """``--ssl`` (or ``ssl = True`` in the file) makes the URL https; a CA file that cannot
    be loaded is one line."""
    res = amqpqctl("--ssl", "-P", str(dead_port), "list_vhosts")
    assert (res.returncode, res.stderr) == (69, refused(dead_port))
    conf = tmp_path / "tls.conf"
    conf.write_text(f"[tls]\nssl = True\nport = {dead_port}\n"
                    f"ssl_ca_cert_file = {tmp_path / 'missing-ca.pem'}\n")
    res = amqpqctl("-c", str(conf), "-N", "tls", "list_vhosts")
    assert res.returncode == 1
    assert res.stderr.startswith("Error: cannot load the TLS certificate files: ")
    assert res.stderr.count("\n") == 1


@pytest.mark.parametrize(("args", "code", "message"), [
    (("--formatter", "xml", "list_queues"), 64,
     "Error: Invalid value for '--formatter' / '--format': 'xml' is not one of 'table', "
     "'pretty_table', 'csv', 'json'. (see 'amqpqctl --help')"),
    (("list_channels", "bogus"), 64,
     "Error: unknown column(s): bogus; known: acks_uncommitted, confirm, connection, "
     "consumer_count, global_prefetch_count, messages_unacknowledged, messages_uncommitted, "
     "messages_unconfirmed, name, number, pid, prefetch_count, transactional, user, vhost"),
    (("export_definitions",), 64,
     "Error: Missing argument 'FILE'. (see 'amqpqctl export_definitions --help')"),
    (("--timeout", "0", "list_queues"), 64,
     "Error: Invalid value for '-t' / '--timeout': 0.0 is not in the range x>0. (see "
     "'amqpqctl --help')"),
    (("list_consumers", "-p"), 64,
     "Error: Option '-p' requires an argument. (see 'amqpqctl list_consumers --help')"),
])
def test_bad_arguments_are_one_line(node: Node, args: tuple[str, ...], code: int,
                                    message: str) -> None:
    res = amqpqctl("-P", str(node.http_port), *args)
    assert (res.returncode, res.stdout, res.stderr) == (code, "", message + "\n")


def test_a_bad_environment_variable_is_one_line() -> None:
    res = amqpqctl("list_queues", AMQPQCTL_PORT="http")
    assert (res.returncode, res.stderr) == (
        64, "Error: Invalid value for '-P' / '--port': 'http' is not a valid integer. (from "
            "AMQPQCTL_PORT) (see 'amqpqctl --help')\n")


def complete(words: str) -> list[str]:
    """What bash completion offers for the last of ``words`` (click's protocol)."""
    res = amqpqctl(COMP_WORDS=words, COMP_CWORD=str(len(words.split(" ")) - 1),
                   _AMQPQCTL_COMPLETE="bash_complete")
    assert res.returncode == 0, res.stderr
    return [line.split(",", 1)[1] for line in res.stdout.splitlines()]


def test_shell_completion() -> None:
    script = amqpqctl(_AMQPQCTL_COMPLETE="bash_source")
    assert script.returncode == 0
    assert "_amqpqctl_completion()" in script.stdout
    assert "complete -o nosort -F _amqpqctl_completion amqpqctl" in script.stdout
    assert complete("amqpqctl list_q") == ["list_queues"]
    assert complete("amqpqctl list_c") == ["list_channels", "list_connections",
                                           "list_consumers"]
    assert complete("amqpqctl list_channels con") == ["confirm", "connection",
                                                       "consumer_count"]
    assert complete("amqpqctl list_queues messages_p") == ["messages_paged_out",
                                                          "messages_persistent"]
    assert complete("amqpqctl list_queues --formatter ") == ["table", "pretty_table", "csv",
                                                            "json"]
    for shell in ("zsh", "fish"):
        res = amqpqctl(_AMQPQCTL_COMPLETE=f"{shell}_source")
        assert res.returncode == 0 and "_AMQPQCTL_COMPLETE" in res.stdout


@pytest.fixture
def https_api(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """A stand-in management API over HTTPS (amqpq's serves HTTP only) answering
    ``GET /api/vhosts`` with a self-signed certificate for 127.0.0.1: (port, cert file)."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    try:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days",
                        "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", str(key), "-out", str(cert)], check=True,
                       capture_output=True, timeout=60)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("openssl not available")

    class Api(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            body = json.dumps([{"name": "/" if self.path == "/api/vhosts" else "?"}]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Api)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], cert
    finally:
        server.shutdown()
        server.server_close()


def test_https_with_a_ca_file_or_insecure(https_api: tuple[int, Path], tmp_path: Path) -> None:
    port, cert = https_api
    res = amqpqctl("--ssl", "--ssl-ca-cert-file", str(cert), "-P", str(port), "list_vhosts")
    assert (res.returncode, res.stdout) == (0, "Listing vhosts ...\nname\n/\n"), res.stderr
    conf = tmp_path / "tls.conf"
    conf.write_text(f"[tls]\nport = {port}\nssl = True\nssl_ca_cert_file = {cert}\n")
    res = amqpqctl("-c", str(conf), "-N", "tls", "-q", "list_vhosts")
    assert (res.returncode, res.stdout) == (0, "name\n/\n"), res.stderr
    res = amqpqctl("--url", f"https://127.0.0.1:{port}", "list_vhosts")  # unknown issuer
    assert res.returncode == 69
    assert res.stderr.startswith(f"Error: TLS with port {port} on 127.0.0.1 failed: "
                                 "CERTIFICATE_VERIFY_FAILED")
    res = amqpqctl("--url", f"https://127.0.0.1:{port}", "-q", "list_vhosts",
                   AMQPQCTL_SSL_INSECURE="true")
    assert (res.returncode, res.stdout) == (0, "name\n/\n"), res.stderr
