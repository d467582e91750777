"""Planning without Spark: options, message starts found in raw bytes, split points, and the
ETL's recovery of interrupted runs (files only)."""

from __future__ import annotations

import io
import json
import random

import pytest

from twisted_broker.client.fetched_message_set import FetchedMessageSet
from twisted_broker.errors import InvalidMessage
from twisted_broker.spark import checkpoint as ckpt
from twisted_broker.spark.etl import EtlRun
from twisted_broker.spark.options import OptionError, ReadOptions
from twisted_broker.spark.planning import BrokerPartition, OffsetRange
from twisted_broker.spark.splits import split_range
from twisted_broker.codec.kafka07.message_search import find_message_start
from twisted_broker.codec.kafka07.compression import GZIP, NO_COMPRESSION, SNAPPY
from twisted_broker.codec.kafka07.message import MAGIC_0, make_message
from twisted_broker.codec.kafka07.message_set import encode_compressed_message_set, encode_messages, iter_entries


def _log(seed: int = 7, batches: int = 60) -> tuple[bytes, list[int]]:
    """A log of plain, gzip, snappy and magic-0 entries of text payloads; its entry starts."""
    rng = random.Random(seed)
    parts = []
    for index in range(batches):
        payloads = [f"message {index}.{n} ".encode() * rng.randint(1, 12) for n in range(rng.randint(1, 5))]
        kind = rng.choice([NO_COMPRESSION, GZIP, SNAPPY, "magic0"])
        parts.append(encode_messages([make_message(p, magic=MAGIC_0) for p in payloads]) if kind == "magic0"
                     else encode_compressed_message_set(payloads, kind))
    data = b"".join(parts)
    return data, [offset for offset, _next, _message in iter_entries(data)] + [len(data)]


def test_find_message_start_finds_the_next_entry_from_any_position():
    data, starts = _log()
    for position in range(len(data) - 1):
        expected = next(start for start in starts if start >= position)
        window = data[position:position + 4096]
        found = find_message_start(window, partial_tail=True)
        if expected >= len(data) or not any(s > expected for s in starts if s <= position + len(window)):
            continue  # no complete entry after the start inside the window: nothing to confirm
        assert found is not None and position + found == expected, position


def test_find_message_start_finds_nothing_in_noise():
    rng = random.Random(3)
    assert all(find_message_start(bytes(rng.getrandbits(8) for _ in range(2000)), partial_tail=True) is None for _ in range(20))


class _RawLogConsumer:
    """Answers fetches from an in-memory log with raw bytes, as a 0.7 broker does."""

    def __init__(self, data: bytes, refuse_misaligned: bool = False) -> None:
        self.data, self.refuse_misaligned, self.fetches = data, refuse_misaligned, []
        self.starts = {offset for offset, _n, _m in iter_entries(data)}

    def fetch(self, request):
        self.fetches.append(request)
        if self.refuse_misaligned and request.offset not in self.starts:
            return FetchedMessageSet(request, InvalidMessage.code, b"")
        return FetchedMessageSet(request, 0, self.data[request.offset:request.offset + request.max_size])


def _range(start: int, end: int) -> OffsetRange:
    return OffsetRange(BrokerPartition(0, 0, "127.0.0.1", 9092), start, end)


def test_split_points_are_real_message_starts_and_cover_the_range():
    data, starts = _log(batches=200)
    consumer = _RawLogConsumer(data)
    pieces = split_range(consumer, "t", _range(0, len(data)), split_bytes=2000, probe_bytes=[512, 4096],
                         segment_starts=[starts[40], starts[90]])
    assert len(pieces) >= len(data) // 2000 - 1
    assert pieces[0].start == 0 and pieces[-1].end == len(data)
    assert all(a.end == b.start for a, b in zip(pieces, pieces[1:]))
    assert all(piece.start in starts and piece.start < piece.end for piece in pieces)
    assert starts[40] in {piece.start for piece in pieces} or starts[90] in {piece.start for piece in pieces}
    assert all(request.max_size <= 4096 for request in consumer.fetches)  # small fetches only


def test_a_broker_that_refuses_every_probe_leaves_the_range_whole():
    data, _starts = _log()
    pieces = split_range(_RawLogConsumer(data, refuse_misaligned=True), "t", _range(0, len(data)),
                         split_bytes=500, probe_bytes=[4096])
    assert pieces == [_range(0, len(data))]


def test_options_are_checked_with_their_names():
    base = {"zk.connect": "127.0.0.1:2181", "topic": "t"}
    parsed = ReadOptions.parse({**base, "startingOffsets": '{"1-0": 5, "0-3": -2}', "FETCH.SIZE": "4096"})
    assert parsed.starting == {"1-0": 5, "0-3": -2} and parsed.fetch_bytes == 4096 and parsed.ending == "latest"
    for bad, message in [({"topic": "t"}, "exactly one"), ({**base, "startingOffset": "earliest"}, "unknown option"),
                         ({**base, "endingOffsets": "earliest"}, "endingOffsets"),
                         ({**base, "startingOffsets": '{"x": 1}'}, "partition name"),
                         ({**base, "endingOffsets": '{"0-0": -2}'}, "not a byte offset"),
                         ({**base, "crc": "maybe"}, "crc"), ({**base, "fetch.size": "0"}, "fetch.size"),
                         ({**base, "topic": "a/b"}, "topic")]:
        with pytest.raises(OptionError, match=message):
            ReadOptions.parse(bad)



