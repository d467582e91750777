"""JVM options for the suite's short-lived Spark JVMs: the C1 compiler only, and the serial
collector.

A JVM that lives for one test spends much of its CPU in the C2 compiler's threads optimising
code it will not run long enough to profit from, on a machine whose two cores the suite keeps
busy. With these options tests/spark/test_standalone_cluster.py took 60 s instead of 104 s
alone on this machine (the master, two workers, each ETL's driver and executors), and all of
tests/spark in 2 workers 83 s instead of 116 s, the same tests passing. They change how fast
the JVM runs, nothing of what it does. (ZooKeeper's JVMs gain nothing: ~0.55 CPU-s to start
either way.)
"""

from __future__ import annotations

JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def spark_conf() -> dict[str, str]:
    """For a driver, and the executors it starts: the ``default`` options, which Spark puts
    before the ``extra`` ones (the session's quiet logging is an extra option)."""
    return {"spark.driver.defaultJavaOptions": JAVA_OPTIONS, "spark.executor.defaultJavaOptions": JAVA_OPTIONS}


def spark_daemon_env() -> dict[str, str]:
    """For a standalone master and its workers (spark-class reads SPARK_DAEMON_JAVA_OPTS)."""
    return {"SPARK_DAEMON_JAVA_OPTS": JAVA_OPTIONS}
