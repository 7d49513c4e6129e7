"""Printing results as rabbitmqctl does, with its formatters (``--formatter``):

* ``table`` (default): an informational line (``Listing queues for vhost / ...``), a header
  line of column names, then one line per row, tab-separated;
* ``pretty_table``: the same in a box-drawn grid (``tabulate``'s ``simple_grid``, as
  rabbitmqctl draws it, without its ANSI bold header);
* ``csv``: every cell quoted, header line first, no informational line;
* ``json``: a JSON array, no informational line; with no columns asked for, each row is the
  whole object the management API returned (as rabbitmqadmin prints), with columns only
  those keys.

``-q/--quiet`` drops the informational line, ``--no-table-headers`` the header row,
``-s/--silent`` both. A column may be a dotted path into nested objects
(``message_stats.publish_details.rate``, ``backing_queue_status.mode``).

Source: https://www.rabbitmq.com/docs/man/rabbitmqctl.8 (``--formatter``, ``--silent``,
``--no-table-headers``, list commands), https://www.rabbitmq.com/docs/management-cli.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import click
import tabulate as tabulate_module
from tabulate import tabulate

from amqpqctl.client import CtlError

#: the ``--formatter`` values, first the default
FORMATTERS = ("table", "pretty_table", "csv", "json")


class ColumnError(CtlError):
    """An unknown column: exit code 64 (``EX_USAGE``), as rabbitmqctl's "Info key(s) ...
    are not supported"."""

    exit_code = 64


@dataclass(frozen=True)
class Output:
    """How a command prints: formatter, informational lines, header row."""

    formatter: str = "table"
    quiet: bool = False
    headers: bool = True

    def override(self, formatter: str | None, no_table_headers: bool, quiet: bool,
                 silent: bool) -> Output:
        """These settings with a command's own options applied (given after the command
        name: ``amqpqctl list_queues --formatter json -s``)."""
        return replace(self, formatter=formatter or self.formatter,
                       quiet=self.quiet or quiet or silent,
                       headers=self.headers and not (no_table_headers or silent))

    @property
    def banners(self) -> bool:
        """Whether informational lines are printed (table formatters, not quiet)."""
        return not self.quiet and self.formatter in ("table", "pretty_table")

    def progress(self, message: str) -> None:
        """A progress line (``Adding vhost "v" ...``) unless quiet or a machine format."""
        if self.banners:
            click.echo(message)


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


def lookup(row: dict[str, Any], column: str) -> Any:
    """The value of ``column`` in ``row``: a key, else a dotted path into nested objects
    (``message_stats.publish``); None where absent."""
    if column in row:
        return row[column]
    value: Any = row
    for part in column.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def pick_columns(requested: Sequence[str], default: Sequence[str], known: Iterable[str],
                 rows: Sequence[dict[str, Any]], out: Output) -> list[str] | None:
    """The columns to print: those asked for, else ``default`` (JSON: None, whole rows).

    A column is accepted when it is in ``known`` (rabbitmqctl's names) or is a key (or
    the first part of a dotted path) of any row the API returned, so a field the API adds
    later can be asked for without a change here.

    Raises:
        ColumnError: a column neither known nor in the rows, naming it and the known ones.
    """
    if not requested:
        return None if out.formatter == "json" else list(default)
    accepted = set(known).union(*(r.keys() for r in rows))
    unknown = [c for c in requested if c not in accepted and c.split(".")[0] not in accepted]
    if unknown:
        raise ColumnError(f"unknown column(s): {', '.join(unknown)}; known: "
                          f"{', '.join(sorted(known))}")
    return list(requested)


def emit(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None, out: Output,
         banner: str | None = None) -> None:
    """Print ``rows`` (restricted to ``columns``; None: whole rows, JSON only) with the
    ``out`` formatter; ``banner`` is the informational line of the table formatters."""
    if out.formatter == "json":
        shown = rows if columns is None else [{c: lookup(r, c) for c in columns}
                                              for r in rows]
        click.echo(json.dumps(list(shown), indent=1))
        return
    cols = list(columns or [])
    cells = [[cell(lookup(r, c)) for c in cols] for r in rows]
    if banner and out.banners:
        click.echo(banner)
    if out.formatter == "csv":
        writer = csv.writer(_Echo(), quoting=csv.QUOTE_ALL, lineterminator="\n")
        if out.headers:
            writer.writerow(cols)
        writer.writerows(cells)
    elif out.formatter == "pretty_table":
        if cells or out.headers:
            click.echo(_grid(cells, cols if out.headers else []))
    else:
        if out.headers:
            click.echo("\t".join(cols))
        for line in cells:
            click.echo("\t".join(line))


def _grid(cells: list[list[str]], headers: list[str]) -> str:
    """rabbitmqctl's pretty_table grid: a box around every cell, one space of padding
    (tabulate pads headers by 2 more unless its ``MIN_PADDING`` is 0)."""
    saved, tabulate_module.MIN_PADDING = tabulate_module.MIN_PADDING, 0
    try:
        return tabulate(cells, headers=headers, tablefmt="simple_grid", disable_numparse=True)
    finally:
        tabulate_module.MIN_PADDING = saved


class _Echo:
    """A file-like ``write`` to click's stdout, for :mod:`csv`."""

    def write(self, text: str) -> int:
        click.echo(text, nl=False)
        return len(text)

