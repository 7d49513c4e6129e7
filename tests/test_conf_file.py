"""``amqpq-server --config FILE``: rabbitmq.conf keys onto BrokerConfig, RabbitMQ's units and
listener forms, one ``FILE:LINE: ...`` error for a bad line, and the command line overriding
the file (only for options really given).

Reference: RabbitMQ's schema (``deps/rabbit/priv/schema/rabbit.schema``) and
``rabbit_resource_monitor_misc:parse_information_unit/1`` (3.13 units).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from amqp_server.conf_file import (
    ConfError,
    bytesize,
    from_option,
    information_unit,
    listener,
    load,
)
from amqp_server.server import command_line, parse_args
from broker.alarms import total_memory
from broker.config import BrokerConfig
from tests.support.broker_process import REPO_ROOT, broker_env


def write(tmp_path: Path, text: str, name: str = "amqpq.conf") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_every_supported_key_reaches_the_broker_config(tmp_path: Path) -> None:
    definitions = write(tmp_path, "{}", "defs.json")
    for name in ("cert.pem", "key.pem", "ca.pem"):
        write(tmp_path, "-", name)
    conf = write(tmp_path, f"""
# a rabbitmq.conf
listeners.tcp.default = 127.0.0.1:5673
listeners.tcp.other   = ::1:5673          # same port, second address
listeners.ssl.default = 5674
ssl_options.certfile   = {tmp_path}/cert.pem
ssl_options.keyfile    = {tmp_path}/key.pem
ssl_options.cacertfile = {tmp_path}/ca.pem
ssl_options.verify     = verify_peer
ssl_options.fail_if_no_peer_cert = true
default_user = admin
default_pass = s3cret
default_vhost = main
loopback_users.guest = false
heartbeat = 30
frame_max = 64KB
channel_max = 100
connection_max = 500
consumer_timeout = 900000
queue_index_embed_msgs_below = 1024
vm_memory_high_watermark.absolute = 2GB
disk_free_limit.absolute = 1GiB
load_definitions = {definitions}
management.tcp.port = 15673
management.tcp.ip = 127.0.0.1
prometheus.tcp.port = 15693
log.file = {tmp_path}/amqpq.log
log.file.level = debug
log.file.rotation.size = 1048576
log.file.rotation.count = 3
log.file.formatter = json
log.console.level = warning
log.connection.level = debug
log.channel.level = error
log.default.level = info
product.name = orders-broker
cluster_formation.etcd.node_ttl = 3
""")
    config = parse_args(["--config", str(conf)])
    assert (config.hosts, config.port) == (("127.0.0.1", "::1"), 5673)
    tls = config.tls
    assert (tls.port, tls.certfile, tls.keyfile, tls.cacertfile) == (
        5674, f"{tmp_path}/cert.pem", f"{tmp_path}/key.pem", f"{tmp_path}/ca.pem")
    assert tls.verify_peer and tls.fail_if_no_peer_cert
    assert (config.default_user, config.default_pass, config.default_vhost) == (
        "admin", "s3cret", "main")
    assert config.loopback_users == ()
    assert (config.heartbeat, config.frame_max, config.channel_max) == (30, 65536, 100)
    assert (config.max_connections, config.consumer_timeout) == (500, 900_000)
    assert config.queue_index_embed_msgs_below == 1024
    assert config.memory_high_watermark == 2_000_000_000
    assert config.disk_free_limit == 2**30
    assert config.management.definitions == definitions
    assert (config.management.port, config.management.host) == (15673, "127.0.0.1")
    assert config.prometheus.port == 15693 and config.prometheus.enabled  # on by default
    log = config.log
    assert (log.file, log.file_level, log.level, log.format) == (
        tmp_path / "amqpq.log", "debug", "warning", "json")
    assert (log.rotation_size, log.rotation_count) == (1_048_576, 3)
    assert log.categories == {"connection": "debug", "channel": "error", "default": "info"}
    assert config.product == "orders-broker"
    assert config.etcd.lease_ttl == 3  # RabbitMQ's etcd peer discovery key: the node's lease
    assert config.config_files == (str(conf.absolute()),)


def test_without_a_file_nothing_changes() -> None:
    config = parse_args([])
    assert config.config_files == () and config.log.file is None
    defaults = BrokerConfig()
    assert (config.heartbeat, config.default_user, config.loopback_users) == (
        defaults.heartbeat, defaults.default_user, defaults.loopback_users)


@pytest.mark.parametrize(("text", "bytes_"), [
    ("50000000", 50_000_000), ("2GB", 2 * 10**9), ("500MB", 500 * 10**6),
    ("500M", 500 * 10**6), ("1024MiB", 2**30), ("1Gi", 2**30), ("4kB", 4000),
    ("4KiB", 4096), ("3G", 3 * 10**9)])
def test_information_units_as_rabbitmq_3_13(text: str, bytes_: int) -> None:
    assert information_unit(text) == bytes_


@pytest.mark.parametrize("text", ["2XB", "-1", "1.5GB", "GB", ""])
def test_bad_information_units(text: str) -> None:
    with pytest.raises(ValueError, match="is not an amount of bytes"):
        information_unit(text)


def test_bytesize_and_listener_forms() -> None:
    assert bytesize("131072") == 131072 and bytesize("128KB") == 131072
    assert listener("5672") == (None, 5672)
    assert listener("127.0.0.1:5672") == ("127.0.0.1", 5672)
    assert listener("::1:5672") == ("::1", 5672)
    assert listener("[::1]:5672") == ("::1", 5672)
    with pytest.raises(ValueError, match="is not a port or IP:port"):
        listener("localhost:5672")


def test_a_bare_port_listens_on_every_interface(tmp_path: Path) -> None:
    config = parse_args(["--config", str(write(tmp_path, "listeners.tcp.default = 5680\n"))])
    assert (config.listen_hosts, config.port) == (("0.0.0.0", "::"), 5680)
    assert config.optional_hosts == ("::",)  # a machine without IPv6 still starts


@pytest.mark.parametrize(("text", "expected"), [
    ("loopback_users.guest = true\n", ("guest",)),
    ("loopback_users.guest = false\nloopback_users.alice = true\n", ("alice",)),
    ("loopback_users = none\n", ()),
])
def test_loopback_users(tmp_path: Path, text: str, expected: tuple[str, ...]) -> None:
    assert parse_args(["--config", str(write(tmp_path, text))]).loopback_users == expected


def test_units_relative_limits_and_log_switches(tmp_path: Path) -> None:
    config = parse_args(["--config", str(write(tmp_path, """
