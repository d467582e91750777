"""The loader on a topic written by a modern client (kafka-python on the modern listener of a
real broker): each record batch is stored as one 0.7 gzip wrapper whose messages are the
records' values (docs/kafka-protocol.md §3), so the loader finds the values as payloads,
whatever compression the client chose."""

from __future__ import annotations

import pytest

from tests.support.modern_listener import start_with_listener
from tests.support.polling import wait_for
from tests.support.spark_topics import rows_of

pytestmark = pytest.mark.spark

COMPRESSIONS = [None, "gzip", "snappy", "lz4", "zstd"]


def test_records_of_every_compression_load_as_their_values(spark, broker_factory):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    broker, port = start_with_listener(broker_factory)
    sent = []
    for compression in COMPRESSIONS:
        producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{port}", acks=1, linger_ms=20,
                                 compression_type=compression)
        # Compressible values, so each codec is really used (kafka-python sends a batch
        # uncompressed when compression would not make it smaller).
        values = [b"%s record %d " % (str(compression).encode(), i) * 6 for i in range(25)]
        futures = [producer.send("written-modern", key=b"key", value=value, headers=[("h", b"x")], partition=0)
                   for value in values]
        producer.flush()
        last = futures[-1].get(10).offset
        producer.close()
        sent += values
    # The modern end counts flushed records only: wait for the last one (brokers flush on a thread).
    ends = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{port}")
    partition = TopicPartition("written-modern", 0)
    try:
        wait_for(lambda: ends.end_offsets([partition])[partition] == last + 1, "the last record flushed")
    finally:
        ends.close()
    df = (spark.read.format("twisted_broker").option("broker.list", f"0:127.0.0.1:{broker.port}")
          .option("topic", "written-modern").load())
    rows = rows_of(df)
    assert [bytes(row[4]) for row in rows] == sent
    assert {(row[0], row[1]) for row in rows} == {(0, 0)}
