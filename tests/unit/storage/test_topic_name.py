"""Topic names: 0.7.2's rules, plus nothing that could leave log.dir or not fit a directory name."""

import os
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from twisted_broker.errors import InvalidTopic, WrongPartition
from twisted_broker.storage.log_manager import LogManager
from twisted_broker.storage.topic_name import check_topic_name

REFUSED = [
    "", ".", "..",
    "a/b", "/", "../x", "/tmp/x",
    "a\x00b", "\x01", "tab\there", "new\nline", "\x1f",
    "\x7f", "\x80", "\x9f",                   # DEL and C1 controls
    "\ud800", "\udfff", "\ue000", "\uf8ff",   # surrogates and private use
    "\ufff0", "\ufffe", "\uffff",
    "x" * 256,                                # over max.topic.name.length
    "x" * 245,                                # "-2147483647" would make it 256 bytes
    "\u00e9" * 123,                           # 246 bytes in UTF-8, only 123 characters
]
ACCEPTED = ["test", "my-topic", "-", "a.b", "...", "_x_", "x" * 244, "\u00e9" * 122, "caf\u00e9",
            "\U0001f600"]


@pytest.mark.parametrize("topic", REFUSED)
def test_check_topic_name_refuses(topic):
    with pytest.raises(InvalidTopic):
        check_topic_name(topic)


@pytest.mark.parametrize("topic", ACCEPTED)
def test_check_topic_name_accepts_and_returns(topic):
    assert check_topic_name(topic) == topic


def test_check_topic_name_honours_a_smaller_configured_limit():
    assert check_topic_name("abc", max_length=3) == "abc"
    with pytest.raises(InvalidTopic):
        check_topic_name("abcd", max_length=3)


@pytest.mark.parametrize("topic", REFUSED)
def test_get_or_create_log_refuses_bad_names_without_touching_the_disk(make_manager, log_dir, topic):
    manager = make_manager()
    with pytest.raises(InvalidTopic):
        manager.get_or_create_log(topic, 0)
    assert os.listdir(log_dir) == []
    assert os.listdir(os.path.dirname(log_dir)) == ["logs"]


@pytest.mark.parametrize("partition", [-1, 3, 2**31 - 1])
def test_get_or_create_log_refuses_a_partition_outside_the_topic(make_manager, log_dir, partition):
    manager = make_manager(partitions_for=lambda topic: 3)
    with pytest.raises(WrongPartition):
        manager.get_or_create_log("t", partition)
    with pytest.raises(WrongPartition):
        manager.get_log("t", partition)
    assert os.listdir(log_dir) == []
    assert manager.get_or_create_log("t", 2).name == "t-2"


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.one_of(
    st.text(max_size=300),
    st.lists(st.sampled_from(["/", ".", "..", "-", "0", "a", "\x00", "\\", "~", "\u00e9"]),
             max_size=8).map("".join),
))
def test_a_topic_is_refused_or_lives_directly_inside_log_dir(tmp_path, topic):
    with tempfile.TemporaryDirectory(dir=tmp_path) as root:  # one per example
        log_dir = os.path.join(root, "logs")
        manager = LogManager(log_dir, now=lambda: 0.0)
        manager.open()
        try:
            log = manager.get_or_create_log(topic, 0)
        except InvalidTopic:
            assert os.listdir(log_dir) == []
        else:
            assert os.listdir(log_dir) == [f"{topic}-0"]
            assert os.path.dirname(log.directory) == log_dir
            assert os.listdir(log.directory) == ["00000000000000000000.kafka"]
        manager.close()
        assert sorted(os.listdir(root)) == ["logs"]
