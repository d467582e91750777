"""The nightly ETL against two real brokers: exactly once across runs, crashes and retention.

A crash is simulated by running the steps of a run up to the point of the "kill" and
then abandoning the run (its lock released, as the kernel releases a dead process's
flock): the disk then holds exactly what a process killed there would have left.

Retention is simulated honestly but not by the broker's timer, which first runs 60 s after
start and then at most once a minute: the broker is stopped cleanly, the oldest segment
files of a partition are deleted, which is exactly what retention does (spec 4.7: whole
segments, oldest first), and the broker is started again on the remaining segments.
"""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path

import pytest

from tests.support.spark_topics import payloads
from twisted_broker.cli import build_parser
from twisted_broker.codec.kafka07.compression import GZIP, NO_COMPRESSION, SNAPPY
from twisted_broker.spark import etl
from twisted_broker.spark.etl import EtlRun, GapError
from twisted_broker.storage.segment import parse_segment_file_name

pytestmark = pytest.mark.spark

TOPIC = "clicks"


def _produce_round(cluster, label: str, count: int = 20, size: int = 50) -> None:
    for broker_id in (0, 1):
        for partition in (0, 1):
            for codec in (NO_COMPRESSION, GZIP, SNAPPY):
                cluster.produce(TOPIC, broker_id, partition,
                                payloads(f"{label}-{broker_id}-{partition}-{codec}", count, size), codec)
    cluster.wait_flushed()


def _run(cluster, tmp_path: Path, **options) -> EtlRun:
    return EtlRun(topic=TOPIC, output=tmp_path / "out", checkpoint=tmp_path / "checkpoint",
                  zk_connect=cluster.zk_connect, messages=io.StringIO(), **options)


def _output_rows(spark, tmp_path: Path) -> list[tuple]:
    rows = spark.read.parquet(str(tmp_path / "out")).select(
        "broker_id", "partition", "offset", "next_offset", "payload").collect()
    return [(r.broker_id, r.partition, r.offset, r.next_offset, bytes(r.payload)) for r in rows]


def _assert_exactly_once(spark, cluster, tmp_path: Path, expected=None) -> None:
    got = Counter(_output_rows(spark, tmp_path))
    want = Counter(expected if expected is not None else cluster.reference_rows(TOPIC))
    assert max(got.values()) == 1, "a message was loaded twice"
    assert got == want


def _checkpoint(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "checkpoint" / "offsets.json").read_text())


def _published(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "out").glob("load_date=*/run_id=*"))


def test_consecutive_runs_load_each_message_once(spark, cluster_factory, tmp_path, capsys):
    cluster = cluster_factory()
    _produce_round(cluster, "first")
    first = _run(cluster, tmp_path, split_bytes=3000).run(lambda: spark)
    assert first["totals"]["messages"] == 4 * 3 * 20 and first["previous_run_id"] is None
    _produce_round(cluster, "second")
    # The second run through the command line's entry point, as cron would run it.
    args = build_parser().parse_args(["etl", "--zk", cluster.zk_connect, "--topic", TOPIC, "--output",
                                      str(tmp_path / "out"), "--checkpoint", str(tmp_path / "checkpoint")])
    assert etl.main(args) == 0
    table = capsys.readouterr().out
    assert "crc failures" in table and "total" in table and "240" in table  # 4 x 3 x 20 new messages
    _assert_exactly_once(spark, cluster, tmp_path)
    runs = _published(tmp_path)
    assert len(runs) == 2
    second = json.loads((runs[1] / "_manifest.json").read_text())
    assert second["previous_run_id"] == first["run_id"]
    for name, entry in second["partitions"].items():
        assert entry["from"] == first["partitions"][name]["until"]  # no gap, no overlap
        assert entry["messages"] == 3 * 20 and entry["crc_failures"] == 0 and entry["gap"] is None
    assert _checkpoint(tmp_path)["offsets"] == {name: entry["until"] for name, entry in second["partitions"].items()}
    # Nothing new: a third run publishes an empty run and reads nothing.
    third = _run(cluster, tmp_path).run(lambda: pytest.fail("Spark is not needed without new messages"))
    assert third["totals"]["messages"] == 0
    _assert_exactly_once(spark, cluster, tmp_path)


def test_a_run_killed_after_publishing_is_committed_not_reloaded(spark, cluster_factory, tmp_path):
    cluster = cluster_factory()
    _produce_round(cluster, "first")
    killed = _run(cluster, tmp_path)
    killed.lock()
    killed.recover()
    killed.plan()
    killed.write(spark)
    killed.verify(spark)
    killed.publish()
    killed.unlock()  # killed here: output published, checkpoint not written
    assert not (tmp_path / "checkpoint" / "offsets.json").exists()
    _produce_round(cluster, "second")
    rerun = _run(cluster, tmp_path)
    manifest = rerun.run(lambda: spark)
    assert rerun.adopted == [killed.run_id]
    assert manifest["previous_run_id"] == killed.run_id
    assert manifest["totals"]["messages"] == 4 * 3 * 20  # only the second round
    _assert_exactly_once(spark, cluster, tmp_path)
    assert _checkpoint(tmp_path)["run_id"] == rerun.run_id


