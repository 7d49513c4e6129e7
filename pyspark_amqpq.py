"""Automatic registration of the ``amqpq`` Spark data source.

At session start PySpark imports every top-level module named ``pyspark_*`` on the Python path
and registers its ``DefaultSource`` (pyspark.sql.worker.lookup_data_sources), so once this
package is installed ``df.write.format("amqpq")`` works without any register call.
"""

from spark_sink.datasource import AmqpqDataSource as DefaultSource

__all__ = ["DefaultSource"]
