"""``twisted-broker etl``: the nightly load of a topic into Parquet, each message exactly once.

    twisted-broker etl --zk 127.0.0.1:2181 --topic events --output /data/events \\
        --checkpoint /data/events-checkpoint [--format parquet] [--master local[*]] \\
        [--on-gap fail|earliest] [--start earliest|latest] [--conf spark.KEY=VALUE ...]

The command line of the run that etl_run.py describes step by step: the options, the
SparkSession it starts when there is something to load (``--master``, ``--conf``: session.py
chooses the executors' Python and ships them this package), and the summary table.
"""

from __future__ import annotations

import argparse
import datetime
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from twisted_broker.spark import executor_code
from twisted_broker.spark.etl_run import (  # noqa: F401 (the run and its errors: importable from here)
    EtlError, EtlRun, GapError, PartitionPlan, spark_call,
)
from twisted_broker.spark.options import DEFAULT_FAILOVER_TIMEOUT_MS, DEFAULT_SPARK_FETCH_BYTES, DEFAULT_SPLIT_BYTES
from twisted_broker.tools import cluster
from twisted_broker.tools.table import format_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

HELP = "the nightly Spark load of a topic into Parquet, from the checkpoint to the latest offsets, exactly once"
OUTPUT_FORMATS = ("parquet", "orc")
ON_GAP = ("fail", "earliest")
STARTS = ("earliest", "latest")


# -- the command line ------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    cluster.add_cluster_arguments(parser)
    cluster.add_topic_argument(parser)
    parser.add_argument("--output", required=True, type=Path, metavar="DIR",
                        help="where runs are published: DIR/load_date=D/run_id=R/")
    parser.add_argument("--checkpoint", required=True, type=Path, metavar="DIR",
                        help="the committed offsets and run manifests (one topic and output per checkpoint)")
    parser.add_argument("--format", choices=OUTPUT_FORMATS, default="parquet", help="file format (default parquet)")
    parser.add_argument("--master", default="local[*]", help="Spark master (default local[*]; a cluster: "
                                                             "spark://HOST:PORT, see --conf spark.pyspark.python)")
    parser.add_argument("--conf", type=_key_value, action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting, as spark-submit's --conf (repeatable; e.g. spark.executor.memory=2g; "
                             "spark.pyspark.python=PATH or $PYSPARK_PYTHON: the executors' Python, which needs "
                             "pyspark and pyarrow only: this package is shipped to it)")
    parser.add_argument("--on-gap", choices=ON_GAP, default="fail",
                        help="offsets deleted by retention since the last run: fail (default), or start "
                             "at the earliest offset and record the gap in the manifest")
    parser.add_argument("--start", choices=STARTS, default="earliest",
                        help="where a partition without a checkpoint starts (default earliest)")
    parser.add_argument("--load-date", type=_load_date, metavar="YYYY-MM-DD",
                        help="the load_date of this run's output (default: today, UTC)")
    parser.add_argument("--fetch-size", type=cluster.positive_int, default=DEFAULT_SPARK_FETCH_BYTES, metavar="BYTES",
                        help=f"bytes per fetch request (default {DEFAULT_SPARK_FETCH_BYTES})")
    parser.add_argument("--split-size", type=cluster.non_negative_int, default=DEFAULT_SPLIT_BYTES,
                        metavar="BYTES", help="split partition ranges larger than this (default "
                                              f"{DEFAULT_SPLIT_BYTES}; 0: never)")
    parser.add_argument("--failover-timeout", type=cluster.non_negative_int, default=DEFAULT_FAILOVER_TIMEOUT_MS,
                        metavar="MS", help="how long a replicated partition without a serving replica (a leader "
                                           "failing over) is waited for, in planning and in each read, before "
                                           f"the run fails (default {DEFAULT_FAILOVER_TIMEOUT_MS}; the loader's "
                                           "failover.timeout.ms)")
    parser.add_argument("--decoder", metavar="json|text|MODULE:FUNCTION",
                        help="decode payloads into the columns of --schema (the payload column stays)")
    parser.add_argument("--schema", metavar="DDL", help='decoded columns, e.g. "user STRING, amount BIGINT"')
    parser.add_argument("--write-option", type=_key_value, action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark write option, over the Parquet settings of "
                             "twisted_broker/spark/write_options.py (repeatable; e.g. "
                             "parquet.enable.dictionary#payload=true, compression=zstd)")


def _key_value(text: str) -> tuple[str, str]:
    key, equals, value = text.partition("=")
    if not equals or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


def _load_date(text: str) -> str:
    try:
        return datetime.date.fromisoformat(text).isoformat()
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date YYYY-MM-DD") from None


def main(args: argparse.Namespace) -> int:
    """Run one ETL; print the summary table. Raises EtlError (a CommandError) on failure."""
    if (args.decoder is None) != (args.schema is None):
        raise EtlError("--decoder and --schema go together")
    brokers = getattr(args, "broker_list", None)
    run = EtlRun(topic=args.topic, output=args.output, checkpoint=args.checkpoint,
                 zk_connect=getattr(args, "zk", None), brokers=brokers, file_format=args.format,
                 on_gap=args.on_gap, start=args.start, load_date=args.load_date,
                 fetch_bytes=args.fetch_size, split_bytes=args.split_size, failover_timeout_ms=args.failover_timeout,
                 decoder=args.decoder, decoded_schema=args.schema, write_options=dict(args.write_option))
    sessions: list[SparkSession] = []  # the one this command started, to stop at the end

    def spark() -> "SparkSession":
        try:
            from pyspark.sql import SparkSession
        except ImportError:
            raise EtlError("etl needs PySpark and pyarrow: pip install 'twisted_broker[spark]' "
                           "(nothing was written)") from None
        from twisted_broker.spark.session import build_session, register
        active = SparkSession.getActiveSession()
        if active is not None:  # called from a program that has its own session: use, keep it
            register(active)
            return active
        if not sessions:
            conf = dict(args.conf)
            python = executor_code.worker_python(args.master, conf, os.environ)
            shipped = ", this package shipped to it" if executor_code.needs_package_zip(python) else ""
            run.say(f"starting Spark ({args.master}; executors' Python: {python or 'python3'}{shipped})")
            sessions.append(spark_call(lambda: build_session(args.master, app_name=f"twisted-broker etl {args.topic}",
                                                             conf=conf),
                                       "starting Spark (is Java 17+ installed?)"))
        return sessions[0]

    try:
        manifest = run.run(spark)
    finally:
        for session in sessions:
            session.stop()
    for line in summary_lines(manifest):
        print(line)
    return 0


# -- output ----------------------------------------------------------------------------------

def summary_lines(manifest: Mapping[str, Any]) -> list[str]:
    """The table printed at the end of a run: one row per partition, then the totals."""
    rows = []
    for name, entry in manifest["partitions"].items():
        gap = entry.get("gap")
        rows.append([name, entry["status"], entry["from"], entry["until"], f"{entry['bytes']:,}",
                     f"{entry['messages']:,}", entry["crc_failures"],
                     f"[{gap['from']}, {gap['until']}) {gap['bytes']:,} B" if gap else "-"])
    totals = manifest["totals"]
    rows.append(["total", "", "", "", f"{totals['bytes']:,}", f"{totals['messages']:,}",
                 totals["crc_failures"], f"{totals['gap_bytes']:,} B" if totals["gap_bytes"] else "-"])
    header = ["partition", "status", "from", "until", "bytes", "messages", "crc failures", "gap"]
    return [f"run {manifest['run_id']} of {manifest['topic']}: {manifest['path']}",
            *format_table(header, rows)]
