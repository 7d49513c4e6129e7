"""The differential report: every compared cell, both observations, every difference.

``report.json`` holds everything (machine-readable); ``report.txt`` lists the differences, each
marked ``ALLOWED (reason)``, ``NOT ALLOWED, known amqpq bug, xfail (reason)`` or ``NOT ALLOWED``,
then the cells that matched and the ones skipped.
Both are rewritten after every cell, so an interrupted run still leaves a report.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from interop_tests.differential.allow_list import allowed
from interop_tests.differential.compare import Difference, diff


@dataclass
class Cell:
    client: str
    scenario: str
    amqpq: Any = None
    reference: Any = None
    differences: list[dict] = field(default_factory=list)
    skipped: str | None = None
    #: ``known_bugs.py`` reason when the cell is an expected failure on amqpq.
    known_bug: str | None = None

    @property
    def not_allowed(self) -> list[dict]:
        return [d for d in self.differences if d["allowed"] is None]


class Report:
    def __init__(self, directory: Path, amqpq_url: str, reference_url: str) -> None:
        self.directory = directory
        self.amqpq_url = amqpq_url
        self.reference_url = reference_url
        self.cells: list[Cell] = []
        self.lock = threading.Lock()
        directory.mkdir(parents=True, exist_ok=True)

    @property
    def json_path(self) -> Path:
        return self.directory / "report.json"

    @property
    def text_path(self) -> Path:
        return self.directory / "report.txt"

    def compare(self, client: str, scenario: str, amqpq: Any, reference: Any,
                known_bug: str | None = None) -> Cell:
        differences: list[Difference] = diff(amqpq, reference)
        cell = Cell(client, scenario, amqpq, reference, known_bug=known_bug)
        for d in differences:
            entry = allowed(client, scenario, d.path)
            cell.differences.append({**d.to_json(),
                                     "allowed": entry.reason if entry else None})
        with self.lock:
            self.cells.append(cell)
            self.write()
        return cell

    def skip(self, client: str, scenario: str, reason: str) -> None:
        with self.lock:
            self.cells.append(Cell(client, scenario, skipped=reason))
            self.write()

    def write(self) -> None:
        data = {
            "amqpq": self.amqpq_url,
            "reference": self.reference_url,
            "cells": [cell.__dict__ for cell in self.cells],
        }
        self.json_path.write_text(json.dumps(data, indent=1, sort_keys=True, default=str))
        self.text_path.write_text(self.text())

    def text(self) -> str:
        compared = [c for c in self.cells if c.skipped is None]
        differing = [c for c in compared if c.differences]
        not_allowed = sum(len(c.not_allowed) for c in compared)
        total = sum(len(c.differences) for c in compared)
        lines = [
            "amqpq vs reference RabbitMQ: differential report",
            f"amqpq:     {self.amqpq_url}",
            f"reference: {self.reference_url}",
            f"cells compared: {len(compared)}, with differences: {len(differing)}, "
            f"differences: {total} ({not_allowed} not allowed), skipped: "
            f"{len(self.cells) - len(compared)}",
            "",
        ]
        if differing:
            lines.append("DIFFERENCES")
        for cell in differing:
            lines.append(f"  {cell.client} x {cell.scenario}")
            for d in cell.differences:
                if d["allowed"]:
                    verdict = f"ALLOWED ({d['allowed']})"
                elif cell.known_bug:
                    verdict = f"NOT ALLOWED, known amqpq bug, xfail ({cell.known_bug})"
                else:
                    verdict = "NOT ALLOWED"
                lines.append(f"    {d['path']}: amqpq={json.dumps(d['amqpq'])} "
                             f"reference={json.dumps(d['reference'])}  -> {verdict}")
        same = sorted(f"{c.client} x {c.scenario}" for c in compared if not c.differences)
        lines += ["", f"IDENTICAL ({len(same)})"] + [f"  {name}" for name in same]
        skipped = sorted(f"{c.client} x {c.scenario}: {c.skipped}" for c in self.cells
                         if c.skipped is not None)
        lines += ["", f"SKIPPED ({len(skipped)})"] + [f"  {name}" for name in skipped]
        return "\n".join(lines) + "\n"
