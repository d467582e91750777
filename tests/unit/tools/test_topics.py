"""topics' rows from a fake registry: one per topic and broker, "-" for a broker that is gone."""

from twisted_broker.registry.paths import BrokerInfo
from twisted_broker.tools.topics import topic_rows


class FakeView:
    def brokers(self):
        return {0: BrokerInfo(0, "c", "a", 9092)}

    def topics_brokers(self, topics):
        return {topic: {"t1": {0: 4, 1: 2}, "t2": {}}[topic] for topic in topics}


def test_one_row_per_topic_and_broker():
    assert topic_rows(FakeView(), ["t1", "t2"]) == [("t1", 0, "a:9092", 4), ("t1", 1, "-", 2)]
