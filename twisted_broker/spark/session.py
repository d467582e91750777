"""A SparkSession for this project: its Python workers' interpreter and code, loopback, offline.

PySpark starts Python workers with ``PYSPARK_PYTHON`` and binds the driver to the machine's
external address unless ``SPARK_LOCAL_IP`` says otherwise. ``configure_environment`` sets both
before the JVM starts: the interpreter as executor_code.py chooses it (the user's
``spark.pyspark.python`` or ``PYSPARK_PYTHON``; on a local master, this interpreter), and
``register`` gives workers running any other interpreter this package as a zip
(``addPyFile``) before it registers the data source. Nothing is downloaded: no
``spark.jars.packages``; the data source is pure Python.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from typing import TYPE_CHECKING

from twisted_broker.spark import executor_code
from twisted_broker.spark.standalone import LOOPBACK

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_CONF = {
    "spark.driver.host": LOOPBACK,
    "spark.driver.bindAddress": LOOPBACK,
    "spark.ui.enabled": "false",  # no web server; the ETL shows its own progress
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "8",  # the ETL's aggregates are per partition: small
}


# Spark's own log lines at ERROR and up only, on stderr. Failed tasks are left to whoever
# runs the job (the ETL prints one line, and the whole error at -vv): the scheduler, the
# executors and the file writer would otherwise print each Python traceback again, with the
# JVM's stack around it.
LOG4J2_PROPERTIES = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
logger.tasks.name = org.apache.spark.scheduler.TaskSetManager
logger.tasks.level = off
logger.executor.name = org.apache.spark.executor.Executor
logger.executor.level = off
logger.native.name = org.apache.hadoop.util.NativeCodeLoader
logger.native.level = off
logger.writer.name = org.apache.spark.sql.execution.datasources.FileFormatWriter
logger.writer.level = off
"""


def _log4j2_file() -> str:
    """A log4j2 configuration with LOG4J2_PROPERTIES, written to the temp directory."""
    path = os.path.join(tempfile.gettempdir(), f"twisted-broker-spark-log4j2-{os.getuid()}.properties")
    try:
        with open(path, encoding="utf-8") as existing:
            if existing.read() == LOG4J2_PROPERTIES:
                return path
    except OSError:
        pass
    temporary = f"{path}.{os.getpid()}"
    with open(temporary, "w", encoding="utf-8") as out:
        out.write(LOG4J2_PROPERTIES)
    os.replace(temporary, path)
    return path


def configure_environment(master: str = "local[*]", conf: Mapping[str, str] | None = None) -> str | None:
    """Point PySpark's workers at their interpreter and Spark at the loopback address; return
    the interpreter (None: Spark's default).

    ``PYSPARK_PYTHON`` becomes ``executor_code.worker_python``: ``conf``'s
    ``spark.pyspark.python``, else the variable as it was, else on a local master this
    interpreter. ``SPARK_LOCAL_IP`` is 127.0.0.1 unless already set. Call before the JVM starts.
    """
    python = executor_code.worker_python(master, conf or {}, os.environ)
    if python is not None:
        os.environ[executor_code.PYTHON_ENV] = python
    os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
    return python


def register(spark: "SparkSession") -> None:
    """Make ``spark.read.format("twisted_broker")`` known to ``spark``, shipping this package
    to its Python workers first unless they run this interpreter (executor_code.py)."""
    from twisted_broker.spark.data_source import TwistedBrokerDataSource
    context = spark.sparkContext
    if executor_code.needs_package_zip(context.pythonExec):
        # Before the data source is registered: its function carries the zips added so far.
        context.addPyFile(str(executor_code.package_zip()))
    spark.dataSource.register(TwistedBrokerDataSource)


def build_session(master: str = "local[*]", app_name: str = "twisted-broker",
                  conf: Mapping[str, str] | None = None, log_level: str = "ERROR") -> "SparkSession":
    """A SparkSession (getOrCreate) on ``master`` with the data source registered.

    Starting one takes 10-25 s and about 1.2 GB here: share it. ``conf`` adds to or overrides
    DEFAULT_CONF and the quiet logging (``spark.driver.extraJavaOptions``), and like it only
    counts if no session is running yet; its ``spark.pyspark.python`` chooses the workers'
    interpreter (configure_environment).
    """
    quiet = {"spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{_log4j2_file()}"}
    settings = {**DEFAULT_CONF, **quiet, **(conf or {})}
    configure_environment(master, settings)
    from pyspark.sql import SparkSession
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    register(spark)
    return spark
