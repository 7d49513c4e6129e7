"""The broker's logs: console and file outputs, size rotation, JSON lines, per-category levels,
``/api/nodes``' ``log_files``; and a broker started from a rabbitmq.conf-style file that
listens and logs where the file says, with each connection's life in its log.

Reference: https://www.rabbitmq.com/docs/logging; the JSON fields ``time``, ``level``,
``msg`` are RabbitMQ's.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from broker.config import LogOptions
from broker.log_setup import JSONFormatter, configure, log_files
from tests.support.broker_process import REPO_ROOT, BrokerProcess, broker_env, free_port


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """Put the root logger and the category loggers back as they were."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {name: logging.getLogger(name).level
              for name in ("amqpq.connection", "amqpq.channel", "amqpq.queue")}
    yield
    for handler in root.handlers:
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)
    for name, old in levels.items():
        logging.getLogger(name).setLevel(old)


def read_json_lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_console_and_file_levels(tmp_path: Path, restore_logging: None) -> None:
    console = io.StringIO()
    configure(LogOptions(level="warning", file=tmp_path / "amqpq.log", file_level="debug"),
              console)
    log = logging.getLogger("amqpq.server")
    log.debug("details")
    log.warning("disk nearly full")
    assert console.getvalue().splitlines()[-1].endswith(
        "WARNING amqpq.server: disk nearly full")
    assert "details" not in console.getvalue()
    text = (tmp_path / "amqpq.log").read_text()
    assert "DEBUG amqpq.server: details" in text and "disk nearly full" in text


def test_size_rotation_keeps_count_files(tmp_path: Path, restore_logging: None) -> None:
    path = tmp_path / "amqpq.log"
    configure(LogOptions(level="none", file=path, rotation_size=2000, rotation_count=2))
    for n in range(200):
        logging.getLogger("amqpq.server").info("line %03d %s", n, "x" * 40)
    rotated = sorted(p.name for p in tmp_path.iterdir())
    assert rotated == ["amqpq.log", "amqpq.log.1", "amqpq.log.2"]
    assert all((tmp_path / name).stat().st_size <= 2000 for name in rotated)
    assert "line 199" in path.read_text()  # the newest lines are in the file itself


def test_json_lines_carry_structured_fields(tmp_path: Path, restore_logging: None) -> None:
    path = tmp_path / "amqpq.log"
    configure(LogOptions(level="none", file=path, format="json"))
    logging.getLogger("amqpq.connection").info(
        "closing AMQP connection (%s):\n%s", "a -> b", "client unexpectedly closed",
        extra={"connection": "a -> b", "user": "guest", "amqp_client_error": True})
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("amqpq.server").exception("tick failed")
    first, second = read_json_lines(path)
    assert {k: first[k] for k in ("level", "msg", "logger", "connection", "user")} == {
        "level": "info", "msg": "closing AMQP connection (a -> b):\nclient unexpectedly closed",
        "logger": "amqpq.connection", "connection": "a -> b", "user": "guest"}
    assert "amqp_client_error" not in first
    assert str(first["time"])[:2] == "20" and str(first["time"])[-6] in "+-"
    assert second["level"] == "error" and "RuntimeError: boom" in str(second["exception"])


def test_category_levels(tmp_path: Path, restore_logging: None) -> None:
    path = tmp_path / "amqpq.log"
    configure(LogOptions(level="none", file=path, file_level="debug",
                         categories={"connection": "debug", "queue": "error",
                                     "default": "info"}))
    logging.getLogger("amqpq.connection").debug("connection detail")
    logging.getLogger("amqpq.queue").warning("queue warning")
    logging.getLogger("amqpq.channel").info("channel info")  # no level of its own: default's
    logging.getLogger("amqpq.channel").debug("channel detail")
    logging.getLogger("amqpq.server").debug("server detail")
    text = path.read_text()
    assert "connection detail" in text and "channel info" in text
    assert "queue warning" not in text and "detail" not in text.replace("connection detail", "")


def test_none_turns_an_output_off_and_log_files_say_so(tmp_path: Path) -> None:
    assert log_files(LogOptions()) == ["<stdout>"]
    assert log_files(LogOptions(file=tmp_path / "a.log")) == [str(tmp_path / "a.log"),
                                                               "<stdout>"]
    assert log_files(LogOptions(level="none", file=tmp_path / "a.log")) == [
        str(tmp_path / "a.log")]


