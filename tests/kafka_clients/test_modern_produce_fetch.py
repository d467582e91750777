"""Records through the modern listener of a real broker, with kafka-python: keys, headers and
timestamps kept, offsets as Kafka clients compute them, and the same topic read by both
protocols (a 0.7 client of this project on the 0.7 port, kafka-python on the modern one)."""

from __future__ import annotations

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from tests.support.console_process import http, metric_families, wait_for_port_file
from tests.support.modern_listener import start_with_listener
from tests.support.polling import produce_payloads, wait_for, wait_for_payloads

T0 = 1_700_000_000_000


def producer(port: int, **options) -> KafkaProducer:
    return KafkaProducer(bootstrap_servers=f"127.0.0.1:{port}", linger_ms=5, **options)


def consume(port: int, topic: str, partition: int, count: int) -> list:
    consumer = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{port}", auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=10000)
    try:
        consumer.assign([TopicPartition(topic, partition)])
        records = []
        for record in consumer:
            records.append(record)
            if len(records) == count:
                break
        return records
    finally:
        consumer.close()


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_keys_headers_and_timestamps_survive_and_offsets_are_kafkas(broker_factory, compression):
    _broker, port = start_with_listener(broker_factory)
    sender = producer(port, acks=1, compression_type=compression)
    sent = [sender.send("t", key=b"k%d" % i, value=b"v%d" % i, headers=[("h", b"%d" % i)], partition=0,
                        timestamp_ms=T0 + 10 * i) for i in range(20)]
    sender.flush()
    offsets = [future.get(10).offset for future in sent]
    sender.close()
    assert offsets == sorted(offsets) and len(set(offsets)) == 20
    records = consume(port, "t", 0, 20)
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in records] == [
        (offsets[i], b"k%d" % i, b"v%d" % i, [("h", b"%d" % i)], T0 + 10 * i) for i in range(20)]
    consumer = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{port}")
    try:
        tp = TopicPartition("t", 0)
        assert consumer.end_offsets([tp])[tp] == offsets[-1] + 1
        assert consumer.beginning_offsets([tp])[tp] == 0
        found = consumer.offsets_for_times({tp: T0 + 55})[tp]
        assert (found.offset, found.timestamp) == (offsets[6], T0 + 60)
    finally:
        consumer.close()


def test_a_0_7_client_reads_values_produced_by_a_modern_one_and_vice_versa(broker_factory):
    broker, port = start_with_listener(broker_factory)
    sender = producer(port, acks=1)
    for i in range(3):
        sender.send("both", key=b"key", value=b"modern %d" % i, partition=0)
    sender.flush()
    sender.close()
    wait_for_payloads(broker, "both", 0, [b"modern 0", b"modern 1", b"modern 2"])
    produce_payloads(broker, "both", 0, [b"old 0", b"old 1"])
    records = consume(port, "both", 0, 5)
    assert [r.value for r in records] == [b"modern 0", b"modern 1", b"modern 2", b"old 0", b"old 1"]
    assert [r.key for r in records] == [b"key"] * 3 + [None] * 2
    assert [r.offset for r in records] == sorted(r.offset for r in records)


def test_acks_all_on_a_replicated_topic_is_acknowledged_once_committed(broker_factory, zk_connect):
    from kafka.admin import NewTopic

    from tests.support.modern_listener import admin

    _broker, port = start_with_listener(broker_factory, zk_connect=zk_connect)
    client = admin(port)
    try:
        client.create_topics([NewTopic("r", 3, 1)])
    finally:
        client.close()
    sender = producer(port, acks="all", enable_idempotence=False)
    metadata = [sender.send("r", value=b"x%d" % i, partition=i % 3).get(10) for i in range(6)]
    sender.close()
    assert sorted((m.partition, m.offset) for m in metadata)[:2] == [(0, 0), (0, metadata[3].offset)]
    assert wait_for(lambda: [r.value for r in consume(port, "r", 1, 2)] == [b"x1", b"x4"], "x1, x4")


def test_over_tls_records_go_through_the_chunked_path(broker_factory, certificate):
    key, cert = certificate
    broker = broker_factory("tls", extra_args=[
        "--kafka-endpoint", f"ssl:0:privateKey={key}:certKey={cert}:interface=127.0.0.1",
        "--kafka-port-file", "kafka-port"])
    port = int((broker.directory / "kafka-port").read_text())
    tls = {"security_protocol": "SSL", "ssl_cafile": str(cert), "ssl_check_hostname": False}
    sender = producer(port, acks=1, **tls)
    offsets = [sender.send("secret", value=b"x" * 50_000 + b"%d" % i, partition=0).get(10).offset
               for i in range(40)]  # 2 MB: many chunks
    sender.close()
    consumer = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{port}", auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=10000, **tls)
    try:
        consumer.assign([TopicPartition("secret", 0)])
        records = [record for _, record in zip(range(40), consumer)]
    finally:
        consumer.close()
    assert [(r.offset, r.value[-2:]) for r in records] == [(o, b"x%d" % i if i < 10 else b"%d" % i)
                                                           for i, o in enumerate(offsets)]


