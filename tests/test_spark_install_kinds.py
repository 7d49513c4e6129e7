"""``format("amqpq")`` works however the package is installed (issue #34).

PySpark registers Python data sources by listing sys.path with ``pkgutil.iter_modules()`` for
top-level ``pyspark_*`` modules (pyspark/sql/worker/lookup_data_sources.py, run in a Python
worker). That listing sees directories and zip files on sys.path, never a meta-path finder,
which is how setuptools implements a plain ``pip install -e .`` unless the layout allows a
.pth file (pyproject.toml: ``package-dir = {"" = "."}``).

Each install kind gets its own new virtualenv with amqpq installed into it by pip, from a copy
of the project's sources (so that building writes nothing into the checkout):

* ``editable``: ``pip install -e .`` (no config settings: what a user types);
* ``wheel``: ``pip wheel --no-deps . -w dist`` then ``pip install dist/amqpq-*.whl``;
* ``compat`` and ``strict``: ``pip install -e . --config-settings editable_mode=...``
  (``make install`` uses compat).

Two tests:

* ``test_spark_lookup_finds_the_data_source`` (every kind, no JVM; 30-60 s for all four, the
  four installs run in parallel): the venv's python runs what Spark's lookup runs
  (``iter_modules``, import, ``DefaultSource``) from a temporary directory with no
  PYTHONPATH. With pyproject.toml as it was before (no ``package-dir``) the ``editable`` kind
  found nothing: ``pyspark_amqpq`` could be imported but was not listed;
* ``test_spark_round_trip`` (``editable`` and ``wheel``; marked slow: a Spark session per venv
  takes 60-140 s on a 2-core machine, so it runs on demand with ``-m slow``): a PySpark
  script run by that venv's python writes a DataFrame with ``format("amqpq")`` into a stream
  of one shared broker and reads it back with ``spark.read.format("amqpq")``, without
  calling any register function.

The dependencies (pyspark, pyarrow, pika, pamqp, ...) are not downloaded again: each venv gets
a .pth naming a directory of symlinks to this interpreter's site-packages entries, leaving out
amqpq's own (its dist-info, its .pth files, its top-level modules). That is honest for what is
tested: only amqpq's own files decide whether Spark finds ``pyspark_amqpq``, and those come
from the install under test alone (each run checks that ``spark_sink`` and ``pyspark_amqpq``
are imported from that install, not from this checkout; a .pth line adds a plain directory,
whose own .pth files Python does not read). pip itself runs as
``python -m pip --python <venv python>``, i.e. inside the new venv, with build isolation.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark not installed (pip install '.[spark]')")
pytest.importorskip("pyarrow", reason="pyarrow not installed (pip install '.[spark]')")
pika = pytest.importorskip("pika")

from tests import spark_support  # noqa: E402
from tests.spark_support import BrokerProcess, _java_available  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
SPARK_KINDS = ("editable", "wheel")
KINDS = ("editable", "wheel", "compat", "strict")

SCRIPT = r'''
import json, os, sys
os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
uri, management, stream = sys.argv[1:4]
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]").appName("amqpq-install-kind")
         .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
         .config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.sql.shuffle.partitions", "1").getOrCreate())
spark.sparkContext.setLogLevel("FATAL")
df = spark.createDataFrame([(i, f"row {i}") for i in range(5)], "id long, name string")
df.write.format("amqpq").option("uri", uri).option("format", "json").mode("append").save(stream)
back = (spark.read.format("amqpq").schema(df.schema).option("uri", uri)
        .option("managementUri", management).option("stream", stream)
        .option("format", "json").load())
rows = sorted([r.id, r.name] for r in back.collect())
spark.stop()
import pyspark_amqpq, spark_sink
print("RESULT " + json.dumps({"rows": rows, "spark_sink": spark_sink.__file__,
                               "pyspark_amqpq": pyspark_amqpq.__file__}))
'''

# what pyspark/sql/worker/lookup_data_sources.py does, without the JVM's socket
LOOKUP = r'''
import json
from importlib import import_module
from pkgutil import iter_modules
from pyspark.sql.datasource import DataSource
found = {}
for info in iter_modules():
    if info.name.startswith("pyspark_"):
        mod = import_module(info.name)
        if hasattr(mod, "DefaultSource") and issubclass(mod.DefaultSource, DataSource):
            found[mod.DefaultSource.name()] = info.name
import pyspark_amqpq, spark_sink
print("RESULT " + json.dumps({"found": found, "spark_sink": spark_sink.__file__,
                               "pyspark_amqpq": pyspark_amqpq.__file__}))
'''


def _project() -> tuple[list[str], list[str]]:
    """The top-level packages and modules pyproject.toml ships."""
    with open(REPO_ROOT / "pyproject.toml", "rb") as fh:
        tool = tomllib.load(fh)["tool"]["setuptools"]
    packages = sorted({p.split(".")[0] for p in tool["packages"]})
    return packages, list(tool.get("py-modules", []))


def _copy_sources(dest: Path) -> None:
    packages, modules = _project()
    dest.mkdir(parents=True)
    for name in ["pyproject.toml", "README.md", *(f"{m}.py" for m in modules)]:
        shutil.copy2(REPO_ROOT / name, dest / name)
    for pkg in packages:
        shutil.copytree(REPO_ROOT / pkg, dest / pkg,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def _deps_dir(dest: Path) -> Path:
    """Symlinks to this interpreter's site-packages entries, amqpq's own left out."""
    packages, modules = _project()
    own = set(packages) | set(modules) | {f"{m}.py" for m in modules}
    dest.mkdir()
    site = Path(sysconfig.get_paths()["purelib"])
    for entry in site.iterdir():
        name = entry.name
        if (name in own or name.endswith(".pth") or name.startswith("__editable__")
                or re.match(r"amqpq-[^-]+\.(dist|egg)-info$", name)):
            continue
        (dest / name).symlink_to(entry)
    return dest


def _run(cmd: list[str], cwd: Path, timeout: float = 180) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
        raise AssertionError(f"{' '.join(cmd)} exited with {proc.returncode}:\n{tail}")
    return proc.stdout


def _install(kind: str, root: Path, deps: Path) -> Path:
    """A new venv at root/kind with amqpq installed the ``kind`` way; its python."""
    venv = root / f"venv-{kind}"
    src = root / f"src-{kind}"
    _copy_sources(src)
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv",
                    "--without-pip", str(venv)], check=True, capture_output=True)
    python = venv / "bin" / "python"
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                   cwd=root).strip()
    Path(purelib, "_amqpq_test_deps.pth").write_text(f"{deps}\n")
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q"]
    if kind == "wheel":
        _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", ".", "-w", "dist"],
             cwd=src)
        _run(pip + [str(next((src / "dist").glob("amqpq-*.whl")))], cwd=root)
    elif kind == "editable":
        _run(pip + ["-e", "."], cwd=src)
    else:
        _run(pip + ["-e", ".", "--config-settings", f"editable_mode={kind}"], cwd=src)
    return python


def _result(stdout: str) -> dict[str, Any]:
    line = next(ln for ln in stdout.splitlines() if ln.startswith("RESULT "))
    result: dict[str, Any] = json.loads(line[len("RESULT "):])
    return result


@pytest.fixture(scope="module")
def installs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """kind -> that venv's python, or the exception its install raised; "root": the dir."""
    root = tmp_path_factory.mktemp("install-kinds")
    deps = _deps_dir(root / "deps")
    (root / "script.py").write_text(SCRIPT)
    (root / "lookup.py").write_text(LOOKUP)

    def one(kind: str) -> Any:
        try:
            return _install(kind, root, deps)
        except Exception as exc:  # reported by the kind's own test
            return exc

    with ThreadPoolExecutor(len(KINDS)) as pool:
        out: dict[str, Any] = dict(zip(KINDS, pool.map(one, KINDS), strict=True))
    out["root"] = root
    return out


