"""``twisted-broker etl``: the nightly load of a topic into Parquet, each message exactly once.

    twisted-broker etl --zk 127.0.0.1:2181 --topic events --output /data/events \\
        --checkpoint /data/events-checkpoint [--format parquet] [--master local[*]] \\
        [--on-gap fail|earliest] [--start earliest|latest]

How a run works (file layout: checkpoint.py):

1. **Lock** ``CHECKPOINT/lock``: one run at a time per checkpoint.
2. **Recover.** Published output is the truth; ``offsets.json`` is the head of a chain of
   runs. A published run whose manifest continues the committed run (its
   ``previous_run_id`` is the checkpoint's ``run_id``) was published by a run that died
   before committing: its ``until`` offsets are committed now (*adopted*), and the chain is
   followed again. Then ``OUTPUT/_tmp/*``, runs that died before publishing, are deleted:
   nobody has seen them, and their offsets were never committed.
3. **Plan.** For every partition of the topic: ``from`` is the committed offset (``--start``
   for a partition seen for the first time), ``until`` the latest flushed offset, asked of
   the brokers once, now. A ``from`` before the earliest offset still on the broker means
   retention deleted messages that were never loaded: ``--on-gap fail`` (default) stops the
   run before it writes anything; ``--on-gap earliest`` starts at the earliest offset and
   records the gap in the manifest. Partitions in the checkpoint that no live broker holds
   keep their offsets (status ``unavailable``).
4. **Write** the exact ranges (startingOffsets/endingOffsets as JSON, so a retried Spark task
   reads exactly the same bytes) into ``OUTPUT/_tmp/<run>/`` with Spark, with the Parquet
   settings of write_options.py (``--write-option KEY=VALUE`` overrides or adds).
5. **Verify** by reading back what was written, per partition: the first row's offset must
   be ``from`` and the last ``next_offset`` ``until``; count messages and CRC failures. Write
   the manifest into the run's directory.
6. **Publish**: fsync, then one ``rename`` to ``OUTPUT/load_date=<D>/run_id=<run>/``.
7. **Commit**: the manifest's copy, then ``offsets.json`` (write, fsync, rename).

Why no failure duplicates or skips a message: a run's rows become visible only at step 6,
all at once, and carry their run id in their path; offsets move only at step 7 or at a
later run's step 2, and only to the ``until`` of a published run that continues the
committed one. Killed before 6: nothing is visible, nothing committed; the next run
deletes the leftovers and reads the same ``from``. Killed between 6 and 7: the next run
finds the published manifest continuing its checkpoint and commits it instead of reading
those offsets again. Killed during 7: the rename of offsets.json either happened or not;
both cases are the ones above. Run ids are unique, so a run is adopted only from the output
it was published to; ``--output`` and ``--checkpoint`` belong together (a checkpoint whose
run is not published under ``--output`` gets a warning).
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from twisted_broker.spark import checkpoint as ckpt
from twisted_broker.spark.checkpoint import Checkpoint, CheckpointError, CheckpointStore
from twisted_broker.spark.options import DEFAULT_FETCH_BYTES, DEFAULT_SPLIT_BYTES
from twisted_broker.spark.planning import (
    BrokerPartition, Consumers, PlanningError, discover_partitions, partition_offsets,
)
from twisted_broker.spark.write_options import write_options
from twisted_broker.tools import cluster
from twisted_broker.tools.errors import CommandError
from twisted_broker.tools.table import format_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

HELP = "the nightly Spark load of a topic into Parquet, from the checkpoint to the latest offsets, exactly once"
FORMATS = ("parquet", "orc")
ON_GAP = ("fail", "earliest")
STARTS = ("earliest", "latest")
SOCKET_TIMEOUT_MS = 30000

# Partition statuses in the manifest.
READ, CAUGHT_UP, UNAVAILABLE = "read", "caught-up", "unavailable"


class EtlError(CommandError):
    """The run stopped; nothing it did is visible or committed unless the message says so."""


class GapError(EtlError):
    """Offsets were deleted by retention before they were loaded, and --on-gap is fail."""


# -- the command line ------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    cluster.add_cluster_arguments(parser)
    cluster.add_topic_argument(parser)
    parser.add_argument("--output", required=True, type=Path, metavar="DIR",
                        help="where runs are published: DIR/load_date=D/run_id=R/")
    parser.add_argument("--checkpoint", required=True, type=Path, metavar="DIR",
                        help="the committed offsets and run manifests (one topic and output per checkpoint)")
    parser.add_argument("--format", choices=FORMATS, default="parquet", help="file format (default parquet)")
    parser.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    parser.add_argument("--on-gap", choices=ON_GAP, default="fail",
                        help="offsets deleted by retention since the last run: fail (default), or start "
                             "at the earliest offset and record the gap in the manifest")
    parser.add_argument("--start", choices=STARTS, default="earliest",
                        help="where a partition without a checkpoint starts (default earliest)")
    parser.add_argument("--load-date", type=_load_date, metavar="YYYY-MM-DD",
                        help="the load_date of this run's output (default: today, UTC)")
    parser.add_argument("--fetch-size", type=cluster.positive_int, default=DEFAULT_FETCH_BYTES, metavar="BYTES",
                        help=f"bytes per fetch request (default {DEFAULT_FETCH_BYTES})")
    parser.add_argument("--split-size", type=cluster.non_negative_int, default=DEFAULT_SPLIT_BYTES,
                        metavar="BYTES", help="split partition ranges larger than this (default "
                                              f"{DEFAULT_SPLIT_BYTES}; 0: never)")
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
                 fetch_bytes=args.fetch_size, split_bytes=args.split_size,
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
            run.say(f"starting Spark ({args.master})")
            sessions.append(_spark_call(lambda: build_session(args.master, app_name=f"twisted-broker etl {args.topic}"),
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


# -- one run ---------------------------------------------------------------------------------

@dataclass
class PartitionPlan:
    name: str
    status: str
    start: int  # "from" in the manifest
    until: int
    gap: tuple[int, int] | None = None  # [from, until) deleted before it was loaded
    target: BrokerPartition | None = None
    messages: int = 0
    crc_failures: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"from": self.start, "until": self.until, "bytes": self.until - self.start,
                "messages": self.messages, "crc_failures": self.crc_failures, "status": self.status,
                "gap": None if self.gap is None else
                {"from": self.gap[0], "until": self.gap[1], "bytes": self.gap[1] - self.gap[0]}}


@dataclass
class EtlRun:
    """One run; ``run`` does every step, the step methods exist for tests (a kill between
    steps leaves exactly what the steps before it wrote)."""

    topic: str
    output: Path
    checkpoint: Path
    zk_connect: str | None = None
    brokers: Mapping[int, tuple[str, int]] | None = None
    file_format: str = "parquet"
    on_gap: str = "fail"
    start: str = "earliest"
    load_date: str | None = None
    fetch_bytes: int = DEFAULT_FETCH_BYTES
    split_bytes: int = DEFAULT_SPLIT_BYTES
    decoder: str | None = None
    decoded_schema: str | None = None
    write_options: Mapping[str, str] = field(default_factory=dict)  # over write_options.py's
    messages: TextIO = field(default_factory=lambda: sys.stderr)
    run_id: str = ""
    started_at: str = ""
    plans: list[PartitionPlan] = field(default_factory=list)
    adopted: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if (self.zk_connect is None) == (self.brokers is None):
            raise ValueError("give exactly one of zk_connect and brokers")
        now = datetime.datetime.now(datetime.timezone.utc)
        self.output, self.checkpoint = Path(self.output).absolute(), Path(self.checkpoint).absolute()
        self.run_id = self.run_id or f"{now:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"
        self.started_at = now.isoformat(timespec="seconds")
        self.load_date = self.load_date or now.date().isoformat()
        self.store = CheckpointStore(self.checkpoint)
        self.committed = Checkpoint(self.topic)
        self.manifest: dict[str, Any] | None = None

    def say(self, text: str) -> None:
        print(f"etl: {text}", file=self.messages, flush=True)

    @property
    def temp(self) -> Path:
        return ckpt.temp_path(self.output, self.run_id)

    @property
    def final(self) -> Path:
        return ckpt.published_path(self.output, self.load_date, self.run_id)

    def run(self, spark: Callable[[], "SparkSession"]) -> dict[str, Any]:
        """Every step, under the lock; returns the manifest. Spark starts only if there is
        something to read."""
        self.lock()
        try:
            self.recover()
            self.plan()
            if any(plan.status == READ for plan in self.plans):
                session = spark()
                self.write(session)
                self.verify(session)
            else:
                self.write(None)
                self.verify(None)
            self.publish()
            self.commit()
            return self.manifest
        finally:
            self.unlock()

    def lock(self) -> None:
        try:
            self.store.lock()
        except CheckpointError as exc:
            raise EtlError(str(exc)) from None

    def unlock(self) -> None:
        self.store.unlock()

    # -- 2. recover ---------------------------------------------------------------------------

    def recover(self) -> None:
        """Adopt published runs that were never committed; delete unpublished leftovers."""
        try:
            self.committed = self.store.load(self.topic)
            published = list(ckpt.published_manifests(self.output, self.topic))
        except (CheckpointError, ValueError, KeyError) as exc:
            raise EtlError(f"cannot read the checkpoint or the output's manifests: {exc}") from None
        known = {manifest["run_id"] for _path, manifest in published}
        if self.committed.run_id is not None and self.committed.run_id not in known:
            self.say(f"warning: {self.store.offsets_path} was committed by run {self.committed.run_id}, which is "
                     f"not published under {self.output} (another output, or its directory was removed)")
        while True:
            following = [(path, manifest) for path, manifest in published
                         if manifest.get("previous_run_id") == self.committed.run_id
                         and manifest["run_id"] != self.committed.run_id]
            if not following:
                break
            if len(following) > 1:
                raise EtlError(f"runs {', '.join(m['run_id'] for _p, m in following)} under {self.output} all "
                               f"continue run {self.committed.run_id}; remove the wrong ones by hand")
            path, manifest = following[0]
            self._check_continues(manifest)
            self.committed = self.committed.advanced_by(manifest, _now())
            self.store.commit(self.committed, manifest)
            self.adopted.append(manifest["run_id"])
            self.say(f"committed run {manifest['run_id']}: it was published to {path} but stopped before "
                     "its checkpoint; its messages are not read again")
        self.removed = ckpt.remove_unpublished(self.output)
        for run_id in self.removed:
            self.say(f"removed the unpublished output of run {run_id} (it stopped before publishing)")

    def _check_continues(self, manifest: Mapping[str, Any]) -> None:
        for name, entry in manifest["partitions"].items():
            committed = self.committed.offsets.get(name)
            started = entry["gap"]["from"] if entry.get("gap") else entry["from"]
            if committed is not None and committed != started:
                raise EtlError(f"published run {manifest['run_id']} read {name} from {started}, but the "
                               f"checkpoint it continues has {committed}")

    # -- 3. plan ------------------------------------------------------------------------------

    def plan(self) -> list[PartitionPlan]:
        """Resolve every partition's [from, until); raise GapError under --on-gap fail."""
        committed = self.committed.offsets
        plans: dict[str, PartitionPlan] = {}
        gaps = []
        with Consumers(SOCKET_TIMEOUT_MS) as consumers:
            try:
                targets = discover_partitions(self.topic, consumers, zk_connect=self.zk_connect, brokers=self.brokers)
            except PlanningError as exc:
                raise EtlError(str(exc)) from None
            for target in targets:
                offsets = partition_offsets(consumers.of(target), self.topic, target.partition)
                start = committed.get(target.name)
                if start is None:
                    start = offsets.earliest if self.start == "earliest" else offsets.latest
                if start > offsets.latest:
                    raise EtlError(f"{self.topic} {target.name}: the checkpoint is at offset {start}, past the "
                                   f"latest offset {offsets.latest}; was the broker's log replaced?")
                gap = None
                if start < offsets.earliest:
                    gap = (start, offsets.earliest)
                    gaps.append(f"{target.name} [{start}, {offsets.earliest}) {offsets.earliest - start} bytes")
                    start = offsets.earliest
                status = READ if offsets.latest > start else CAUGHT_UP
                plans[target.name] = PartitionPlan(target.name, status, start, offsets.latest, gap, target)
        if gaps and self.on_gap == "fail":
            raise GapError(f"retention deleted {self.topic} messages that were never loaded: {'; '.join(gaps)}. "
                           "Nothing was written; rerun with --on-gap earliest to skip them (the manifest records "
                           "the gap)")
        for name, offset in committed.items():
            if name not in plans:
                plans[name] = PartitionPlan(name, UNAVAILABLE, offset, offset)
        self.plans = [plans[name] for name in sorted(plans, key=_partition_key)]
        reading = [plan for plan in self.plans if plan.status == READ]
        self.say(f"run {self.run_id}: {self.topic}: {len(reading)} of {len(self.plans)} partitions have new "
                 f"messages, {sum(p.until - p.start for p in reading):,} bytes to load")
        for plan in self.plans:
            if plan.gap:
                self.say(f"gap in {plan.name}: offsets [{plan.gap[0]}, {plan.gap[1]}) were deleted by retention "
                         "before they were loaded; starting at the earliest offset")
            if plan.status == UNAVAILABLE:
                self.say(f"{plan.name} is held by no live broker: its offset stays at {plan.start}")
        return self.plans

    # -- 4. write -----------------------------------------------------------------------------

    def read_options(self) -> dict[str, str]:
        """The data source options that read exactly this run's ranges."""
        reading = {plan.name: plan for plan in self.plans if plan.status == READ}
        options = {"topic": self.topic, "crc": "mark", "fetch.size": str(self.fetch_bytes),
                   "split.size": str(self.split_bytes),
                   "startingOffsets": json.dumps({name: plan.start for name, plan in reading.items()}),
                   "endingOffsets": json.dumps({name: plan.until for name, plan in reading.items()})}
        if self.zk_connect is not None:
            options["zk.connect"] = self.zk_connect
        else:
            options["broker.list"] = ",".join(f"{broker_id}:{host}:{port}"
                                              for broker_id, (host, port) in sorted(self.brokers.items()))
        if self.decoder:
            options["decoder"] = self.decoder
        return options

    def write(self, spark: "SparkSession | None") -> None:
        """Read the planned ranges and write them into ``OUTPUT/_tmp/<run>/``."""
        if spark is None:
            self.temp.mkdir(parents=True)
            return
        from twisted_broker.spark.data_source import DEFAULT_COLUMNS
        reader = spark.read.format("twisted_broker").options(**self.read_options())
        if self.decoder:
            reader = reader.schema(f"{DEFAULT_COLUMNS}, crc_valid BOOLEAN, {self.decoded_schema}")
        self.say(f"run {self.run_id}: writing {self.file_format} to {self.temp}")
        to_load = sum(plan.until - plan.start for plan in self.plans if plan.status == READ)
        with _SparkProgress(spark, f"run {self.run_id}: loading {to_load:,} bytes", self.messages):
            _spark_call(lambda: reader.load().write.format(self.file_format).mode("errorifexists")
                        .options(**write_options(self.file_format, dict(self.write_options)))
                        .save(str(self.temp)), "the load")

    # -- 5. verify ----------------------------------------------------------------------------

    def verify(self, spark: "SparkSession | None") -> dict[str, Any]:
        """Count what was written per partition, check it covers exactly [from, until), and
        write the manifest into the run's directory."""
        stats: dict[str, dict[str, int]] = {}
        if spark is not None:
            from pyspark.sql import functions as F
            rows = _spark_call(lambda: spark.read.format(self.file_format).load(str(self.temp))
                               .groupBy("broker_id", "partition")
                               .agg(F.count(F.lit(1)).alias("messages"),
                                    F.sum(F.when(F.col("crc_valid"), 0).otherwise(1)).alias("crc_failures"),
                                    F.min("offset").alias("first"), F.max("next_offset").alias("end"))
                               .collect(), "reading back the output")
            stats = {f"{row['broker_id']}-{row['partition']}": row.asDict() for row in rows}
        for plan in self.plans:
            found = stats.pop(plan.name, None)
            if plan.status != READ:
                continue
            if found is None or found["first"] != plan.start or found["end"] != plan.until:
                covered = "nothing" if found is None else f"[{found['first']}, {found['end']})"
                raise EtlError(f"run {self.run_id}: the output holds {covered} of {plan.name}, not the planned "
                               f"[{plan.start}, {plan.until}); not published")
            plan.messages, plan.crc_failures = found["messages"], found["crc_failures"]
        if stats:
            raise EtlError(f"run {self.run_id}: the output holds unplanned partitions {', '.join(stats)}; "
                           "not published")
        self.manifest = {
            "format": ckpt.FORMAT, "run_id": self.run_id, "topic": self.topic,
            "previous_run_id": self.committed.run_id, "load_date": self.load_date,
            "started_at": self.started_at, "finished_at": _now(), "file_format": self.file_format,
            "path": str(self.final.relative_to(self.output)),
            "partitions": {plan.name: plan.to_json() for plan in self.plans},
            "totals": {"bytes": sum(p.until - p.start for p in self.plans),
                       "messages": sum(p.messages for p in self.plans),
                       "crc_failures": sum(p.crc_failures for p in self.plans),
                       "gap_bytes": sum(p.gap[1] - p.gap[0] for p in self.plans if p.gap)},
        }
        ckpt.write_json_atomically(self.temp / ckpt.MANIFEST_NAME, self.manifest)
        return self.manifest

    # -- 6. publish, 7. commit ----------------------------------------------------------------

    def publish(self) -> None:
        ckpt.publish(self.temp, self.final)
        self.say(f"run {self.run_id}: published {self.final}")

    def commit(self) -> None:
        self.committed = self.committed.advanced_by(self.manifest, _now())
        self.store.commit(self.committed, self.manifest)
        self.say(f"run {self.run_id}: committed the checkpoint {self.store.offsets_path}")


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


def _partition_key(name: str) -> tuple[int, int]:
    broker, _, partition = name.partition("-")
    return int(broker), int(partition)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _spark_call(action: Callable[[], Any], what: str) -> Any:
    """Run a Spark action; turn its failure into one EtlError line (the whole text at -vv)."""
    try:
        return action()
    except Exception as exc:  # PySparkException, Py4JJavaError: Spark's classes, not ours
        if exc.__class__.__module__.split(".")[0] not in ("pyspark", "py4j"):
            raise
        text = str(exc)
        log.debug("%s failed:\n%s", what, text)
        raise EtlError(f"{what} failed, nothing was published: {_root_cause(text)}") from None


def _root_cause(text: str) -> str:
    """The most telling line of a Spark error: our own exception if a worker raised one."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("twisted_broker.") and ": " in line:
            return line
    for line in lines:
        if "Error" in line or "Exception" in line:
            return line[:500]
    return lines[0][:500] if lines else "unknown error"


class _SparkProgress:
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

    def __enter__(self) -> "_SparkProgress":
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
