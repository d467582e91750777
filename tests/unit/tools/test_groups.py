"""groups' rows (ConsumerOffsetChecker) from a fake registry and fake brokers."""

from twisted_broker.client.modern_lookup import ModernLookup
from twisted_broker.registry.paths import BrokerInfo
from twisted_broker.tools.groups import OFFSET_CHECKER_HEADER, group_rows
from twisted_broker.tools.table import format_table


class FakeView:
    def __init__(self, counts, brokers, offsets, owners):
        self._counts, self._brokers, self._offsets, self._owners = counts, brokers, offsets, owners

    def assignment(self, topic):
        return None  # a 0.7 topic

    def has_consumer_registry(self, group):
        return True  # a 0.7 group

    def partitions(self, topic):
        return [(b, p) for b, count in sorted(self._counts.items()) for p in range(count)]

    def brokers(self):
        return self._brokers

    def offsets(self, group, topic):
        return self._offsets

    def owners(self, group, topic):
        return self._owners


class FakeConsumer:
    def __init__(self, latest):
        self.latest = latest

    def get_offsets_before(self, topic, partition, time, max_offsets):
        assert (time, max_offsets) == (-1, 1)
        if partition not in self.latest:
            raise ConnectionError("closed")
        return [self.latest[partition]]


class FakeConsumers:
    def __init__(self, by_port):
        self.by_port = by_port

    def get(self, host, port):
        return self.by_port[port]


def test_a_row_per_partition_registered_committed_or_owned():
    view = FakeView(counts={0: 2, 10: 1},
                    brokers={0: BrokerInfo(0, "c", "h", 1)},  # broker 10 is down
                    offsets={"0-0": 100, "10-0": 5, "2-3": 7},  # 2-3: a partition since removed
                    owners={"0-1": "g_a-0"})
    consumers = FakeConsumers({1: FakeConsumer({0: 150, 1: 40})})
    rows = group_rows(view, consumers, ModernLookup([]), "g", "t")
    # Sorted as numbers: 0-0, 0-1, 2-3, 10-0 (0.7's string sort would put 10-0 before 2-3).
    assert rows == [
        ("g", "t", "0-0", 100, 150, 50, "none"),
        ("g", "t", "0-1", "-", 40, "-", "g_a-0"),
        ("g", "t", "2-3", 7, "-", "-", "none"),
        ("g", "t", "10-0", 5, "-", "-", "none"),
    ]
    assert format_table(OFFSET_CHECKER_HEADER, rows)[:2] == [
        "GROUP  TOPIC  PID   OFFSET  LOGSIZE  LAG  OWNER",
        "g      t      0-0   100     150      50   none",
    ]


def test_a_partition_the_broker_no_longer_answers_for_is_unknown():
    view = FakeView({0: 1}, {0: BrokerInfo(0, "c", "h", 1)}, {"0-0": 3}, {})
    rows = group_rows(view, FakeConsumers({1: FakeConsumer({})}), ModernLookup([]), "g", "t")
    assert rows == [("g", "t", "0-0", 3, "-", "-", "none")]


def test_replicated_partition_names_sort_as_numbers_before_stray_nodes():
    from twisted_broker.tools.groups import _partition_key

    names = ["10", "stray", "2", "0"]
    assert sorted(names, key=_partition_key) == ["0", "2", "10", "stray"]