def _python(installs: dict[str, Any], kind: str) -> Path:
    python = installs[kind]
    if isinstance(python, BaseException):
        raise python
    assert isinstance(python, Path)
    return python


def _check_origin(installs: dict[str, Any], kind: str, result: dict[str, Any]) -> None:
    """spark_sink and pyspark_amqpq came from the install under test, not this checkout."""
    root: Path = installs["root"]
    where = root / (f"venv-{kind}" if kind == "wheel" else f"src-{kind}")
    if kind == "strict":  # a tree of links in the source copy's build/ (resolving leads home)
        where = root / f"src-{kind}"
    for module in ("spark_sink", "pyspark_amqpq"):
        assert Path(result[module]).resolve().is_relative_to(where.resolve()), result


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", KINDS)
def test_spark_lookup_finds_the_data_source(installs: dict[str, Any], kind: str) -> None:
    python = _python(installs, kind)
    root: Path = installs["root"]
    result = _result(_run([str(python), str(root / "lookup.py")], cwd=root))
    assert result["found"] == {"amqpq": "pyspark_amqpq"}, result
    _check_origin(installs, kind, result)


broker = spark_support.broker  # fixture: one broker with its management API


@pytest.fixture(scope="module")
def round_trips(installs: dict[str, Any], broker: BrokerProcess) -> dict[str, Any]:
    """kind -> the Spark script's result, or the exception it raised (both run in parallel)."""
    if not _java_available():
        pytest.skip("java not found (install OpenJDK 17 or set JAVA_HOME)")
    root: Path = installs["root"]
    streams = {kind: f"install-{kind}-{uuid.uuid4().hex[:6]}" for kind in SPARK_KINDS}
    ch = broker.channel()
    for stream in streams.values():
        ch.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    ch.connection.close()
    management = f"http://127.0.0.1:{broker.management_port}"

    def one(kind: str) -> Any:
        try:
            python = _python(installs, kind)
            return _result(_run([str(python), str(root / "script.py"), broker.uri, management,
                                 streams[kind]], cwd=root, timeout=400))
        except Exception as exc:  # reported by the kind's own test
            return exc

    with ThreadPoolExecutor(len(SPARK_KINDS)) as pool:
        return dict(zip(SPARK_KINDS, pool.map(one, SPARK_KINDS), strict=True))


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", SPARK_KINDS)
def test_spark_round_trip(installs: dict[str, Any], round_trips: dict[str, Any],
                          kind: str) -> None:
    result = round_trips[kind]
    if isinstance(result, BaseException):
        raise result
    assert result["rows"] == [[i, f"row {i}"] for i in range(5)]
    _check_origin(installs, kind, result)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", KINDS)
def test_the_broker_starts_from_each_install(installs: dict[str, Any], kind: str) -> None:
    """``amqpq-server`` imports all it needs from the install (a wheel once lacked
    amqp_server.cluster and amqp_server.workers, so its amqpq-server failed to import)."""
    python = _python(installs, kind)
    out = _run([str(python.parent / "amqpq-server"), "--version"], cwd=installs["root"])
    assert out.strip() == "amqpq-server 0.1.0"


def test_every_package_directory_is_listed() -> None:
    """Each directory holding Python files under a shipped package is in pyproject's
    ``packages`` (setuptools ships only those in a wheel), examples aside."""
    packages, _ = _project()
    with open(REPO_ROOT / "pyproject.toml", "rb") as fh:
        listed = set(tomllib.load(fh)["tool"]["setuptools"]["packages"])
    found = set()
    for top in packages:
        for py in (REPO_ROOT / top).rglob("*.py"):
            rel = py.parent.relative_to(REPO_ROOT)
            if "__pycache__" not in rel.parts and "examples" not in rel.parts:
                found.add(".".join(rel.parts))
    assert found - listed == set()