def test_a_replicated_partition_is_named_by_number_and_asks_its_leader_then_the_isr():
    from twisted_broker.client.cluster import replicated_partitions
    from twisted_broker.client.replicated_topics import ReplicatedTopic
    from twisted_broker.codec.kafka07.replication import PartitionMetadata
    topic = ReplicatedTopic("t", (PartitionMetadata(0, 2, 4, (0, 1, 2, 3), (2, 3, 0)),
                                  PartitionMetadata(1, -1, 5, (1,), ())),
                            {0: ("h0", 90), 2: ("h2", 92), 3: ("h3", 93)})  # broker 1 is down
    first, offline = replicated_partitions(topic)
    assert (first.name, first.broker_id, first.host, first.port) == ("0", None, "h2", 92)
    assert [replica.broker_id for replica in first.replicas] == [2, 3, 0]  # leader, ISR; broker 1 is not live
    assert offline.replicas == ()
    parsed = ReadOptions.parse({"zk.connect": "z", "topic": "t", "startingOffsets": '{"0": 5, "01": -2}',
                                "failover.timeout.ms": "0"})
    assert parsed.starting == {"0": 5, "1": -2} and parsed.failover_timeout_ms == 0



class _Replicas:
    """A consumer pool over fake replicas: ``answers[port]`` is a list of latest offsets, one
    per Offsets request (None: connection refused)."""

    def __init__(self, answers: dict[int, list[int | None]]) -> None:
        self.answers, self.asked = answers, []

    def get(self, host: str, port: int, *, connect_timeout_ms: int | None = None):
        pool = self

        class Consumer:
            def get_offsets_before(self, topic, partition, time_ms, max_offsets):
                pool.asked.append(port)
                latest = pool.answers[port].pop(0)
                if latest is None:
                    raise ConnectionRefusedError(f"127.0.0.1:{port} refused")
                return [latest, 0]
        return Consumer()


def test_offsets_are_asked_again_while_the_replica_answering_is_behind_the_offset_wanted():
    from twisted_broker.client.cluster import ReplicatedPartition
    from twisted_broker.spark.planning import replica_offsets
    target = ReplicatedPartition(0, (BrokerPartition(2, 0, "h", 92), BrokerPartition(0, 0, "h", 90)))
    pool, pauses = _Replicas({92: [None, None, None], 90: [100, 100, 250]}), []
    clock = iter(range(100))
    offsets = replica_offsets(pool, "t", target, at_least=200, timeout_ms=5000, clock=lambda: next(clock) / 10,
                              sleep=pauses.append)
    assert offsets.latest == 250 and pool.asked == [92, 90] * 3  # the dead leader, then the follower, thrice
    assert pauses == [0.1, 0.2]
    # behind for longer than the timeout: the last answer, for the caller to judge
    pool = _Replicas({92: [None] * 9, 90: [100] * 9})
    offsets = replica_offsets(pool, "t", target, at_least=200, timeout_ms=250, clock=lambda: next(clock) / 10,
                              sleep=pauses.append)
    assert offsets.latest == 100 and len(pool.asked) == 6


# -- the ETL's recovery step, on files alone ------------------------------------------------

def _etl(tmp_path, **options) -> EtlRun:
    return EtlRun(topic="t", output=tmp_path / "out", checkpoint=tmp_path / "checkpoint",
                  brokers={0: ("127.0.0.1", 1)}, messages=io.StringIO(), **options)


def _publish_manifest(tmp_path, run_id: str, previous: str | None, offsets: dict[str, tuple[int, int]]) -> None:
    directory = ckpt.published_path(tmp_path / "out", "2025-01-01", run_id)
    directory.mkdir(parents=True)
    partitions = {name: {"from": start, "until": until, "bytes": until - start, "messages": 1,
                         "crc_failures": 0, "status": "read", "gap": None}
                  for name, (start, until) in offsets.items()}
    (directory / ckpt.MANIFEST_NAME).write_text(json.dumps(
        {"format": 1, "run_id": run_id, "topic": "t", "previous_run_id": previous, "partitions": partitions}))


def test_recovery_commits_a_chain_of_published_runs_and_removes_unpublished_ones(tmp_path):
    _publish_manifest(tmp_path, "r1", None, {"0-0": (0, 100)})
    _publish_manifest(tmp_path, "r2", "r1", {"0-0": (100, 250), "0-1": (0, 7)})
    _publish_manifest(tmp_path, "stray", "elsewhere", {"0-0": (5, 9)})  # continues nothing of ours
    (tmp_path / "out" / "_tmp" / "r3" / "part-0").mkdir(parents=True)
    run = _etl(tmp_path)
    run.lock()
    run.recover()
    run.unlock()
    assert run.adopted == ["r1", "r2"] and run.removed == ["r3"]
    assert not (tmp_path / "out" / "_tmp" / "r3").exists()
    committed = json.loads((tmp_path / "checkpoint" / "offsets.json").read_text())
    assert committed["run_id"] == "r2" and committed["offsets"] == {"0-0": 250, "0-1": 7}
    assert sorted(p.name for p in (tmp_path / "checkpoint" / "manifests").iterdir()) == ["r1.json", "r2.json"]
    again = _etl(tmp_path)  # nothing left to adopt
    again.lock()
    again.recover()
    again.unlock()
    assert again.adopted == [] and again.committed.run_id == "r2"


def test_recovery_refuses_a_published_run_that_does_not_start_at_the_checkpoint(tmp_path):
    _publish_manifest(tmp_path, "r1", None, {"0-0": (0, 100)})
    _publish_manifest(tmp_path, "r2", "r1", {"0-0": (90, 250)})
    run = _etl(tmp_path)
    run.lock()
    with pytest.raises(Exception, match="read 0-0 from 90"):
        run.recover()
    run.unlock()


def test_one_run_at_a_time(tmp_path):
    first, second = _etl(tmp_path), _etl(tmp_path)
    first.lock()
    with pytest.raises(Exception, match="another etl run holds"):
        second.lock()
    first.unlock()
    second.lock()
    second.unlock()