vm_memory_high_watermark.relative = 0.6
disk_free_limit.relative = 1.5
channel_max = 0
connection_max = infinity
log.console = false
log.dir = logs
log.file = broker.log
"""))])
    assert config.memory_high_watermark == 0.6
    assert config.disk_free_limit == int(1.5 * total_memory())
    assert config.channel_max == 65535  # RabbitMQ's "no limit"
    assert config.max_connections == 0
    assert config.log.level == "none"
    assert config.log.file == Path("logs/broker.log").absolute()


def test_absolute_watermark_wins_with_a_warning(tmp_path: Path) -> None:
    conf = write(tmp_path, "vm_memory_high_watermark.relative = 0.5\n"
                           "vm_memory_high_watermark.absolute = 1024MiB\n")
    config, warnings = command_line(["--config", str(conf)])
    assert config.memory_high_watermark == 2**30
    assert warnings == [f"{conf}:2: both vm_memory_high_watermark.absolute and "
                        "vm_memory_high_watermark.relative are set: "
                        "vm_memory_high_watermark.absolute has precedence"]


def test_harmless_keys_are_warnings(tmp_path: Path) -> None:
    conf = write(tmp_path, "cluster_name = prod\ncollect_statistics_interval = 10000\n"
                           "ssl_options.verify = verify_none\nlog.file.rotation.date = $D0\n")
    config, warnings = command_line(["--config", str(conf)])
    assert warnings == [
        f"{conf}:1: cluster_name is ignored (it changes nothing in a single amqpq node)",
        f"{conf}:2: collect_statistics_interval is ignored (it changes nothing in a single "
        "amqpq node)",
        f"{conf}:4: log.file.rotation.date is ignored (amqpq logs as text or json and "
        "rotates by size only)",
        f"{conf}:3: ssl_options.* without a listeners.ssl.* key: no TLS listener (as in "
        "RabbitMQ)"]
    assert not config.tls.enabled


# ---- errors: one line naming the file and line --------------------------------------------

@pytest.mark.parametrize(("text", "message"), [
    ("heartbeat = 10\nheartbeats = 10\n", "2: unknown setting 'heartbeats'"),
    ("\n# comment\nheartbeat = soon\n", "3: heartbeat: 'soon' is not an integer"),
    ("heartbeat = 10\nheartbeat = 20\n", "2: heartbeat is already set on line 1"),
    ("just words\n", "1: expected 'key = value', got 'just words'"),
    ("heartbeat =\n", "1: heartbeat has no value"),
    ("frame_max = 1024\n", "1: frame_max: 1024 is out of range (must be >= 4096)"),
    ("channel_max = 70000\n", "1: channel_max: 70000 is out of range (must be 0..65535)"),
    ("listeners.tcp.a = 5672\nlisteners.tcp.b = 127.0.0.1:5673\n",
     "2: amqpq listens on one AMQP port on every address: 5673 here, 5672 in listeners.tcp.a"),
    ("listeners.tcp = none\n", "1: listeners.tcp: amqpq always has an AMQP listener "
                               "(listeners.tcp = none is not supported)"),
    ("listeners.ssl.default = 5671\n", "1: listeners.ssl.default needs ssl_options.certfile "
                                       "and ssl_options.keyfile"),
    ("disk_free_limit.absolute = 2XB\n", "1: disk_free_limit.absolute: '2XB' is not an amount "
                                         "of bytes (e.g. 50000000, 500MB, 2GiB)"),
    ("vm_memory_high_watermark.relative = 1.5\n",
     "1: vm_memory_high_watermark.relative: 1.5 must be above 0 and at most 1 (a fraction "
     "of RAM; amqpq does not support more than 1)"),
    ("log.console.level = loud\n", "1: log.console.level: 'loud' is not a log level (debug, "
                                   "info, notice, warning, error, critical, alert, emergency, "
                                   "none)"),
    ("log.syslog = true\n", "1: log.syslog is not supported by amqpq"),
    ("auth_backends.1 = ldap\n", "1: auth_backends.1 is not supported by amqpq"),
    ("ssl_options.versions.1 = tlsv1.3\n", "1: ssl_options.versions.1 is not supported by amqpq"),
    ("load_definitions = /no/such/defs.json\n",
     "1: load_definitions: no such file: /no/such/defs.json"),
    ("log.console.formatter = json\nlog.file.formatter = plaintext\n",
     "2: amqpq has one log format for every output: log.console.formatter and "
     "log.file.formatter differ"),
])
def test_bad_lines_name_the_line(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfError) as err:
        load(path)
    assert str(err.value) == f"{path}:{message}"


def test_server_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    write(tmp_path, "heartbeat = 10\nconsumer_timeout = -5\n")
    done = subprocess.run([sys.executable, "-m", "amqp_server", "--config", "amqpq.conf"],
                          capture_output=True, text=True, timeout=30, cwd=tmp_path,
                          env=broker_env())
    assert (done.returncode, done.stdout, done.stderr) == (
        2, "", "amqpq-server: amqpq.conf:2: consumer_timeout: -5 is out of range "
               "(must be >= 0)\n")


def test_missing_file_and_erlang_terms_format(tmp_path: Path) -> None:
    with pytest.raises(ConfError, match=r"nope.conf: cannot read: No such file"):
        from_option(str(tmp_path / "nope.conf"))
    with pytest.raises(ConfError, match="classic Erlang-terms config format is not supported"):
        from_option(str(write(tmp_path, "[].", "rabbitmq.config")))


def test_rabbitmq_config_file_environment_variable(tmp_path: Path) -> None:
    write(tmp_path, "heartbeat = 15\n", "rabbitmq.conf")
    env = {"RABBITMQ_CONFIG_FILE": str(tmp_path / "rabbitmq")}  # .conf added, as RabbitMQ
    conf = from_option(None, env)
    assert conf is not None and conf.options["heartbeat"] == 15
    assert from_option(None, {}) is None
    given = from_option(str(write(tmp_path, "heartbeat = 20\n")), env)  # --config wins
    assert given is not None and given.options["heartbeat"] == 20


# ---- the command line overrides the file --------------------------------------------------

def test_options_given_override_the_file_and_defaults_do_not(tmp_path: Path) -> None:
    conf = str(write(tmp_path, """
