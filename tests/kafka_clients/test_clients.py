"""kafka-python, aiokafka, confluent-kafka and kafkajs against the modern listener: records with
keys, headers and timestamps under every compression each client offers; offsets for a time;
the idempotent producer; a consumer group of two (these four and kcat -G) that splits the
partitions and resumes after a commit without re-delivery. Each client produces what it reads
back itself, and one client's records are read by every other (kcat's other tests:
tests/kafka_clients/test_kcat.py)."""

from __future__ import annotations

import time

import pytest

from tests.support.kafka_clients import client_aiokafka, client_confluent, client_kafka_python, client_kafkajs, client_kcat
from tests.support.kafka_clients.modern_cluster import create_topic
from tests.support.kafka_clients.records import assert_same_records, sample_records, values

CLIENTS = {c.NAME: c for c in (client_kafka_python, client_aiokafka, client_confluent, client_kafkajs)}
PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
GROUP_APIS = (8, 9, 10, 11, 12, 13, 14)  # OffsetCommit, OffsetFetch, FindCoordinator, Join, Heartbeat, Leave, Sync
INIT_PRODUCER_ID = 22
RECORDS = 20
SETTLE_S = 30.0


def read_apis(name: str) -> tuple[int, ...]:
    """What a client needs to read a partition: kafkajs reads only as a group member."""
    return (FETCH, LIST_OFFSETS, METADATA, *(GROUP_APIS if name == "kafkajs" else ()))


def client_cases(extra: tuple[int, ...] = (), clients=tuple(CLIENTS.values())):
    return [pytest.param(c, marks=pytest.mark.needs_api(PRODUCE, *read_apis(c.NAME), *extra), id=c.NAME)
            for c in clients]


@pytest.mark.parametrize(("client", "compression"), [
    pytest.param(c, compression, marks=pytest.mark.needs_api(PRODUCE, *read_apis(c.NAME)), id=f"{c.NAME}-{compression}")
    for c in CLIENTS.values() for compression in c.COMPRESSIONS])
def test_records_keep_keys_headers_and_timestamps_under_each_compression(modern_broker, topic, client, compression):
    sent = sample_records(RECORDS, f"{client.NAME}-{compression}")
    acknowledged = client.produce(modern_broker.bootstrap, topic, sent, compression=compression)
    assert [p for p, _ in acknowledged] == [0] * RECORDS
    consumed = client.consume(modern_broker.bootstrap, topic, RECORDS)
    assert_same_records(sent, consumed)
    # the offsets the producer was told are the ones the records are read at
    assert [o for _, o in acknowledged] == [c.offset for c in consumed]


@pytest.mark.parametrize("reader", client_cases())
def test_every_client_reads_what_another_client_wrote_compressed(modern_broker, topic, reader):
    writer = client_confluent if reader is not client_confluent else client_kafka_python
    sent = sample_records(RECORDS, f"from-{writer.NAME}")
    writer.produce(modern_broker.bootstrap, topic, sent[:10], compression="gzip")
    writer.produce(modern_broker.bootstrap, topic, sent[10:], compression="snappy")
    assert_same_records(sent, reader.consume(modern_broker.bootstrap, topic, RECORDS))


@pytest.mark.parametrize("client", client_cases())
def test_offsets_for_a_time_find_the_first_record_at_or_after_it(modern_broker, topic, client):
    sent = sample_records(10, client.NAME)
    acknowledged = client.produce(modern_broker.bootstrap, topic, sent)
    offsets = [o for _, o in acknowledged]
    # between records 3 and 4: record 4; exactly record 6's: record 6; after the last: none
    assert client.offset_for_time(modern_broker.bootstrap, topic, sent[3].timestamp_ms + 1) == offsets[4]
    assert client.offset_for_time(modern_broker.bootstrap, topic, sent[6].timestamp_ms) == offsets[6]
    assert client.offset_for_time(modern_broker.bootstrap, topic, sent[0].timestamp_ms - 10_000) == offsets[0]
    # after the last: Kafka answers -1, which kafkajs turns into the end offset (last + 1)
    after_last = offsets[-1] + 1 if client is client_kafkajs else None
    assert client.offset_for_time(modern_broker.bootstrap, topic, sent[-1].timestamp_ms + 1) == after_last


