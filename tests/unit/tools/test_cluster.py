"""The arguments that name a cluster: --zk, --broker-list, --topic, --partition, and the
partition probe that --broker-list needs (against a fake consumer)."""

import argparse

import pytest

from twisted_broker.client.fetched_message_set import FetchedMessageSet
from twisted_broker.tools import cluster
from twisted_broker.tools.errors import CommandError


@pytest.mark.parametrize("text", ["h:2181", "127.0.0.1:2181,b:2182", "h:1/chroot", "h:1,i:2/a/b"])
def test_zk_connect_accepts_hosts_and_a_chroot(text):
    assert cluster.zk_connect(text) == text


@pytest.mark.parametrize("text", ["", "h", "h:", "h:port", "h:1,", "/chroot", "h:1 /x", "h:123456"])
def test_zk_connect_refuses_anything_else(text):
    with pytest.raises(argparse.ArgumentTypeError):
        cluster.zk_connect(text)


def test_broker_list_parses_into_addresses_and_back():
    assert cluster.broker_list("0:a:1,2:b:3") == {0: ("a", 1), 2: ("b", 3)}
    assert cluster.broker_list_text(cluster.broker_list(" 0:a:1, 2:b:3")) == "0:a:1,2:b:3"
    with pytest.raises(argparse.ArgumentTypeError, match="not id:host:port"):
        cluster.broker_list("0:a")


@pytest.mark.parametrize("text, choice", [
    ("3", cluster.PartitionChoice(3)),
    ("1-3", cluster.PartitionChoice(3, 1)),
    ("10-0", cluster.PartitionChoice(0, 10)),
])
def test_partition_is_p_or_broker_p(text, choice):
    assert cluster.partition_choice(text) == choice


@pytest.mark.parametrize("text", ["", "a", "1-", "-1", "1-2-3", "x-1"])
def test_partition_refuses_other_forms(text):
    with pytest.raises(argparse.ArgumentTypeError):
        cluster.partition_choice(text)


def test_a_partition_choice_matches_on_any_or_one_broker():
    assert cluster.PartitionChoice(1).matches(7, 1)
    assert not cluster.PartitionChoice(1).matches(7, 2)
    assert cluster.PartitionChoice(1, 7).matches(7, 1)
    assert not cluster.PartitionChoice(1, 6).matches(7, 1)


def test_topic_must_be_a_name_a_broker_accepts():
    assert cluster.topic("my-topic.1") == "my-topic.1"
    for bad in ("", "..", "a/b", "x" * 300):
        with pytest.raises(argparse.ArgumentTypeError):
            cluster.topic(bad)


@pytest.mark.parametrize("parse, text, value", [
    (cluster.positive_int, "1", 1), (cluster.non_negative_int, "0", 0)])
def test_whole_number_arguments(parse, text, value):
    assert parse(text) == value
    for bad in ("x", "1.5", "-1"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(bad)
    with pytest.raises(argparse.ArgumentTypeError):
        cluster.positive_int("0")


def parser(**options) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    cluster.add_cluster_arguments(parser, **options)
    return parser


@pytest.mark.parametrize("argv, options", [
    (["--zk", "h:1", "--broker-list", "0:h:1"], {}),
    (["--broker-list", "0:h:1"], {"allow_broker_list": False}),
])
def test_at_most_one_of_zk_and_broker_list(argv, options, capsys):
    assert parser().parse_args(["--zk", "h:1"]).broker_list is None
    assert parser().parse_args(["--broker-list", "0:h:1"]).broker_list == {0: ("h", 1)}
    with pytest.raises(SystemExit) as exit:
        parser(**options).parse_args(argv)
    assert exit.value.code == 2


class FakeConsumer:
    """Answers MultiFetch like a broker holding ``partitions`` partitions of every topic."""

    host, port = "h", 1

    def __init__(self, partitions: int, error_code: int = 0) -> None:
        self.partitions, self.error_code = partitions, error_code
        self.requests = []

    def multifetch(self, requests):
        self.requests.append(requests)
        return [FetchedMessageSet(r, self.error_code if r.partition < self.partitions else 3, b"")
                for r in requests]


@pytest.mark.parametrize("partitions", [1, 2, 63, 64, 65, 200])
def test_the_probe_finds_a_brokers_partition_count(partitions):
    consumer = FakeConsumer(partitions)
    assert cluster.probe_partition_count(consumer, "t") == partitions
    assert len(consumer.requests) == partitions // cluster.PROBE_BATCH + 1
    assert all(r.max_size == 0 for batch in consumer.requests for r in batch)  # no data is read


def test_the_probe_counts_out_of_range_partitions_as_existing_and_refuses_bad_names():
    assert cluster.probe_partition_count(FakeConsumer(3, error_code=1), "t") == 3
    with pytest.raises(CommandError, match="refuses topic t"):
        cluster.probe_partition_count(FakeConsumer(3, error_code=-1), "t")
    with pytest.raises(CommandError, match="over 128 partitions"):
        cluster.probe_partition_count(FakeConsumer(1000), "t", limit=128)


class FakeView:
    zk_connect = "zk:1/c"

    def __init__(self, counts, brokers):
        self._counts, self._brokers = counts, brokers

    def topic_brokers(self, topic):
        return self._counts

    def brokers(self):
        return self._brokers


class Info:
    def __init__(self, host, port):
        self.host, self.port = host, port


def test_registered_partitions_skip_brokers_that_are_gone():
    view = FakeView({0: 2, 1: 1}, {0: Info("a", 1)})
    assert cluster.registered_partitions(view, "t") == [
        cluster.BrokerPartition(0, 0, "a", 1), cluster.BrokerPartition(0, 1, "a", 1)]
    assert cluster.BrokerPartition(0, 1, "a", 1).name == "0-1"
    with pytest.raises(CommandError, match="not registered"):
        cluster.registered_partitions(FakeView({}, {}), "t")
    with pytest.raises(CommandError, match="no live broker holds topic t"):
        cluster.registered_partitions(FakeView({1: 1}, {0: Info("a", 1)}), "t")
