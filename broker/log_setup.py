"""The broker process's logging: console and file outputs, text or JSON, per-category levels.

What RabbitMQ's logging guide describes, on the stdlib ``logging`` module:

* **console** (stdout, as RabbitMQ's ``log.console``) at ``LogOptions.level``; level ``none``
  turns it off (rabbitmq.conf ``log.console = false``).
* **file** (``--log-file``, ``log.file``) at ``file_level`` (default: the console's, info
  when the console is off), rotated
  by size: after ``rotation_size`` bytes the file becomes ``FILE.1`` (``FILE.1`` becomes
  ``FILE.2``...), ``rotation_count`` old files are kept; size 0 never rotates
  (``logging.handlers.RotatingFileHandler``).
* **format** ``text`` (``2026-11-23 21:40:00,123 INFO amqpq.connection: accepting AMQP
  connection (...)``) or ``json``: one JSON object per line with RabbitMQ's field names
  ``time`` (RFC 3339, microseconds, local offset), ``level`` (lower case), ``msg``, then
  ``logger`` (amqpq's logger name) and the record's structured fields where it has some
  (the connection lines carry ``connection``, ``user``, ``vhost``, ``channel``).
* **categories** (``log.<category>.level``): RabbitMQ's category -> amqpq loggers, see
  :data:`CATEGORIES`. ``default`` is every logger not in another category. A category
  level filters that category's records before the outputs filter them by theirs.

Levels are RabbitMQ's names: debug, info, notice, warning, error, critical, alert,
emergency, none (Python has no notice/alert/emergency: notice sits between info and
warning, alert and emergency are critical).

Source: https://www.rabbitmq.com/docs/logging (log outputs, levels, categories, JSON,
rotation).
"""

from __future__ import annotations

import argparse
import json
import logging
import logging.handlers
import sys
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from broker.config import LogOptions

NONE = logging.CRITICAL + 10  # above every record: the output or category is off
NOTICE = 25

#: RabbitMQ's level names -> stdlib levels.
LEVELS: dict[str, int] = {
    "debug": logging.DEBUG, "info": logging.INFO, "notice": NOTICE,
    "warning": logging.WARNING, "error": logging.ERROR, "critical": logging.CRITICAL,
    "alert": logging.CRITICAL, "emergency": logging.CRITICAL, "none": NONE,
}

#: RabbitMQ's log categories -> the amqpq loggers in them. ``default`` is the root logger
#: (everything else: server, listeners, storage, management...). mirroring, federation,
#: upgrade and ra exist in RabbitMQ but log nothing in amqpq (accepted, no effect).
CATEGORIES: dict[str, tuple[str, ...]] = {
    "connection": ("amqpq.connection",),
    "channel": ("amqpq.channel",),
    "queue": ("amqpq.queue",),
    "default": ("",),
    "mirroring": (), "federation": (), "upgrade": (), "ra": (),
}

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
CONSOLE = "<stdout>"  # the console output as /api/nodes' log_files names it

# LogRecord attributes that are not structured fields of the message.
_RECORD_FIELDS = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message", "asctime", "taskName", "amqp_client_error"}


class JSONFormatter(logging.Formatter):
    """One JSON object per record, on one line (newlines in the message are escaped):
    ``{"time": "2026-11-23 21:40:00.123456+00:00", "level": "info", "msg": "...",
    "logger": "amqpq.connection", "connection": "127.0.0.1:45780 -> 127.0.0.1:5672"}``;
    an exception's traceback is the ``exception`` field."""

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.fromtimestamp(record.created).astimezone()
        entry: dict[str, Any] = {
            "time": when.isoformat(sep=" ", timespec="microseconds"),
            "level": level_name(record.levelno), "msg": record.getMessage(),
            "logger": record.name,
        }
        for key, value in record.__dict__.items():
            if key not in _RECORD_FIELDS and key not in entry:
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def level_name(levelno: int) -> str:
    """RabbitMQ's lower-case name of a stdlib level (``warning``, ``notice``...)."""
    if levelno == NOTICE:
        return "notice"
    return logging.getLevelName(levelno).lower()


