"""The controller killed in the middle of a failover, on three real brokers: the leader of a
partition is killed, then the controller (another broker) before it can finish electing; the
third broker becomes controller, finishes the failover, and nothing committed is lost."""

import time

import pytest

from tests.support.reliability import record, record_durations
from tests.support.replicated_cluster import Wire, committed, produce_all, segment_bytes

SESSION_TIMEOUT_S = 2.0


@pytest.mark.parametrize("controller_killed_after_s", [
    SESSION_TIMEOUT_S - 0.5,  # before the leader's session expires: the old controller never acts
    SESSION_TIMEOUT_S + 0.2,  # as the expiry reaches the controller: mid-election at the latest
])
def test_a_controller_killed_mid_failover_is_replaced_and_the_failover_finishes(replicated_cluster, request,
                                                                                 controller_killed_after_s):
    cluster = replicated_cluster
    cluster.properties["num.partitions"] = "3"  # three partitions: their preferred leaders differ
    for broker_id in range(3):
        cluster.start(broker_id)
    metadata = cluster.create("mid")
    cluster.wait_for(lambda: cluster.controller() is not None, what="a controller")
    controller = cluster.controller()
    partition = next(p for p in metadata.partitions if p.leader != controller)
    leader = partition.leader
    [survivor] = {0, 1, 2} - {leader, controller}
    before = [f"before{i}".encode() for i in range(30)]
    produce_all(cluster, "mid", partition.partition, before)

    cluster.brokers[leader].kill()
    killed_at = time.monotonic()
    time.sleep(max(0.0, killed_at + controller_killed_after_s - time.monotonic()))
    cluster.brokers[controller].kill()
    controller_killed_at = time.monotonic()

    after = [f"after{i}".encode() for i in range(30)]
    served_at = produce_all(cluster, "mid", partition.partition, after, timeout_s=30, via=survivor)
    took = served_at - controller_killed_at
    record(request, faults_injected=2, messages_checked=len(before) + len(after))
    record_durations(request, "failover ctl kill", [took])
    assert took <= SESSION_TIMEOUT_S + 2, f"writes resumed {took:.2f} s after the controller was killed"
    # the killed controller's node lasts until its session expires; the survivor takes over then
    cluster.wait_for(lambda: cluster.controller() == survivor, timeout_s=SESSION_TIMEOUT_S + 2,
                     what="the survivor to become controller")
    state = cluster.metadata("mid", via=survivor).topics[0].partitions[partition.partition]
    assert state.leader == survivor and state.leader_epoch > partition.leader_epoch
    assert committed(cluster, "mid", partition.partition, survivor) == before + after
    # every partition has a leader again (the new controller moves the dead controller's
    # partitions too, which on a loaded machine can land a moment after the one written to
    # above), and the two killed brokers rejoin byte-identical
    cluster.wait_for(lambda: all(p.leader == survivor
                                 for p in cluster.metadata("mid", via=survivor).topics[0].partitions),
                     timeout_s=SESSION_TIMEOUT_S + 2, what="the survivor to lead every partition")
    cluster.start(leader)
    cluster.start(controller)
    cluster.create("mid")
    for p in metadata.partitions:
        cluster.wait_for(lambda: len({segment_bytes(b, "mid", p.partition) for b in cluster.brokers.values()}) == 1,
                         what=f"partition {p.partition}'s copies to be identical")
    with Wire(cluster.brokers[leader]) as wire:
        assert [m for _, m in wire.read_all("mid", partition.partition)] == before + after