listeners.tcp.default = 127.0.0.1:5680
heartbeat = 30
channel_max = 100
log.console.level = warning
management.tcp.port = 15680
"""))
    from_file = parse_args(["--config", conf])
    assert (from_file.port, from_file.heartbeat, from_file.channel_max) == (5680, 30, 100)
    # log.console.level is the console's alone: a log file stays at info, as in RabbitMQ
    assert (from_file.log.level, from_file.log.file_level) == ("warning", "info")
    over = parse_args(["--config", conf, "--heartbeat", "60", "--port", "5690",
                       "--host", "::1", "--log-level", "debug", "--management-port", "0"])
    # --heartbeat 60 is the built-in default, but given: it wins
    assert (over.heartbeat, over.port, over.hosts) == (60, 5690, ("::1",))
    assert (over.log.level, over.management.port, over.channel_max) == ("debug", 0, 100)
    assert parse_args(["--heartbeat", "60", "--config", conf]).heartbeat == 60  # any order


def test_a_bad_command_line_value_is_still_argparse_s_error(tmp_path: Path) -> None:
    conf = str(write(tmp_path, "heartbeat = 30\n"))
    done = subprocess.run([sys.executable, "-m", "amqp_server", "--config", conf,
                           "--heartbeat", "-1"], capture_output=True, text=True, timeout=30,
                          cwd=REPO_ROOT, env=broker_env())
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == "amqpq-server: error: --heartbeat must be >= 0, got -1"
