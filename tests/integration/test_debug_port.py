"""The debug port of a real ``twistd -n broker`` over real sockets.

Each broker listens for debug sessions on ``--debug tcp:0:interface=127.0.0.1`` and writes the
port it bound to ``--debug-port-file``. A session reads the greeting, then sends one command
per line and reads each answer up to the empty line that ends it. A one-shot (``one_shot``) sends one line as
``echo WORD | nc`` does, shuts its side for writing, and reads until the broker closes.
"""

from __future__ import annotations

import re
import socket
import struct
import time

import pytest

from tests.support.brokers import DebugSession
from tests.support.polling import fetch_all, latest_offset, produce_payloads, wait_for, wait_for_end
from twisted_broker import __version__
from twisted_broker.codec.kafka.api_keys import API_VERSIONS, METADATA
from twisted_broker.codec.kafka.protocol import decode_response as decode_kafka_response
from twisted_broker.codec.kafka.protocol import encode_request as encode_kafka_request
from twisted_broker.codec.kafka07.compression import GZIP
from twisted_broker.codec.kafka07.message_set import encode_compressed_message_set
from twisted_broker.codec.kafka07.requests import ProduceRequest, encode_request

NUL_AND_BAD_UTF8 = b"nul\x00 and \xff\xfe not utf-8"


@pytest.fixture
def debug_broker(broker_factory, tmp_path):
    """``debug_broker(name, idle_timeout_s=..., **options)`` -> (broker, debug port)."""

    def start(name: str = "broker", idle_timeout_s: float = 60.0, **options):
        port_file = tmp_path / f"{name}-debug-port"
        extra = ["--debug", "tcp:0:interface=127.0.0.1", "--debug-port-file", str(port_file),
                 "--debug-idle-timeout", str(idle_timeout_s)]
        broker = broker_factory(name, extra_args=extra + options.pop("extra_args", []), **options)
        return broker, int(port_file.read_text())

    return start


def columns(line: str) -> list[str]:
    return line.split()


def produce_raw(broker, topic: str, partition: int, messages: bytes) -> None:
    with broker.connect() as client:
        before = latest_offset(client, topic, partition)
        client.send(encode_request(ProduceRequest(topic, partition, messages)))
        wait_for_end(client, topic, before + len(messages), partition)  # flushed on a thread


def produce_visible(broker, topic: str, partition: int, payloads: list[bytes]) -> None:
    """Produce and wait until the broker's flusher thread made the messages visible."""
    messages = produce_payloads(broker, topic, partition, payloads)
    with broker.connect() as client:
        wait_for_end(client, topic, len(messages), partition)


def test_every_command_answers_and_errors_keep_the_session_open(debug_broker):
    broker, port = debug_broker()
    produce_visible(broker, "t", 0, [b"one", b"two"])
    with DebugSession(port) as session:
        assert session.greeting == ["twisted_broker debug port, broker 0: 'help' lists the commands"]
        assert session.ask("frobnicate") == ["error: unknown command 'frobnicate': 'help' lists the commands"]
        help_text = "\n".join(session.ask("help"))
        for command in ("help", "stats", "topics", "partitions", "offsets", "tail", "dump", "zk ls",
                        "zk get", "flush", "quit"):
            assert command in help_text
        stats = session.ask("stats")
        assert {"socket server", "requests", "all topics", "log flush", "topics", "logs"} <= set(stats)
        assert columns(next(line for line in stats if line.strip().startswith("messages in"))) == [
            "messages", "in", "2"]
        assert session.ask("topics") == ["topic  partitions  configured  bytes  messages appended",
                                         "t               1           1     26                  2"]
        assert session.ask("partitions t")[1].split()[:4] == ["0", "0", "26", "26"]
        assert session.ask("partitions nope") == ["error: no topic 'nope' on this broker"]
        assert session.ask("offsets t 0") == ["offset", "    26"]
        assert session.ask("offsets t 0 earliest 10") == ["offset", "     0"]
        assert session.ask("offsets t x") == ["error: PARTITION must be an integer, not 'x'"]
        assert session.ask("tail t 0 1")[1].endswith('"two"')
        assert session.ask("tail t 5") == ["error: partition 5 of 't' is not in [0, 1)"]
        assert session.ask("dump t 0 0")[-1] == "next offset 26"
        assert session.ask("dump t 0 999") == ["error: offset 999 is outside [0, 26] of t-0"]
        assert session.ask("zk ls /brokers/ids") == ["error: ZooKeeper is not enabled"]
        assert session.ask("flush") == ["log  end offset  state", "t-0          26  flushed"]
        assert session.ask(b"\xff\xfe\xfd") == ["error: the command is not UTF-8 text"]
        assert session.ask("quit") == ["bye"]
        assert session.is_closed_by_peer()


