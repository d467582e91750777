"""``twisted-broker offsets`` (GetOffsetShell) and ``topics`` as real processes: offsets match
the broker's segment files, and the listing matches what two brokers registered."""

from __future__ import annotations

import time

from tests.support.cli import assert_one_line_error, broker_list, run_cli
from tests.support.polling import wait_for, wait_for_end

ENTRY = 4 + 6 + 1  # a one-byte message: length, magic-1 header, payload


def offsets(*args: object) -> list[str]:
    result = run_cli("offsets", *args)
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode().splitlines()


def test_offsets_are_segment_starts_and_the_flushed_end(broker_factory):
    broker = broker_factory(properties={"log.file.size": "100"})
    # 20 requests of one message each: a segment rolls once it holds more than 100 bytes.
    produced = run_cli("produce", "--broker-list", broker_list(broker), "--topic", "segs", "--batch-size", 1,
                       input=b"x\n" * 20)
    assert produced.returncode == 0, produced.stderr.decode()
    with broker.connect() as client:
        end = wait_for_end(client, "segs", 20 * ENTRY)
    starts = sorted(int(path.name[:-len(".kafka")]) for path in (broker.log_dir / "segs-0").glob("*.kafka"))
    assert len(starts) > 1 and starts[0] == 0
    cluster = ["--broker-list", broker_list(broker), "--topic", "segs"]
    assert offsets(*cluster) == [f"segs:0-0:{end}"]
    assert offsets(*cluster, "--time", "earliest") == ["segs:0-0:0"]
    newest_first = [end, *reversed(starts)]
    assert offsets(*cluster, "--time", "latest", "--max", 100) == [f"segs:0-0:{','.join(map(str, newest_first))}"]
    assert offsets(*cluster, "--max", 2, "--partition", "0-0") == [f"segs:0-0:{end},{starts[-1]}"]
    assert offsets(*cluster, "--time", 0) == ["segs:0-0:"]  # every segment was written after 1970
    future_ms = int(time.time() * 1000) + 3_600_000
    assert offsets(*cluster, "--time", future_ms, "--max", 100) == offsets(*cluster, "--max", 100)


def test_offsets_by_zookeeper_cover_every_broker_and_partition(broker_factory, zk_connect):
    first = broker_factory("first", broker_id=0, zk_connect=zk_connect, properties={"num.partitions": "2"})
    second = broker_factory("second", broker_id=1, zk_connect=zk_connect)
    for broker in (first, second):
        run_cli("produce", "--broker-list", broker_list(broker), "--topic", "both", input=b"x\n")
    wait_for(lambda: len(offsets("--zk", zk_connect, "--topic", "both")) == 3, "both brokers to register")
    with second.connect() as client:
        wait_for_end(client, "both", ENTRY)
    found = dict(line.rsplit(":", 1) for line in offsets("--zk", zk_connect, "--topic", "both"))
    assert set(found) == {"both:0-0", "both:0-1", "both:1-0"}
    assert found["both:1-0"] == str(ENTRY)
    assert sorted(found.values()) == ["0", str(ENTRY), str(ENTRY)]  # one of 0-0, 0-1 got the message


def test_offsets_of_a_missing_partition_fail_in_one_line(broker):
    result = run_cli("offsets", "--broker-list", broker_list(broker), "--topic", "one", "--partition", 5)
    assert_one_line_error(result, 1, "topic one has no partition 5")
    result = run_cli("offsets", "--broker-list", broker_list(broker), "--topic", "one", "--time", "soon")
    assert_one_line_error(result, 2, "is not latest, earliest or a time in ms")


def test_topics_lists_each_brokers_partitions(broker_factory, zk_connect):
    first = broker_factory("first", broker_id=0, zk_connect=zk_connect,
                           properties={"num.partitions": "2", "topic.partition.count.map": "beta:5"})
    second = broker_factory("second", broker_id=1, zk_connect=zk_connect)
    for broker, topic in ((first, "alpha"), (second, "alpha"), (first, "beta")):
        produced = run_cli("produce", "--broker-list", broker_list(broker), "--topic", topic, input=b"x\n")
        assert produced.returncode == 0, produced.stderr.decode()
    expected = [
        ["TOPIC", "BROKER", "ADDRESS", "PARTITIONS"],
        ["alpha", "0", f"127.0.0.1:{first.port}", "2"],
        ["alpha", "1", f"127.0.0.1:{second.port}", "1"],
        ["beta", "0", f"127.0.0.1:{first.port}", "5"],
    ]

    def listing():
        result = run_cli("topics", "--zk", zk_connect)
        assert result.returncode == 0, result.stderr.decode()
        return [line.split() for line in result.stdout.decode().splitlines()]

    wait_for(lambda: listing() == expected, "the registrations")
    only_beta = run_cli("topics", "--zk", zk_connect, "--topic", "beta").stdout.decode().splitlines()
    assert [line.split() for line in only_beta] == [expected[0], expected[3]]
    assert_one_line_error(run_cli("topics", "--zk", zk_connect, "--topic", "gamma"), 1, "not registered")


def test_topics_without_zookeeper_is_a_one_line_error():
    assert_one_line_error(run_cli("topics", "--zk", "127.0.0.1:1"), 1, "no ZooKeeper answers at 127.0.0.1:1 (from --zk; ")
    assert_one_line_error(run_cli("topics", "--broker-list", "0:127.0.0.1:1"), 2, "unrecognized arguments: --broker-list")
