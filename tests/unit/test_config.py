"""The properties parser and the broker, producer and consumer configs (spec section 6)."""

import dataclasses
import logging
from pathlib import Path

import pytest

from twisted_broker.config import (
    BrokerConfig,
    ConfigError,
    ConsumerConfig,
    ProducerConfig,
    parse_properties,
)

ETC = Path(__file__).parents[2] / "etc"
MINIMAL_BROKER = {"brokerid": "0", "log.dir": "/tmp/logs", "zk.connect": "127.0.0.1:2181"}


def broker(**extra: str) -> BrokerConfig:
    return BrokerConfig.from_properties({**MINIMAL_BROKER, **extra})


# --- the properties parser ----------------------------------------------------------------

@pytest.mark.parametrize("line", ["key=value", "key = value", "key:value", "key : value",
                                  "key value", "key\tvalue", "   key=value   ", "key=value\t "])
def test_all_three_separators_and_surrounding_blanks(line):
    assert parse_properties(line) == {"key": "value"}


def test_hash_and_bang_comments_and_blank_lines_are_skipped():
    text = "# a comment\n  ! another\n\n   \nkey=value # not a comment\n"
    assert parse_properties(text) == {"key": "value # not a comment"}


def test_backslash_continues_a_line_dropping_the_next_lines_leading_blanks():
    text = "topics=a,\\\n        b,\\\n        c\nnext=1\n"
    assert parse_properties(text) == {"topics": "a,b,c", "next": "1"}


def test_an_even_run_of_backslashes_does_not_continue():
    assert parse_properties("path=c:\\\\\nnext=1") == {"path": "c:\\", "next": "1"}


def test_a_comment_ending_in_a_backslash_does_not_continue():
    assert parse_properties("# comment \\\nkey=value") == {"key": "value"}


def test_a_continued_line_starting_with_hash_is_not_a_comment():
    assert parse_properties("key=a\\\n#b") == {"key": "a#b"}


def test_escapes_in_keys_and_values():
    text = "a\\=b\\:c\\ d=x\\ty\\u0041\\z\nspaced=kept\\ \\ \n"
    assert parse_properties(text) == {"a=b:c d": "x\tyAz", "spaced": "kept  "}


def test_windows_and_old_mac_line_endings():
    assert parse_properties("a=1\r\nb=2\rc=3") == {"a": "1", "b": "2", "c": "3"}


def test_key_alone_has_empty_value_and_the_last_duplicate_wins():
    assert parse_properties("lonely\nkey=1\nkey=2") == {"lonely": "", "key": "2"}


def test_malformed_unicode_escape_is_a_config_error():
    with pytest.raises(ConfigError, match="uxxxx"):
        parse_properties("key=\\u12G4")


# --- defaults -----------------------------------------------------------------------------

def test_broker_defaults_are_the_0_7_2_ones():
    config = broker()
    assert (config.port, config.num_partitions, config.log_file_size) == (6667, 1, 1073741824)
    assert config.log_flush_interval == 500
    assert config.log_default_flush_scheduler_interval_ms == 3000
    assert (config.log_retention_hours, config.log_retention_size) == (168, -1)
    assert (config.log_cleanup_interval_mins, config.log_roll_hours) == (10, 168)
    assert config.max_socket_request_bytes == 104857600
    assert config.enable_zookeeper is True
    assert config.hostname is None
    assert config.zk_sessiontimeout_ms == 6000


def test_flush_interval_defaults_to_the_scheduler_interval():
    assert broker().log_default_flush_interval_ms == 3000
    assert broker(**{"log.default.flush.scheduler.interval.ms": "700"}
                  ).log_default_flush_interval_ms == 700
    assert broker(**{"log.default.flush.scheduler.interval.ms": "700",
                     "log.default.flush.interval.ms": "50"}).log_default_flush_interval_ms == 50


def test_connection_timeout_defaults_to_the_session_timeout():
    assert broker(**{"zk.sessiontimeout.ms": "1500"}).zk_connectiontimeout_ms == 1500
    assert broker(**{"zk.connectiontimeout.ms": "10"}).zk_connectiontimeout_ms == 10


def test_consumer_defaults_and_rebalance_backoff_follows_zk_synctime():
    config = ConsumerConfig.from_properties({"groupid": "g", "zk.synctime.ms": "321"})
    assert config.rebalance_backoff_ms == 321
    assert (config.fetch_size, config.autooffset_reset, config.consumer_timeout_ms) == (
        1048576, "smallest", -1)
    assert config.autocommit_enable is True


