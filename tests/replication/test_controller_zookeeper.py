"""The controller's writes against a real ZooKeeper (tests/replication/controller_harness.py: the
controller in the test's process, the brokers as registrations the test writes): fenced once a
newer controller exists, conditional on the topic node for reassignments, a quick restart seen
by its new czxid, a failed log listed under /replication/offline_replicas moving the
leadership, and one subscriber's exception stopping nothing else."""

from __future__ import annotations

import pytest_twisted

from tests.replication.controller_harness import (  # noqa: F401 (fixtures)
    controllers, create_topic, read_assignment, read_state, register, reregister, settle, wait_until, write_state,
    zk_proxy,
)
from twisted_broker.registry import replication_paths as paths
from twisted_broker.registry.replication_paths import PartitionMove, PartitionState
from twisted_broker.replication.cluster_state import Subscriber


def has_state(zk, topic, partition, predicate=lambda s: True):
    try:
        return predicate(read_state(zk, topic, partition)[0])
    except Exception:  # NoNodeError before the controller wrote it
        return False


@pytest_twisted.inlineCallbacks
def test_moving_two_partitions_of_one_topic_in_one_request_keeps_both_moves(zk, controllers):
    for broker_id in (1, 2):
        register(zk, broker_id)
    node = yield controllers(0)
    create_topic(zk, "moved", {0: (0, 1, 2), 1: (1, 2, 0)})
    yield wait_until(lambda: has_state(zk, "moved", 0) and has_state(zk, "moved", 1), "the first states")
    # Both narrow their partition: every target replica is in the ISR already, so each move
    # is done in one step, and each writes the topic's assignment.
    request = [PartitionMove("moved", 0, (0, 1)), PartitionMove("moved", 1, (1, 2))]
    zk.create(paths.REASSIGN_PARTITIONS, paths.encode_partition_list(request, with_replicas=True), makepath=True)
    yield wait_until(lambda: zk.exists(paths.REASSIGN_PARTITIONS) is None, "the request to be done")
    assert dict(read_assignment(zk, "moved").replicas) == {0: (0, 1), 1: (1, 2)}
    assert node.controller.active


@pytest_twisted.inlineCallbacks
def test_a_reassignment_that_moves_the_leader_narrows_the_replicas_in_the_transaction_of_the_new_state(zk, controllers):
    # Written one after the other, the new leader could take the dropped replica's fetch back
    # into the ISR before it saw the narrowed assignment (an ISR naming a broker that holds
    # no replica, seen by tests/replication/test_cli_replication.py in CI).
    for broker_id in (1, 2):
        register(zk, broker_id)
    yield controllers(0)
    create_topic(zk, "narrowed", {0: (0, 1, 2)})
    yield wait_until(lambda: has_state(zk, "narrowed", 0, lambda s: s.leader == 0 and len(s.isr) == 3),
                     "broker 0 leading with every replica in the ISR")
    request = [PartitionMove("narrowed", 0, (2, 1))]
    zk.create(paths.REASSIGN_PARTITIONS, paths.encode_partition_list(request, with_replicas=True), makepath=True)
    yield wait_until(lambda: zk.exists(paths.REASSIGN_PARTITIONS) is None, "the request to be done")
    _value, topic_stat = zk.get(paths.topic_path("narrowed"))
    state, state_stat = read_state(zk, "narrowed", 0)
    assert read_assignment(zk, "narrowed").replicas[0] == (2, 1)
    assert state.leader in (1, 2) and 0 not in state.isr
    assert topic_stat.mzxid == state_stat.mzxid, "the narrowed assignment and the new state in two transactions"


