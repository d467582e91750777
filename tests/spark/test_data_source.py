"""The twisted_broker data source on a real local SparkSession against two real brokers."""

from __future__ import annotations

import json

import pytest

from tests.support.spark_topics import payloads, rows_of
from twisted_broker.codec.kafka07.compression import GZIP, NO_COMPRESSION, SNAPPY

pytestmark = pytest.mark.spark

TOPIC = "events"


def _fill(cluster, rounds: int = 3, per_round: int = 40, size: int = 60) -> None:
    """Plain, gzip and snappy message sets, interleaved, into all four broker-partitions."""
    for round_ in range(rounds):
        for broker_id in (0, 1):
            for partition in (0, 1):
                for codec in (NO_COMPRESSION, GZIP, SNAPPY):
                    prefix = f"r{round_}-b{broker_id}-p{partition}-c{codec}"
                    cluster.produce(TOPIC, broker_id, partition, payloads(prefix, per_round, size), codec)
    cluster.wait_flushed()


def _by_partition(rows):
    grouped = {}
    for row in rows:
        grouped.setdefault((row[0], row[1]), []).append(row)
    return grouped


def test_every_message_round_trips_with_offsets_and_order(spark, cluster_factory):
    cluster = cluster_factory()
    _fill(cluster)
    expected = cluster.reference_rows(TOPIC)
    assert len(expected) == 3 * 4 * 3 * 40
    df = spark.read.format("twisted_broker").option("zk.connect", cluster.zk_connect).option("topic", TOPIC).load()
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("topic", "string"), ("broker_id", "int"), ("partition", "int"), ("offset", "bigint"),
        ("next_offset", "bigint"), ("payload", "binary")]
    assert df.rdd.getNumPartitions() == 4  # one per broker-partition: nothing is large enough to split
    got = rows_of(df)
    # Row-exact per partition, in log order: payloads, offsets (inner messages of a wrapper
    # report its offset, the last one the offset after it), and nothing else.
    assert _by_partition(got) == _by_partition(expected)
    assert {row.topic for row in df.select("topic").distinct().collect()} == {TOPIC}


def test_broker_list_and_json_offsets_read_exactly_the_range(spark, cluster_factory):
    cluster = cluster_factory()
    _fill(cluster, rounds=2, per_round=5)
    everything = cluster.reference_rows(TOPIC)
    # Start at the second produce of 0-1, stop after the fourth of 1-0; read only those two.
    first = sorted({row[2] for row in everything if row[:2] == (0, 1)})
    ends = sorted({row[3] for row in everything if row[:2] == (1, 0)})
    start, end = first[1], ends[3]
    df = (spark.read.format("twisted_broker").option("broker.list", cluster.broker_list())
          .option("topic", TOPIC).option("startingOffsets", json.dumps({"0-1": start, "1-0": -2}))
          .option("endingOffsets", json.dumps({"0-1": -1, "1-0": end})).load())
    expected = [row for row in everything
                if (row[:2] == (0, 1) and row[2] >= start) or (row[:2] == (1, 0) and row[3] <= end)]
    assert _by_partition(rows_of(df)) == _by_partition(expected)


def test_a_split_range_still_yields_each_message_once(spark, cluster_factory):
    cluster = cluster_factory()
    _fill(cluster, rounds=4, per_round=30, size=100)
    expected = cluster.reference_rows(TOPIC)
    df = (spark.read.format("twisted_broker").option("zk.connect", cluster.zk_connect).option("topic", TOPIC)
          .option("split.size", "2000").load())
    assert df.rdd.getNumPartitions() > 4 * 4  # every ~12 KB partition range cut into pieces
    got = rows_of(df)
    assert len(got) == len(expected) and len(set(got)) == len(got)
    assert _by_partition(got) == _by_partition(expected)


def test_json_decoder_fills_the_schema_columns(spark, cluster_factory):
    cluster = cluster_factory()
    events = [json.dumps({"user": f"u{i}", "amount": i, "extra": [i]}).encode() for i in range(50)]
    cluster.produce(TOPIC, 0, 0, events[:25])
    cluster.produce(TOPIC, 1, 1, events[25:], GZIP)
    cluster.produce(TOPIC, 1, 1, [b"not json"])
    cluster.wait_flushed()
    df = (spark.read.format("twisted_broker").schema("partition INT, offset BIGINT, user STRING, amount BIGINT")
          .option("zk.connect", cluster.zk_connect).option("topic", TOPIC).option("decoder", "json")
          .option("decoder.errors", "null").load())
    rows = [(r.user, r.amount) for r in df.collect()]
    assert rows == [(f"u{i}", i) for i in range(50)] + [(None, None)]


def test_a_false_split_point_inside_a_payload_fails_the_query_instead_of_duplicating(spark, cluster_factory):
    # Every payload is itself a message set, so the CRC chain that finds split points can
    # start inside a payload: planning cannot tell, the reader of the piece before must.
    from twisted_broker.codec.kafka07.message_set import encode_message_set
    cluster = cluster_factory()
    nested = [encode_message_set([f"inner {i}.{j}".encode() * 5 for j in range(6)]) for i in range(40)]
    cluster.produce(TOPIC, 0, 0, nested)
    cluster.wait_flushed()
    reader = (spark.read.format("twisted_broker").option("zk.connect", cluster.zk_connect).option("topic", TOPIC)
              .option("startingOffsets", '{"0-0": -2}').option("endingOffsets", '{"0-0": -1}'))
    with pytest.raises(Exception, match="split point was not a message start"):
        reader.option("split.size", "1000").load().collect()
    assert rows_of(reader.option("split.size", "0").load()) == cluster.reference_rows(TOPIC)