def test_an_idempotent_producer_gets_an_id_and_a_retried_batch_is_stored_once(broker_factory):
    from tests.support.modern_listener import raw_request
    from twisted_broker.codec.kafka.api_keys import INIT_PRODUCER_ID, PRODUCE
    from twisted_broker.codec.kafka.record_batch import build_batch

    broker, port = start_with_listener(broker_factory)
    produce_payloads(broker, "idem", 0, [b"0.7 first"])
    ids = [raw_request(port, INIT_PRODUCER_ID, 0, {"transactional_id": None, "transaction_timeout_ms": 60000})
           for _ in range(2)]
    assert [i["error_code"] for i in ids] == [0, 0] and ids[0]["producer_id"] != ids[1]["producer_id"]
    producer_id = ids[0]["producer_id"]

    def send(sequence: int, value: bytes) -> dict:
        batch = build_batch([(T0, None, value)], producer_id=producer_id, producer_epoch=0, base_sequence=sequence)
        answer = raw_request(port, PRODUCE, 3, {"acks": -1, "timeout_ms": 5000, "topic_data": [
            {"name": "idem", "partition_data": [{"index": 0, "records": batch}]}]})
        return answer["responses"][0]["partition_responses"][0]
    first = send(0, b"a")
    assert send(0, b"a") == first  # the retry: acknowledged with the same offset
    assert send(5, b"gap")["error_code"] == 45  # out of order
    assert send(1, b"b")["error_code"] == 0
    assert [r.value for r in consume(port, "idem", 0, 3)] == [b"0.7 first", b"a", b"b"]


def test_acks_all_on_a_single_copy_topic_answers_once_consumers_can_read_the_batch(broker_factory):
    # a flush policy that never flushes by itself within the test: only acks=all's own flush
    # can make the batch visible before the acknowledgement
    _broker, port = start_with_listener(broker_factory, properties={
        "log.flush.interval": "1000000", "log.default.flush.interval.ms": "600000",
        "log.default.flush.scheduler.interval.ms": "600000"})
    tp = TopicPartition("single", 0)
    reader = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{port}")
    try:
        loose = producer(port, acks=1)
        unflushed = loose.send("single", value=b"acks=1", partition=0).get(10).offset
        loose.close()
        assert reader.end_offsets([tp])[tp] <= unflushed  # appended, not yet visible
        strict = producer(port, acks="all")
        committed = strict.send("single", value=b"acks=all", partition=0).get(10).offset
        strict.close()
        assert reader.end_offsets([tp])[tp] == committed + 1
    finally:
        reader.close()
    assert [r.value for r in consume(port, "single", 0, 2)] == [b"acks=1", b"acks=all"]


def test_the_embedded_console_shows_the_modern_listeners_requests_beside_the_0_7_ports(broker_factory, tmp_path):
    port_file = tmp_path / "webui-port"
    broker, port = start_with_listener(broker_factory, extra_args=[
        "--webui", "tcp:0:interface=127.0.0.1", "--webui-port-file", str(port_file)])
    console_port = wait_for_port_file(port_file, broker.process, 30)
    sender = producer(port, acks=1)
    for i in range(3):
        sender.send("t", value=b"v%d" % i, partition=0)
    sender.flush()
    sender.close()
    families = metric_families(console_port)
    requests = {s.labels["api"]: s.value for s in families["twisted_broker_broker_kafka_requests"].samples}
    assert requests["Produce"] >= 1 and requests["Metadata"] >= 1 and requests["ApiVersions"] >= 1
    assert families["twisted_broker_broker_kafka_connections"].samples[0].value == 0  # the producer closed
    assert families["twisted_broker_broker_kafka_bytes_read"].samples[0].value > 0
    old_port = {s.labels["request"]: s.value for s in families["twisted_broker_broker_requests"].samples}
    assert old_port["produce"] == 0  # the 0.7 port's figures stay its own
    messages_in = {s.labels["topic"]: s.value for s in families["twisted_broker_broker_topic_messages_in"].samples}
    assert messages_in["t"] == 3  # topics' figures count both listeners
    stats = http(console_port, "GET", "/api/brokers/0").json()["stats"]
    assert stats["kafka_listener"]["requests"]["Produce"]["count"] == requests["Produce"]
    page = http(console_port, "GET", "/brokers/0").text
    assert 'id="kafka-requests"' in page and "<td>Produce</td>" in page
