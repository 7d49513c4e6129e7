"""Where ``amqpqctl`` finds the broker and how it logs in: command-line options, then
environment variables, then a configuration file, then defaults (each setting on its own).

The configuration file is rabbitmqadmin's INI format (``~/.rabbitmqadmin.conf``)::

    [default]
    hostname = localhost
    port = 15672
    username = guest
    password = guest
    vhost = /

    [host_https]
    hostname = broker.example.com
    port = 15671
    ssl = True
    ssl_ca_cert_file = /etc/ssl/ca.pem

read from ``--config FILE`` (``AMQPQCTL_CONFIG``), else the first of ``~/.amqpqctl.conf``
and ``~/.rabbitmqadmin.conf`` that exists; the section is ``--node NAME`` (``-N``,
``AMQPQCTL_NODE``), else ``[default]`` if the file has one. Values are taken literally (no
``%`` interpolation, so passwords may hold ``%``); `` # comment`` after a value is a comment,
as rabbitmqadmin's example file writes them.

Errors (one line, exit 1): a ``--config`` file that cannot be read or is not INI, a
``--node`` section the file lacks, a setting amqpqctl does not know, a port or timeout that
is not a number, a boolean that is not one.

Source: https://www.rabbitmq.com/docs/management-cli (configuration file),
rabbitmqadmin's ``--config``/``--node`` options.
"""

from __future__ import annotations

import configparser
import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from amqpqctl.client import CtlError
from amqpqctl.output import FORMATTERS

#: the management API's port and the other defaults (rabbitmqadmin's, but 127.0.0.1)
DEFAULTS: dict[str, Any] = {
    "hostname": "127.0.0.1", "port": 15672, "username": "guest", "password": "guest",
    "vhost": "/", "ssl": False, "path_prefix": "", "request_timeout": 30.0,
    "ssl_ca_cert_file": None, "ssl_cert_file": None, "ssl_key_file": None,
    "ssl_insecure": False, "ssl_disable_hostname_verification": False, "base_uri": None,
    "formatter": None,
}
_INT = {"port"}
_FLOAT = {"request_timeout"}
_BOOL = {"ssl", "ssl_insecure", "ssl_disable_hostname_verification"}
#: rabbitmqadmin settings that mean nothing to amqpqctl (accepted, not used)
IGNORED = {"declare_vhost", "depth", "sort", "sort_reverse", "verbose", "bash_completion",
           "format"}
#: files read when no ``--config`` is given, the first that exists
DEFAULT_FILES = ("~/.amqpqctl.conf", "~/.rabbitmqadmin.conf")


def default_config_file() -> Path | None:
    """The first of :data:`DEFAULT_FILES` that exists (``~`` is ``$HOME``)."""
    for name in DEFAULT_FILES:
        found = Path(os.path.expanduser(name))
        if found.is_file():
            return found
    return None


def load_config(file: str | None, node: str | None) -> dict[str, Any]:
    """The settings of section ``node`` (None: ``[default]``, if any) of ``file`` (None:
    :func:`default_config_file`, if any), converted (port an int, ssl a bool...).

    Raises:
        CtlError: the file cannot be read or parsed, the ``node`` section is missing, a
            setting is unknown or its value has the wrong type.
    """
    found = Path(file) if file is not None else default_config_file()
    if found is None:
        if node is not None:
            raise CtlError(f"--node {node}: no configuration file (--config FILE, or "
                           f"{' or '.join(DEFAULT_FILES)})")
        return {}
    parser = configparser.ConfigParser(interpolation=None,
                                       inline_comment_prefixes=("#", ";"),
                                       default_section="__none__")
    try:
        with found.open(encoding="utf-8") as stream:
            parser.read_file(stream)
    except OSError as exc:
        raise CtlError(f"cannot read configuration file '{found}': "
                       f"{exc.strerror or exc}") from None
    except (configparser.Error, UnicodeDecodeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CtlError(f"configuration file '{found}' is not valid INI: {first}") from None
    section = node if node is not None else "default"
    if not parser.has_section(section):
        if node is None:
            return {}
        raise CtlError(f"no section [{node}] in configuration file '{found}' (sections: "
                       f"{', '.join(parser.sections()) or 'none'})")
    return {key: _convert(found, section, key, value)
            for key, value in parser.items(section) if key not in IGNORED}


def _convert(file: Path, section: str, key: str, value: str) -> Any:
    where = f"configuration file '{file}', section [{section}]"
    if key not in DEFAULTS:
        known = ", ".join(sorted(k for k in DEFAULTS if k != "formatter"))
        raise CtlError(f"{where}: unknown setting '{key}' (known: {known}, formatter)")
    try:
        if key in _INT:
            return int(value)
        if key in _FLOAT:
            return float(value)
    except ValueError:
        raise CtlError(f"{where}: {key} must be a number, got '{value}'") from None
    if key == "formatter" and value not in FORMATTERS:
        raise CtlError(f"{where}: formatter must be one of {', '.join(FORMATTERS)}, got "
                       f"'{value}'")
    if key in _BOOL:
        state = configparser.ConfigParser.BOOLEAN_STATES.get(value.lower())
        if state is None:
            raise CtlError(f"{where}: {key} must be true or false, got '{value}'")
        return state
    return value


@dataclass(frozen=True)
class Settings:
    """The resolved connection settings (see the module doc for where each comes from)."""

    base_url: str
    username: str
    password: str
    vhost: str
    timeout: float
    ssl_context: ssl.SSLContext | None
    formatter: str | None


def resolve(given: dict[str, Any], config: dict[str, Any]) -> Settings:
    """``given`` (command line or environment; None where neither) over ``config`` over
    :data:`DEFAULTS`.

    ``base_uri`` (``--url``) wins over hostname/port/ssl/path_prefix.

    Raises:
        CtlError: a TLS file cannot be loaded.
    """
    merged = {key: given[key] if given.get(key) is not None else
              config[key] if config.get(key) is not None else default
              for key, default in DEFAULTS.items()}
    if merged["base_uri"]:
        base = str(merged["base_uri"])
    else:
        host = str(merged["hostname"])
        shown = f"[{host}]" if ":" in host else host
        prefix = "/" + str(merged["path_prefix"]).strip("/") if merged["path_prefix"] else ""
        base = f"{'https' if merged['ssl'] else 'http'}://{shown}:{merged['port']}{prefix}"
    context = _ssl_context(merged) if base.startswith("https:") else None
    return Settings(base, str(merged["username"]), str(merged["password"]),
                    str(merged["vhost"]), float(merged["request_timeout"]), context,
                    merged["formatter"])


def _ssl_context(settings: dict[str, Any]) -> ssl.SSLContext:
    try:
        context = ssl.create_default_context(cafile=settings["ssl_ca_cert_file"])
        if settings["ssl_cert_file"]:
            context.load_cert_chain(settings["ssl_cert_file"], settings["ssl_key_file"])
    except (OSError, ssl.SSLError) as exc:
        raise CtlError(f"cannot load the TLS certificate files: {exc}") from None
    if settings["ssl_insecure"] or settings["ssl_disable_hostname_verification"]:
        context.check_hostname = False
    if settings["ssl_insecure"]:
        context.verify_mode = ssl.CERT_NONE
    return context