@pytest_twisted.inlineCallbacks
def test_a_controller_whose_epoch_was_taken_writes_nothing_more_at_its_epoch(zk, controllers):
    for broker_id in (1, 2):
        register(zk, broker_id)
    node = yield controllers(0)
    create_topic(zk, "fenced", {p: (1, 2, 0) for p in range(4)})
    yield wait_until(lambda: all(has_state(zk, "fenced", p, lambda s: s.leader == 1) for p in range(4)),
                     "broker 1 leading every partition")
    deposed_epoch = node.controller.epoch
    before = {p: read_state(zk, "fenced", p)[1].version for p in range(4)}
    # A newer controller was elected while this one was paused: it bumped the controller epoch.
    zk.set(paths.CONTROLLER_EPOCH, str(deposed_epoch + 1).encode())
    # The leader of every partition dies: the deposed controller would elect broker 2 everywhere.
    zk.delete("/brokers/ids/1")
    yield wait_until(lambda: 1 not in node.cluster.brokers, "the controller's cache to see broker 1 gone")
    yield settle(1.0)
    for partition in range(4):
        state, stat = read_state(zk, "fenced", partition)
        assert stat.version == before[partition] or state.controller_epoch > deposed_epoch + 1, \
            f"fenced-{partition} was written by the deposed controller: {state}"
    assert node.controller.fenced_writes >= 1
    # It stood again, and the controller that won (itself, at a newer epoch) finished the job.
    yield wait_until(lambda: all(has_state(zk, "fenced", p, lambda s: s.leader in (0, 2)) for p in range(4)),
                     "a live leader for every partition")
    assert node.controller.epoch > deposed_epoch + 1


@pytest_twisted.inlineCallbacks
def test_the_controller_epoch_is_bumped_with_the_controller_node_in_one_write(zk, controllers):
    node = yield controllers(0)
    yield wait_until(lambda: node.controller.active, "broker 0 to control")
    value, stat = zk.get(paths.CONTROLLER)
    epoch, epoch_stat = zk.get(paths.CONTROLLER_EPOCH)
    assert paths.ControllerInfo.decode(value).epoch == int(epoch) == node.controller.epoch
    assert stat.czxid == epoch_stat.mzxid, "the controller node and its epoch were written in two transactions"


@pytest_twisted.inlineCallbacks
def test_a_follower_registered_anew_leaves_the_isr_even_when_never_seen_gone(zk, controllers):
    for broker_id in (1, 2):
        register(zk, broker_id)
    node = yield controllers(0)
    create_topic(zk, "bounced", {0: (0, 1, 2)})
    yield wait_until(lambda: has_state(zk, "bounced", 0, lambda s: s.isr == (0, 1, 2)), "the first state")
    first_registration = zk.exists("/brokers/ids/1").czxid
    # A renewed session of the same process (the same creatorId: its page cache lived on)
    # keeps its place: the state records each member's creatorId when it joined.
    reregister(zk, 1)
    yield wait_until(lambda: node.cluster.broker_epochs.get(1, 0) > first_registration, "the new registration")
    assert node.cluster.registered_since_state("bounced", 0) == frozenset()
    # Broker 1 restarts (a new process: a new creatorId) faster than anyone can see it gone.
    reregister(zk, 1, creator="127.0.0.1-restarted")
    yield wait_until(lambda: has_state(zk, "bounced", 0, lambda s: s.isr == (0, 2)),
                     "broker 1 out of the ISR", timeout_s=5)
    assert node.cluster.broker_epochs[1] == zk.exists("/brokers/ids/1").czxid > first_registration
    state, _ = read_state(zk, "bounced", 0)
    assert state.leader == 0 and state.leader_epoch == 0


@pytest_twisted.inlineCallbacks
def test_a_restarted_in_sync_follower_is_not_elected_while_an_unrestarted_one_lives(zk, controllers):
    for broker_id in (0, 1, 2):
        register(zk, broker_id)
    first = yield controllers(3)
    create_topic(zk, "elect", {0: (2, 1, 0)})
    yield wait_until(lambda: has_state(zk, "elect", 0, lambda s: s.isr == (2, 1, 0)), "the first state")
    # No controller runs while broker 1 restarts (losing its unflushed tail) and the leader
    # dies: the next one never saw broker 1's old registration, only its czxid says it is new.
    yield first.stop()
    reregister(zk, 1, creator="127.0.0.1-restarted")
    zk.delete("/brokers/ids/2")
    successor = yield controllers(4)
    yield wait_until(lambda: successor.controller.active, "a new controller")
    yield wait_until(lambda: has_state(zk, "elect", 0, lambda s: s.leader != 2), "a new leader")
    state, _ = read_state(zk, "elect", 0)
    # Brokers 1 and 0 lead nothing: assignment order alone would pick broker 1.
    assert state.leader == 0 and 1 not in state.isr, state


