"""The broker's 0.7-style statistics: windowed rates, request times, per-topic and flush figures."""

from __future__ import annotations

import pytest

from twisted_broker.server.stats import BrokerStats, RequestStats, WindowedCounter, broker_snapshot
from twisted_broker.storage.log_manager import LogManager
from twisted_broker.codec.kafka07.message_set import encode_message_set, validate_message_set
from twisted_broker.codec.kafka07.requests import FETCH_TYPE, PRODUCE_TYPE


class Clock:
    def __init__(self) -> None:
        self.time = 1000.0

    def __call__(self) -> float:
        return self.time


def test_rate_is_the_count_of_the_last_complete_window_per_second():
    clock = Clock()
    counter = WindowedCounter(10, clock)
    counter.add(30)
    clock.time += 10
    counter.add(5)  # belongs to the new window
    assert counter.rate() == pytest.approx(3.0)
    assert counter.total == 35


def test_rate_drops_to_zero_after_an_idle_window():
    clock = Clock()
    counter = WindowedCounter(10, clock)
    counter.add(30)
    clock.time += 25  # one full window with nothing in it has passed
    assert counter.rate() == 0.0


def test_rate_before_the_first_window_ends_is_not_inflated_by_a_burst():
    clock = Clock()
    counter = WindowedCounter(10, clock)
    clock.time += 0.001
    counter.add(1)
    assert counter.rate() == pytest.approx(1.0)


def test_request_stats_keep_count_average_and_maximum_time_per_type():
    stats = RequestStats(600, Clock())
    stats.record(PRODUCE_TYPE, 0.002)
    stats.record(PRODUCE_TYPE, 0.004)
    snapshot = stats.snapshot()["requests"]
    assert snapshot["produce"]["count"] == 2
    assert snapshot["produce"]["avg_ms"] == pytest.approx(3.0)
    assert snapshot["produce"]["max_ms"] == pytest.approx(4.0)
    assert snapshot["fetch"]["count"] == 0 and FETCH_TYPE != PRODUCE_TYPE


def test_broker_snapshot_reports_flushes_and_per_log_figures(tmp_path):
    clock = Clock()
    logs = LogManager(tmp_path, now=clock)
    logs.open()
    log = logs.get_or_create_log("t", 0)
    log.append(validate_message_set(encode_message_set([b"a", b"b"])))
    log.flush()
    snapshot = broker_snapshot(BrokerStats(RequestStats(600, clock)), logs)
    assert snapshot["log_flush"]["flushes"] == 1
    (entry,) = snapshot["logs"]
    assert entry == {"topic": "t", "partition": 0, "size": 2 * 11, "segments": 1, "first_offset": 0,
                     "current_offset": 22, "messages_appended": 2, "messages_per_second": 0.0}


def test_each_log_has_a_message_rate_counted_per_appended_set(tmp_path):
    clock = Clock()
    logs = LogManager(tmp_path, now=clock, partitions_for=lambda topic: 2)
    logs.open()
    logs.get_or_create_log("t", 0)
    logs.get_or_create_log("t", 1)
    stats = BrokerStats(RequestStats(600, clock))
    stats.appended("t", 0, 30)
    clock.time += 2
    stats.appended("t", 0, 10)
    rates = {entry["partition"]: entry["messages_per_second"] for entry in broker_snapshot(stats, logs)["logs"]}
    assert rates == {0: 40 / 2, 1: 0.0}  # before the first minute ends: the count so far over the time so far
    clock.time += 60
    assert broker_snapshot(stats, logs)["logs"][0]["messages_per_second"] == 40 / 60  # the last full minute


def test_a_produce_counts_its_topic_all_topics_and_its_partitions_rate_in_one_call(tmp_path):
    clock = Clock()
    logs = LogManager(tmp_path, now=clock, partitions_for=lambda topic: 2)
    logs.open()
    logs.get_or_create_log("t", 1)
    stats = BrokerStats(RequestStats(600, clock))
    stats.produced("t", 1, 3, 120)
    stats.produced("t", 1, 2, 80)
    assert (stats.topic("t").messages_in, stats.topic("t").bytes_in) == (5, 200)
    assert (stats.all_topics.messages_in, stats.all_topics.bytes_in) == (5, 200)
    clock.time += 1
    assert broker_snapshot(stats, logs)["logs"][0]["messages_per_second"] == 5.0


# --- messages out (estimated) and open connections -------------------------------------------

def test_messages_out_are_the_bytes_fetched_at_the_topics_messages_per_byte():
    stats = BrokerStats(RequestStats(600, Clock()))
    stats.topic("t").messages_in, stats.topic("t").bytes_in = 10, 110  # ten 11-byte entries
    stats.all_topics.messages_in, stats.all_topics.bytes_in = 10, 110
    stats.record_fetched("t", 33)
    stats.record_fetched("t", 110)
    assert stats.topic("t").snapshot()["messages_out"] == 13
    assert stats.topic("t").bytes_out == 143
    assert stats.all_topics.snapshot()["messages_out"] == 13 and stats.all_topics.bytes_out == 143


def test_messages_out_of_a_topic_nothing_was_produced_to_use_all_topics_ratio():
    stats = BrokerStats(RequestStats(600, Clock()))
    stats.topic("busy").messages_in, stats.topic("busy").bytes_in = 4, 100
    stats.all_topics.messages_in, stats.all_topics.bytes_in = 4, 100
    stats.record_fetched("old", 50)
    assert stats.topic("old").snapshot()["messages_out"] == 2


def test_no_messages_out_are_counted_before_anything_was_produced():
    stats = BrokerStats(RequestStats(600, Clock()))
    stats.record_fetched("t", 500)
    assert stats.topic("t").snapshot()["messages_out"] == 0
    assert stats.topic("t").bytes_out == 500


def test_open_connections_are_kept_oldest_first_until_closed():
    clock = Clock()
    stats = RequestStats(600, clock)
    first = stats.connection_opened("127.0.0.1", 1000)
    clock.time += 5
    second = stats.connection_opened("127.0.0.1", 1001)
    assert list(stats.open_connections) == [first, second]
    assert (first.established_s, second.established_s) == (1000.0, 1005.0)
    stats.connection_closed(first)
    stats.connection_closed(first)  # twice changes nothing
    assert list(stats.open_connections) == [second]
    assert (stats.connections, stats.connections_total) == (1, 2)
    assert stats.snapshot()["connections"] == 1