def test_tail_shows_the_last_messages_with_offsets_and_escaped_payloads(debug_broker):
    broker, port = debug_broker()
    produce_visible(broker, "t", 0, [b"m%d" % i for i in range(20)] + [NUL_AND_BAD_UTF8])
    with DebugSession(port) as session:
        lines = session.ask("tail t 0 3")
    assert lines == [
        "offset  next  bytes  crc  codec  payload",
        "   224   237      3  ok   none   \"m18\"",
        "   237   250      3  ok   none   \"m19\"",
        "   250   281     21  ok   none   \"nul\\x00 and \\xff\\xfe not utf-8\""]


def test_dump_is_bounded_by_maxbytes_and_expands_wrappers(debug_broker):
    broker, port = debug_broker()
    produce_visible(broker, "t", 0, [b"plain-%d" % i for i in range(10)])  # 17 bytes each
    produce_raw(broker, "t", 0, encode_compressed_message_set([b"in-1", b"in-2", b"in\x003"], GZIP))
    with DebugSession(port) as session:
        bounded = session.ask("dump t 0 0 40")
        assert [columns(line)[0] for line in bounded[1:-1]] == ["0", "17"]
        assert bounded[-1] == "next offset 34"
        wrapper = session.ask("dump t 0 170")
        end = int(session.ask("offsets t 0")[1])
    assert [columns(line)[:6] for line in wrapper[1:-1]] == [
        ["170", "170", "4", "ok", "gzip", "1/3"],
        ["170", "170", "4", "ok", "gzip", "2/3"],
        ["170", str(end), "4", "ok", "gzip", "3/3"]]
    assert wrapper[3].endswith('"in\\x003"')
    assert wrapper[-1] == f"next offset {end}"


def test_flush_makes_produced_data_visible(debug_broker):
    broker, port = debug_broker(properties={"log.flush.interval": "100000",
                                            "log.default.flush.interval.ms": "3600000"})
    produce_payloads(broker, "t", 0, [b"held back"])
    with DebugSession(port) as session, broker.connect() as client:
        assert columns(session.ask("partitions t")[1])[2:6] == ["0", "0", "1", "19"]  # end, bytes, segs, unflushed
        assert session.ask("tail t 0") == ["(no flushed messages in t-0)"]
        assert latest_offset(client, "t") == 0
        assert session.ask("flush t") == ["log  end offset  state", "t-0          19  flushed"]
        assert session.ask("tail t 0")[1].endswith('"held back"')
        assert latest_offset(client, "t") == 19


def test_zk_ls_and_get_show_the_broker_registration(debug_broker, zk_connect):
    broker, port = debug_broker(broker_id=5, zk_connect=zk_connect)
    with DebugSession(port) as session:
        assert wait_for(lambda: session.ask("zk ls /brokers/ids") == ["5"], "broker 5 registered")
        data = session.ask("zk get /brokers/ids/5")
        assert data[0].startswith('data ') and data[0].endswith(f':127.0.0.1:{broker.port}"')
        assert columns(data[-1])[:2] == ["ephemeral", "owner"] and columns(data[-1])[2].startswith("0x")
        assert session.ask("zk ls /nope") == ["error: no ZooKeeper node /nope"]
        assert session.ask("zk ls brokers") == [
            "error: PATH must be an absolute ZooKeeper path like /brokers/ids, not 'brokers'"]
        assert session.ask("zk ls /") != []


def test_an_idle_session_is_closed_after_the_timeout(debug_broker):
    _broker, port = debug_broker(idle_timeout_s=0.5)
    with DebugSession(port) as session:
        assert session.ask("topics") == ["(no topics)"]
        started = time.monotonic()
        assert session.answer() == ["error: idle for 0.5 s: closing"]
        assert session.is_closed_by_peer()
        assert 0.3 < time.monotonic() - started < 5


def test_random_input_and_long_lines_never_hurt_the_broker(debug_broker):
    broker, port = debug_broker()
    with DebugSession(port) as session:
        session.sock.sendall(bytes(range(256)) * 3 + b"\r\n\x1b[2J\xff\xf4\xff\xfd\x06\n")
        session.sock.sendall(b"z" * 100_000)  # no newline: refused before it is kept
        answers = session.read_to_end()
    assert answers.endswith(b"error: line too long (more than 1024 bytes)\n\n")
    assert b"error: the command is not UTF-8 text\n\n" in answers
    with DebugSession(port) as session:
        assert session.ask("topics") == ["(no topics)"]
    produce_visible(broker, "t", 0, [b"still serving"])
    with broker.connect() as client:
        assert latest_offset(client, "t") == 23


# --- ZooKeeper's four-letter words --------------------------------------------------------------

