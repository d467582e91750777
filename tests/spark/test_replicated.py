"""The loader and the ETL on a replicated topic: three real brokers (tests/replication's
cluster: 2 s ZooKeeper sessions), a topic of two partitions with three replicas each, a
real local SparkSession.

A replicated partition is named by its number alone, whichever broker serves it, so a
leader killed with SIGKILL between planning and reading, or between two runs, changes
nothing in what is loaded: every committed message once, the checkpoint keyed ``"0"`` and
``"1"`` throughout.
"""

from __future__ import annotations

import io
import json
import time
from collections import Counter

import pytest

from tests.support.replicated_cluster import Wire, produce_all
from tests.support.spark_topics import payloads, rows_of
from twisted_broker.cli import build_parser
from twisted_broker.client.simple_consumer import LATEST_TIME, SimpleConsumer
from twisted_broker.codec.kafka07.compression import GZIP
from twisted_broker.codec.kafka07.message_set import encode_compressed_message_set
from twisted_broker.codec.kafka07.replication import ProduceAckRequest, decode_produce_acks, encode_replication_request
from twisted_broker.codec.kafka07.requests import FetchRequest, MultiProduceRequest, ProduceRequest
from twisted_broker.spark.etl import EtlError, EtlRun

pytestmark = pytest.mark.spark

TOPIC = "orders"


def _produce(cluster, partition: int, values: list[bytes], codec: int = 0) -> None:
    """One message set (in one ``codec`` wrapper) to the partition's leader, acks=all."""
    leader = cluster.leaders(TOPIC)[partition]
    request = ProduceAckRequest(-1, 10_000, MultiProduceRequest((
        ProduceRequest(TOPIC, partition, encode_compressed_message_set(values, codec)),)))
    with Wire(cluster.brokers[leader]) as wire:
        body = wire.request(encode_replication_request(request))
    [(_topic, _partition, error, _offset)] = decode_produce_acks(body[2:])
    assert error == 0


def _reference(cluster, via: int | None = None) -> list[tuple]:
    """Every committed message of both partitions as their leaders (named by broker ``via``)
    serve them: (broker_id, partition, offset, next_offset, payload), broker_id None as the
    loader says. A follower's high watermark may lag its leader's a moment."""
    rows = []
    for partition, leader in sorted(cluster.leaders(TOPIC, via).items()):
        with SimpleConsumer("127.0.0.1", cluster.brokers[leader].port) as consumer:
            offset, end = 0, consumer.get_offsets_before(TOPIC, partition, LATEST_TIME, 1)[0]
            while offset < end:
                fetched = consumer.fetch(FetchRequest(TOPIC, partition, offset, 1 << 20))
                rows += [(None, partition, o, n, bytes(m.payload)) for o, n, m in fetched]
                offset = fetched.next_offset
    return rows


def test_a_replicated_topic_loads_each_partition_once_named_by_its_number(spark, three_brokers):  # noqa: F811
    cluster = three_brokers
    cluster.create(TOPIC)
    for round_ in range(2):
        for partition in (0, 1):
            _produce(cluster, partition, payloads(f"r{round_}-p{partition}-plain", 20, 40))
            _produce(cluster, partition, payloads(f"r{round_}-p{partition}-gzip", 20, 40), GZIP)
    expected = _reference(cluster)
    assert len(expected) == 2 * 2 * 2 * 20
    df = spark.read.format("twisted_broker").option("zk.connect", cluster.zk_connect).option("topic", TOPIC).load()
    assert df.rdd.getNumPartitions() == 2  # one range per partition, not one per replica
    got = rows_of(df)
    assert sorted(got, key=lambda row: row[1:4]) == sorted(expected, key=lambda row: row[1:4])
    assert Counter(got).most_common(1)[0][1] == 1
    # broker.list finds it by a Metadata request; JSON offsets name partitions by number
    start = sorted({row[2] for row in expected if row[1] == 1})[5]
    broker_list = ",".join(f"{b.broker_id}:127.0.0.1:{b.port}" for b in cluster.live())
    df = (spark.read.format("twisted_broker").option("broker.list", broker_list).option("topic", TOPIC)
          .option("startingOffsets", json.dumps({"1": start})).option("endingOffsets", json.dumps({"1": -1})).load())
    assert rows_of(df) == [row for row in expected if row[1] == 1 and row[2] >= start]
    with pytest.raises(Exception, match=r"names partitions 0-1 of orders, which no live broker holds \(found: 0, 1\)"):
        (spark.read.format("twisted_broker").option("zk.connect", cluster.zk_connect).option("topic", TOPIC)
         .option("startingOffsets", '{"0-1": 0}').load().collect())


def _run(cluster, tmp_path) -> EtlRun:
    return EtlRun(topic=TOPIC, output=tmp_path / "out", checkpoint=tmp_path / "checkpoint",
                  zk_connect=cluster.zk_connect, messages=io.StringIO())


