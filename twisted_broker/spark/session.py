"""A SparkSession for this project: its own interpreter for the workers, loopback only, offline.

PySpark starts Python workers with ``PYSPARK_PYTHON`` (else the system ``python3``, which
cannot import this package, and the data source's classes are pickled by reference), and
binds the driver to the machine's external address unless ``SPARK_LOCAL_IP`` says otherwise.
``configure_environment`` sets both before the JVM starts. Nothing is downloaded: no
``spark.jars.packages``; the data source is pure Python.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LOOPBACK = "127.0.0.1"
DEFAULT_CONF = {
    "spark.driver.host": LOOPBACK,
    "spark.driver.bindAddress": LOOPBACK,
    "spark.ui.enabled": "false",  # no web server; the ETL shows its own progress
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "8",  # the ETL's aggregates are per partition: small
}


# Spark's own log lines at ERROR and up only, on stderr. Failed tasks are left to whoever
# runs the job (the ETL prints one line, and the whole error at -vv): the scheduler and the
# executors would otherwise print each Python traceback again, with the JVM's stack around it.
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


def configure_environment() -> None:
    """Point PySpark's workers at this interpreter and Spark at the loopback address.

    ``PYSPARK_PYTHON`` is always this interpreter (another one cannot import the project);
    ``SPARK_LOCAL_IP`` is 127.0.0.1 unless already set. Call before the JVM starts.
    """
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)


def register(spark: "SparkSession") -> None:
    """Make ``spark.read.format("twisted_broker")`` known to ``spark``."""
    from twisted_broker.spark.data_source import TwistedBrokerDataSource
    spark.dataSource.register(TwistedBrokerDataSource)


def build_session(master: str = "local[*]", app_name: str = "twisted-broker",
                  conf: Mapping[str, str] | None = None, log_level: str = "ERROR") -> "SparkSession":
    """A SparkSession (getOrCreate) on ``master`` with the data source registered.

    Starting one takes 10-25 s and about 1.2 GB here: share it. ``conf`` adds to or overrides
    DEFAULT_CONF and the quiet logging (``spark.driver.extraJavaOptions``), and like it only
    counts if no session is running yet.
    """
    configure_environment()
    from pyspark.sql import SparkSession
    builder = SparkSession.builder.master(master).appName(app_name)
    quiet = {"spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{_log4j2_file()}"}
    for key, value in {**DEFAULT_CONF, **quiet, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    register(spark)
    return spark
