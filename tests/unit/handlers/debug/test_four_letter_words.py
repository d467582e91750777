"""ZooKeeper's four-letter words (server/debug_words.py) and BROKER-P partition arguments, run
through DebugCommands against real logs, a real Broker for the traffic, and a task.Clock
(debug_fixtures.py)."""

from __future__ import annotations

import re

import pytest

from tests.unit.handlers.debug.debug_fixtures import clock, commands, logs, run, stats  # noqa: F401 (fixtures)
from twisted_broker import __version__
from twisted_broker.codec.kafka.api_keys import API_NAMES, LIST_OFFSETS
from twisted_broker.codec.kafka.api_keys import PRODUCE as PRODUCE_API
from twisted_broker.handlers.kafka07.broker import Broker
from twisted_broker.handlers.debug.commands import DebugCommands
from twisted_broker.server.stats import BrokerStats, RequestStats
from twisted_broker.codec.kafka07.message_set import encode_message_set
from twisted_broker.codec.kafka07.requests import FETCH_TYPE, PRODUCE_TYPE, FetchRequest, ProduceRequest

BROKER_ID = 7  # the commands fixture's


@pytest.fixture
def broker(logs, stats) -> Broker:  # noqa: F811 (fixtures)
    return Broker(logs, stats)


def traffic(broker: Broker, stats: BrokerStats) -> None:
    """Three 11-byte messages produced to t-0 and fetched back, as a connection would."""
    broker.handle(ProduceRequest("t", 0, encode_message_set([b"a", b"b", b"c"])))
    stats.requests.record(PRODUCE_TYPE, 0.002)
    for piece in broker.handle(FetchRequest("t", 0, 0, 1 << 20)):
        getattr(piece, "close", lambda: None)()
    stats.requests.record(FETCH_TYPE, 0.004)


def mntr(commands: DebugCommands) -> dict[str, str]:
    lines = run(commands, "mntr")
    pairs = [line.split("\t") for line in lines]
    assert all(len(pair) == 2 and re.fullmatch(r"tb_[a-z_]+", pair[0]) for pair in pairs), lines
    figures = dict(pairs)
    assert len(figures) == len(lines), "a key twice"
    return figures


def test_ruok_answers_imok(commands):
    assert run(commands, "ruok") == ["imok"]


def test_mntr_gives_the_figures_as_tab_separated_keys_and_values(commands, broker, stats, clock):
    clock.advance(12.5)
    connection = stats.requests.connection_opened("127.0.0.1", 50000)
    traffic(broker, stats)
    figures = mntr(commands)
    assert len(figures) >= 12
    assert figures["tb_version"] == __version__
    assert figures["tb_broker_id"] == str(BROKER_ID)
    assert figures["tb_server_state"] == "standalone"
    assert figures["tb_uptime_ms"] == "12500"
    assert figures["tb_open_connections"] == "1"
    assert (figures["tb_requests_produce"], figures["tb_requests_fetch"], figures["tb_requests_offsets"]) == ("1", "1", "0")
    assert figures["tb_request_latency_avg_ms"] == "3.000" and figures["tb_request_latency_max_ms"] == "4.000"
    assert (figures["tb_messages_in"], figures["tb_bytes_in"]) == ("3", "33")
    assert (figures["tb_messages_out"], figures["tb_bytes_out"]) == ("3", "33")
    assert (figures["tb_topics"], figures["tb_partitions"], figures["tb_log_bytes"]) == ("1", "1", "33")
    assert figures["tb_under_replicated_partitions"] == "0"
    assert int(figures["tb_flushes"]) >= 1 and float(figures["tb_flush_latency_max_ms"]) >= 0
    stats.requests.connection_closed(connection)
    assert mntr(commands)["tb_open_connections"] == "0"


def test_cons_names_each_connection_as_zookeeper_does(commands, stats, clock):
    assert run(commands, "cons") == [" (no Kafka-protocol connections)"]
    first = stats.requests.connection_opened("127.0.0.1", 54321)
    first.requests, first.responses, first.bytes_received, first.bytes_sent = 12, 11, 400, 5000
    first.last_request = "fetch"
    first.queued = lambda: 2
    first.reading = lambda: False
    clock.advance(1.5)
    stats.requests.connection_opened("::1", 40000)
    assert run(commands, "cons") == [
        " /127.0.0.1:54321[0](queued=2,recved=12,sent=11,bytes_recved=400,bytes_sent=5000,"
        "est=1700000000000,lop=fetch,idle=1500)",
        " /::1:40000[1](queued=0,recved=0,sent=0,bytes_recved=0,bytes_sent=0,est=1700000001500,lop=NA,idle=0)"]