def test_the_etl_resumes_exactly_across_leaders_killed_mid_run_and_between_runs(spark, three_brokers, tmp_path):  # noqa: F811
    cluster = three_brokers
    cluster.create(TOPIC)
    for partition in (0, 1):
        _produce(cluster, partition, payloads(f"first-p{partition}", 30, 40))
        _produce(cluster, partition, payloads(f"first-p{partition}-gzip", 30, 40), GZIP)
    first = _run(cluster, tmp_path).run(lambda: spark)
    assert set(first["partitions"]) == {"0", "1"}

    for partition in (0, 1):
        _produce(cluster, partition, payloads(f"second-p{partition}", 30, 40))
    # No pause: the followers may not know the new high watermark yet when the leader dies,
    # so the executors (and the data source's planning) may have to wait for a new leader.
    second = _run(cluster, tmp_path)
    second.lock()
    second.recover()
    second.plan()
    killed = cluster.leaders(TOPIC)[0]
    assert second.plans[0].target.replicas[0].broker_id == killed  # planned on the leader...
    cluster.brokers[killed].kill()  # ... which dies before the executors read
    second.write(spark)
    second.verify(spark)
    second.publish()
    second.commit()
    second.unlock()
    for name in ("0", "1"):
        assert second.manifest["partitions"][name]["from"] == first["partitions"][name]["until"]
    assert second.manifest["partitions"]["0"]["messages"] == 30

    produce_all(cluster, TOPIC, 1, payloads("third-p1", 10, 40))
    produce_all(cluster, TOPIC, 0, payloads("third-p0", 10, 40))
    second_killed = cluster.leaders(TOPIC)[1]
    cluster.brokers[second_killed].kill()
    third = _run(cluster, tmp_path)  # at once: ZooKeeper still names the dead leader of partition 1
    third.run(lambda: spark)
    assert third.plans[1].target.replicas[0].broker_id == second_killed
    assert third.manifest["partitions"]["1"]["from"] == second.manifest["partitions"]["1"]["until"]

    survivor = cluster.live()[0].broker_id
    cluster.wait_for(lambda: set(cluster.leaders(TOPIC, via=survivor).values()) == {survivor},
                     what="the last broker to lead both partitions")
    expected = _reference(cluster, survivor)
    last = _run(cluster, tmp_path).run(lambda: spark)  # whatever the third run could not see yet
    rows = spark.read.parquet(str(tmp_path / "out")).select(
        "broker_id", "partition", "offset", "next_offset", "payload").collect()
    got = Counter((r.broker_id, r.partition, r.offset, r.next_offset, bytes(r.payload)) for r in rows)
    assert max(got.values()) == 1, "a message was loaded twice"
    assert got == Counter(expected)
    produced = {value for p in (0, 1) for prefix, count in ((f"first-p{p}", 30), (f"first-p{p}-gzip", 30),
                                                          (f"second-p{p}", 30), (f"third-p{p}", 10))
                for value in payloads(prefix, count, 40)}
    assert {row[4] for row in expected} == produced  # nothing committed is missing
    checkpoint = json.loads((tmp_path / "checkpoint" / "offsets.json").read_text())
    assert checkpoint["run_id"] == last["run_id"]
    assert checkpoint["offsets"] == {str(p): max(row[3] for row in expected if row[1] == p) for p in (0, 1)}


def test_the_etls_failover_timeout_bounds_its_wait_for_a_replica_to_reach_the_checkpoint(
        spark, three_brokers, tmp_path):  # noqa: F811
    cluster = three_brokers
    cluster.create(TOPIC)
    for partition in (0, 1):
        _produce(cluster, partition, payloads(f"p{partition}", 10, 40))
    _run(cluster, tmp_path).run(lambda: spark)
    # A checkpoint past every replica's end: what a follower whose high watermark lags the
    # leader's shows for a moment. Planning asks again until the failover timeout, then fails.
    path = tmp_path / "checkpoint" / "offsets.json"
    checkpoint = json.loads(path.read_text())
    checkpoint["offsets"]["0"] += 1000
    path.write_text(json.dumps(checkpoint))
    waited = {}
    for timeout_ms in (0, 3000):
        run = EtlRun(topic=TOPIC, output=tmp_path / "out", checkpoint=tmp_path / "checkpoint",
                     zk_connect=cluster.zk_connect, messages=io.StringIO(), failover_timeout_ms=timeout_ms)
        assert run.read_options()["failover.timeout.ms"] == str(timeout_ms)  # the executors' bound too
        started = time.monotonic()
        with pytest.raises(EtlError, match="past the latest offset"):
            run.run(lambda: spark)
        waited[timeout_ms] = time.monotonic() - started
    assert waited[0] < 3.0 <= waited[3000], waited  # not the default 30 s either way
    args = build_parser().parse_args(["etl", "--topic", TOPIC, "--output", "o", "--checkpoint", "c",
                                      "--failover-timeout", "1500"])
    assert args.failover_timeout == 1500
    assert build_parser().parse_args(["etl", "--topic", TOPIC, "--output", "o", "--checkpoint", "c"]
                                     ).failover_timeout == 30000
