"""One run of the nightly ETL (``twisted-broker etl``, etl.py): the steps and their guarantees.

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

   A replicated topic's partitions are keyed by number alone, ``"<partition>"``, in the
   checkpoint and the manifests (planning.py): the committed offset of a partition is a
   byte offset valid on every replica, so a run after a leader change (a kill -9 of the
   leader between two runs, or during one) reads from exactly where the last committed run
   stopped, on whichever replica serves it now. Keyed by the serving broker, the new
   leader's key would have no checkpoint and be read again from ``--start``, and the old
   one's stay ``unavailable``. The offsets are asked of the leader, or of the next replica
   that answers when it does not (a follower's are at most as far: only committed data;
   one behind the checkpoint is asked again for a while, planning.replica_offsets).
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

Spark is asked for two things only, through ``spark_call``: the load (step 4) and the read-back
(step 5); spark_jobs.py turns its failures into one line and draws the progress line.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from twisted_broker.spark import checkpoint as ckpt
from twisted_broker.spark.checkpoint import Checkpoint, CheckpointError, CheckpointStore
from twisted_broker.spark.options import DEFAULT_FAILOVER_TIMEOUT_MS, DEFAULT_SPARK_FETCH_BYTES, DEFAULT_SPLIT_BYTES
from twisted_broker.client.cluster import ConsumerPool, partition_name
from twisted_broker.client.consumer_stream import split_partition_name
from twisted_broker.client.errors import ReplicasUnavailable
from twisted_broker.spark.planning import PlanningError, discover_partitions, replica_offsets
from twisted_broker.spark.splits import PlannedPartition
from twisted_broker.spark.spark_jobs import SparkProgress, is_spark_failure, root_cause
from twisted_broker.spark.write_options import write_options
from twisted_broker.tools.errors import CommandError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

ETL_SOCKET_TIMEOUT_MS = 30000

# Partition statuses in the manifest.
READ, CAUGHT_UP, UNAVAILABLE = "read", "caught-up", "unavailable"


class EtlError(CommandError):
    """The run stopped; nothing it did is visible or committed unless the message says so."""


class GapError(EtlError):
    """Offsets were deleted by retention before they were loaded, and --on-gap is fail."""


def spark_call(action: Callable[[], Any], what: str) -> Any:
    """Run a Spark action; turn its failure into one EtlError line (the whole text at -vv)."""
    try:
        return action()
    except Exception as exc:  # PySparkException, Py4JJavaError: Spark's classes, not ours
        if not is_spark_failure(exc):
            raise
        text = str(exc)
        log.debug("%s failed:\n%s", what, text)
        raise EtlError(f"{what} failed, nothing was published: {root_cause(text)}") from None


@dataclass
class PartitionPlan:
    name: str
    status: str
    start: int  # "from" in the manifest
    until: int
    gap: tuple[int, int] | None = None  # [from, until) deleted before it was loaded
    target: PlannedPartition | None = None
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
    fetch_bytes: int = DEFAULT_SPARK_FETCH_BYTES
    split_bytes: int = DEFAULT_SPLIT_BYTES
    failover_timeout_ms: int = DEFAULT_FAILOVER_TIMEOUT_MS  # the data source's failover.timeout.ms
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
        with ConsumerPool(ETL_SOCKET_TIMEOUT_MS) as consumers:
            try:
                targets = discover_partitions(self.topic, consumers, zk_connect=self.zk_connect, brokers=self.brokers)
            except PlanningError as exc:
                raise EtlError(str(exc)) from None
            for target in targets:
                start = committed.get(target.name)
                try:
                    offsets = replica_offsets(consumers, self.topic, target, at_least=start or 0,
                                              timeout_ms=self.failover_timeout_ms)
                except ReplicasUnavailable as exc:
                    raise EtlError(f"{self.topic}: {exc}; nothing was written") from None
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
        self.plans = [plans[name] for name in sorted(plans, key=split_partition_name)]
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
                   "split.size": str(self.split_bytes), "failover.timeout.ms": str(self.failover_timeout_ms),
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
        with SparkProgress(spark, f"run {self.run_id}: loading {to_load:,} bytes", self.messages):
            spark_call(lambda: reader.load().write.format(self.file_format).mode("errorifexists")
                        .options(**write_options(self.file_format, dict(self.write_options)))
                        .save(str(self.temp)), "the load")

    # -- 5. verify ----------------------------------------------------------------------------

    def verify(self, spark: "SparkSession | None") -> dict[str, Any]:
        """Count what was written per partition, check it covers exactly [from, until), and
        write the manifest into the run's directory."""
        stats: dict[str, dict[str, int]] = {}
        if spark is not None:
            from pyspark.sql import functions as F
            rows = spark_call(lambda: spark.read.format(self.file_format).load(str(self.temp))
                               .groupBy("broker_id", "partition")
                               .agg(F.count(F.lit(1)).alias("messages"),
                                    F.sum(F.when(F.col("crc_valid"), 0).otherwise(1)).alias("crc_failures"),
                                    F.min("offset").alias("first"), F.max("next_offset").alias("end"))
                               .collect(), "reading back the output")
            stats = {partition_name(row["broker_id"], row["partition"]): row.asDict() for row in rows}
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


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
