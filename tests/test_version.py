"""``amqpq-server --version`` and ``amqpqctl --version``: the ``amqpq`` package's version
(importlib.metadata) on stdout, exit status 0."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pytest
from click.testing import CliRunner

from amqp_server.server import package_version, parse_args
from amqpqctl.cli import cli

VERSION = importlib.metadata.version("amqpq")


def test_package_version_is_the_metadata() -> None:
    assert package_version() == VERSION == "0.1.0"


def test_server_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"amqpq-server {VERSION}\n"


def test_ctl_version() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"amqpqctl {VERSION}\n"


@pytest.mark.parametrize("module,prog", [("amqp_server", "amqpq-server"),
                                         ("amqpqctl", "amqpqctl")])
def test_version_from_the_command_line(module: str, prog: str) -> None:
    done = subprocess.run([sys.executable, "-m", module, "--version"], capture_output=True,
                          text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"{prog} {VERSION}\n", "")
