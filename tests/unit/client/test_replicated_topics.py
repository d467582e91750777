"""The clients' metadata cache and produce-ack rules (client/replicated_topics.py), with a
scripted broker answer function and a fake clock: which broker is asked, what counts as a 0.7
topic, waiting for a leader, and what each ack error means."""

import pytest

from twisted_broker.client.errors import LeaderNotAvailable
from twisted_broker.client.replicated_topics import (
    FAIL, RETRY, TopicMetadataCache, ack_error, ack_outcome, replicated_topic,
)
from twisted_broker.errors import WrongPartition
from twisted_broker.codec.kafka07.replication_errors import NotEnoughReplicas
from twisted_broker.codec.kafka07.replication import Metadata, PartitionMetadata, TopicMetadata

BROKERS = ((0, "h0", 9000), (1, "h1", 9001))


def metadata(topic="t", leaders=(0, 1), error=0):
    partitions = tuple(PartitionMetadata(p, leader, 0, (0, 1), (0, 1) if leader >= 0 else ())
                       for p, leader in enumerate(leaders))
    return Metadata(BROKERS, (TopicMetadata(topic, error, partitions if not error else ()),))


class Script:
    """The brokers' answers in turn (an exception is raised; None: "not ours"), recording who was asked."""

    def __init__(self, *answers):
        self.answers, self.asked = list(answers), []

    def __call__(self, broker_id, address, topic):
        self.asked.append(address)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


class Clock:
    def __init__(self):
        self.now = 0.0
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


def cache(script, clock=None, candidates=((0, ("h0", 9000)), (1, ("h1", 9001)))):
    clock = clock or Clock()
    return TopicMetadataCache(script, lambda: list(candidates), clock=clock, sleep=clock.sleep)


def test_a_replicated_topic_is_asked_once_and_kept():
    script = Script(metadata(leaders=(1, 0)))
    topics = cache(script)
    first = topics.topic("t")
    assert topics.topic("t") is first and len(script.asked) == 1
    assert first.partition_count == 2 and first.leader(0) == (1, ("h1", 9001))


def test_error_3_is_a_0_7_topic():
    assert cache(Script(metadata(error=3))).topic("t") is None


def test_a_broker_that_is_not_ours_is_remembered_and_means_0_7():
    script = Script(None)
    topics = cache(script)
    assert topics.topic("a") is None
    assert topics.topic("b") is None
    assert script.asked == [("h0", 9000), ("h1", 9001)]  # each asked once, for the first topic only


def test_an_unreachable_broker_is_skipped_and_asked_last_next_time():
    script = Script(ConnectionError("refused"), metadata(), metadata())
    topics = cache(script)
    topics.topic("t")
    topics.refresh("t")
    assert script.asked == [("h0", 9000), ("h1", 9001), ("h1", 9001)]


def test_no_broker_answering_raises_the_error():
    with pytest.raises(ConnectionError, match="refused"):
        cache(Script(ConnectionError("refused"))).topic("t")


def test_leader_waits_with_growing_pauses_until_a_leader_is_elected():
    clock = Clock()
    script = Script(metadata(leaders=(-1, 0)), metadata(leaders=(-1, 0)), metadata(leaders=(-1, 0)),
                    metadata(leaders=(1, 0)))
    topics = cache(script, clock)
    assert topics.leader("t", 0, deadline=10.0) == (1, ("h1", 9001))
    assert clock.sleeps == [0.1, 0.2, 0.4]


def test_leader_gives_up_at_the_deadline():
    clock = Clock()
    topics = cache(Script(metadata(leaders=(-1, 0))), clock)
    with pytest.raises(LeaderNotAvailable, match="partition 0 has no leader"):
        topics.leader("t", 0, deadline=1.0)
    assert clock.now == pytest.approx(1.0)


def test_leader_of_a_partition_the_topic_lacks_is_wrong_partition():
    with pytest.raises(WrongPartition):
        cache(Script(metadata())).leader("t", 5, deadline=1.0)


def test_partitions_must_be_numbered_from_0():
    answer = Metadata(BROKERS, (TopicMetadata("t", 0, (PartitionMetadata(1, 0, 0, (0,), (0,)),)),))
    with pytest.raises(ValueError, match="not 0..N-1"):
        replicated_topic(answer, "t")


@pytest.mark.parametrize("code, outcome", [(0, None), (6, RETRY), (3, RETRY), (7, RETRY), (19, FAIL), (20, FAIL),
                                           (2, FAIL)])
def test_what_each_ack_code_means(code, outcome):
    assert ack_outcome(code) == outcome


def test_too_few_in_sync_replicas_names_the_partition_and_the_isr():
    error = ack_error("t", 1, 19, (2,))
    assert isinstance(error, NotEnoughReplicas)
    assert "topic t partition 1" in str(error) and "1 in-sync replica (2)" in str(error)
    assert "min.insync.replicas" in str(error)
