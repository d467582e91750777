"""The replication commands as real processes against three real brokers: ``topics --create``
places replicas as the controller then serves them, ``topics --describe --json`` prints one
object that matches ZooKeeper (leader null once a partition is offline), refused requests
change nothing, ``reassign-partitions`` copies a partition byte for byte before dropping the
old replica, and ``preferred-leader-election`` moves leadership back."""

from __future__ import annotations

import json


from kazoo.client import KazooClient

from tests.support.cli import assert_one_line_error, broker_list, run_cli
from tests.support.replicated_cluster import committed, produce_all, segment_bytes
from twisted_broker.registry import replication_paths as paths
from twisted_broker.registry.replication_paths import TopicAssignment


def describe(cluster, topic: str) -> dict:
    """``topics --describe --json``: exactly one JSON object on stdout, nothing on stderr."""
    result = run_cli("topics", "--zk", cluster.zk_connect, "--topic", topic, "--describe", "--json")
    assert result.returncode == 0, result.stderr.decode()
    assert result.stderr == b""
    out = result.stdout.decode()
    assert out.count("\n") == 1 and out.endswith("}\n"), out
    return json.loads(out)


def describe_when(cluster, topic: str, ok, what: str) -> dict:
    """``describe`` once ``ok`` holds for what it prints."""
    return cluster.wait_for(lambda: d if ok(d := describe(cluster, topic)) else None, what=what)


def create(cluster, topic: str, partitions: int, factor: int) -> None:
    result = run_cli("topics", "--zk", cluster.zk_connect, "--create", "--topic", topic,
                     "--partitions", partitions, "--replication-factor", factor)
    assert result.returncode == 0, result.stderr.decode()


def reassign(cluster, topic: str, partition: int, *replicas: int):
    return run_cli("reassign-partitions", "--zk", cluster.zk_connect, "--topic", topic, "--partition", partition,
                   "--replicas", ",".join(map(str, replicas)), "--timeout", 15)


def zk_nodes(cluster, *node_paths: str) -> dict[str, bytes | None]:
    """What ZooKeeper holds at each path (None: no node), read with a client of the test's own."""
    client = KazooClient(hosts=cluster.zk_connect)
    client.start(10)
    try:
        return {path: client.get(path)[0] if client.exists(path) else None for path in node_paths}
    finally:
        client.stop()
        client.close()


def listing(cluster, *args: str) -> list[list[str]]:
    result = run_cli("topics", "--zk", cluster.zk_connect, *args)
    assert result.returncode == 0, result.stderr.decode()
    return [line.split() for line in result.stdout.decode().splitlines()]


def test_describe_json_of_a_created_topic_matches_zookeeper(three_brokers):
    cluster = three_brokers
    create(cluster, "d", 2, 3)
    stored = TopicAssignment.decode(zk_nodes(cluster, paths.topic_path("d"))[paths.topic_path("d")])
    described = describe_when(cluster, "d", lambda d: all(len(p["isr"]) == 3 for p in d["partitions"]),
                              "every replica in the ISR")
    assert described["topic"] == "d"
    assert [p["partition"] for p in described["partitions"]] == [0, 1]
    for p in described["partitions"]:
        assert tuple(p["replicas"]) == stored.replicas[p["partition"]]
        assert sorted(p["replicas"]) == [0, 1, 2] and sorted(p["isr"]) == [0, 1, 2]
        assert p["leader"] in p["replicas"] and p["leader"] in p["isr"]
    # the brokers serve what the command wrote
    assert cluster.leaders("d") == {p["partition"]: p["leader"] for p in described["partitions"]}
    assert ["d", "2", "3"] in listing(cluster)
    table = listing(cluster, "--describe", "--topic", "d")
    assert table[0] == ["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR"]
    assert table[1][:4] == ["d", "0", str(described["partitions"][0]["leader"]),
                            ",".join(map(str, stored.replicas[0]))]


def test_a_partition_whose_only_replica_is_dead_has_leader_null(three_brokers):
    cluster = three_brokers
    create(cluster, "solo", 1, 1)
    [partition] = describe(cluster, "solo")["partitions"]
    [only] = partition["replicas"]
    assert partition["leader"] == only
    cluster.brokers[only].kill()
    offline = describe_when(cluster, "solo", lambda d: d["partitions"][0]["leader"] is None,
                            "the partition to go offline")
    assert offline["partitions"][0]["replicas"] == [only]
    assert listing(cluster, "--describe", "--topic", "solo")[1][2] == "none"


def test_refused_creations_are_one_line_and_write_nothing(replicated_cluster):
    cluster = replicated_cluster
    cluster.properties["default.replication.factor"] = "1"  # a produce then makes a 0.7 topic
    for broker_id in range(3):
        cluster.start(broker_id)
    produced = run_cli("produce", "--broker-list", broker_list(cluster.brokers[0]), "--topic", "old", input=b"x\n")
    assert produced.returncode == 0, produced.stderr.decode()
    create(cluster, "new", 1, 2)
    old_row = ["old", "0", f"127.0.0.1:{cluster.brokers[0].port}", cluster.properties["num.partitions"]]
    cluster.wait_for(lambda: old_row in listing(cluster), what="the 0.7 topic's registration")
    assert listing(cluster)[-2:] == [["TOPIC", "PARTITIONS", "REPLICATION-FACTOR"], ["new", "1", "2"]]
    before = zk_nodes(cluster, paths.topic_path("old"), paths.topic_path("new"), paths.topic_path("big"))

    def refused(status: int, fragment: str, *args: object) -> None:
        assert_one_line_error(run_cli("topics", "--zk", cluster.zk_connect, *args), status, fragment)

    refused(1, "replication factor 4 is larger than the 3 live broker(s)",
            "--create", "--topic", "big", "--partitions", 1, "--replication-factor", 4)
    refused(1, "old is a Kafka 0.7 topic", "--create", "--topic", "old", "--partitions", 1, "--replication-factor", 2)
    refused(1, "topic new exists already", "--create", "--topic", "new", "--partitions", 3, "--replication-factor", 1)
    refused(2, "--create needs --topic, --partitions and --replication-factor", "--create", "--topic", "x")
    refused(2, "old is a Kafka 0.7 topic: partitions are per broker (see topics --describe without --json)",
            "--describe", "--json", "--topic", "old")
    refused(1, "topic nothing is not registered", "--describe", "--topic", "nothing")
    assert zk_nodes(cluster, *before) == before
    assert before[paths.topic_path("old")] is None and before[paths.topic_path("big")] is None
    # a 0.7 topic described: what 0.7 has, partitions per broker
    assert listing(cluster, "--describe", "--topic", "old") == [
        ["TOPIC", "BROKER", "ADDRESS", "PARTITIONS"], old_row]