def test_producer_defaults_and_the_camel_case_key():
    config = ProducerConfig.from_properties({"broker.list": "0:127.0.0.1:9092",
                                             "queue.enqueueTimeout.ms": "-1",
                                             "compressed.topics": "a, b,"})
    assert config.queue_enqueue_timeout_ms == -1
    assert config.compressed_topics == ("a", "b")
    assert (config.producer_type, config.compression_codec, config.batch_size) == ("sync", 0, 200)


def test_config_built_in_code_gets_the_same_derived_defaults():
    config = BrokerConfig(brokerid=1, log_dir="/d", enable_zookeeper=False,
                          log_default_flush_scheduler_interval_ms=250)
    assert config.log_default_flush_interval_ms == 250


def test_configs_are_frozen():
    config = broker(**{"topic.partition.count.map": "a:2"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.port = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.topic_partition_count_map["a"] = 3  # type: ignore[index]


# --- per-topic maps -----------------------------------------------------------------------

def test_per_topic_maps_and_their_helpers():
    config = broker(**{
        "topic.partition.count.map": "topic1:3, topic2:4",
        "topic.flush.intervals.ms": "fast:10",
        "topic.log.retention.hours": "short:1",
        "topic.log.retention.size": "small:1048576",
        "topic.log.file.size": "tiny:100",
        "topic.log.roll.hours": "hourly:1",
        "log.retention.size": "5000000",
    })
    assert dict(config.topic_partition_count_map) == {"topic1": 3, "topic2": 4}
    assert (config.partitions_for("topic2"), config.partitions_for("other")) == (4, 1)
    assert (config.flush_interval_ms_for("fast"), config.flush_interval_ms_for("x")) == (10, 3000)
    assert (config.retention_hours_for("short"), config.retention_hours_for("x")) == (1, 168)
    assert config.retention_size_for("small") == 1048576
    assert config.retention_size_for("x") == 5000000
    assert (config.file_size_for("tiny"), config.file_size_for("x")) == (100, 1073741824)
    assert (config.roll_hours_for("hourly"), config.roll_hours_for("x")) == (1, 168)


@pytest.mark.parametrize("bad", ["zero:0", "negative:-2", "word:many", "nocolon", ":5", "a:1:2"])
def test_bad_map_token_is_skipped_with_a_warning(caplog, bad):
    with caplog.at_level(logging.WARNING, logger="twisted_broker.config"):
        config = broker(**{"topic.flush.intervals.ms": f"good:5,{bad},also:6"})
    assert dict(config.topic_flush_intervals_ms) == {"good": 5, "also": 6}
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert "topic.flush.intervals.ms" in record.getMessage() and repr(bad) in record.getMessage()


def test_empty_map_has_no_overrides_and_no_warning(caplog):
    config = broker(**{"topic.log.retention.hours": ""})
    assert dict(config.topic_log_retention_hours) == {}
    assert not caplog.records


# --- unknown keys and invalid values ------------------------------------------------------

def test_unknown_key_is_ignored_with_a_warning_naming_it(caplog):
    with caplog.at_level(logging.WARNING, logger="twisted_broker.config"):
        config = broker(**{"log.flush.intervall": "5"})
    assert config.log_flush_interval == 500
    [record] = caplog.records
    assert record.levelno == logging.WARNING and "log.flush.intervall" in record.getMessage()


@pytest.mark.parametrize("key, value", [
    ("port", "9092x"), ("port", "0x10"), ("port", ""), ("port", "1_000"),
    ("log.flush.interval", "1.5"), ("enable.zookeeper", "True"), ("enable.zookeeper", "yes"),
])
def test_invalid_value_is_a_config_error_naming_key_and_value(key, value):
    with pytest.raises(ConfigError) as error:
        broker(**{key: value})
    assert key in str(error.value) and repr(value) in str(error.value)


@pytest.mark.parametrize("config_class, props, key", [
    (BrokerConfig, {"log.dir": "/d", "zk.connect": "z:1"}, "brokerid"),
    (BrokerConfig, {"brokerid": "0", "zk.connect": "z:1"}, "log.dir"),
    (ConsumerConfig, {"zk.connect": "z:1"}, "groupid"),
])
def test_missing_required_key_is_a_config_error_naming_it(config_class, props, key):
    with pytest.raises(ConfigError, match=f"{key} is required"):
        config_class.from_properties(props)


@pytest.mark.parametrize("config_class, props, key", [
    (BrokerConfig, {**MINIMAL_BROKER, "log.file.size": "4"}, "log.file.size"),
    (BrokerConfig, {**MINIMAL_BROKER, "num.partitions": "0"}, "num.partitions"),
    (ProducerConfig, {"zk.connect": "z:1", "producer.type": "fast"}, "producer.type"),
    (ProducerConfig, {"zk.connect": "z:1", "compression.codec": "3"}, "compression.codec"),
    (ConsumerConfig, {"groupid": "g", "autooffset.reset": "middle"}, "autooffset.reset"),
])
def test_out_of_range_value_is_a_config_error_naming_the_key(config_class, props, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        config_class.from_properties(props)


def test_zookeeper_enabled_without_zk_connect_is_a_config_error():
    with pytest.raises(ConfigError, match="zk.connect"):
        BrokerConfig.from_properties({"brokerid": "0", "log.dir": "/d"})
    BrokerConfig.from_properties({"brokerid": "0", "log.dir": "/d", "enable.zookeeper": "false"})


@pytest.mark.parametrize("props", [{}, {"zk.connect": "z:1", "broker.list": "0:h:1"}])
def test_producer_needs_exactly_one_of_zk_connect_and_broker_list(props):
    with pytest.raises(ConfigError, match="exactly one"):
        ProducerConfig.from_properties(props)


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


# --- files --------------------------------------------------------------------------------

def test_load_applies_overrides_over_the_file(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("brokerid=3\nlog.dir=/data\nenable.zookeeper=false\nport=9092\n")
    config = BrokerConfig.load(path, overrides={"port": "0"})
    assert (config.brokerid, config.log_dir, config.port) == (3, "/data", 0)


def test_load_without_a_file_uses_the_overrides_alone():
    overrides = {"brokerid": "1", "log.dir": "/d", "enable.zookeeper": "false"}
    config = BrokerConfig.load(None, overrides)
    assert config.brokerid == 1


def test_load_error_names_the_file(tmp_path):
    path = tmp_path / "bad.properties"
    path.write_text("brokerid=one\n")
    with pytest.raises(ConfigError, match=f"^{path}: brokerid='one'"):
        BrokerConfig.load(path)


@pytest.mark.parametrize("name, config_class", [
    ("server.properties", BrokerConfig),
    ("producer.properties", ProducerConfig),
    ("consumer.properties", ConsumerConfig),
])
def test_shipped_files_load_without_warnings(caplog, name, config_class):
    with caplog.at_level(logging.DEBUG, logger="twisted_broker.config"):
        config_class.load(ETC / name)
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]


def test_shipped_server_properties_are_the_local_development_values():
    config = BrokerConfig.load(ETC / "server.properties")
    assert (config.brokerid, config.hostname, config.port) == (0, "127.0.0.1", 9092)
    assert (config.log_dir, config.zk_connect) == ("var/kafka-logs", "127.0.0.1:2181")
    assert (config.log_flush_interval, config.log_default_flush_interval_ms) == (10000, 1000)
    assert (config.log_file_size, config.log_cleanup_interval_mins) == (536870912, 1)


# --- replication keys (docs/replication.md §4) ---------------------------------------------

def test_replication_defaults_keep_0_7_behaviour_and_are_kafkas():
    config = broker()
    assert config.default_replication_factor == 1
    assert (config.replica_lag_time_max_ms, config.replica_fetch_wait_max_ms, config.replica_fetch_max_bytes) == \
        (10000, 500, 1048576)
    assert config.min_insync_replicas == 1
    assert config.unclean_leader_election_enable is False
    assert config.controlled_shutdown_enable is True
    assert config.log_visibility == "auto"


def test_kafkas_broker_id_is_accepted_alone_or_beside_brokerid_with_the_same_value():
    props = {"log.dir": "/d", "zk.connect": "z:1"}
    assert BrokerConfig.from_properties({**props, "broker.id": "3"}).brokerid == 3
    assert BrokerConfig.from_properties({**props, "broker.id": "3", "brokerid": "3"}).broker_id == 3
    with pytest.raises(ConfigError, match="brokerid=2 and broker.id=3 disagree"):
        BrokerConfig.from_properties({**props, "broker.id": "3", "brokerid": "2"})


@pytest.mark.parametrize("key, value", [("log.visibility", "fsynced"), ("min.insync.replicas", "0"),
                                        ("default.replication.factor", "0"),
                                        ("unclean.leader.election.enable", "yes")])
def test_bad_replication_values_are_config_errors_naming_the_key(key, value):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        broker(**{key: value})


# --- the modern listener's keys (docs/kafka-protocol.md) ----------------------------------

def test_the_modern_listener_is_off_unless_configured_and_the_shipped_file_opens_9094():
    config = broker()
    assert (config.kafka_port, config.kafka_max_batch_bytes, config.auto_create_topics_enable) == (0, 1114124, True)
    assert BrokerConfig.load(ETC / "server.properties").kafka_port == 9094


def test_a_negative_kafka_port_is_refused():
    with pytest.raises(ConfigError, match="kafka.port=-1: must be at least 0"):
        broker(**{"kafka.port": "-1"})
