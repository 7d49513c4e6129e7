"""``amqpq-server --config FILE``: RabbitMQ's ``rabbitmq.conf`` keys (and amqpq's own
``cluster_tls.*``), in its sysctl format.

The format is cuttlefish's, as RabbitMQ reads it: one ``key = value`` a line, ``#`` starts a
comment anywhere (a value cannot contain ``#``, as in RabbitMQ), blank lines are skipped,
surrounding spaces are dropped. A key given twice is an error (naming both lines).

Every key amqpq supports maps onto a command-line option or a
:class:`~broker.config.BrokerConfig` setting (the exact keys are :data:`SUPPORTED`; besides
them ``listeners.tcp.NAME``, ``listeners.ssl.NAME``, ``loopback_users.NAME`` and
``log.CATEGORY.level``), values and units as RabbitMQ's schema (``deps/rabbit/priv/schema/
rabbit.schema``) takes them; ``cluster_tls.certfile``, ``.keyfile`` and ``.cacertfile`` are
amqpq's (``--cluster-tls-*``: RabbitMQ configures inter-node TLS elsewhere). The result,
:class:`ConfFile`, has

* ``options``: argparse destinations -> values, made the parser's defaults, so a command-line
  option the user gives overrides the file and one left out does not;
* ``hosts``: the listeners' addresses (``--host`` overrides them);
* ``settings``: the rest (no command-line option), applied by :meth:`ConfFile.apply`;
* ``warnings``: keys RabbitMQ knows that change nothing in amqpq (RabbitMQ's own clustering
  and peer discovery: amqpq clusters through ``--cluster-etcd``; acceptor counts,
  statistics intervals...; :data:`IGNORED`) or are log layout details
  (:data:`IGNORED_LOG`), and ``ssl_options.*`` given without a ``listeners.ssl.*`` key (no
  TLS listener then); logged at start.

A key RabbitMQ knows that amqpq does not implement, where ignoring it would change what a
user gets (auth backends, TLS versions, plugins' settings...), is an error, as is an unknown
key or a bad value: :class:`ConfError`, ``FILE:LINE: what is wrong``.

Deliberate differences: ``listeners.tcp.*`` must share one port (amqpq listens on one AMQP
port on every address), and the TLS listener uses the TCP listener's addresses;
``vm_memory_high_watermark.relative`` above 1 is refused; ``channel_max = 0`` means 65535;
``consumer_timeout = 0`` disables the timeout.

Source: https://www.rabbitmq.com/docs/configure#config-file-formats,
https://www.rabbitmq.com/docs/logging, https://www.rabbitmq.com/docs/networking.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from amqp_server.cluster.options import LOCATOR_VALUES
from broker.alarms import total_memory
from broker.config import BrokerConfig
from broker.log_setup import CATEGORIES, LEVELS

#: 3.13's information units (rabbit_resource_monitor_misc): K, M, G, T, P and kB... are
#: powers of 1000, Ki/KiB... powers of 1024 (case as RabbitMQ accepts them).
_UNITS = {"": 1, "k": 10**3, "K": 10**3, "kB": 10**3, "KB": 10**3, "kb": 10**3, "Kb": 10**3,
          "m": 10**6, "M": 10**6, "MB": 10**6, "mB": 10**6, "mb": 10**6, "Mb": 10**6,
          "g": 10**9, "G": 10**9, "GB": 10**9, "gB": 10**9, "gb": 10**9, "Gb": 10**9,
          "T": 10**12, "TB": 10**12, "tb": 10**12, "Tb": 10**12,
          "P": 10**15, "PB": 10**15, "pb": 10**15, "Pb": 10**15}
for _prefix, _power in (("k", 1), ("m", 2), ("g", 3), ("t", 4), ("p", 5)):
    for _unit in (f"{_prefix}i", f"{_prefix.upper()}i", f"{_prefix}ib", f"{_prefix}iB",
                  f"{_prefix.upper()}iB", f"{_prefix.upper()}IB"):
        _UNITS[_unit] = 1024**_power
_INFO_UNIT = re.compile(r"^([0-9]+)([A-Za-z]*)$")
_KEY = re.compile(r"^[A-Za-z0-9_$\-]+(\.[A-Za-z0-9_$\-]+)*$")

#: Keys RabbitMQ knows that change nothing here: accepted with a warning (fnmatch-like:
#: a trailing ``.*`` is a prefix).
IGNORED = ("cluster_name", "cluster_formation.*", "cluster_partition_handling*",
           "cluster_keepalive_interval", "num_acceptors.*", "tcp_listen_options.*",
           "collect_statistics", "collect_statistics_interval", "background_gc_*",
           "hipe_compile", "mnesia_table_loading_retry_*", "memory_monitor_interval",
           "vm_memory_calculation_strategy", "vm_memory_high_watermark_paging_ratio",
           "reverse_dns_lookups", "delegate_count",
           "net_ticktime", "distribution.*", "handshake_timeout", "ssl_handshake_timeout",
           "management.rates_mode", "management.sample_retention_policies.*",
           "definitions.skip_if_unchanged", "definitions.hashing.algorithm",
           "deprecated_features.permit.*", "raft.*", "sysmon_handler.*", "motd_file",
           "mirroring_sync_*", "queue_master_locator")

#: Log layout details amqpq does not implement: accepted with a warning (amqpq's format is
#: ``text`` or ``json``, and it rotates by size only).
IGNORED_LOG = ("log.console.use_colors", "log.console.color_esc_seqs.*",
               "log.*.formatter.time_format", "log.*.formatter.level_format",
               "log.*.formatter.single_line", "log.*.formatter.plaintext.format",
               "log.*.formatter.json.*", "log.file.rotation.date", "log.file.rotation.compress")

#: RabbitMQ namespaces amqpq does not implement: an error says "not supported".
UNSUPPORTED = ("auth_backends", "auth_mechanisms", "auth_cache", "auth_ldap", "auth_http",
               "auth_oauth2", "default_permissions", "default_user_tags", "default_users",
               "default_policies", "default_limits", "default_queue_type", "ssl_options",
               "ssl_cert_login_from", "ssl_cert_login_san_type", "ssl_cert_login_san_index",
               "ssl_allow_poodle_attack", "max_message_size", "channel_max_per_node",
               "consumer_max_per_channel", "vhost_max", "cluster_queue_limit",
               "initial_frame_max", "socket_writer", "proxy_protocol", "password_hashing_module",
               "credential_validator", "vhost_restart_strategy", "classic_queue", "quorum_queue",
               "stream", "mqtt", "stomp", "web_stomp", "web_mqtt", "web_dispatch", "shovel",
               "federation", "prometheus", "management", "log", "listeners", "definitions",
               "loopback_users", "ranch_connection_max", "total_memory_available_override_value",
               "disk_free_limit", "vm_memory_high_watermark", "message_store_shutdown_timeout",
               "product", "metadata_store", "erlang", "default_worker_pool_size",
               "message_interceptors", "feature_flags", "trust_store", "peer_discovery")


class ConfError(ValueError):
    """A config file amqpq cannot use; ``str()`` is ``FILE:LINE: what is wrong`` (or
    ``FILE: ...`` for the file as a whole)."""

    def __init__(self, path: Path | str, line: int | None, message: str) -> None:
        super().__init__(f"{path}:{line}: {message}" if line else f"{path}: {message}")
        self.path, self.line, self.message = str(path), line, message


@dataclass
class Entry:
    """One ``key = value`` line (``line`` counts from 1)."""

    key: str
    value: str
    line: int


@dataclass
class ConfFile:
    """What a config file says, split by how the command line overrides it (module doc).

    Attributes:
        path: the file, absolute (``/api/nodes`` lists it in ``config_files``).
        options: argparse destination -> value (``port``, ``heartbeat``, ``log_level``...).
        hosts: the TCP listeners' addresses; None when the file has no ``listeners.tcp.*``.
        settings: dotted BrokerConfig attribute -> value (``default_user``,
            ``log.rotation_size``...); ``prometheus.port`` only where still None.
        warnings: one line per ignored key, ``FILE:LINE: ...``.
    """

    path: Path
    options: dict[str, Any] = field(default_factory=dict)
    hosts: tuple[str, ...] | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def apply(self, config: BrokerConfig) -> None:
        """Set :attr:`settings` on ``config`` (``config_files`` too)."""
        for dotted, value in self.settings.items():
            *parents, name = dotted.split(".")
            target: Any = config
            for parent in parents:
                target = getattr(target, parent)
            if dotted == "prometheus.port" and target.port is not None:
                continue  # --prometheus-port given
            setattr(target, name, value)
        config.config_files = (str(self.path),)


# ---- values -----------------------------------------------------------------------------

def _int(value: str, low: int | None = None, high: int | None = None) -> int:
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"'{value}' is not an integer") from None
    if (low is not None and number < low) or (high is not None and number > high):
        bounds = f"{low}..{high}" if high is not None else f">= {low}"
        raise ValueError(f"{number} is out of range (must be {bounds})")
    return number


def _bool(value: str) -> bool:
    if value not in ("true", "false"):
        raise ValueError(f"'{value}' is not true or false")
    return value == "true"


def _float(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"'{value}' is not a number") from None


def information_unit(value: str) -> int:
    """Bytes of ``2GB`` (2 x 10^9), ``1024MiB`` (1024 x 2^20), ``50000000``, as RabbitMQ 3.13
    reads ``vm_memory_high_watermark.absolute`` and ``disk_free_limit.absolute``.

    Raises:
        ValueError: not digits with an optional known unit.
    """
    match = _INFO_UNIT.match(value)
    if match is None or match.group(2) not in _UNITS:
        raise ValueError(f"'{value}' is not an amount of bytes (e.g. 50000000, 500MB, 2GiB)")
    return int(match.group(1)) * _UNITS[match.group(2)]


def bytesize(value: str) -> int:
    """Bytes of cuttlefish's ``bytesize`` (``frame_max``): digits, optionally ``KB``, ``MB``
    or ``GB`` (powers of 1024)."""
    match = re.fullmatch(r"([0-9]+)(KB|MB|GB)?", value)
    if match is None:
        raise ValueError(f"'{value}' is not a size in bytes (e.g. 131072, 128KB)")
    return int(match.group(1)) * {None: 1, "KB": 2**10, "MB": 2**20, "GB": 2**30}[match.group(2)]


def listener(value: str) -> tuple[str | None, int]:
    """``5672`` (every interface), ``127.0.0.1:5672``, ``::1:5672`` or ``[::1]:5672`` ->
    (address or None, port)."""
    if value.isdigit():
        return None, _int(value, 0, 65535)
    host, sep, port = value.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"'{value}' is not a port or IP:port") from None
    if not sep or not port.isdigit():
        raise ValueError(f"'{value}' is not a port or IP:port")
    return host, _int(port, 0, 65535)


def _level(value: str) -> str:
    if value not in LEVELS:
        raise ValueError(f"'{value}' is not a log level ({', '.join(LEVELS)})")
    return value


def _existing_file(value: str) -> str:
    path = Path(value)
    if path.is_dir():
        raise ValueError(f"{value} is a directory (amqpq imports one definitions file)")
    if not path.is_file():
        raise ValueError(f"no such file: {value}")
    return value


def _matches(key: str, patterns: tuple[str, ...]) -> bool:
    return any(re.fullmatch(re.escape(p).replace(r"\*", ".*"), key) for p in patterns)


# ---- the file ---------------------------------------------------------------------------

def parse_lines(text: str, path: Path | str = "<config>") -> list[Entry]:
    """``key = value`` entries of a rabbitmq.conf text.

    Raises:
        ConfError: a line that is not ``key = value``, a bad key, or a key given twice.
    """
    entries: list[Entry] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep:
            raise ConfError(path, number, f"expected 'key = value', got '{line}'")
        if not _KEY.match(key):
            raise ConfError(path, number, f"'{key}' is not a valid key")
        if not value:
            raise ConfError(path, number, f"{key} has no value")
        if key in seen:
            raise ConfError(path, number, f"{key} is already set on line {seen[key]}")
        seen[key] = number
        entries.append(Entry(key, value, number))
    return entries


class _Reader:
    """Turns entries into a :class:`ConfFile` (one handler a key, checks across keys at
    the end)."""

    def __init__(self, path: Path, shown: Path | str) -> None:
        self.conf = ConfFile(path)
        self.shown = shown  # the path as given, for messages
        self.tcp: list[tuple[str | None, int, Entry]] = []
        self.ssl: list[tuple[str | None, int, Entry]] = []
        self.ssl_none: Entry | None = None
        self.entries: dict[str, Entry] = {}
        self.loopback: list[str] | None = None  # loopback_users.NAME = true ones

    def read(self, entries: list[Entry]) -> ConfFile:
        for entry in entries:
            self.entries[entry.key] = entry
            try:
                self.one(entry)
            except ConfError:
                raise
            except ValueError as exc:
                raise ConfError(self.shown, entry.line, f"{entry.key}: {exc}") from None
        self.finish()
        return self.conf

    def error(self, entry: Entry, message: str) -> ConfError:
        return ConfError(self.shown, entry.line, message)

    def warn(self, entry: Entry, message: str) -> None:
        self.conf.warnings.append(f"{self.shown}:{entry.line}: {message}")

    def one(self, e: Entry) -> None:
        key, value = e.key, e.value
        handler = _EXACT.get(key)
        if handler is not None:
            handler(self, value)
        elif key.startswith("listeners.tcp."):
            self.tcp.append((*listener(value), e))
        elif key.startswith("listeners.ssl."):
            self.ssl.append((*listener(value), e))
        elif key == "listeners.ssl":
            if value != "none":
                raise ValueError(f"'{value}' is not none")
            self.ssl_none = e
        elif key.startswith("loopback_users."):
            given = self.loopback if self.loopback is not None else []
            self.loopback = given + [key.split(".", 1)[1]] if _bool(value) else given
        elif (m := re.fullmatch(r"log\.([a-z_]+)\.level", key)) and m.group(1) in CATEGORIES:
            self.conf.settings.setdefault("log.categories", {})[m.group(1)] = _level(value)
        elif _matches(key, IGNORED):
            self.warn(e, f"{key} is ignored (it changes nothing in a single amqpq node)")
        elif _matches(key, IGNORED_LOG):
            self.warn(e, f"{key} is ignored (amqpq logs as text or json and rotates by size "
                         "only)")
        elif key.split(".")[0] in UNSUPPORTED or key.split(".")[0].startswith("auth_"):
            raise self.error(e, f"{key} is not supported by amqpq")
        else:
            raise self.error(e, f"unknown setting '{key}'")

    def finish(self) -> None:
        conf, opts = self.conf, self.conf.options
        if self.tcp:
            port = self.tcp[0][1]
            for _host, other, entry in self.tcp:
                if other != port:
                    raise self.error(entry, f"amqpq listens on one AMQP port on every address: "
                                            f"{other} here, {port} in {self.tcp[0][2].key}")
            hosts: list[str] = []
            for host, _port, _entry in self.tcp:
                for one in ([host] if host else ["0.0.0.0", "::"]):
                    if one not in hosts:
                        hosts.append(one)
            opts["port"], conf.hosts = port, tuple(hosts)
        ssl_keys = [e for k, e in self.entries.items() if k.startswith("ssl_options.")]
        if self.ssl and self.ssl_none is None:
            port = self.ssl[0][1]
            for host, other, entry in self.ssl:
                if other != port:
                    raise self.error(entry, "amqpq's TLS listener has one port on every "
                                            f"address: {other} here, {port} on line "
                                            f"{self.ssl[0][2].line}")
                if host is not None and conf.hosts is not None and host not in conf.hosts:
                    raise self.error(entry, "amqpq's TLS listener listens on the addresses "
                                            f"of listeners.tcp, and {host} is not one of them")
            if "ssl_cert" not in opts or "ssl_key" not in opts:
                raise self.error(self.ssl[0][2], f"{self.ssl[0][2].key} needs "
                                                 "ssl_options.certfile and ssl_options.keyfile")
            opts["ssl_port"] = port
            for key, dest in (("ssl_options.verify", "ssl_verify_peer"),
                              ("ssl_options.fail_if_no_peer_cert", "ssl_fail_if_no_peer_cert")):
                if opts.get(dest) and "ssl_cacert" not in opts:
                    raise self.error(self.entries[key], f"{key} = {self.entries[key].value} "
                                                        "needs ssl_options.cacertfile")
        else:
            for dest in ("ssl_cert", "ssl_key", "ssl_cacert", "ssl_verify_peer",
                         "ssl_fail_if_no_peer_cert"):
                opts.pop(dest, None)
            if ssl_keys:
                self.warn(ssl_keys[0], "ssl_options.* without a listeners.ssl.* key: no TLS "
                                       "listener (as in RabbitMQ)")
        if "loopback_users" in self.entries:  # none: no user is loopback-only
            conf.settings["loopback_users"] = ()
        elif self.loopback is not None:
            conf.settings["loopback_users"] = tuple(self.loopback)
        self._log_file()
        self._either("vm_memory_high_watermark", "vm_memory_high_watermark")
        self._either("disk_free_limit", "disk_free_limit")

    def _either(self, prefix: str, dest: str) -> None:
        """``.absolute`` wins over ``.relative`` (with a warning), as in RabbitMQ."""
        absolute = self.entries.get(f"{prefix}.absolute")
        relative = self.entries.get(f"{prefix}.relative")
        if absolute is None and relative is None:
            return
        if absolute is not None and relative is not None:
            self.warn(absolute, f"both {prefix}.absolute and {prefix}.relative are set: "
                                f"{prefix}.absolute has precedence")
        self.conf.options[dest] = self.conf.options.pop(
            f"{prefix}.absolute" if absolute is not None else f"{prefix}.relative")
        self.conf.options.pop(f"{prefix}.relative", None)

    def _log_file(self) -> None:
        opts = self.conf.options
        log_dir = opts.pop("log.dir", None)
        name = opts.pop("log.file", None)
        if name is None and log_dir is not None:
            name = "amqpq.log"  # log.dir alone: a file in it (RabbitMQ: <node>.log)
        if name is not None and name is not False:
            path = Path(name)
            if not path.is_absolute() and log_dir is not None:
                path = Path(log_dir) / path
            opts["log_file"] = str(path.absolute())
        formats = {opts.pop(k) for k in ("log.console.formatter", "log.file.formatter")
                   if k in opts}
        if len(formats) > 1:
            raise self.error(self.entries["log.file.formatter"], "amqpq has one log format for "
                             "every output: log.console.formatter and log.file.formatter differ")
        if formats:
            opts["log_format"] = formats.pop()
        console = opts.pop("log.console", True)
        if not console:
            opts["log_level"] = "none"
        if "log.console.level" in self.entries and "log.file.level" not in self.entries:
            self.conf.settings["log.file_level"] = "info"  # each output its own, as RabbitMQ


def _option(dest: str, parse: Callable[[str], Any]) -> Callable[[_Reader, str], None]:
    def handler(reader: _Reader, value: str) -> None:
        reader.conf.options[dest] = parse(value)
    return handler


def _setting(dotted: str, parse: Callable[[str], Any]) -> Callable[[_Reader, str], None]:
    def handler(reader: _Reader, value: str) -> None:
        reader.conf.settings[dotted] = parse(value)
    return handler


def _text(value: str) -> str:
    return value


def _positive(value: str) -> float:
    number = _float(value)
    if number < 0:
        raise ValueError(f"{number} is negative")
    return number


def _relative_watermark(value: str) -> float:
    number = _float(value)
    if not 0 < number <= 1:
        raise ValueError(f"{number} must be above 0 and at most 1 (a fraction of RAM; amqpq "
                         "does not support more than 1)")
    return number


def _absolute_watermark(value: str) -> float:
    number = information_unit(value)
    if number <= 1:
        raise ValueError(f"{number} bytes is too small")
    return float(number)


def _verify(value: str) -> bool:
    if value not in ("verify_peer", "verify_none"):
        raise ValueError(f"'{value}' is not verify_peer or verify_none")
    return value == "verify_peer"


def _formatter(value: str) -> str:
    if value not in ("plaintext", "json"):
        raise ValueError(f"'{value}' is not plaintext or json")
    return "text" if value == "plaintext" else "json"


def _stdio(value: str) -> str:
    if value != "stdout":
        raise ValueError(f"'{value}': amqpq's console log is stdout")
    return value


def _log_file(value: str) -> str | bool:
    return False if value == "false" else value


def _channel_max(value: str) -> int:
    number = _int(value, 0, 65535)
    return number or 65535  # RabbitMQ: 0 = no limit


def _connection_max(value: str) -> int:
    return 0 if value == "infinity" else _int(value, 0)


def _loopback_none(reader: _Reader, value: str) -> None:
    if value != "none":
        raise ValueError(f"'{value}' is not none (use loopback_users.NAME = true|false)")


def _import_backend(reader: _Reader, value: str) -> None:
    if value not in ("local_filesystem", "local", "rabbit_definitions_import_local_filesystem"):
        raise ValueError(f"'{value}': amqpq imports definitions from a local file only")


def _leader_locator(value: str) -> str:
    if value not in LOCATOR_VALUES:
        raise ValueError(f"'{value}' is not one of {', '.join(LOCATOR_VALUES)}")
    return value


def _listeners_tcp(reader: _Reader, value: str) -> None:
    raise ValueError("amqpq always has an AMQP listener (listeners.tcp = none is not supported)"
                     if value == "none" else f"'{value}' is not none")


_EXACT: dict[str, Callable[[_Reader, str], None]] = {
    "listeners.tcp": _listeners_tcp,
    "ssl_options.certfile": _option("ssl_cert", lambda v: _existing_file(v)),
    "ssl_options.keyfile": _option("ssl_key", lambda v: _existing_file(v)),
    "ssl_options.cacertfile": _option("ssl_cacert", lambda v: _existing_file(v)),
    "ssl_options.verify": _option("ssl_verify_peer", _verify),
    "ssl_options.fail_if_no_peer_cert": _option("ssl_fail_if_no_peer_cert", _bool),
    "cluster_formation.etcd.node_ttl": _option("cluster_lease", lambda v: _int(v, 2)),
    "queue_leader_locator": _option("queue_leader_locator", _leader_locator),
    "quorum_queue.continuous_membership_reconciliation.enabled":
        _option("quorum_reconciliation", _bool),
    "quorum_queue.continuous_membership_reconciliation.target_group_size":
        _option("quorum_target_group_size", lambda v: _int(v, 1)),
    "cluster_tls.certfile": _option("cluster_tls_cert", _existing_file),  # amqpq's keys
    "cluster_tls.keyfile": _option("cluster_tls_key", _existing_file),
    "cluster_tls.cacertfile": _option("cluster_tls_cacert", _existing_file),
    "default_user": _setting("default_user", _text),
    "default_pass": _setting("default_pass", _text),
    "default_vhost": _setting("default_vhost", _text),
    "loopback_users": _loopback_none,
    "heartbeat": _option("heartbeat", lambda v: _int(v, 0, 65535)),
    "frame_max": _option("frame_max", lambda v: _int(str(bytesize(v)), 4096)),
    "channel_max": _option("channel_max", _channel_max),
    "connection_max": _option("max_connections", _connection_max),
    "consumer_timeout": _option("consumer_timeout", lambda v: _int(v, 0)),
    "vm_memory_high_watermark.relative": _option("vm_memory_high_watermark.relative",
                                                 _relative_watermark),
    "vm_memory_high_watermark.absolute": _option("vm_memory_high_watermark.absolute",
                                                 _absolute_watermark),
    "disk_free_limit.absolute": _option("disk_free_limit.absolute", information_unit),
    "disk_free_limit.relative": _option("disk_free_limit.relative",
                                        lambda v: int(_positive(v) * total_memory())),
    "load_definitions": _option("definitions", _existing_file),
    "management.load_definitions": _option("definitions", _existing_file),
    "definitions.local.path": _option("definitions", _existing_file),
    "definitions.import_backend": _import_backend,
    "management.tcp.port": _option("management_port", lambda v: _int(v, 0, 65535)),
    "management.listener.port": _option("management_port", lambda v: _int(v, 0, 65535)),
    "management.ssl.port": _option("management_port", lambda v: _int(v, 0, 65535)),
    "management.ssl.certfile": _option("management_ssl_cert", _existing_file),
    "management.ssl.keyfile": _option("management_ssl_key", _existing_file),
    "management.tcp.ip": _setting("management.host", lambda v: str(ipaddress.ip_address(v))),
    "management.listener.ip": _setting("management.host",
                                       lambda v: str(ipaddress.ip_address(v))),
    "prometheus.tcp.port": _setting("prometheus.port", lambda v: _int(v, 0, 65535)),
    "log.dir": _option("log.dir", _text),
    "log.file": _option("log.file", _log_file),
    "log.file.level": _setting("log.file_level", _level),
    "log.file.rotation.size": _setting("log.rotation_size", lambda v: _int(v, 0)),
    "log.file.rotation.count": _setting("log.rotation_count", lambda v: _int(v, 0)),
    "queue_index_embed_msgs_below": _setting("queue_index_embed_msgs_below",
                                             lambda v: _int(str(bytesize(v)), 0)),
    "log.file.formatter": _option("log.file.formatter", _formatter),
    "log.console": _option("log.console", _bool),
    "log.console.level": _option("log_level", _level),
    "log.console.formatter": _option("log.console.formatter", _formatter),
    "log.console.stdio": _option("log.console.stdio", _stdio),
    "product.name": _setting("product", _text),
    "product.version": _setting("version", _text),
}

#: Every key amqpq reads (``listeners.tcp.NAME``, ``listeners.ssl.NAME``,
#: ``loopback_users.NAME`` and ``log.CATEGORY.level`` besides these).
SUPPORTED = tuple(_EXACT)


def load(path: Path | str) -> ConfFile:
    """Read a rabbitmq.conf-style file.

    Raises:
        ConfError: unreadable file, bad line, unknown or unsupported key, bad value
            (``FILE:LINE: ...``).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfError(path, None, f"cannot read: {getattr(exc, 'strerror', None) or exc}"
                        ) from None
    conf = _Reader(path.absolute(), path).read(parse_lines(text, path))
    conf.options.pop("log.console.stdio", None)
    return conf


def from_option(value: str | None, environ: Mapping[str, str] = os.environ) -> ConfFile | None:
    """The ``--config`` file, else ``$RABBITMQ_CONFIG_FILE`` (``.conf`` added to a path
    without an extension, as RabbitMQ does), read; None when neither is given.

    Raises:
        ConfError: see :func:`load`; also a ``.config`` file (RabbitMQ's classic Erlang
            terms format, not supported).
    """
    if not value:
        value = environ.get("RABBITMQ_CONFIG_FILE") or None
        if value is None:
            return None
        if not Path(value).suffix:
            value += ".conf"
    if Path(value).suffix == ".config":
        raise ConfError(value, None, "the classic Erlang-terms config format is not "
                                     "supported (use rabbitmq.conf's key = value format)")
    return load(value)