def test_a_run_killed_before_publishing_leaves_nothing_and_is_redone(spark, cluster_factory, tmp_path):
    cluster = cluster_factory()
    _produce_round(cluster, "first")
    killed = _run(cluster, tmp_path)
    killed.lock()
    killed.recover()
    killed.plan()
    killed.write(spark)  # killed here: Spark's files in _tmp, nothing published
    killed.unlock()
    assert killed.temp.is_dir() and not _published(tmp_path)
    rerun = _run(cluster, tmp_path)
    manifest = rerun.run(lambda: spark)
    assert rerun.removed == [killed.run_id] and not killed.temp.exists()
    assert manifest["previous_run_id"] is None and manifest["totals"]["messages"] == 4 * 3 * 20
    _assert_exactly_once(spark, cluster, tmp_path)


def _delete_oldest_segments(broker, topic: str, partition: int, keep: int) -> int:
    """What retention does (spec 4.7), done while the broker is stopped: delete all but the
    newest ``keep`` segment files; return the new earliest offset."""
    directory = broker.log_dir / f"{topic}-{partition}"
    segments = sorted((parse_segment_file_name(path.name), path) for path in directory.iterdir()
                      if parse_segment_file_name(path.name) is not None)
    assert len(segments) > keep
    for _start, path in segments[:-keep]:
        path.unlink()
    return segments[-keep][0]


def test_retention_deleting_unloaded_messages_triggers_the_gap_policy(spark, cluster_factory, tmp_path):
    # Small segments: every produce request (~1.3 KB) rolls a new one.
    cluster = cluster_factory(**{"log.file.size": "1000"})
    _produce_round(cluster, "first")
    first = _run(cluster, tmp_path).run(lambda: spark)
    loaded = _output_rows(spark, tmp_path)
    _produce_round(cluster, "second")
    _produce_round(cluster, "third")
    broker = cluster.brokers[0]
    broker.stop()
    earliest = _delete_oldest_segments(broker, TOPIC, 0, keep=2)
    broker.start()
    cluster.wait_flushed()
    checkpointed = first["partitions"]["0-0"]["until"]
    assert earliest > checkpointed  # retention took messages the ETL never loaded

    with pytest.raises(GapError, match=r"0-0 \[%d, %d\)" % (checkpointed, earliest)):
        _run(cluster, tmp_path).run(lambda: pytest.fail("a gap under --on-gap fail writes nothing"))
    assert len(_published(tmp_path)) == 1 and _checkpoint(tmp_path)["run_id"] == first["run_id"]

    manifest = _run(cluster, tmp_path, on_gap="earliest").run(lambda: spark)
    gap = manifest["partitions"]["0-0"]["gap"]
    assert gap == {"from": checkpointed, "until": earliest, "bytes": earliest - checkpointed}
    assert manifest["partitions"]["0-0"]["from"] == earliest
    assert manifest["totals"]["gap_bytes"] == earliest - checkpointed
    assert all(entry["gap"] is None for name, entry in manifest["partitions"].items() if name != "0-0")
    # Everything loaded once: the first run's rows, and what is on the brokers after them.
    after_first = {name: entry["until"] for name, entry in first["partitions"].items()}
    after_first["0-0"] = earliest
    expected = loaded + cluster.reference_rows(TOPIC, start=after_first)
    _assert_exactly_once(spark, cluster, tmp_path, expected)


def test_crc_failures_are_kept_marked_and_counted(spark, cluster_factory, tmp_path):
    cluster = cluster_factory()
    cluster.produce(TOPIC, 1, 0, payloads("intact", 10, 40))
    cluster.produce(TOPIC, 1, 0, payloads("later", 10, 40))
    cluster.wait_flushed()
    broker = cluster.brokers[1]
    broker.stop()  # a clean stop: on restart no recovery scan truncates the bad message
    segment = next((broker.log_dir / f"{TOPIC}-0").glob("*.kafka"))
    data = bytearray(segment.read_bytes())
    data[4 + 6 + 3] ^= 0xFF  # a payload byte of the first message
    segment.write_bytes(bytes(data))
    broker.start()
    cluster.wait_flushed()
    manifest = _run(cluster, tmp_path).run(lambda: spark)
    assert manifest["partitions"]["1-0"]["crc_failures"] == 1
    assert manifest["partitions"]["1-0"]["messages"] == 20
    rows = spark.read.parquet(str(tmp_path / "out")).orderBy("offset").select("crc_valid", "payload").collect()
    assert [row.crc_valid for row in rows] == [False] + [True] * 19
    # A 0.7 broker serves the damaged bytes; this one refuses to, and the row has no payload.
    original = payloads("intact", 1, 40)[0]
    damaged = original[:3] + bytes([original[3] ^ 0xFF]) + original[4:]
    assert rows[0].payload is None or bytes(rows[0].payload) == damaged
    assert [bytes(row.payload) for row in rows[1:]] == payloads("intact", 10, 40)[1:] + payloads("later", 10, 40)


def test_write_options_default_to_the_parquet_settings_and_the_command_line_overrides_them():
    from twisted_broker.spark.write_options import PARQUET_WRITE_OPTIONS, write_options
    assert write_options("parquet") == PARQUET_WRITE_OPTIONS
    assert write_options("orc") == {}
    args = build_parser().parse_args(["etl", "--broker-list", "0:127.0.0.1:9092", "--topic", "t", "--output", "o",
                                      "--checkpoint", "c", "--write-option", "parquet.enable.dictionary#payload=true",
                                      "--write-option", "compression=zstd"])
    options = write_options("parquet", dict(args.write_option))
    assert options["parquet.enable.dictionary#payload"] == "true" and options["compression"] == "zstd"
    assert options["parquet.enable.dictionary#offset"] == "false"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["etl", "--broker-list", "0:127.0.0.1:9092", "--topic", "t", "--output", "o",
                                   "--checkpoint", "c", "--write-option", "no-equals-sign"])