@pytest_twisted.inlineCallbacks
def test_a_leader_listing_a_partition_offline_hands_it_to_another_isr_member(zk, controllers):
    for broker_id in (0, 1, 2):
        register(zk, broker_id)
    node = yield controllers(3)
    create_topic(zk, "disk", {0: (1, 2, 0), 1: (1, 0, 2)})
    yield wait_until(lambda: all(has_state(zk, "disk", p, lambda s: s.leader == 1 and len(s.isr) == 3)
                                 for p in (0, 1)), "broker 1 leading both")
    # Broker 1's log of disk-0 failed: its replica manager lists it (the broker half).
    listed = paths.encode_partition_list([PartitionMove("disk", 0)], with_replicas=False)
    zk.create(paths.offline_replicas_path(1), listed, ephemeral=True, makepath=True)
    yield wait_until(lambda: has_state(zk, "disk", 0, lambda s: s.leader != 1), "disk-0 to move", timeout_s=5)
    state, _ = read_state(zk, "disk", 0)
    assert state.leader == 2 and state.isr == (2, 0), "the ISR member leading fewest, assignment order"
    assert read_state(zk, "disk", 1)[0] .leader == 1, "a partition whose log is fine stays"
    assert node.cluster.offline_replicas == {1: frozenset({("disk", 0)})}
    # Its new leader dies: broker 1 is still listed, so it is not elected there (nor put back
    # in the ISR), broker 0 is.
    zk.delete("/brokers/ids/2")
    yield wait_until(lambda: has_state(zk, "disk", 0, lambda s: s.leader != 2), "disk-0 to move again")
    assert read_state(zk, "disk", 0)[0].leader == 0
    # Once the listing goes (the broker restarted with a good disk), nothing holds it back.
    zk.delete(paths.offline_replicas_path(1))
    yield wait_until(lambda: node.cluster.offline_replicas == {}, "the listing to go")


@pytest_twisted.inlineCallbacks
def test_a_subscriber_raising_for_one_partition_stops_nothing_else(zk, controllers):
    for broker_id in (1, 2):
        register(zk, broker_id)
    create_topic(zk, "loud", {0: (1, 2, 0), 1: (2, 1, 0)})
    for partition, leader in ((0, 1), (1, 2)):
        write_state(zk, "loud", partition, PartitionState(leader, 0, (1, 2, 0), 0))
    seen, resynced = [], []

    def on_state(topic, partition):
        seen.append((topic, partition))
        if partition == 0:
            raise RuntimeError("this replica's log refuses to open")

    raising = Subscriber(on_state=on_state, on_resynced=lambda: resynced.append(True))
    node = yield controllers(0, before=[raising])
    yield wait_until(lambda: node.controller.active, "the controller to campaign")
    assert ("loud", 1) in seen and resynced
    assert node.cluster.callback_errors >= 1


@pytest_twisted.inlineCallbacks
def test_after_a_dropped_connection_the_controller_still_answers_admin_requests(zk, controllers, zk_proxy):
    proxy, through_proxy = zk_proxy
    for broker_id in (1, 2):
        register(zk, broker_id)
    node = yield controllers(0, connect=through_proxy)
    yield wait_until(lambda: node.controller.active, "broker 0 to control")
    # kazoo forgets every watch when the connection drops (the session lives on): the
    # controller must set its watches again, the admin requests' too.
    proxy.reset()
    yield wait_until(lambda: not node.zk.connected, "the connection to drop")
    yield wait_until(lambda: node.zk.connected and node.controller.active, "the controller back")
    yield settle(0.5)
    zk.create(paths.shutdown_path(2), b"{}", ephemeral=True, makepath=True)
    yield wait_until(lambda: zk.get(paths.shutdown_path(2))[0] == b"done", "the controlled shutdown answered",
                     timeout_s=5)
