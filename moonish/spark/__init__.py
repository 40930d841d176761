"""moonish on Apache Spark (PySpark >= 4.2): two ways in, and a materialized table.

- The WAL directly: ``register(spark)``, then ``spark.readStream.format("moonish").load(dir)``
  (``moonish.spark.datasource``): flat change rows built as Arrow batches from the records.
- Envelope files written by ``moonish cdc export``: :func:`read_envelope_files`
  (``moonish.spark.files``), through Spark's JSON file source.
- :func:`materialize` keeps a Delta Lake table of the latest state per key exactly once, one
  delta-rs MERGE per micro-batch; :func:`read_table` reads its current version
  (``moonish.spark.table``, ``moonish.spark.delta``, ``moonish.spark.tablerows``).

Both paths give the same flat columns (``CHANGE_COLUMNS``); docs/spark.md describes them.
This package imports pyspark, pyarrow and deltalake only when one of these names is used
(``pip install moonish[spark]``).

Example::

    import moonish.spark
    spark = moonish.spark.session()
    moonish.spark.register(spark)
    changes = spark.readStream.format("moonish").load("data")
    moonish.spark.materialize(changes, "table", "checkpoint").awaitTermination()
    moonish.spark.read_table(spark, "table").show()
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_LAZY = {
    "CHANGE_COLUMNS": "moonish.spark.columns",
    "ENVELOPE_SCHEMA": "moonish.spark.files",
    "MoonishDataSource": "moonish.spark.datasource",
    "read_envelope_files": "moonish.spark.files",
    "materialize": "moonish.spark.table",
    "read_table": "moonish.spark.table",
    "TABLE_COLUMNS": "moonish.spark.table",
    "open_table": "moonish.spark.delta",
}

__all__ = [*_LAZY, "envelope_schema", "register", "session"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'moonish.spark' has no attribute {name!r}")


def envelope_schema() -> Any:
    """The payload-only Debezium envelope as a ``StructType`` (before/after as JSON text)."""
    from pyspark.sql.types import StructType

    from moonish.spark.files import ENVELOPE_SCHEMA

    return StructType.fromDDL(ENVELOPE_SCHEMA)


def register(spark: SparkSession) -> None:
    """Register the ``moonish`` data source with ``spark`` (once per session is enough).

    Raises:
        InvalidArgumentError: the current directory holds a ``moonish`` that Spark's Python
            workers, started there, would import instead of this package
            (``moonish.spark.workers``).
    """
    from moonish.spark.datasource import MoonishDataSource
    from moonish.spark.workers import check_workers_import

    check_workers_import()
    spark.dataSource.register(MoonishDataSource)


def session(master: str = "local[*]", app_name: str = "moonish", **conf: str) -> SparkSession:
    """A SparkSession set up for moonish: UI off, few shuffle partitions, Arrow on, the
    ``moonish`` data source registered, and Python workers running this interpreter (unless
    ``PYSPARK_PYTHON`` says otherwise). A ``local`` master binds to 127.0.0.1 (unless
    ``SPARK_LOCAL_IP`` says otherwise). ``conf`` adds Spark settings (dots as ``__``:
    ``spark__sql__shuffle__partitions="4"``).

    When this call starts the JVM, it starts it in a session of its own (``setsid``): a
    Ctrl-C at a terminal goes to the foreground process group, and PySpark's Python workers
    (children of the JVM) would die of it in the middle of a task, printing tracebacks, while
    the command stops its query cleanly (moonish.spark.progress). The JVM still exits with
    this process (it watches its stdin pipe).

    Raises:
        InvalidArgumentError: the current directory holds a ``moonish`` that Spark's Python
            workers, started there, would import instead of this package (checked before the
            JVM starts; ``moonish.spark.workers``).
    """
    import os
    import sys

    from moonish.spark.workers import check_workers_import

    check_workers_import()
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    settings = {
        "spark.master": master,
        "spark.app.name": app_name,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.driver.memory": "2g",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        **{key.replace("__", "."): value for key, value in conf.items()},
    }
    if SparkContext._gateway is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        spark_conf = SparkConf().setAll(list(settings.items()))
        gateway = launch_gateway(  # type: ignore[no-untyped-call]
            spark_conf, popen_kwargs={"start_new_session": True}
        )
        SparkContext._ensure_initialized(gateway=gateway, conf=spark_conf)
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
