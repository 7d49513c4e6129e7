"""Printing results as rabbitmqctl does: a header line of column names, then one line per
row, tab-separated; or JSON (``--format json``) for scripts.

Source: https://www.rabbitmq.com/docs/man/rabbitmqctl.8 (``--formatter``, list commands).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click


def cell(value: Any) -> str:
    """One table cell: booleans as ``true``/``false``, null as empty, lists/objects as
    compact JSON, everything else as text."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return str(value)


def emit(rows: Sequence[dict[str, Any]], columns: Sequence[str], fmt: str,
         banner: str | None = None) -> None:
    """Print ``rows`` restricted to ``columns``, as a table or JSON."""
    if fmt == "json":
        click.echo(json.dumps([{c: r.get(c) for c in columns} for r in rows], indent=1))
        return
    if banner:
        click.echo(banner)
    click.echo("\t".join(columns))
    for row in rows:
        click.echo("\t".join(cell(row.get(c)) for c in columns))


def emit_message(message: str, fmt: str) -> None:
    """A progress line (``Adding vhost "v" ...``); nothing in JSON mode."""
    if fmt != "json":
        click.echo(message)
