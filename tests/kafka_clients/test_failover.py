"""Three brokers, a topic of two partitions with replication factor 3: a confluent-kafka
producer with acks=all and enable.idempotence writes numbered records to both partitions
while the leaders are killed with kill -9 one after the other (each killed broker comes back
on its kafka.port); afterwards every acknowledged record is there exactly once, at the offset
it was acknowledged at, in the order sent per partition. The figures (acknowledged, found,
duplicated, missing) go to the reliability summary printed at the end of the run."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from tests.support.kafka_clients import client_confluent
from tests.support.reliability import record, record_durations

PRODUCE, FETCH, LIST_OFFSETS, METADATA, INIT_PRODUCER_ID = 0, 1, 2, 3, 22
PARTITIONS = (0, 1)
KILL_CYCLES = {"short": 2, "soak": 10}
RATE_PER_S = 500
PRODUCE_AROUND_KILL_S = 4.0


def produce_for(producer, topic: str, seconds: float, state: dict) -> None:
    """Numbered records to both partitions in turn at about RATE_PER_S, for ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sequence = state["sent"]
        partition = PARTITIONS[sequence % len(PARTITIONS)]
        producer.produce(topic, value=f"{partition}:{sequence}".encode(), partition=partition,
                         on_delivery=state["report"])
        state["sent"] += 1
        producer.poll(1 / RATE_PER_S)


def read_everything(bootstrap: str, topic: str, timeout_s: float = 60.0) -> dict[int, list[tuple[int, bytes]]]:
    """(offset, value) of every record of each partition, up to its high watermark."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "failover-reader", "enable.auto.commit": False})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=20)[1] for p in PARTITIONS}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in PARTITIONS])
        found: dict[int, list[tuple[int, bytes]]] = {p: [] for p in PARTITIONS}
        deadline = time.monotonic() + timeout_s
        while any(not found[p] and ends[p] or found[p] and found[p][-1][0] + 1 < ends[p] for p in PARTITIONS):
            assert time.monotonic() < deadline, f"read {[len(v) for v in found.values()]} records, ends {ends}"
            for message in consumer.consume(500, 0.5):
                assert message.error() is None, message.error()
                found[message.partition()].append((message.offset(), message.value()))
        return found
    finally:
        consumer.close()


@pytest.mark.needs_api(PRODUCE, FETCH, LIST_OFFSETS, METADATA, INIT_PRODUCER_ID)
def test_an_idempotent_acks_all_producer_loses_and_duplicates_nothing_while_leaders_are_killed(
        modern_cluster, request, scale):
    cluster = modern_cluster
    topic = "failover"
    cluster.create(topic)
    acknowledged: dict[int, list[tuple[int, bytes]]] = {p: [] for p in PARTITIONS}
    failed: list[str] = []
    acked_at: list[tuple[float, int, int]] = []  # (when, partition, sequence)

    def report(error, message):
        if error is None:
            acknowledged[message.partition()].append((message.offset(), message.value()))
            acked_at.append((time.monotonic(), message.partition(), int(message.value().split(b":")[1])))
        else:
            failed.append(str(error))

    state = {"sent": 0, "report": report}
    producer = client_confluent.producer(cluster.bootstrap, **{
        "acks": "all", "enable.idempotence": True, "message.timeout.ms": 60_000,
        "topic.metadata.refresh.interval.ms": 1_000, "reconnect.backoff.max.ms": 500})
    kills = []  # (when, partition, first sequence sent after the kill)
    produce_for(producer, topic, 1.0, state)
    for cycle in range(KILL_CYCLES.get(scale.name, 2)):
        partition = PARTITIONS[cycle % len(PARTITIONS)]
        victim = cluster.leaders(topic)[partition]
        cluster.brokers[victim].kill()
        kills.append((time.monotonic(), partition, state["sent"]))
        produce_for(producer, topic, PRODUCE_AROUND_KILL_S, state)
        cluster.start(victim)
        cluster.wait_for(lambda: set(cluster.metadata(topic).topics[0].partitions[partition].isr) == {0, 1, 2},
                         30, what=f"broker {victim} back in the ISR of partition {partition}")
    left = producer.flush(90)
    # from each kill to the first acknowledgement of a record of that partition sent after it
    outages = [min((when for when, p, sequence in acked_at if p == partition and sequence >= first),
                   default=time.monotonic())
               - killed_at for killed_at, partition, first in kills]
    found = read_everything(cluster.bootstrap, topic)

    acked_values = [v for p in PARTITIONS for _, v in acknowledged[p]]
    found_values = Counter(v for p in PARTITIONS for _, v in found[p])
    duplicated = sum(count - 1 for count in found_values.values() if count > 1)
    missing = sum(1 for v in acked_values if v not in found_values)
    record(request, faults_injected=len(outages), messages_checked=len(acked_values), messages_lost=missing)
    record_durations(request, "first ack after a leader kill", outages)
    print(f"\nmodern failover: sent {state['sent']}, acknowledged {len(acked_values)}, found {sum(found_values.values())}, "
          f"duplicated {duplicated}, missing {missing}, failed {len(failed)}, unflushed {left}; "
          f"first ack after each kill {', '.join(f'{s:.1f} s' for s in outages)}")
    assert left == 0 and not failed, f"{left} unflushed, failures {Counter(failed)}"
    assert missing == 0 and duplicated == 0
    for p in PARTITIONS:
        # each partition holds its acknowledged records at their offsets, in the order sent
        by_offset = dict(found[p])
        assert all(by_offset.get(offset) == value for offset, value in acknowledged[p])
        sequences = [int(v.split(b":")[1]) for _, v in found[p]]
        assert sequences == sorted(sequences)
