"""Replica logs under log.dir: created by replication, reopened with their checkpointed high
watermark, deleted when moved away; the checkpoint files' format and atomic replacement."""

import os

import pytest

from twisted_broker.errors import InvalidTopic
from twisted_broker.storage.checkpoints import (
    HIGH_WATERMARK_CHECKPOINT, LEADER_EPOCH_CHECKPOINT, decode_high_watermarks, encode_high_watermarks,
    read_high_watermarks, write_high_watermarks,
)
from twisted_broker.codec.kafka07.message_set import encode_message_set, validate_message_set
from twisted_broker.storage.replica_log import ReplicaLog


def batch(*payloads):
    return validate_message_set(encode_message_set(list(payloads)))


def test_high_watermark_checkpoint_round_trips_topics_with_dashes_and_refuses_damage(tmp_path):
    offsets = {("my-topic", 0): 120, ("b", 3): 0}
    assert encode_high_watermarks(offsets) == b"0\n2\nb 3 0\nmy-topic 0 120\n"
    write_high_watermarks(str(tmp_path), offsets)
    assert read_high_watermarks(str(tmp_path)) == offsets
    assert not os.path.exists(tmp_path / f"{HIGH_WATERMARK_CHECKPOINT}.tmp")
    for damaged in (b"", b"1\n0\n", b"0\n2\nt 0 1\n", b"0\n1\nt x 1\n"):
        with pytest.raises(ValueError):
            decode_high_watermarks(damaged)
    assert read_high_watermarks(str(tmp_path / "nowhere")) == {}


def test_a_replica_log_is_marked_and_starts_with_nothing_visible(make_manager, log_dir):
    manager = make_manager()
    log = manager.create_replica_log("r", 5)
    assert os.path.exists(os.path.join(log_dir, "r-5", LEADER_EPOCH_CHECKPOINT))
    log.append(batch(b"ab"))
    log.flush()
    assert log.end_offset == 0
    assert manager.create_replica_log("r", 5) is log


def test_a_restarted_broker_serves_a_replica_only_up_to_its_checkpointed_high_watermark(make_manager, log_dir):
    manager = make_manager()
    log = manager.create_replica_log("r", 0)
    for payload in (b"ab", b"cd", b"ef"):
        log.append(batch(payload))
    log.publish_to(24)
    write_high_watermarks(log_dir, {("r", 0): 12})
    manager.close()
    reopened = make_manager()
    assert reopened.get_log("r", 0).end_offset == 12
    assert reopened.get_log("r", 0).written_end == 36


def test_a_damaged_checkpoint_hides_every_replica_until_its_leader_answers(make_manager, log_dir):
    manager = make_manager()
    log = manager.create_replica_log("r", 0)
    log.append(batch(b"ab"))
    manager.close()
    with open(os.path.join(log_dir, HIGH_WATERMARK_CHECKPOINT), "wb") as f:
        f.write(b"garbage")
    assert make_manager().get_log("r", 0).end_offset == 0


def test_a_0_7_topics_log_is_not_taken_over_as_a_replica(make_manager):
    manager = make_manager()
    manager.get_or_create_log("t", 0).append(batch(b"ab"))
    with pytest.raises(InvalidTopic, match="0.7 topic"):
        manager.create_replica_log("t", 0)


def test_an_empty_unmarked_log_is_taken_as_a_replicas_and_its_topic_forgotten_by_0_7(make_manager):
    # A replica's log whose mark (written without an fsync) a power loss took, and which was
    # reopened as a 0.7 log: nothing is in it, and replication's assignment says whose it is.
    gone = []
    manager = make_manager(on_topic_gone=gone.append)
    manager.get_or_create_log("t", 0)
    log = manager.create_replica_log("t", 0)
    assert isinstance(log, ReplicaLog) and gone == ["t"]
    assert manager.topics_0_7() == []


def test_a_replica_named_by_the_checkpoint_reopens_as_a_replica_without_its_mark(make_manager, log_dir):
    manager = make_manager()
    manager.create_replica_log("r", 0).append(batch(b"ab"))
    write_high_watermarks(log_dir, {("r", 0): 0})
    manager.close()
    os.unlink(os.path.join(log_dir, "r-0", LEADER_EPOCH_CHECKPOINT))  # not durable: lost
    reopened = make_manager().get_log("r", 0)
    assert isinstance(reopened, ReplicaLog) and reopened.end_offset == 0
    assert os.path.exists(os.path.join(log_dir, "r-0", LEADER_EPOCH_CHECKPOINT))


def test_a_replicas_mark_is_written_without_an_fsync(make_manager, log_dir, monkeypatch):
    manager = make_manager()
    fsyncs = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real(fd)))
    for partition in range(10):
        manager.create_replica_log("r", partition)
    assert fsyncs == []


def test_deleting_a_moved_replica_removes_its_directory(make_manager, log_dir):
    manager = make_manager()
    manager.create_replica_log("r", 1).append(batch(b"ab"))
    manager.delete_log("r", 1)
    assert not os.path.exists(os.path.join(log_dir, "r-1"))
    assert not manager.has_topic("r")


def test_an_empty_replicas_epochs_are_made_durable_before_its_first_append(make_manager, log_dir, monkeypatch):
    manager = make_manager()
    log = manager.create_replica_log("r", 0)
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real(fd)))
    log.write_epochs(b"0\n1\n3 0\n")  # taking office at epoch 3: nothing in the log yet
    assert synced == []
    log.append(batch(b"ab"))
    epochs = os.path.join(log_dir, "r-0", LEADER_EPOCH_CHECKPOINT)
    assert synced == [epochs, os.path.join(log_dir, "r-0")]
    log.append(batch(b"cd"))
    log.write_epochs(b"0\n2\n3 0\n4 12\n")  # with data: fsynced at once, as before
    assert len(synced) == 4
