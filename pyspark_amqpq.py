"""Automatic registration of the ``amqpq`` Spark data source.

At session start PySpark imports every top-level module named ``pyspark_*`` on the Python path
and registers its ``DefaultSource`` (pyspark.sql.worker.lookup_data_sources), so once this
package is installed ``df.write.format("amqpq")`` works without any register call.

PySpark finds such modules with ``pkgutil.iter_modules()``, which lists the directories and zip
files on sys.path and never asks an import hook (a meta-path finder). A wheel puts this file in
site-packages; an editable install puts the project root on sys.path with a .pth file, because
pyproject.toml declares ``package-dir = {"" = "."}`` (without it, setuptools serves a plain
``pip install -e .`` through a finder, and Spark answered ``DATA_SOURCE_NOT_FOUND``).
Where this module is not on the Python workers' path, call ``spark_sink.register(spark)``.
Test: tests/test_spark_install_kinds.py.
"""

from spark_sink.datasource import AmqpqDataSource as DefaultSource

__all__ = ["DefaultSource"]
