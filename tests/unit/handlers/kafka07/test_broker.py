"""The 0.7 handler table: every produce path counts into the topic's, all topics' and the
partition's figures (BrokerStats.produced), the ProduceAck path for a 0.7 topic included."""

from __future__ import annotations

from twisted.internet.task import Clock

from twisted_broker.codec.kafka07.message_set import encode_message_set
from twisted_broker.codec.kafka07.replication import ProduceAckRequest
from twisted_broker.codec.kafka07.requests import MultiProduceRequest, ProduceRequest
from twisted_broker.handlers.kafka07.broker import Broker
from twisted_broker.server.stats import BrokerStats, RequestStats
from twisted_broker.storage.flusher import InlineFlusher
from twisted_broker.storage.log import LogPolicy
from twisted_broker.storage.log_manager import LogManager


class Kafka07TopicsOnly:
    """Only what Broker wires for ProduceAck: every topic is a 0.7 one, appended the 0.7 way."""

    class cluster:
        @staticmethod
        def is_replicated(topic: str) -> bool:
            return False

    def produce_ack(self, request: ProduceAckRequest, append_0_7):
        return [append_0_7(part) for part in request.produce.produces]

    replica_fetch = epoch_end_offset = metadata = None


def make_broker(tmp_path, replication=None):
    clock = Clock()
    logs = LogManager(str(tmp_path), now=clock.seconds, partitions_for=lambda topic: 2, flusher=InlineFlusher(),
                      policy_for=lambda topic: LogPolicy(flush_interval_messages=1))
    logs.open()
    return Broker(logs, BrokerStats(RequestStats(60, clock.seconds)), replication=replication), logs


def test_a_0_7_produce_counts_its_topic_all_topics_and_its_partition(tmp_path):
    broker, logs = make_broker(tmp_path)
    messages = encode_message_set([b"one", b"two"])
    assert broker.handle(ProduceRequest("a", 1, messages)) == []
    stats = broker.stats
    assert (stats.topic("a").messages_in, stats.topic("a").bytes_in) == (2, len(messages))
    assert (stats.all_topics.messages_in, stats.all_topics.bytes_in) == (2, len(messages))
    assert list(stats.log_messages) == [("a", 1)]
    logs.close()


def test_a_produce_ack_to_a_0_7_topic_now_feeds_the_partitions_rate_too(tmp_path):
    broker, logs = make_broker(tmp_path, Kafka07TopicsOnly())
    messages = encode_message_set([b"x"])
    offsets = broker.handle(ProduceAckRequest(1, 1000, MultiProduceRequest((ProduceRequest("a", 0, messages),))))
    assert offsets == [0]
    assert broker.stats.topic("a").messages_in == 1
    assert list(broker.stats.log_messages) == [("a", 0)]
    logs.close()
