"""The broker's logs under log.dir: directory names, loading, creating logs, new topics (spec 4.1, 4.9)."""

import logging
import os

import pytest

from twisted_broker.storage.log import LogPolicy
from twisted_broker.storage.log_manager import LogManager, parse_partition_directory
from twisted_broker.codec.kafka07.message_set import encode_message_set

ENTRY = encode_message_set([b"ab"])  # 12 bytes


@pytest.mark.parametrize("name, parsed", [
    ("test-0", ("test", 0)),
    ("my-topic-12", ("my-topic", 12)),  # split at the last "-"
    ("a--1", ("a-", 1)),
    ("-0", None),
    ("test", None),
    ("test-", None),
    ("test-x", None),
    ("test-+1", None),
    ("test-1.5", None),
    ("test-\u00b2", None),  # superscript two: str.isdigit() says yes, int() says no
    ("test-\u0661", None),  # ARABIC-INDIC DIGIT ONE: not a directory any broker makes
])
def test_parse_partition_directory(name, parsed):
    assert parse_partition_directory(name) == parsed


def write_segment(log_dir, directory, start, data):
    os.makedirs(os.path.join(log_dir, directory), exist_ok=True)
    with open(os.path.join(log_dir, directory, f"{start:020d}.kafka"), "wb") as file:
        file.write(data)


def test_open_loads_every_partition_directory(make_manager, log_dir):
    write_segment(log_dir, "test-0", 0, ENTRY)
    write_segment(log_dir, "my-topic-12", 0, ENTRY)
    write_segment(log_dir, "my-topic-12", 12, ENTRY * 2)
    manager = make_manager(partitions_for=lambda topic: 20)
    assert manager.topics() == ["my-topic", "test"]
    assert manager.has_topic("my-topic") and not manager.has_topic("other")
    log = manager.get_log("my-topic", 12)
    assert (log.name, log.first_offset, log.end_offset) == ("my-topic-12", 0, 36)
    assert manager.get_log("test", 0).end_offset == 12


def test_open_creates_the_first_segment_of_an_empty_partition_directory(make_manager, log_dir):
    os.makedirs(os.path.join(log_dir, "t-0"))
    log = make_manager().get_log("t", 0)
    assert os.listdir(os.path.join(log_dir, "t-0")) == ["00000000000000000000.kafka"]
    assert (log.first_offset, log.end_offset) == (0, 0)


def test_open_warns_about_and_skips_what_is_not_a_partition_directory(make_manager, log_dir, caplog):
    os.makedirs(log_dir)
    with open(os.path.join(log_dir, "stray-0"), "w"):
        pass
    os.makedirs(os.path.join(log_dir, "lost+found"))
    os.makedirs(os.path.join(log_dir, "t-\u00b2"))
    os.makedirs(os.path.join(log_dir, "t-0"))
    with caplog.at_level(logging.WARNING, logger="twisted_broker.storage.log_manager"):
        manager = make_manager()
    assert [log.name for log in manager.logs()] == ["t-0"]
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert any(os.path.join(log_dir, "stray-0") in message for message in warnings)
    assert any(os.path.join(log_dir, "lost+found") in message for message in warnings)
    assert any(os.path.join(log_dir, "t-\u00b2") in message for message in warnings)
    assert os.listdir(os.path.join(log_dir, "lost+found")) == []


def test_open_refuses_a_partition_whose_segments_are_not_contiguous(log_dir, clock):
    write_segment(log_dir, "t-0", 0, ENTRY)
    write_segment(log_dir, "t-0", 24, ENTRY)  # 12..24 is missing
    with pytest.raises(ValueError):
        LogManager(log_dir, now=clock).open()


def test_get_or_create_log_makes_the_directory_and_first_segment(make_manager, log_dir, batch):
    manager = make_manager(partitions_for=lambda topic: 4,
                           policy_for=lambda topic: LogPolicy(flush_interval_messages=1))
    assert manager.get_log("t", 3) is None
    log = manager.get_or_create_log("t", 3)
    assert log.directory == os.path.join(log_dir, "t-3")
    assert os.listdir(log.directory) == ["00000000000000000000.kafka"]
    assert manager.get_or_create_log("t", 3) is log
    assert manager.get_log("t", 3) is log
    log.append(batch([b"ab"]))
    with open(os.path.join(log_dir, "t-3", "00000000000000000000.kafka"), "rb") as file:
        assert file.read() == ENTRY


def test_on_new_topic_is_called_once_per_new_topic(make_manager):
    seen = []
    manager = make_manager(partitions_for=lambda topic: 3, on_new_topic=seen.append)
    for topic, partition in [("a", 0), ("a", 1), ("a", 0), ("b", 2), ("a", 2), ("b", 0)]:
        manager.get_or_create_log(topic, partition)
    assert seen == ["a", "b"]


def test_on_new_topic_is_not_called_for_a_topic_found_on_disk(make_manager, log_dir):
    write_segment(log_dir, "a-0", 0, b"")
    seen = []
    manager = make_manager(partitions_for=lambda topic: 3, on_new_topic=seen.append)
    manager.get_or_create_log("a", 1)
    assert seen == []


def test_each_topic_gets_its_own_policy(make_manager, batch):
    policies = {"small": LogPolicy(file_size=10, flush_interval_messages=1), "big": LogPolicy()}
    manager = make_manager(policy_for=policies.__getitem__)
    for topic in policies:
        log = manager.get_or_create_log(topic, 0)
        for _ in range(3):
            log.append(batch([b"ab"]))
    assert len(manager.get_log("small", 0).segments) == 3
    assert len(manager.get_log("big", 0).segments) == 1


def test_deleting_a_topics_last_log_reports_the_topic_gone_once(make_manager, log_dir):
    gone = []
    manager = make_manager(partitions_for=lambda topic: 2, on_topic_gone=gone.append)
    manager.get_or_create_log("doomed", 0)
    manager.get_or_create_log("doomed", 1)
    manager.delete_log("doomed", 0)
    assert gone == []  # partition 1 is still here
    manager.delete_log("doomed", 1)
    manager.delete_log("doomed", 1)  # nothing left: no second report
    assert gone == ["doomed"]
    assert not os.path.exists(os.path.join(log_dir, "doomed-1"))