def parse_level(name: str) -> int:
    """The stdlib level of a RabbitMQ level name (case-insensitive).

    Raises:
        ValueError: not one of :data:`LEVELS` (the text lists them).
    """
    try:
        return LEVELS[name.strip().lower()]
    except KeyError:
        raise ValueError(f"unknown log level '{name}' (one of: {', '.join(LEVELS)})") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--log-file PATH`` and ``--log-format text|json`` (``--log-level`` is the server's)."""
    parser.add_argument("--log-file", default=None, metavar="PATH",
                        help="also log to this file (rotated by log.file.rotation.size "
                             "in --config)")
    parser.add_argument("--log-format", default="text", choices=FORMATS,
                        help="text, or json: one JSON object per line")


def from_args(args: argparse.Namespace) -> LogOptions:
    """LogOptions of ``--log-level``, ``--log-file`` (made absolute), ``--log-format``."""
    return LogOptions(level=args.log_level,
                      file=Path(args.log_file).absolute() if args.log_file else None,
                      format=args.log_format)


def log_files(opts: LogOptions) -> list[str]:
    """Where the logs go, as RabbitMQ's ``/api/nodes`` ``log_files`` lists them: the file's
    absolute path, then ``<stdout>`` when the console is on."""
    files = [str(Path(opts.file).absolute())] if opts.file is not None else []
    if parse_level(opts.level) < NONE:
        files.append(CONSOLE)
    return files


def _formatter(opts: LogOptions) -> logging.Formatter:
    return JSONFormatter() if opts.format == "json" else logging.Formatter(TEXT_FORMAT)


def configure(opts: LogOptions, console: IO[str] | None = None) -> list[logging.Handler]:
    """Install the outputs and category levels of ``opts`` on the root logger (replacing
    the handlers an earlier call installed; others, such as pytest's, stay).

    Args:
        console: the console stream (default ``sys.stdout``).

    Returns:
        The handlers installed (console first when on, then the file).

    Raises:
        ValueError: an unknown level name or format; OSError: the log file cannot be opened.
    """
    if opts.format not in FORMATS:
        raise ValueError(f"unknown log format '{opts.format}' (text or json)")
    console_level = parse_level(opts.level)
    file_level = (parse_level(opts.file_level) if opts.file_level
                  else console_level if console_level < NONE else logging.INFO)
    categories = {name: parse_level(level) for name, level in opts.categories.items()}
    unknown = set(categories) - set(CATEGORIES)
    if unknown:
        raise ValueError(f"unknown log category '{sorted(unknown)[0]}'")
    handlers: list[logging.Handler] = []
    if console_level < NONE:
        handler: logging.Handler = logging.StreamHandler(console or sys.stdout)
        handler.setLevel(console_level)
        handlers.append(handler)
    if opts.file is not None:
        Path(opts.file).parent.mkdir(parents=True, exist_ok=True)
        handler = logging.handlers.RotatingFileHandler(
            opts.file, maxBytes=max(0, opts.rotation_size),
            backupCount=max(0, opts.rotation_count), encoding="utf-8")
        handler.setLevel(file_level)
        handlers.append(handler)
    formatter = _formatter(opts)
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "_amqpq_log_setup", False)]:
        root.removeHandler(old)
        old.close()
    for handler in handlers:
        handler.setFormatter(formatter)
        handler._amqpq_log_setup = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    outputs = min((h.level for h in handlers), default=NONE)
    root.setLevel(categories.get("default", outputs))
    for name, loggers in CATEGORIES.items():
        for logger in loggers:
            if logger:
                logging.getLogger(logger).setLevel(categories.get(name, logging.NOTSET))
    return handlers