def test_srvr_and_stat_give_version_id_uptime_connections_and_requests(commands, broker, stats, clock):
    stats.requests.connection_opened("127.0.0.1", 54321)
    traffic(broker, stats)
    clock.advance(3723.4)
    srvr = run(commands, "srvr")
    assert srvr == [f"twisted-broker version: {__version__}", f"Broker id: {BROKER_ID}", "Mode: standalone",
                    "Uptime: 3723 s", "Connections: 1", "Outstanding: 0",
                    "Requests: 2 (produce 1, fetch 1, multifetch 0, multiproduce 0, offsets 0)",
                    "Latency avg/max: 3.000/4.000 ms", "Partitions: 1"]
    stat = run(commands, "STAT")
    assert stat[:2] == [srvr[0], "Clients:"]
    assert stat[2].startswith(" /127.0.0.1:54321[1](") and stat[3:] == srvr[1:]


def test_the_words_take_no_arguments(commands):
    assert run(commands, "mntr now") == ["error: usage: mntr"]


def test_help_lists_the_words_and_the_partition_forms(commands):
    text = "\n".join(run(commands, "help"))
    for word in ("ruok", "srvr", "stat", "cons", "mntr"):
        assert re.search(rf"^  {word} ", text, re.MULTILINE), word
    assert f"BROKER-P with this broker's id ({BROKER_ID})" in text


# --- PARTITION as P or BROKER-P ------------------------------------------------------------------

def test_partition_arguments_take_this_brokers_broker_p(commands, broker):
    broker.handle(ProduceRequest("t", 1, encode_message_set([b"x"])))
    for command in ("offsets t {}", "tail t {}", "dump t {} 0"):
        assert run(commands, command.format(f"{BROKER_ID}-1")) == run(commands, command.format("1"))
    assert run(commands, f"offsets t {BROKER_ID}-1") == ["offset", "    11"]


def test_a_partition_on_another_broker_is_a_clear_error(commands, broker):
    broker.handle(ProduceRequest("t", 1, encode_message_set([b"x"])))
    message = f"error: partition '3-1' is on broker 3; this is broker {BROKER_ID}: give P or {BROKER_ID}-P"
    assert run(commands, "tail t 3-1") == [message]
    assert run(commands, "offsets t 3-1") == [message]
    assert run(commands, "dump t 3-1 0") == [message]


@pytest.mark.parametrize(("argument", "error"), [
    ("x-1", "error: BROKER of BROKER-PARTITION must be an integer, not 'x'"),
    (f"{BROKER_ID}-y", "error: PARTITION of BROKER-PARTITION must be an integer, not 'y'"),
    (f"{BROKER_ID}--1", "error: BROKER of BROKER-PARTITION must be an integer, not '7-'"),
    ("-1", "error: PARTITION must be at least 0, not -1"),
])
def test_malformed_partition_arguments_are_error_answers(commands, argument, error):
    assert run(commands, f"tail t {argument}") == [error]


# --- replication: the mode, mntr's figures, the replicas command ------------------------------------

def replication_figures(*, active: bool) -> dict:
    """server.stats.replication_snapshot's shape: broker 7 leads t-1 and follows t-0."""
    return {
        "leader_count": 1, "under_replicated_partitions": 1, "isr_shrinks": 2, "isr_expands": 1,
        "not_enough_replicas": 4, "offline_replicas": 1, "follower_lag_max_bytes": 33,
        "controller": {"active": active, "broker_id": BROKER_ID if active else 3, "epoch": 9 if active else None,
                       "elections": 5, "offline_partitions": 2 if active else 0},
        "replicas": [
            {"topic": "t", "partition": 0, "role": "following", "fenced": False, "leader": 3, "leader_epoch": 2,
             "replicas": [3, 7], "isr": [3, 7], "high_watermark": 100, "log_end": 110, "lag_bytes": 33,
             "follower_lag_bytes": {}},
            {"topic": "t", "partition": 1, "role": "leader", "fenced": True, "leader": BROKER_ID, "leader_epoch": 4,
             "replicas": [7, 3, 5], "isr": [7], "high_watermark": 50, "log_end": 60, "lag_bytes": None,
             "follower_lag_bytes": {3: 12, 5: None}},
            {"topic": "u", "partition": 0, "role": "offline", "fenced": False, "leader": None, "leader_epoch": 1,
             "replicas": [5, 7], "isr": [], "high_watermark": 0, "log_end": 0, "lag_bytes": None,
             "follower_lag_bytes": {}}]}


@pytest.fixture
def replicated(logs, stats, clock):  # noqa: F811 (fixtures)
    """(commands, figures): DebugCommands of a broker with replication; change figures["active"]."""
    figures = {"active": True}
    commands = DebugCommands(logs, stats, clock=clock, broker_id=BROKER_ID,
                             replication=lambda: replication_figures(active=figures["active"]))
    return commands, figures


def test_the_mode_is_controller_or_broker_with_replication(replicated):
    commands, figures = replicated
    srvr = run(commands, "srvr")
    assert srvr[1:5] == [f"Broker id: {BROKER_ID}", "Mode: controller", f"Controller: {BROKER_ID}",
                         "Leader of: 1 partition(s), 1 under-replicated"]
    figures["active"] = False
    assert run(commands, "srvr")[2:4] == ["Mode: broker", "Controller: 3"]
    stat = run(commands, "stat")
    assert "Mode: broker" in stat and "Controller: 3" in stat


