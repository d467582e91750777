"""A follower's copy of a leader's stored batches: what a new leader's idempotent-producer
table is rebuilt from (handlers/kafka/produce.py), committed or not."""

from pathlib import Path

from twisted_broker.codec.kafka07.message_set import validate_message_set
from twisted_broker.storage.record_offsets import append_batch, iter_batch_headers
from twisted_broker.storage.replica_log import ReplicaLog


def test_a_followers_copied_batches_give_their_headers_past_the_high_watermark(make_log, make_batch):
    leader = make_log(topic="l", log_class=ReplicaLog)
    bases = [append_batch(leader, make_batch([b"v"] * 2, producer_id=42, producer_epoch=1, base_sequence=seq),
                          [b"v"] * 2, 0) for seq in (0, 2, 4)]
    leader.flush()
    copied = b"".join(Path(leader.directory, name).read_bytes()
                      for name in sorted(p.name for p in Path(leader.directory).glob("*.kafka")))
    follower = make_log(topic="f", log_class=ReplicaLog)
    follower.append(validate_message_set(copied))  # as the fetcher appends what it fetched
    follower.publish_to(bases[1])  # the high watermark below the last batch
    assert [(first, h.base_sequence) for first, h in iter_batch_headers(follower)] == [
        (bases[0], 0), (bases[1], 2), (bases[2], 4)]
