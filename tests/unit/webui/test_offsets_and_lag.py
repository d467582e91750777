"""OffsetBook (sharing, expiry, rates) and the lag sampler, with fake brokers and a task.Clock."""

from __future__ import annotations

from twisted.internet.defer import Deferred, ensureDeferred
from twisted.internet.task import Clock

from webui.broker_offsets import BrokerUnavailable, OffsetBook, RateTracker
from webui.cluster_cache import BrokerEntry, GroupState
from webui.lag_history import LagHistory, LagSample, sample_all


class FakeClients:
    """Offsets requests answered by the test: each call waits on a Deferred it can fire."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.pending: list[Deferred] = []
        self.errors: dict[int, str] = {}

    async def offsets(self, broker_id, topic, partition, time, max_offsets):
        self.calls.append((broker_id, topic, partition, time))
        d = Deferred()
        self.pending.append(d)
        return await d


def test_concurrent_askers_share_one_request_and_the_answer_is_kept_for_the_ttl():
    clock, clients = Clock(), FakeClients()
    book = OffsetBook(clients, clock, ttl_s=1.0)
    first = ensureDeferred(book.latest("t", 0, 0))
    second = ensureDeferred(book.latest("t", 0, 0))
    assert len(clients.calls) == 1
    clients.pending.pop().callback([120])
    assert first.result == 120 and second.result == 120
    assert ensureDeferred(book.latest("t", 0, 0)).result == 120  # from memory
    assert len(clients.calls) == 1
    clock.advance(1.5)
    again = ensureDeferred(book.latest("t", 0, 0))
    assert len(clients.calls) == 2
    clients.pending.pop().callback([180])
    assert again.result == 180


def test_an_unavailable_broker_reads_as_unknown():
    clock, clients = Clock(), FakeClients()
    book = OffsetBook(clients, clock)
    answer = ensureDeferred(book.earliest("t", 3, 0))
    clients.pending.pop().errback(BrokerUnavailable("broker 3 refused"))
    assert answer.result is None


def test_byte_rate_from_latest_offsets_over_time():
    clock, clients = Clock(), FakeClients()
    book = OffsetBook(clients, clock, ttl_s=0.5)
    for end in (1000, 3000, 5000):
        answer = ensureDeferred(book.latest("t", 0, 0))
        clients.pending.pop().callback([end])
        assert answer.called
        clock.advance(1.0)
    assert book.byte_rate("t", 0, 0) == 2000.0


def test_rate_tracker_needs_two_observations_apart_and_restarts_when_the_counter_goes_back():
    rates = RateTracker(window_s=60, min_span_s=1.0)
    rates.observe("k", 0.0, 100)
    assert rates.rate("k", 0.0) is None
    rates.observe("k", 0.5, 150)
    assert rates.rate("k", 0.5) is None  # too close together
    rates.observe("k", 2.0, 300)
    assert rates.rate("k", 2.0) == 100.0
    rates.observe("k", 3.0, 10)  # recreated log
    assert rates.rate("k", 3.0) is None
    assert rates.rate("k", 200.0) is None  # nothing seen for longer than the window


class FakeCluster:
    def __init__(self, groups: dict[str, GroupState]) -> None:
        self._groups = groups

    def groups(self):
        return sorted(self._groups)

    def group(self, group):
        return self._groups.get(group)

    def brokers(self):
        return {0: BrokerEntry(0, "h", 1, "c", 0)}  # broker 1 is down

    def topic_brokers(self, topic):
        return {0: 2, 1: 1}


class FixedOffsets:
    def __init__(self, latest: dict[tuple, int | None]) -> None:
        self._latest = latest
        self.asked: list[tuple] = []

    async def latest(self, topic, broker_id, partition):
        self.asked.append((topic, broker_id, partition))
        return self._latest.get((topic, broker_id, partition))


def test_a_sampling_round_records_each_groups_lag_and_asks_each_partition_once():
    cluster = FakeCluster({
        "a": GroupState("a", offsets={"t": {"0-0": 100, "0-1": 50, "1-0": 0}}),
        "b": GroupState("b", offsets={"t": {"0-0": 150, "9-9": 1}, "u": {"0-0": None}}),
    })
    offsets = FixedOffsets({("t", 0, 0): 200, ("t", 0, 1): None})
    history = LagHistory()
    clock = Clock()
    clock.advance(50)
    ensureDeferred(sample_all(cluster, offsets, history, clock.seconds)).result  # noqa: B018 (raises if failed)
    assert sorted(offsets.asked) == [("t", 0, 0), ("t", 0, 1)]  # broker 1 is down; 9-9 is not registered
    assert history.last("a") == LagSample(50.0, 100, {"t": 100}, partial=True)
    assert history.last("b") == LagSample(50.0, 50, {"t": 50}, partial=False)
    assert history.rounds == 1


def test_history_keeps_the_last_hour_and_forgets_gone_groups():
    history = LagHistory(span_s=3600)
    for second in range(0, 7200, 600):
        history.add("g", LagSample(float(second), second))
    assert [s.time_s for s in history.samples("g")][0] == 7200 - 600 - 3600
    history.keep_only(set())
    assert history.samples("g") == []