def test_mntr_gives_the_replication_figures(replicated):
    commands, figures = replicated
    found = mntr(commands)
    assert found["tb_server_state"] == "controller"
    assert {key: found[f"tb_{key}"] for key in (
        "under_replicated_partitions", "offline_partitions", "leader_count", "replicas", "isr_shrinks",
        "isr_expands", "not_enough_replicas", "offline_replicas", "follower_lag_max_bytes", "controller",
        "controller_id", "controller_epoch")} == {
        "under_replicated_partitions": "1", "offline_partitions": "2", "leader_count": "1", "replicas": "3",
        "isr_shrinks": "2", "isr_expands": "1", "not_enough_replicas": "4", "offline_replicas": "1",
        "follower_lag_max_bytes": "33",
        "controller": "1", "controller_id": str(BROKER_ID), "controller_epoch": "9"}
    figures["active"] = False
    found = mntr(commands)
    assert (found["tb_server_state"], found["tb_controller"], found["tb_controller_id"],
            found["tb_controller_epoch"], found["tb_offline_partitions"]) == ("broker", "0", "3", "-1", "0")


def test_without_zookeeper_mntr_has_the_same_keys_at_zero(commands, replicated):
    alone, with_replication = mntr(commands), mntr(replicated[0])
    assert set(alone) == set(with_replication)
    assert alone["tb_server_state"] == "standalone"
    assert (alone["tb_under_replicated_partitions"], alone["tb_leader_count"], alone["tb_controller_id"]) == ("0", "0", "-1")


def test_replicas_lists_each_replica_with_its_role_isr_watermark_and_lag(replicated):
    commands, _ = replicated
    lines = run(commands, "replicas")
    assert [line.split() for line in lines] == [
        ["topic", "partition", "role", "leader", "epoch", "isr", "hw", "end", "lag"],
        ["t", "0", "following", "3", "2", "3,7", "100", "110", "33"],
        ["t", "1", "leader(fenced)", "7", "4", "7", "50", "60", "3:12", "5:?"],
        ["u", "0", "offline", "-", "1", "-", "0", "0", "-"]]
    assert [line.split()[:2] for line in run(commands, "replicas u")[1:]] == [["u", "0"]]
    assert run(commands, "replicas nope") == ["no replica of 'nope' on this broker"]
    assert run(commands, "replicas a b") == ["error: usage: replicas [TOPIC]"]


def test_replicas_without_zookeeper_is_a_clear_error(commands):
    assert run(commands, "replicas") == ["error: no replication: this broker runs without ZooKeeper"]
    assert re.search(r"^  replicas \[TOPIC\] ", "\n".join(run(commands, "help")), re.MULTILINE)


@pytest.fixture
def kafka_requests(clock) -> RequestStats:  # noqa: F811 (fixtures)
    """The modern listener's request figures, as tap.py makes them."""
    return RequestStats(60, clock.seconds, names=API_NAMES, always=())


@pytest.fixture
def with_listener(logs, stats, clock, kafka_requests) -> DebugCommands:  # noqa: F811 (fixtures)
    return DebugCommands(logs, stats, clock=clock, broker_id=BROKER_ID, kafka_requests=kafka_requests)


def test_the_words_count_the_modern_listener_apart_from_the_0_7_port(with_listener, stats, kafka_requests, clock):
    stats.requests.connection_opened("127.0.0.1", 50000)
    client = kafka_requests.connection_opened("127.0.0.1", 50001)
    client.requests, client.last_request = 2, "Metadata"
    kafka_requests.record(PRODUCE_API, 0.002)  # api key 0, as 0.7's produce type
    kafka_requests.record(LIST_OFFSETS, 0.001)
    kafka_requests.bytes_read.add(120)
    figures = mntr(with_listener)
    assert (figures["tb_open_connections"], figures["tb_requests_produce"]) == ("1", "0")
    assert (figures["tb_kafka_open_connections"], figures["tb_kafka_connections_total"]) == ("1", "1")
    assert (figures["tb_kafka_requests_produce"], figures["tb_kafka_requests_list_offsets"]) == ("1", "1")
    assert figures["tb_kafka_bytes_received"] == "120"
    cons = run(with_listener, "cons")
    assert len(cons) == 2 and "lop=Metadata" in cons[1] and cons[1].startswith(" /127.0.0.1:50001[1](")
    srvr = run(with_listener, "srvr")
    assert "Kafka-client connections: 1" in srvr
    assert "Kafka-client requests: 2 (Produce 1, ListOffsets 1)" in srvr


def test_without_the_listener_mntr_has_its_keys_at_zero(commands, with_listener):
    alone, listening = mntr(commands), mntr(with_listener)
    assert set(alone) == set(listening)  # no request served yet: no tb_kafka_requests_*
    assert (alone["tb_kafka_open_connections"], alone["tb_kafka_bytes_sent"]) == ("0", "0")
    assert not any(line.startswith("Kafka-client") for line in run(commands, "srvr"))
