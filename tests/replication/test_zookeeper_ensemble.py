"""Replication on a real three-node ZooKeeper ensemble that loses a node: three brokers
connected to every member, acks=all writes and consumers running; the ensemble's leader is
killed with SIGKILL. Writes go on (after at most a pause while ZooKeeper elects), nothing
acknowledged or seen is lost, a broker failover still works on the two remaining members, and
the replicas end byte-identical."""

import time

import pytest

from tests.support.faults.ensemble import Ensemble
from tests.support.faults.traffic import LeaderProducer, Leaders, check_history, group_of
from tests.support.reliability import record, record_durations
from tests.support.replicated_cluster import FAST, ReplicatedCluster, Wire, all_in_sync, segment_bytes
from tests.support.zookeeper import new_chroot

SESSION_TIMEOUT_S = 2.0
TOPIC = "ensemble"
PARTITIONS = (0, 1)


@pytest.fixture
def ensemble_cluster(tmp_path):
    ensemble = Ensemble(tmp_path / "zookeeper")
    try:
        ensemble.start()
        cluster = ReplicatedCluster(tmp_path, new_chroot(ensemble), dict(FAST))
        try:
            for broker_id in range(3):
                cluster.start(broker_id)
            yield ensemble, cluster
        finally:
            cluster.stop_all()
    finally:
        ensemble.stop()


def longest_pause(acks, start: float, end: float) -> float:
    times = [start, *sorted(a.at for a in acks if start < a.at < end), end]
    return max(b - a for a, b in zip(times, times[1:]))


def test_replication_goes_on_when_the_zookeeper_leader_is_killed(ensemble_cluster, request):
    ensemble, cluster = ensemble_cluster
    cluster.create(TOPIC)
    leaders = Leaders(cluster.bootstrap, TOPIC)
    producers = {p: LeaderProducer(leaders, p, timeout_ms=1000) for p in PARTITIONS}
    consumers = group_of(leaders, list(PARTITIONS), members=2)
    loops = [*producers.values(), *consumers]
    for loop in loops:
        loop.start()
    history = None
    try:
        cluster.wait_for(lambda: all(p.acked for p in producers.values()), what="the first acknowledgements")
        zk_leader = ensemble.leader()
        ensemble.servers[zk_leader].kill()
        killed_at = time.monotonic()
        ensemble.wait_for_quorum(timeout_s=20)
        cluster.wait_for(lambda: all(p.first_ack_after(killed_at + 3) for p in producers.values()), timeout_s=30,
                         what="writes to go on after the ZooKeeper leader's death")
        pauses = [longest_pause(p.acked, killed_at, killed_at + 3) for p in producers.values()]

        # the controller still works on two members: a broker failover
        victim = cluster.leaders(TOPIC)[0]
        cluster.brokers[victim].kill()
        stopped_at = time.monotonic()
        cluster.wait_for(lambda: producers[0].first_ack_after(stopped_at, not_by=victim), timeout_s=30,
                         what="a new partition leader")
        failover = producers[0].first_ack_after(stopped_at, not_by=victim) - stopped_at
        cluster.start(victim)
        cluster.wait_for(lambda: all_in_sync(cluster, TOPIC), timeout_s=30, what="every replica back in sync")
        for producer in producers.values():
            producer.stop()
        final = {}
        for p, leader in cluster.leaders(TOPIC).items():
            with Wire(cluster.brokers[leader]) as wire:
                final[p] = wire.read_all(TOPIC, p)
        cluster.wait_for(lambda: all(c.caught_up({p: e[-1][0] + 1 for p, e in final.items()}) for c in consumers),
                         what="the consumers to read everything")
        for consumer in consumers:
            consumer.stop()
        history = check_history(final, [a for p in producers.values() for a in p.acked], consumers)
    finally:
        for loop in loops:
            if loop.is_alive():
                loop.stop()
    record(request, faults_injected=2, messages_checked=history.checked, messages_lost=len(history.lost))
    record_durations(request, "zk leader kill pause", pauses)
    record_durations(request, "failover kill -9", [failover])
    assert history.lost == [], "\n".join(history.lost[:20])
    # a pause is at most the ZooKeeper election plus the session timeout (sessions may expire)
    assert max(pauses) <= SESSION_TIMEOUT_S + 2, f"writes paused {max(pauses):.2f} s"
    assert failover <= SESSION_TIMEOUT_S + 2, f"failover took {failover:.2f} s"
    for p in PARTITIONS:
        cluster.wait_for(lambda: len({segment_bytes(b, TOPIC, p) for b in cluster.brokers.values()}) == 1,
                         what=f"partition {p}'s copies to be identical")