def one_shot(port: int, data: bytes, timeout_s: float = 10.0) -> bytes:
    """What ``printf DATA | nc 127.0.0.1 PORT`` prints: send, half-close, read until closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def mntr(port: int) -> dict[str, str]:
    lines = one_shot(port, b"mntr\n").decode().splitlines()
    assert all(re.fullmatch(r"tb_[a-z_]+\t[^\t ]+", line) for line in lines), lines
    return dict(line.split("\t") for line in lines)


def test_ruok_as_a_one_shot_answers_imok_and_closes(debug_broker):
    _broker, port = debug_broker()
    assert one_shot(port, b"ruok\n") == b"imok\n"
    assert one_shot(port, b"ruok") == b"imok\n"  # printf ruok | nc: no newline before the half-close


def test_mntr_as_a_one_shot_counts_messages_in_and_out(debug_broker):
    broker, port = debug_broker()
    produce_visible(broker, "t", 0, [b"one", b"two", b"six"])
    before = mntr(port)
    assert len(before) >= 12
    assert (before["tb_version"], before["tb_broker_id"]) == (__version__, "0")
    assert (before["tb_messages_in"], before["tb_bytes_in"], before["tb_partitions"]) == ("3", "39", "1")
    with broker.connect() as client:
        fetch_all(client, "t")
    after = mntr(port)
    assert int(after["tb_messages_out"]) == int(before["tb_messages_out"]) + 3
    assert int(after["tb_bytes_out"]) == int(before["tb_bytes_out"]) + 39
    assert int(after["tb_requests_fetch"]) > int(before["tb_requests_fetch"])


def test_cons_and_stat_list_an_open_kafka_connection_by_its_peer_port(debug_broker):
    broker, port = debug_broker()
    with broker.connect() as client:
        latest_offset(client, "t")  # one request answered
        peer = f" /127.0.0.1:{client.sock.getsockname()[1]}[1](queued=0,recved=1,sent=1,"
        cons = one_shot(port, b"cons\n").decode().splitlines()
        assert [line for line in cons if line.startswith(peer)], cons
        assert re.search(r",lop=offsets,idle=\d+\)$", next(line for line in cons if line.startswith(peer)))
        stat = one_shot(port, b"stat\n").decode().splitlines()
        assert stat[:2] == [f"twisted-broker version: {__version__}", "Clients:"]
        assert any(line.startswith(peer) for line in stat)
        assert {"Broker id: 0", "Connections: 1", "Mode: standalone"} <= set(stat)
        assert any(re.fullmatch(r"Uptime: \d+ s", line) for line in stat)
    srvr = one_shot(port, b"srvr\n").decode().splitlines()
    assert srvr[0] == f"twisted-broker version: {__version__}" and "Clients:" not in srvr


def test_words_inside_an_interactive_session_keep_it_open(debug_broker):
    broker, port = debug_broker()
    produce_visible(broker, "t", 0, [b"one"])
    with DebugSession(port) as session:
        assert session.ask("ruok") == ["imok"]
        assert len(session.ask("mntr")) >= 12
        assert session.ask("offsets t 0-0") == session.ask("offsets t 0") == ["offset", "    13"]
        assert session.ask("tail t 3-0") == [
            "error: partition '3-0' is on broker 3; this is broker 0: give P or 0-P"]
        assert session.ask("ruok") == ["imok"]
        assert not session.is_closed_by_peer(timeout_s=0.3)


def test_the_words_show_the_listener_of_todays_kafka_clients_apart(debug_broker):
    broker, port = debug_broker(extra_args=["--kafka-endpoint", "tcp:0:interface=127.0.0.1",
                                            "--kafka-port-file", "kafka-port"])
    kafka_port = int((broker.directory / "kafka-port").read_text())
    before = mntr(port)
    assert (before["tb_kafka_open_connections"], before["tb_kafka_connections_total"]) == ("0", "0")
    with socket.create_connection(("127.0.0.1", kafka_port), timeout=10) as client:
        reader = client.makefile("rb")
        for correlation_id, (api_key, version, body) in enumerate(
                [(API_VERSIONS, 0, {}), (METADATA, 1, {"topics": None})]):
            client.sendall(encode_kafka_request(api_key, version, correlation_id, "debug-test", body))
            (size,) = struct.unpack(">i", reader.read(4))
            assert decode_kafka_response(api_key, version, reader.read(size))[0] == correlation_id
        figures = mntr(port)
        assert (figures["tb_kafka_open_connections"], figures["tb_kafka_connections_total"]) == ("1", "1")
        assert (figures["tb_kafka_requests_api_versions"], figures["tb_kafka_requests_metadata"]) == ("1", "1")
        assert int(figures["tb_kafka_bytes_received"]) > 0 and int(figures["tb_kafka_bytes_sent"]) > 0
        assert figures["tb_open_connections"] == before["tb_open_connections"]  # the 0.7 port's
        peer = f" /127.0.0.1:{client.getsockname()[1]}[1](queued=0,recved=2,sent=2,"
        cons = one_shot(port, b"cons\n").decode().splitlines()
        assert re.search(r",lop=Metadata,idle=\d+\)$", next(line for line in cons if line.startswith(peer))), cons
        srvr = one_shot(port, b"srvr\n").decode().splitlines()
        assert {"Kafka-client connections: 1", "Kafka-client requests: 2 (ApiVersions 1, Metadata 1)"} <= set(srvr)
