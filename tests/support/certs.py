"""Test certificates made with the ``openssl`` command: one CA and leaf certificates it signs
(for AMQPS, the node links' TLS and etcd's TLS). :data:`OPENSSL` is None without the command
(tests that need certificates skip)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

OPENSSL = shutil.which("openssl")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(d: Path, name: str = "ca") -> Path:
    """A self-signed CA in ``d`` (``NAME.pem``, ``NAME.key``, 1 day); returns the PEM's path."""
    d.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
             f"/CN=amqpq-test-{name}", "-keyout", f"{name}.key", "-out", f"{name}.pem", cwd=d)
    return d / f"{name}.pem"


def make_leaf(d: Path, name: str, cn: str, ca: str = "ca",
              san: str = "IP:127.0.0.1,DNS:localhost") -> tuple[Path, Path]:
    """A certificate ``NAME.pem`` / key ``NAME.key`` in ``d`` for subject CN ``cn``, signed by
    the CA ``ca`` made there by :func:`make_ca`, usable by servers and clients alike (both
    extended key usages, subjectAltName ``san``); returns (cert, key)."""
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={cn}",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)
    (d / f"{name}.ext").write_text(
        f"subjectAltName={san}\nextendedKeyUsage=serverAuth,clientAuth\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-days", "1", "-extfile", f"{name}.ext",
             "-out", f"{name}.pem", cwd=d)
    return d / f"{name}.pem", d / f"{name}.key"
