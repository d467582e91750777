"""Spark jobs as a command shows them: one line for a failure, a progress line while one runs.

Spark's errors are pages of JVM and Python stack; a worker's own exception is one line of
them. Nothing here starts Spark or imports pyspark: the session's status tracker is handed in.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SPARK_MODULES = ("pyspark", "py4j")  # where Spark's exception classes live (PySparkException, Py4JJavaError)


def is_spark_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is Spark's report of a failed action, rather than a bug of the caller."""
    return exc.__class__.__module__.split(".")[0] in SPARK_MODULES


def root_cause(text: str) -> str:
    """The most telling line of a Spark error: our own exception if a worker raised one."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("twisted_broker.") and ": " in line:
            return line
    for line in lines:
        if "Error" in line or "Exception" in line:
            return line[:500]
    return lines[0][:500] if lines else "unknown error"


class SparkProgress:
    """While a Spark job runs: ``label: N/M partitions done, K running, T s`` redrawn in place,
    on a terminal only (a log file gets the step lines alone)."""

    def __init__(self, spark: "SparkSession", label: str, stream: TextIO, interval_s: float = 0.5) -> None:
        self._tracker = spark.sparkContext.statusTracker()
        self._label, self._stream, self._interval_s = label, stream, interval_s
        isatty = getattr(stream, "isatty", None)
        self._enabled = bool(isatty and isatty())
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._draw, name="etl-progress", daemon=True)
        self._started = time.monotonic()

    def __enter__(self) -> "SparkProgress":
        if self._enabled:
            self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._enabled:
            self._done.set()
            self._thread.join()
            self._stream.write("\r\x1b[K")
            self._stream.flush()

    def _draw(self) -> None:
        while not self._done.wait(self._interval_s):
            done = running = total = 0
            try:
                for stage_id in self._tracker.getActiveStageIds():
                    info = self._tracker.getStageInfo(stage_id)
                    if info is not None:
                        done += info.numCompletedTasks
                        running += info.numActiveTasks
                        total += info.numTasks
            except Exception:  # the JVM is shutting down; the line is only a courtesy
                return
            # Before the first stage, Spark is planning: the data source asks the brokers.
            state = f"{done}/{total} partitions done, {running} running" if total else "planning"
            self._stream.write(f"\r\x1b[Ketl: {self._label}: {state}, {time.monotonic() - self._started:.0f} s")
            self._stream.flush()
