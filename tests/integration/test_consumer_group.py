"""Consumer groups against a real ZooKeeper and real brokers (spec 5.2-5.5): ZookeeperConsumerConnector.

Brokers flush every message (the fixture's log.flush.interval=1) but publish flushes
asynchronously, and group members react to ZooKeeper watches: every check polls with a
deadline. Consumers run with short backoffs (rebalance.backoff.ms=200, fetcher.backoff.ms=50)
and ZooKeeper sessions of 1-4 s against a server whose tickTime is 200 ms.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tests.integration.polling import wait_for
from twisted_broker.client.producer import Producer
from twisted_broker.client.simple_consumer import LATEST_TIME, SimpleConsumer
from twisted_broker.client.sync_producer import SyncProducer
from twisted_broker.client.topic_filter import Blacklist, Whitelist
from twisted_broker.client.zookeeper_consumer import (ConsumerRebalanceFailed, ConsumerTimeout, KafkaStream,
                                                      MessageAndMetadata, ZookeeperConsumerConnector)
from twisted_broker.config import ConsumerConfig, ProducerConfig
from twisted_broker.errors import InvalidFetchSize
from twisted_broker.registry import paths, rebalance
from twisted_broker.registry.zk_partition_info import ZkBrokerPartitionInfo
from twisted_broker.wire.compression import GZIP
from twisted_broker.wire.message_set import encode_compressed_message_set, encode_message_set

HERE = Path(__file__).resolve().parent
GROUP = "g"


# -- helpers ---------------------------------------------------------------------------------

def send(broker, topic: str, partition: int, payloads: Iterable[str]) -> list[str]:
    """Produce ``payloads`` to one partition of one broker; return them."""
    payloads = list(payloads)
    with SyncProducer("127.0.0.1", broker.port) as producer:
        producer.send(topic, partition, encode_message_set(p.encode() for p in payloads))
    return payloads


def fill(brokers, topic: str, partitions: int, count: int, tag: str) -> list[str]:
    """``count`` messages to every partition of every broker; payloads name their place."""
    sent = []
    for broker in brokers:
        for partition in range(partitions):
            sent += send(broker, topic, partition,
                         (f"{tag}-{broker.broker_id}-{partition}-{i}" for i in range(count)))
    return sent


def latest_offset(broker, topic: str, partition: int) -> int:
    with SimpleConsumer("127.0.0.1", broker.port) as consumer:
        return consumer.get_offsets_before(topic, partition, LATEST_TIME, 1)[0]


def owners(zk: KazooClient, topic: str, group: str = GROUP) -> dict[str, str]:
    """``{partition name: owner thread id}`` from the owner nodes."""
    path = paths.owners_path(group, topic)
    if not zk.exists(path):
        return {}
    result = {}
    for name in zk.get_children(path):
        try:
            result[name] = paths.decode_owner(zk.get(f"{path}/{name}")[0])
        except Exception:  # noqa: BLE001 - vanished between the two calls
            pass
    return result


def committed(zk: KazooClient, topic: str, group: str = GROUP) -> dict[str, int]:
    path = paths.offsets_path(group, topic)
    if not zk.exists(path):
        return {}
    return {name: paths.decode_offset(zk.get(f"{path}/{name}")[0]) for name in zk.get_children(path)}


class Collector:
    """Iterates one stream on a thread of its own, keeping every message (thread-safe list)."""

    def __init__(self, stream: KafkaStream) -> None:
        self.stream, self.messages, self.errors = stream, [], []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                message = next(self.stream)
            except ConsumerTimeout:
                continue
            except StopIteration:
                return
            except Exception as exc:  # noqa: BLE001 - reported by the test
                self.errors.append(exc)
                return
            with self._lock:
                self.messages.append(message)

    def snapshot(self) -> list[MessageAndMetadata]:
        with self._lock:
            return list(self.messages)

    def payloads(self) -> set[str]:
        return {m.payload.decode() for m in self.snapshot()}

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


@pytest.fixture
def connector_factory(zk_connect):
    """``connector_factory(consumerid=None, group=GROUP, **properties)``: a connector with test
    settings; properties use 0.7 keys (dots). All are shut down after the test."""
    made: list[ZookeeperConsumerConnector] = []

    def make(consumerid: str | None = None, group: str = GROUP, **properties: str) -> ZookeeperConsumerConnector:
        settings = {"zk.connect": zk_connect, "groupid": group, "zk.sessiontimeout.ms": "4000",
                    "zk.connectiontimeout.ms": "10000", "rebalance.backoff.ms": "200",
                    "rebalance.retries.max": "20", "fetcher.backoff.ms": "50", "socket.timeout.ms": "5000",
                    "consumer.timeout.ms": "100", "autocommit.interval.ms": "200"}
        if consumerid is not None:
            settings["consumerid"] = consumerid
        settings.update({key.replace("_", "."): value for key, value in properties.items()})
        connector = ZookeeperConsumerConnector(ConsumerConfig.from_properties(settings))
        made.append(connector)
        return connector

    yield make
    for connector in made:
        connector.shutdown()


@pytest.fixture
def collectors():
    started: list[Collector] = []

    def start(stream: KafkaStream) -> Collector:
        started.append(Collector(stream))
        return started[-1]

    yield start
    for collector in started:
        collector.stop()


def cluster(broker_factory, zk_connect, broker_ids=(0, 1), partitions: int = 4):
    return [broker_factory(f"broker{broker_id}", broker_id=broker_id, zk_connect=zk_connect,
                           properties={"num.partitions": str(partitions)})
            for broker_id in broker_ids]


def wait_registered(zk: KazooClient, topic: str, broker_ids: Iterable[int]) -> None:
    for broker_id in broker_ids:
        wait_for(lambda: zk.exists(paths.broker_topic_path(topic, broker_id)),
                 f"broker {broker_id} to register {topic}")


def consumed_all(collectors_: Iterable[Collector], expected: Iterable[str], extra: set[str] = frozenset()):
    expected = set(expected)
    return lambda: expected <= set().union(extra, *(c.payloads() for c in collectors_))


# -- the group's assignment and delivery ---------------------------------------------------------

def test_three_consumers_over_eight_partitions_own_0_7s_ranges_and_consume_everything(
        broker_factory, zk_connect, zk, connector_factory, collectors):
    brokers = cluster(broker_factory, zk_connect, broker_ids=(2, 10))
    sent = fill(brokers, "t", 4, 25, "m")
    wait_registered(zk, "t", (2, 10))
    members = {}
    for consumerid in ("c9", "c10", "c2"):
        connector = connector_factory(consumerid)
        (stream,) = connector.create_message_streams({"t": 1})["t"]
        members[consumerid] = collectors(stream)
    # Hand-computed (tests/unit/registry/test_rebalance.py): partitions and thread ids sort as
    # strings, 10-x before 2-x and g_c10-0 < g_c2-0 < g_c9-0; 8 = 3 + 3 + 2.
    expected = {"10-0": "g_c10-0", "10-1": "g_c10-0", "10-2": "g_c10-0",
                "10-3": "g_c2-0", "2-0": "g_c2-0", "2-1": "g_c2-0",
                "2-2": "g_c9-0", "2-3": "g_c9-0"}
    wait_for(lambda: owners(zk, "t") == expected, f"owners {expected}, have {owners(zk, 't')}")
    for consumerid in ("c9", "c10", "c2"):
        value, _ = zk.get(paths.consumer_id_path(GROUP, f"g_{consumerid}"))
        assert value == b'{ "t": 1 }'
    wait_for(consumed_all(members.values(), sent), "every message to be consumed")
    more = fill(brokers, "t", 4, 5, "more")
    wait_for(consumed_all(members.values(), more), "messages produced after the rebalance")
    # autocommit.interval.ms=200: the offsets reach the end of every partition.
    ends = {paths.partition_name(b.broker_id, p): latest_offset(b, "t", p) for b in brokers for p in range(4)}
    wait_for(lambda: committed(zk, "t") == ends, f"autocommitted offsets {ends}")
    # Once the assignment settled, each member receives only its own partitions.
    for consumerid, collector in members.items():
        late = {m.partition for m in collector.snapshot() if m.payload.startswith(b"more-")}
        assert late <= {p for p, owner in expected.items() if owner == f"g_{consumerid}-0"}
    assert not any(c.errors for c in members.values())


def test_members_joining_and_leaving_together_converge_on_0_7s_assignment(
        broker_factory, zk_connect, zk, connector_factory, collectors):
    brokers = cluster(broker_factory, zk_connect)
    sent = fill(brokers, "t", 4, 10, "m")
    wait_registered(zk, "t", (0, 1))
    members = {consumerid: connector_factory(consumerid) for consumerid in ("d", "c", "b", "a")}
    streams: dict[str, list[KafkaStream]] = {}
    errors: list[BaseException] = []

    def join(consumerid: str) -> None:
        try:
            streams[consumerid] = members[consumerid].create_message_streams({"t": 2})["t"]
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
    joining = [threading.Thread(target=join, args=(consumerid,)) for consumerid in members]
    for thread in joining:
        thread.start()
    for thread in joining:
        thread.join(60)
    assert not errors
    partitions = [f"{b}-{p}" for b in (0, 1) for p in range(4)]

    def expected(consumerids):
        threads = [f"g_{c}-{i}" for c in consumerids for i in range(2)]
        return {p: thread for thread, owned in rebalance.assign(threads, partitions).items() for p in owned}
    wait_for(lambda: owners(zk, "t") == expected("abcd"), "eight threads over eight partitions")
    group = [collectors(stream) for member_streams in streams.values() for stream in member_streams]
    wait_for(consumed_all(group, sent), "every message")
    leaving = [threading.Thread(target=members[c].shutdown) for c in ("a", "c")]
    for thread in leaving:
        thread.start()
    for thread in leaving:
        thread.join(30)
    wait_for(lambda: owners(zk, "t") == expected("bd"), "the two remaining members' ranges")
    more = fill(brokers, "t", 4, 5, "more")
    wait_for(consumed_all(group, more), "messages after the others left")


def test_streams_of_one_consumer_are_threads_of_the_assignment(broker_factory, zk_connect, zk, connector_factory,
                                                               collectors):
    (broker,) = cluster(broker_factory, zk_connect, broker_ids=(0,), partitions=3)
    sent = fill([broker], "t", 3, 10, "m")
    wait_registered(zk, "t", (0,))
    connector = connector_factory("a")
    streams = connector.create_message_streams({"t": 2})["t"]
    assert len(streams) == 2
    # Threads g_a-0, g_a-1 over 0-0 0-1 0-2: 2 + 1.
    wait_for(lambda: owners(zk, "t") == {"0-0": "g_a-0", "0-1": "g_a-0", "0-2": "g_a-1"}, "two streams' owners")
    first, second = collectors(streams[0]), collectors(streams[1])
    wait_for(consumed_all([first, second], sent), "every message")
    assert {m.partition for m in first.snapshot()} == {"0-0", "0-1"}
    assert {m.partition for m in second.snapshot()} == {"0-2"}


def test_consumed_offsets_chain_and_shutdown_commits_them_and_releases_ownership(
        broker_factory, zk_connect, zk, connector_factory):
    (broker,) = cluster(broker_factory, zk_connect, broker_ids=(0,), partitions=2)
    fill([broker], "t", 2, 10, "m")
    wait_registered(zk, "t", (0,))
    connector = connector_factory("a", autocommit_enable="true", autocommit_interval_ms="600000",
                                  consumer_timeout_ms="5000")
    (stream,) = connector.create_message_streams({"t": 1})["t"]
    wait_for(lambda: len(owners(zk, "t")) == 2, "both partitions owned")
    last: dict[str, MessageAndMetadata] = {}
    for _ in range(13):
        message = next(stream)
        if message.partition in last:  # uncompressed: each message starts where the last ended
            assert message.offset == last[message.partition].next_offset
        else:
            assert message.offset == 0
        last[message.partition] = message
    assert committed(zk, "t") == {}  # nothing committed yet: the interval is 10 minutes
    connector.shutdown()
    expected = {partition: 0 for partition in ("0-0", "0-1")}  # owned, nothing consumed: where it starts
    expected.update({partition: message.next_offset for partition, message in last.items()})
    assert committed(zk, "t") == expected
    assert owners(zk, "t") == {}
    assert zk.exists(paths.consumer_id_path(GROUP, "g_a")) is None
    with pytest.raises(StopIteration):
        next(stream)
    # The next member of the group starts exactly there (one more message each, so that a
    # partition consumed to its end has something to start with).
    fill([broker], "t", 2, 1, "after")
    successor = connector_factory("b", consumer_timeout_ms="5000")
    (stream,) = successor.create_message_streams({"t": 1})["t"]
    firsts: dict[str, int] = {}
    while len(firsts) < 2:
        message = next(stream)
        firsts.setdefault(message.partition, message.offset)
    assert firsts == expected


def test_commit_offsets_writes_consumed_offsets_without_autocommit(broker_factory, zk_connect, zk, connector_factory):
    (broker,) = cluster(broker_factory, zk_connect, broker_ids=(0,), partitions=1)
    fill([broker], "t", 1, 5, "m")
    connector = connector_factory("a", autocommit_enable="false", consumer_timeout_ms="5000")
    (stream,) = connector.create_message_streams({"t": 1})["t"]
    messages = [next(stream) for _ in range(3)]
    connector.commit_offsets()
    assert committed(zk, "t") == {"0-0": messages[-1].next_offset}
    next(stream)
    connector.shutdown()  # autocommit.enable=false: shutdown does not commit
    assert committed(zk, "t") == {"0-0": messages[-1].next_offset}


def test_compressed_wrappers_report_0_7_offsets_and_a_commit_inside_one_replays_it(
        broker_factory, zk_connect, zk, connector_factory):
    (broker,) = cluster(broker_factory, zk_connect, broker_ids=(0,), partitions=1)
    plain = encode_message_set([b"x"])
    wrapper = encode_compressed_message_set([b"a", b"b", b"c"], GZIP)
    with SyncProducer("127.0.0.1", broker.port) as producer:
        producer.send("t", 0, plain)
        producer.send("t", 0, wrapper)
    end = len(plain) + len(wrapper)
    connector = connector_factory("a", autocommit_enable="false", consumer_timeout_ms="5000")
    (stream,) = connector.create_message_streams({"t": 1})["t"]
    got = [(m.payload, m.offset, m.next_offset) for m in (next(stream) for _ in range(3))]
    # Spec 3.5: inner messages before the last report the wrapper's own start.
    assert got == [(b"x", 0, len(plain)), (b"a", len(plain), len(plain)), (b"b", len(plain), len(plain))]
    connector.commit_offsets()
    assert committed(zk, "t") == {"0-0": len(plain)}
    connector.shutdown()
    successor = connector_factory("b", autocommit_enable="false", consumer_timeout_ms="5000")
    (stream,) = successor.create_message_streams({"t": 1})["t"]
    replay = [(m.payload, m.offset, m.next_offset) for m in (next(stream) for _ in range(3))]
    assert replay == [(b"a", len(plain), len(plain)), (b"b", len(plain), len(plain)), (b"c", len(plain), end)]


def test_a_message_larger_than_fetch_size_raises_in_the_iterator(broker_factory, zk_connect, zk, connector_factory):
    (broker,) = cluster(broker_factory, zk_connect, broker_ids=(0,), partitions=1)
    send(broker, "t", 0, ["y" * 500])
    connector = connector_factory("a", fetch_size="100", consumer_timeout_ms="5000")
    (stream,) = connector.create_message_streams({"t": 1})["t"]
    with pytest.raises(InvalidFetchSize, match="raise fetch.size"):
        next(stream)


def test_consumer_timeout_raises_and_the_stream_stays_usable(broker_factory, zk_connect, zk, connector_factory):
    (broker,) = cluster(broker_factory, zk_connect, broker_ids=(0,), partitions=1)
    connector = connector_factory("a", consumer_timeout_ms="300")
    (stream,) = connector.create_message_streams({"t": 1})["t"]
    started = time.monotonic()
    with pytest.raises(ConsumerTimeout):
        next(stream)
    assert 0.25 <= time.monotonic() - started < 5
    send(broker, "t", 0, ["late"])

    def receive():
        try:
            return next(stream)
        except ConsumerTimeout:
            return None
    assert wait_for(receive, "the message produced after a timeout").payload == b"late"


def test_autooffset_reset_largest_skips_old_messages_and_smallest_reads_them(
        broker_factory, zk_connect, zk, connector_factory):
    (broker,) = cluster(broker_factory, zk_connect, broker_ids=(0,), partitions=1)
    old = send(broker, "t", 0, [f"old-{i}" for i in range(5)])
    wait_for(lambda: latest_offset(broker, "t", 0) > 0, "the old messages to be flushed")
    largest = connector_factory("l", group="largest", autooffset_reset="largest", consumer_timeout_ms="5000")
    smallest = connector_factory("s", group="smallest", autooffset_reset="smallest", consumer_timeout_ms="5000")
    (from_largest,) = largest.create_message_streams({"t": 1})["t"]
    (from_smallest,) = smallest.create_message_streams({"t": 1})["t"]
    new = send(broker, "t", 0, [f"new-{i}" for i in range(3)])
    assert [next(from_largest).payload.decode() for _ in new] == new
    assert [next(from_smallest).payload.decode() for _ in old + new] == old + new


def test_offset_out_of_range_resets_per_autooffset_and_writes_the_offset(
        broker_factory, zk_connect, zk, connector_factory):
    (broker,) = cluster(broker_factory, zk_connect, broker_ids=(0,), partitions=1)
    sent = send(broker, "t", 0, [f"m-{i}" for i in range(4)])
    zk.create(paths.offset_path(GROUP, "t", "0-0"), b"1000000", makepath=True)
    connector = connector_factory("a", autooffset_reset="smallest", consumer_timeout_ms="5000",
                                  autocommit_enable="false")
    (stream,) = connector.create_message_streams({"t": 1})["t"]
    assert [next(stream).payload.decode() for _ in sent] == sent
    # The fetcher wrote the reset offset (the earliest, 0) as 0.7 does; nothing else committed.
    assert committed(zk, "t") == {"0-0": 0}


def test_rebalance_fails_after_its_retries_while_a_partition_stays_owned_then_recovers(
        broker_factory, zk_connect, zk, connector_factory):
    (broker,) = cluster(broker_factory, zk_connect, broker_ids=(0,), partitions=1)
    send(broker, "t", 0, ["m"])
    wait_registered(zk, "t", (0,))
    squatter = zk.create(paths.owner_path(GROUP, "t", "0-0"), b"g_other-0", ephemeral=True, makepath=True)
    connector = connector_factory("a", rebalance_retries_max="3", rebalance_backoff_ms="200",
                                  consumer_timeout_ms="5000")
    started = time.monotonic()
    with pytest.raises(ConsumerRebalanceFailed, match="g_a can't rebalance after 3 retries"):
        connector.create_message_streams({"t": 1})
    assert time.monotonic() - started >= 0.4  # 3 attempts, 2 backoffs
    # 0.7 would wait for the next ZooKeeper event; this consumer keeps trying.
    zk.delete(squatter)
    wait_for(lambda: owners(zk, "t") == {"0-0": "g_a-0"}, "the freed partition to be taken")


# -- wildcard subscriptions ----------------------------------------------------------------------

def test_whitelist_consumer_picks_up_a_topic_created_after_it_started(
        broker_factory, zk_connect, zk, connector_factory, collectors):
    (broker,) = cluster(broker_factory, zk_connect, broker_ids=(0,), partitions=2)
    first = fill([broker], "wl-a", 2, 5, "a")
    other = fill([broker], "other", 2, 5, "o")
    wait_registered(zk, "wl-a", (0,))
    wait_registered(zk, "other", (0,))
    white = connector_factory("w", group="white")
    black = connector_factory("b", group="black")
    (white_stream,) = white.create_message_streams_by_filter(Whitelist("wl-.*"), 1)
    (black_stream,) = black.create_message_streams_by_filter(Blacklist("other"), 1)
    assert zk.get(paths.consumer_id_path("white", "white_w"))[0] == b"*1*wl-.*"
    assert zk.get(paths.consumer_id_path("black", "black_b"))[0] == b"!1!other"
    whites, blacks = collectors(white_stream), collectors(black_stream)
    wait_for(consumed_all([whites], first), "the whitelisted topic")
    wait_for(consumed_all([blacks], first), "the topic the blacklist allows")
    later = fill([broker], "wl-b", 2, 5, "b")  # a topic that did not exist when they started
    wait_for(consumed_all([whites], later), "the new whitelisted topic")
    wait_for(consumed_all([blacks], later), "the new topic the blacklist allows")
    assert owners(zk, "wl-b", group="white") == {"0-0": "white_w-0", "0-1": "white_w-0"}
    assert not whites.payloads() & set(other)
    assert not blacks.payloads() & set(other)
    assert {m.topic for m in whites.snapshot()} == {"wl-a", "wl-b"}


def test_a_member_filter_python_cannot_compile_counts_for_nothing_instead_of_failing_the_rebalance(
        broker_factory, zk_connect, zk, connector_factory, collectors):
    (broker,) = cluster(broker_factory, zk_connect, broker_ids=(0,), partitions=2)
    sent = fill([broker], "t", 2, 3, "t")
    wait_registered(zk, "t", (0,))
    # What a Java member with Whitelist("\\p{Alpha}+") registers: valid for Java, not for re.
    zk.create(paths.consumer_id_path(GROUP, "g_java"), b"*1*\\p{Alpha}+", ephemeral=True, makepath=True)
    connector = connector_factory("a", rebalance_retries_max="3")
    (stream,) = connector.create_message_streams({"t": 1})["t"]  # raised ConsumerRebalanceFailed before
    assert owners(zk, "t") == {"0-0": "g_a-0", "0-1": "g_a-0"}
    wait_for(consumed_all([collectors(stream)], sent), "every message")


# -- failures: a killed member, an expired session, a broker joining ------------------------------

def test_killed_consumer_partitions_move_to_the_others_from_its_last_committed_offsets(
        broker_factory, zk_connect, zk, connector_factory, collectors, tmp_path):
    brokers = cluster(broker_factory, zk_connect)
    sent = fill(brokers, "t", 4, 40, "m")
    wait_registered(zk, "t", (0, 1))
    stdout_path = tmp_path / "member.out"
    with stdout_path.open("wb") as stdout:
        member = subprocess.Popen(
            [sys.executable, str(HERE / "consumer_group_member.py"), zk_connect, GROUP, "t", "s",
             "--delay-ms", "20", "--commit-every", "5", "--session-timeout-ms", "1000",
             "--fetch-size", "200"],  # ~10 messages a chunk: its two partitions interleave
            stdout=stdout, stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        def events():
            lines = stdout_path.read_text().splitlines()
            return [json.loads(line) for line in lines if line.endswith("}")]
        wait_for(lambda: any(e["event"] == "ready" for e in events()), "the member process to start")
        a, b = connector_factory("a"), connector_factory("b")
        first, second = (collectors(c.create_message_streams({"t": 1})["t"][0]) for c in (a, b))
        # g_a-0, g_b-0, g_s-0: s takes the last range, 1-2 and 1-3.
        split = {"0-0": "g_a-0", "0-1": "g_a-0", "0-2": "g_a-0", "0-3": "g_b-0", "1-0": "g_b-0",
                 "1-1": "g_b-0", "1-2": "g_s-0", "1-3": "g_s-0"}
        wait_for(lambda: owners(zk, "t") == split, "the three-way split")
        mine = ("1-2", "1-3")
        wait_for(lambda: any(e["event"] == "commit" and all(p in e["consumed"] for p in mine) for e in events()),
                 "the member to commit progress in both its partitions")
        member.send_signal(signal.SIGKILL)
        member.wait(10)
    finally:
        if member.poll() is None:
            member.kill()
            member.wait()
    printed = [e for e in events() if e["event"] == "message"]
    left = committed(zk, "t")  # the dead member's last commits: nobody else writes them yet
    for partition in mine:
        mine_printed = [e for e in printed if e["partition"] == partition]
        assert len(mine_printed) < 40, "killed mid-stream"
    # The others take over once its session times out, and resume where it committed.
    others = {"0-0": "g_a-0", "0-1": "g_a-0", "0-2": "g_a-0", "0-3": "g_a-0",
              "1-0": "g_b-0", "1-1": "g_b-0", "1-2": "g_b-0", "1-3": "g_b-0"}
    wait_for(lambda: owners(zk, "t") == others, "the others to own everything", timeout_s=30)
    more = fill(brokers, "t", 4, 5, "more")
    extra = {e["payload"] for e in printed}
    wait_for(consumed_all([first, second], sent + more, extra=extra), "every message, at least once")
    taken_over = [m for m in second.snapshot() if m.partition in mine]
    for partition in mine:
        chain = [m for m in taken_over if m.partition == partition]
        start = left.get(partition, 0)
        assert chain[0].offset == start, f"{partition} resumed at {chain[0].offset}, committed {start}"
        for before, after in zip(chain, chain[1:]):
            assert after.offset == before.next_offset, f"{partition} skipped from {before.next_offset}"
        # Nothing before the commit point is consumed again, nothing after it is lost.
        expected = {f"m-1-{partition[2:]}-{i}" for i in range(40)} | {f"more-1-{partition[2:]}-{i}" for i in range(5)}
        assert expected <= {m.payload.decode() for m in chain} | {e["payload"] for e in printed
                                                                  if e["partition"] == partition}


def test_session_expiry_forgets_partitions_registers_again_and_rebalances(
        broker_factory, zk_connect, zookeeper, zk, connector_factory, collectors):
    (broker,) = cluster(broker_factory, zk_connect, broker_ids=(0,), partitions=2)
    sent = fill([broker], "t", 2, 5, "m")
    connector = connector_factory("a")
    collector = collectors(connector.create_message_streams({"t": 1})["t"][0])
    wait_for(lambda: owners(zk, "t") == {"0-0": "g_a-0", "0-1": "g_a-0"}, "ownership")
    wait_for(consumed_all([collector], sent), "the first messages")
    old_session = zk.exists(paths.consumer_id_path(GROUP, "g_a")).ephemeralOwner
    # Expire the connector's session from outside: a second client attached to the same session
    # closes it (white box: the session id and password are the registry's).
    session_id, password = connector._registry._client.client_id
    intruder = KazooClient(hosts=zk_connect, client_id=(session_id, password))
    intruder.start(10)
    intruder.stop()
    intruder.close()

    def registered_again():
        stat = zk.exists(paths.consumer_id_path(GROUP, "g_a"))
        return stat is not None and stat.ephemeralOwner not in (0, old_session)
    wait_for(registered_again, "the consumer to register in a new session")
    wait_for(lambda: owners(zk, "t") == {"0-0": "g_a-0", "0-1": "g_a-0"}, "ownership in the new session")
    for partition in ("0-0", "0-1"):
        stat = zk.exists(paths.owner_path(GROUP, "t", partition))
        assert stat.ephemeralOwner not in (0, old_session)
    later = fill([broker], "t", 2, 5, "later")
    wait_for(consumed_all([collector], later), "messages after the expiry")


def test_broker_joining_mid_run_is_picked_up_by_the_zk_producer_and_the_consumers(
        broker_factory, zk_connect, zk, connector_factory, collectors):
    (first_broker,) = cluster(broker_factory, zk_connect, broker_ids=(0,))
    producer_config = ProducerConfig.from_properties({"zk.connect": zk_connect, "zk.sessiontimeout.ms": "4000"})
    info = ZkBrokerPartitionInfo.from_config(producer_config)
    producer = Producer(producer_config, broker_partition_info=info)
    try:
        # A new topic: every live broker's partition 0, then what broker 0 registers.
        assert info.partitions("t") == [(0, 0)]
        producer.send("t", [b"first"])
        wait_for(lambda: info.partitions("t") == [(0, 0), (0, 1), (0, 2), (0, 3)], "broker 0's partitions")
        a, b = connector_factory("a"), connector_factory("b")
        group = [collectors(c.create_message_streams({"t": 1})["t"][0]) for c in (a, b)]
        sent = ["first"]
        for i in range(40):
            producer.send("t", [f"before-{i}".encode()], key=f"k{i}")
            sent.append(f"before-{i}")
        wait_for(consumed_all(group, sent), "messages before the new broker")

        second_broker = broker_factory("broker1", broker_id=1, zk_connect=zk_connect,
                                       properties={"num.partitions": "4"})
        wait_for(lambda: _known(info, 1), "the producer to see broker 1")
        # 0.7: a broker is used for an existing topic once it holds the topic. A message
        # produced to it directly creates it there (0.7's way of spreading a topic).
        assert [p for p in info.partitions("t") if p[0] == 1] == []
        sent += send(second_broker, "t", 0, ["direct"])
        wait_for(lambda: info.partitions("t") == [(b, p) for b in (0, 1) for p in range(4)],
                 "the producer to see broker 1's partitions")
        wait_for(lambda: set(owners(zk, "t")) == {f"{b}-{p}" for b in (0, 1) for p in range(4)},
                 "the consumers to own broker 1's partitions")
        for i in range(80):
            producer.send("t", [f"after-{i}".encode()], key=f"k{i}")
            sent.append(f"after-{i}")
        wait_for(consumed_all(group, sent), "every message")
        from_new_broker = {m.payload.decode() for c in group for m in c.snapshot() if m.partition.startswith("1-")}
        assert from_new_broker & {f"after-{i}" for i in range(80)}, "the producer sent to broker 1"
        # A topic first produced after broker 1 joined starts on both brokers.
        assert info.partitions("fresh") == [(0, 0), (1, 0)]
    finally:
        producer.close()
        info.close()


def _known(info: ZkBrokerPartitionInfo, broker_id: int) -> bool:
    try:
        info.broker(broker_id)
        return True
    except KeyError:
        return False