def test_a_reassignment_to_a_missing_broker_is_refused_and_writes_nothing(three_brokers):
    cluster = three_brokers
    create(cluster, "r", 1, 2)
    watched = (paths.topic_path("r"), paths.REASSIGN_PARTITIONS)
    before = zk_nodes(cluster, *watched)
    result = run_cli("reassign-partitions", "--zk", cluster.zk_connect, "--topic", "r", "--partition", 0,
                     "--replicas", "0,7")
    assert_one_line_error(result, 1, "r-0: broker(s) [7] are not registered in ZooKeeper (live: 0,1,2)")
    result = run_cli("reassign-partitions", "--zk", cluster.zk_connect, "--topic", "r", "--partition", 3,
                     "--replicas", "0,1")
    assert_one_line_error(result, 1, "topic r has no partition 3 (it has 0..0)")
    assert zk_nodes(cluster, *watched) == before and before[paths.REASSIGN_PARTITIONS] is None


# Guards 1f59199: a leader learns of the replicas a reassignment adds (before, it refused the
# new replica's fetches as an unknown follower's until its leadership changed).
def test_a_reassignment_copies_the_partition_then_drops_the_old_replica(three_brokers):
    cluster = three_brokers
    create(cluster, "mv", 1, 2)
    a, b = describe(cluster, "mv")["partitions"][0]["replicas"]
    [c] = {0, 1, 2} - {a, b}
    payloads = [f"m{i}".encode() * 50 for i in range(200)]
    produce_all(cluster, "mv", 0, payloads)
    result = reassign(cluster, "mv", 0, b, c)
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().splitlines()[1].split() == ["mv", "0", f"{b},{c}"]
    assert zk_nodes(cluster, paths.REASSIGN_PARTITIONS)[paths.REASSIGN_PARTITIONS] is None
    after = describe(cluster, "mv")["partitions"][0]
    assert after["replicas"] == [b, c] and after["leader"] in (b, c)
    assert segment_bytes(cluster.brokers[c], "mv", 0) == segment_bytes(cluster.brokers[b], "mv", 0) != b""
    assert committed(cluster, "mv", 0, c) == payloads
    dropped = cluster.brokers[a].log_dir / "mv-0"
    cluster.wait_for(lambda: not dropped.exists(), what=f"broker {a} to delete its copy")


def test_a_reassignment_that_drops_the_leader_moves_leadership_and_deletes_its_copy(three_brokers):
    cluster = three_brokers
    create(cluster, "shrink", 1, 3)
    a, b, c = describe_when(cluster, "shrink", lambda d: len(d["partitions"][0]["isr"]) == 3,
                            "every replica in the ISR")["partitions"][0]["replicas"]
    payloads = [f"s{i}".encode() for i in range(100)]
    produce_all(cluster, "shrink", 0, payloads)
    assert cluster.leaders("shrink") == {0: a}
    result = reassign(cluster, "shrink", 0, c, b)
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().splitlines()[1].split() == ["shrink", "0", f"{c},{b}"]
    after = describe(cluster, "shrink")["partitions"][0]
    assert after["replicas"] == [c, b] and after["leader"] in (b, c) and a not in after["isr"]
    assert committed(cluster, "shrink", 0, after["leader"]) == payloads
    dropped = cluster.brokers[a].log_dir / "shrink-0"
    cluster.wait_for(lambda: not dropped.exists(), what=f"broker {a} to delete its copy")


# Guards 1f59199: every new epoch the controller writes records the new leader's session (a
# preferred election once kept its predecessor's, and the preferred broker refused to lead).
def test_preferred_leader_election_moves_leadership_back_to_a_restarted_broker(three_brokers):
    cluster = three_brokers
    create(cluster, "pl", 1, 3)
    preferred = describe(cluster, "pl")["partitions"][0]["replicas"][0]
    assert describe(cluster, "pl")["partitions"][0]["leader"] == preferred
    cluster.brokers[preferred].stop()  # controlled shutdown: leadership moves to another replica
    describe_when(cluster, "pl", lambda d: d["partitions"][0]["leader"] not in (None, preferred), "another leader")
    cluster.start(preferred)
    describe_when(cluster, "pl", lambda d: preferred in d["partitions"][0]["isr"], "the restarted broker in the ISR")
    assert describe(cluster, "pl")["partitions"][0]["leader"] != preferred  # nothing moves it back by itself
    result = run_cli("preferred-leader-election", "--zk", cluster.zk_connect, "--topic", "pl", "--timeout", 20)
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().splitlines()[1].split() == ["pl", "0", str(preferred), str(preferred), "yes"]
    assert describe(cluster, "pl")["partitions"][0]["leader"] == preferred
    assert cluster.leaders("pl") == {0: preferred}