def test_json_formatter_escapes_newlines_to_one_line() -> None:
    record = logging.LogRecord("amqpq.connection", logging.ERROR, __file__, 1,
                               "a\nb \u00e9", None, None)
    line = JSONFormatter().format(record)
    assert "\n" not in line and json.loads(line)["msg"] == "a\nb \u00e9"


# ---- a broker process started with --config -----------------------------------------------

def get_json(url: str) -> object:
    request = urllib.request.Request(url, headers={
        "Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def test_broker_started_from_a_config_file(tmp_path: Path) -> None:
    amqp_port, http_port = free_port(), free_port()
    log_path = tmp_path / "logs" / "amqpq.log"
    conf = tmp_path / "amqpq.conf"
    conf.write_text(f"""
listeners.tcp.default = 127.0.0.1:{amqp_port}
management.tcp.port = {http_port}
log.file = {log_path}
log.file.formatter = json
log.file.rotation.size = 10485760
log.console.level = error
cluster_name = ignored-here
""")
    proc = subprocess.Popen([sys.executable, "-m", "amqp_server", "--config", str(conf),
                             "--data-dir", str(tmp_path / "data")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=REPO_ROOT, env=broker_env())
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # the console is at error: the listening line first
        assert first == f"amqpq: listening on amqp://127.0.0.1:{amqp_port}\n", first
        params = pika.ConnectionParameters(
            "127.0.0.1", amqp_port, client_properties={"connection_name": "from-conf"})
        connection = pika.BlockingConnection(params)
        connection.channel().queue_declare("conf-q")
        connection.close()
        node = get_json(f"http://127.0.0.1:{http_port}/api/nodes")[0]  # type: ignore[index]
        assert node["log_files"] == [str(log_path), "<stdout>"]  # console at error
        assert node["config_files"] == [str(conf)]
    finally:
        proc.terminate()
        out = proc.communicate(timeout=15)[0]
    assert proc.returncode == 0, out
    lines = read_json_lines(log_path)
    assert lines[0]["msg"] == (f"{conf}:8: cluster_name is ignored (it changes nothing in a "
                               "single amqpq node)")
    life = [line for line in lines if line["logger"] == "amqpq.connection"]
    name = life[0]["connection"]
    assert [line["msg"] for line in life] == [
        f"accepting AMQP connection ({name})",
        f"connection ({name}) has a client-provided name: from-conf",
        f"connection ({name} - from-conf): user 'guest' authenticated and granted access "
        "to vhost '/'",
        f"closing AMQP connection ({name} - from-conf, vhost: '/', user: 'guest')"]
    assert str(name).endswith(f" -> 127.0.0.1:{amqp_port}")
    assert life[-1]["user"] == "guest" and life[-1]["vhost"] == "/"
    assert lines[-1]["msg"] == "amqpq stopped"


def test_log_file_options_and_an_http_request_logged_once(tmp_path: Path) -> None:
    log_path = tmp_path / "amqpq.json.log"
    with BrokerProcess(tmp_path / "data", log_level="none",
                       args=("--log-file", str(log_path), "--log-format", "json")) as broker:
        with socket.create_connection(("127.0.0.1", broker.port)) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
            assert sock.recv(8) == b"AMQP\x00\x00\x09\x01"  # RabbitMQ's answer to a bad header
            assert sock.recv(8) == b""  # then the socket is closed
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            pika.BlockingConnection(pika.URLParameters(
                f"amqp://guest:wrong@127.0.0.1:{broker.port}/%2F"))
        assert broker.stop() == 0
    lines = read_json_lines(log_path)
    bad = [line for line in lines if "bad_header" in str(line["msg"])]
    assert len(bad) == 1 and bad[0]["level"] == "error"
    assert str(bad[0]["msg"]).endswith(':\n{bad_header,<<"GET / HT">>}')
    refused = [line for line in lines if "login refused" in str(line["msg"])]
    assert [line["msg"] for line in refused] == [
        f"Error on AMQP connection ({refused[0]['connection']}, state: starting):\n"
        "PLAIN login refused: user 'guest' - invalid credentials"]
    assert "accepting" not in broker.log_text()  # --log-level none: nothing on the console
