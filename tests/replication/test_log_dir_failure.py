"""A leader whose disk fills gives its leadership up (issue 22, defect 4; Kafka's KIP-112).

Three real brokers, each with its log dir on a small tmpfs of its own; the disk under the
leader of a replicated partition is filled, and the next write fails there. The replica is given
up on that broker (its ephemeral /replication/offline_replicas node lists it), the controller
elects an in-sync follower, writes go on there with nothing acknowledged lost, and the broker
with the full disk stays up and keeps answering.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.support.replicated_cluster import Wire, committed, produce_all
from twisted_broker.registry import replication_paths

TOPIC = "disk"


@pytest.fixture
def small_disks(replicated_cluster):
    mounted = []
    for broker_id in range(3):
        logs = replicated_cluster.root / f"broker-{broker_id}" / "logs"
        logs.mkdir(parents=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(logs)], check=True)
        mounted.append(logs)
    yield mounted
    replicated_cluster.stop_all()
    for logs in mounted:
        subprocess.run(["umount", "-l", str(logs)], check=False)


def fill(directory) -> None:
    """Write a ballast file until the file system under ``directory`` is full."""
    with open(os.path.join(directory, "ballast"), "wb", buffering=0) as ballast:
        for size in (65536, 1):  # then what is left, a byte at a time
            try:
                while True:
                    ballast.write(b"\0" * size)
            except OSError:
                pass


def test_a_leader_whose_disk_fills_hands_its_leadership_to_an_in_sync_follower(replicated_cluster, small_disks):
    cluster = replicated_cluster
    cluster.properties.update({"log.file.size": str(1 << 20), "min.insync.replicas": "2"})
    cluster.start_all()
    cluster.create(TOPIC)
    before = [b"before-%d" % i for i in range(20)]
    produce_all(cluster, TOPIC, 0, before)
    old_leader = cluster.leaders(TOPIC)[0]

    fill(small_disks[old_leader])
    after = [b"after-%d-" % i + b"x" * 8192 for i in range(20)]  # more than the last page held
    produce_all(cluster, TOPIC, 0, after, timeout_s=30.0)

    new_leader = cluster.leaders(TOPIC)[0]
    assert new_leader not in (old_leader, -1)
    assert committed(cluster, TOPIC, 0, via=new_leader) == before + after
    # The broker with the full disk is up, answers, and is out of the partition's ISR.
    assert cluster.brokers[old_leader].process.poll() is None
    with Wire(cluster.brokers[old_leader]) as wire:
        [partition] = [p for p in wire.metadata(TOPIC).topics[0].partitions if p.partition == 0]
    assert partition.leader == new_leader and old_leader not in partition.isr
    client = cluster.zk_client()
    try:
        value, _ = client.get(replication_paths.offline_replicas_path(old_leader))
    finally:
        client.stop()
        client.close()
    listed = replication_paths.decode_partition_list(value, with_replicas=False)
    assert [(m.topic, m.partition) for m in listed] == [(TOPIC, 0)]
