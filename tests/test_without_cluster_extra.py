"""``make run`` installs the broker without the ``cluster`` extra (no aetcd, no grpc): the
broker must start without them; only ``--cluster-etcd`` needs them (it says so then)."""

from __future__ import annotations

import subprocess
import sys

from tests.support.broker_process import REPO_ROOT

BLOCK = "import sys; sys.modules['aetcd'] = None; sys.modules['grpc'] = None; "


def test_the_server_imports_without_aetcd() -> None:
    out = subprocess.run(
        [sys.executable, "-c", BLOCK + "from amqp_server.server import main; "
         "main(['--version'])"],
        capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("amqpq-server "), out.stdout
