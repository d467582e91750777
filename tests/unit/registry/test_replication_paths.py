"""Replication's ZooKeeper values: round trips, and a clear ValueError for anything else."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twisted_broker.registry import replication_paths as paths
from twisted_broker.registry.replication_paths import (
    ControllerInfo, PartitionMove, PartitionState, TopicAssignment, decode_partition_list, encode_partition_list,
)


def test_paths_live_under_replication_and_leave_0_7_paths_alone():
    assert paths.state_path("t", 3) == "/replication/topics/t/partitions/3/state"
    assert paths.topic_path("t") == "/replication/topics/t"
    assert not paths.state_path("t", 0).startswith("/brokers")


def test_partition_state_bytes_are_kafka_like_json():
    state = PartitionState(leader=1, leader_epoch=3, isr=(1, 2, 0), controller_epoch=7)
    assert state.encode() == (b'{"version":1,"leader":1,"leader_epoch":3,"isr":[1,2,0],"controller_epoch":7,'
                              b'"leader_session":""}')
    assert PartitionState.decode(state.encode()) == state


ids = st.lists(st.integers(0, 1000), unique=True, max_size=5)


@given(leader=st.integers(-1, 1000), epoch=st.integers(0, 2**31), isr=ids, ce=st.integers(0, 2**31))
def test_partition_state_round_trips(leader, epoch, isr, ce):
    state = PartitionState(leader, epoch, tuple(isr), ce)
    assert PartitionState.decode(state.encode()) == state


@given(st.dictionaries(st.integers(0, 5), st.lists(st.integers(0, 9), unique=True, min_size=1, max_size=4),
                       min_size=1))
def test_assignment_round_trips_when_numbered_from_zero(raw):
    if sorted(raw) != list(range(len(raw))):
        with pytest.raises(ValueError, match="0..N-1"):
            TopicAssignment({p: tuple(r) for p, r in raw.items()})
        return
    assignment = TopicAssignment({p: tuple(r) for p, r in raw.items()})
    assert TopicAssignment.decode(assignment.encode()) == assignment


@pytest.mark.parametrize("value, message", [
    (b"nope", "not JSON"),
    (b"[1]", "not a version 1 object"),
    (b'{"version":2,"leader":1}', "not a version 1 object"),
    (b'{"version":1,"leader":"1","leader_epoch":0,"isr":[1],"controller_epoch":0}', "lacks leader"),
    (b'{"version":1,"leader":1,"leader_epoch":0,"isr":[1,1],"controller_epoch":0}', "twice"),
    (b'{"version":1,"leader":1,"leader_epoch":0,"isr":[-3],"controller_epoch":0}', "not a list of broker ids"),
])
def test_bad_partition_states_are_refused_with_the_reason(value, message):
    with pytest.raises(ValueError, match=message):
        PartitionState.decode(value)


def test_controller_and_admin_requests_round_trip():
    assert ControllerInfo.decode(ControllerInfo(2, 9).encode()) == ControllerInfo(2, 9)
    moves = [PartitionMove("t", 0, (0, 1)), PartitionMove("u", 2, (2,))]
    assert decode_partition_list(encode_partition_list(moves, with_replicas=True), with_replicas=True) == moves
    plain = [PartitionMove("t", 0)]
    assert decode_partition_list(encode_partition_list(plain, with_replicas=False), with_replicas=False) == plain
    with pytest.raises(ValueError, match="names no replica"):
        decode_partition_list(b'{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[]}]}',
                              with_replicas=True)


def test_replica_ends_bytes_and_round_trip():
    ends = paths.ReplicaEnds("broker1-42003", {("t", 0): (4, 6566), ("t", 1): (-1, 0), ("u", 0): (0, 12)})
    assert paths.replica_ends_path(1) == "/replication/replica_ends/1"
    assert ends.encode() == (b'{"version":1,"session":"broker1-42003","topics":{"t":{"0":[4,6566],"1":[-1,0]},'
                             b'"u":{"0":[0,12]}}}')
    assert paths.ReplicaEnds.decode(ends.encode()) == ends
    assert ends.end_of("t", 0) == (4, 6566)
    assert ends.end_of("v", 0) == (-1, 0)  # not held there: an empty log


@pytest.mark.parametrize("value, message", [
    (b'{"version":1,"topics":{}}', "lack a session"),
    (b'{"version":1,"session":"s","topics":{"t":[1]}}', "not a map of partitions"),
    (b'{"version":1,"session":"s","topics":{"t":{"x":[1,2]}}}', "not a map of partitions"),
    (b'{"version":1,"session":"s","topics":{"t":{"0":[1]}}}', "not a map of partitions"),
])
def test_bad_replica_ends_are_refused_with_the_reason(value, message):
    with pytest.raises(ValueError, match=message):
        paths.ReplicaEnds.decode(value)