@pytest.mark.parametrize("client", client_cases((INIT_PRODUCER_ID,)))
def test_an_idempotent_producer_writes_each_record_once_in_order(modern_broker, topic, client):
    sent = sample_records(RECORDS, f"{client.NAME}-idempotent")
    acknowledged = client.produce(modern_broker.bootstrap, topic, sent, idempotent=True, compression="gzip")
    assert len(set(acknowledged)) == RECORDS
    consumed = client.consume(modern_broker.bootstrap, topic, RECORDS + 1, timeout_s=5.0)
    assert_same_records(sent, consumed)


def settle(members, partitions: set[int]) -> float:
    """Poll every member until their assignments split ``partitions``; return the seconds it took."""
    started = time.monotonic()
    while time.monotonic() - started < SETTLE_S:
        for member in members:
            assert member.poll(0.1) == [], "a record before any was produced"
        assignments = [member.assignment() for member in members]
        if all(assignments) and set().union(*assignments) == partitions and sum(map(len, assignments)) == len(partitions):
            return time.monotonic() - started
    pytest.fail(f"the group did not settle within {SETTLE_S:.0f} s: {[m.assignment() for m in members]}")


def poll_until(members, count: int, timeout_s: float = 20.0) -> list[list]:
    """Poll every member until they returned ``count`` records together; each member's list."""
    found, deadline = [[] for _ in members], time.monotonic() + timeout_s
    while sum(map(len, found)) < count and time.monotonic() < deadline:
        for mine, member in zip(found, members):
            mine += member.poll(0.1)
    return found


@pytest.mark.parametrize("client", client_cases(GROUP_APIS, (*CLIENTS.values(), client_kcat)))
def test_two_members_split_the_partitions_and_a_restart_resumes_after_the_commit(modern_broker, topic, client):
    group = f"g-{topic}"
    assert create_topic(modern_broker, topic) == 2
    members = [client.Member(modern_broker.bootstrap, topic, group)]
    try:
        settle(members, {0, 1})  # alone, it has both
        members.append(client.Member(modern_broker.bootstrap, topic, group))
        settle(members, {0, 1})
        before = sample_records(20, "before")
        for partition in (0, 1):
            client_confluent.produce(modern_broker.bootstrap, topic, before[partition::2], partition=partition)
        got = poll_until(members, len(before))
        assert sorted(values(sum(got, []))) == sorted(r.value for r in before)
        # each member got its own partition's records, each partition's in order
        for mine, member, in zip(got, members):
            assert {c.partition for c in mine} == member.assignment()
            assert values(mine) == [r.value for r in before[next(iter(member.assignment()))::2]]
        for member in members:
            member.commit()
    finally:
        for member in members:
            member.close()
    after = sample_records(10, "after")
    client_confluent.produce(modern_broker.bootstrap, topic, after, partition=None)
    restarted = client.Member(modern_broker.bootstrap, topic, group)
    try:
        [got] = poll_until([restarted], len(after))
        [more] = poll_until([restarted], 1, timeout_s=2.0)  # anything re-delivered would come now
    finally:
        restarted.close()
    assert sorted(values(got + more)) == sorted(r.value for r in after)


@pytest.mark.needs_api(PRODUCE, *read_apis("confluent-kafka"))
def test_batches_of_about_a_megabyte_as_librdkafka_builds_them_are_accepted(modern_broker, topic):
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": modern_broker.bootstrap, "linger.ms": 500, "batch.size": 1_000_000,
                         "batch.num.messages": 100_000, "message.max.bytes": 1_000_000, "acks": "all"})
    values_sent = [b"%06d" % i + b"m" * 994 for i in range(990)]  # ~1 MB in one batch
    failures = []
    for value in values_sent:
        producer.produce(topic, value, partition=0, on_delivery=lambda error, _m: error and failures.append(error))
    assert producer.flush(30) == 0 and not failures, failures[:3]
    assert values(client_confluent.consume(modern_broker.bootstrap, topic, len(values_sent))) == values_sent
