"""A replica whose leader-epoch file is ahead of its recovered log (issue 22, defect 2).

The epoch file is rewritten at once on every leader change, the log's tail only when it is
flushed: a crash within a flush interval of a leader change leaves epochs the log never
reached. Opening the replica must cut them, or the next ``become_leader`` raises and the broker
never leads that partition again. Real files in a temporary log directory.
"""

from twisted_broker.codec.kafka07.message_set import encode_message_set, validate_message_set
from twisted_broker.registry.replication_paths import PartitionState
from twisted_broker.replication.epochs import EpochEntry, LeaderEpochCache
from twisted_broker.replication.replica import Replica, Role
from twisted_broker.storage.checkpoints import read_leader_epochs, write_leader_epochs
from twisted_broker.storage.log_manager import LogManager


def _replica_with_epochs_past_its_end(tmp_path):
    logs = LogManager(str(tmp_path), now=lambda: 0.0)
    log_ = logs.create_replica_log("t", 0)
    log_.append(validate_message_set(encode_message_set([b"a" * 10, b"b" * 10])))
    end = log_.written_end
    # What a crash leaves: epoch 3 started at an offset the lost tail held, epoch 4 beyond it.
    write_leader_epochs(log_.directory, LeaderEpochCache([EpochEntry(0, 0), EpochEntry(3, end + 40),
                                                          EpochEntry(4, end + 90)]).encode())
    return Replica("t", 0, log_), end


def test_opening_a_replica_cuts_the_epochs_the_recovered_log_never_reached(tmp_path):
    replica, end = _replica_with_epochs_past_its_end(tmp_path)
    assert replica.epochs.entries == (EpochEntry(0, 0),)
    assert LeaderEpochCache.decode(read_leader_epochs(replica.log.directory)).entries == (EpochEntry(0, 0),)


def test_a_replica_that_recovered_behind_its_epoch_file_can_lead_again(tmp_path):
    replica, end = _replica_with_epochs_past_its_end(tmp_path)
    state = PartitionState(leader=1, leader_epoch=5, isr=(1, 2), controller_epoch=1)
    replica.become_leader(state, (1, 2), broker_id=1, now_ms=0, lag_time_max_ms=10_000, min_insync_replicas=1,
                          log_end=end)
    assert replica.role is Role.LEADER
    assert replica.epochs.entries == (EpochEntry(0, 0), EpochEntry(5, end))
