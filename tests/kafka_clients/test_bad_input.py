"""Bad input on the modern port: each kind of broken frame gets the protocol's answer (an
ApiVersions above v2: error 35 with the supported list, on a connection that stays usable) or
a closed connection with one WARNING naming the peer, while a client on another connection
keeps being served; a seeded fuzzer (tests/support/kafka_clients/fuzz_modern.py) throws thousands of mutated
frames at it beside a well-behaved client, and the broker neither dies nor hangs a connection."""

from __future__ import annotations

import os
import socket
import struct
import threading
import time

import pytest

from tests.support.kafka_clients.fuzz_modern import ModernFrameFuzzer
from tests.support.kafka_clients.kafka_frames import (
    API_VERSIONS, METADATA, UNSUPPORTED_VERSION, Connection, api_versions_v3, decode_api_versions,
    decode_metadata_v1, frame, metadata_v1, string16,
)
from tests.support.faults.wire_load import CaseRunner
from tests.support.reliability import record

MAX_REQUEST_BYTES = 104_857_600  # max.socket.request.bytes, etc/server.properties' default
FUZZ_CASES = {"short": 10_000, "soak": 100_000}

BAD_FRAMES = {
    "garbage": struct.pack(">i", 40) + bytes(range(200, 240)),
    "unknown api key": frame(999, 0, 5),
    "unknown version of a served api": frame(METADATA, 99, 5, struct.pack(">i", -1)),
    "truncated body": frame(METADATA, 1, 5, struct.pack(">i", 1) + struct.pack(">h", 20) + b"abc"),
    "trailing bytes": frame(METADATA, 1, 5, struct.pack(">i", -1) + b"extra"),
    "client id longer than the frame": struct.pack(">ihhih", 11, METADATA, 1, 5, 500) + b"x",
    "negative size": struct.pack(">i", -4) + b"abcd",
    "zero size": struct.pack(">i", 0),
    "size over max.socket.request.bytes": struct.pack(">i", MAX_REQUEST_BYTES + 1) + b"\x00" * 100,
    "huge size": struct.pack(">i", 2**31 - 1) + b"\x00" * 100,
}


def served(broker) -> bool:
    """A new connection gets a Metadata answer with this broker in it."""
    with Connection(broker.kafka_port) as connection:
        answer = decode_metadata_v1(connection.request(metadata_v1(3, [])))
    return answer["correlation_id"] == 3 and 0 in answer["brokers"]


def warnings_naming(broker, port: int) -> list[str]:
    return [line for line in broker.log_tail(200_000).splitlines() if "#warn]" in line and f":{port}" in line]


@pytest.mark.needs_api(API_VERSIONS, METADATA)
def test_apiversions_above_v2_gets_error_35_with_the_list_and_the_connection_stays_usable(modern_broker):
    with Connection(modern_broker.kafka_port) as connection:
        correlation_id, error, apis = decode_api_versions(connection.request(api_versions_v3(1234)))
        assert (correlation_id, error) == (1234, UNSUPPORTED_VERSION)
        assert apis == modern_broker.apis and apis[API_VERSIONS] == (0, 2)
        # the client falls back, on the same connection
        for version in (2, 1, 0):
            correlation_id, error, again = decode_api_versions(
                connection.request(frame(API_VERSIONS, version, 40 + version)), version)
            assert (correlation_id, error, again) == (40 + version, 0, apis)
        assert decode_metadata_v1(connection.request(metadata_v1(99, [])))["correlation_id"] == 99


@pytest.mark.needs_api(API_VERSIONS, METADATA)
@pytest.mark.parametrize("case", BAD_FRAMES)
def test_a_bad_frame_closes_its_connection_with_one_warning_and_others_are_served(modern_broker, case):
    with Connection(modern_broker.kafka_port) as steady, Connection(modern_broker.kafka_port) as bad:
        assert steady.request(metadata_v1(1, []))[:4] == struct.pack(">i", 1)
        peer_port = bad.sock.getsockname()[1]
        bad.send(BAD_FRAMES[case])
        started = time.monotonic()
        assert bad.is_closed_by_peer(), f"{case}: the connection stayed open"
        # refused at once, without waiting for a huge frame's bytes
        assert time.monotonic() - started < 3.0
        assert steady.request(metadata_v1(2, []))[:4] == struct.pack(">i", 2)
    assert served(modern_broker)
    deadline = time.monotonic() + 5
    while not warnings_naming(modern_broker, peer_port) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(warnings_naming(modern_broker, peer_port)) == 1, modern_broker.log_tail()


INVALID_TOPIC = 17


@pytest.mark.needs_api(METADATA)
def test_metadata_for_invalid_topic_names_answers_error_17_per_topic(modern_broker):
    names = ["..", "a/b", "../escape", "x" * 300, "tab\tname", ""]
    with Connection(modern_broker.kafka_port) as connection:
        answer = decode_metadata_v1(connection.request(metadata_v1(21, names)))
        assert {name: error for name, (error, _) in answer["topics"].items()} == dict.fromkeys(names, INVALID_TOPIC)
        assert decode_metadata_v1(connection.request(metadata_v1(22, [])))["correlation_id"] == 22


@pytest.mark.needs_api(API_VERSIONS, METADATA)
def test_a_frame_cut_off_by_the_peer_leaves_nothing_behind(modern_broker):
    request = metadata_v1(8, ["cut"])
    for cut in (2, 4, 10, len(request) - 1):
        with socket.create_connection(("127.0.0.1", modern_broker.kafka_port)) as sock:
            sock.sendall(request[:cut])
            sock.shutdown(socket.SHUT_WR)
            sock.settimeout(5)
            assert sock.recv(100) == b""
    assert served(modern_broker)


class SteadyClient(threading.Thread):
    """A well-behaved client beside the fuzzer: Metadata then ApiVersions, round after round,
    timing each round; any error or wrong answer is kept."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port, self.rounds, self.slowest_s, self.errors = port, 0, 0.0, []
        self._stopping = threading.Event()

    def run(self) -> None:
        try:
            with Connection(self.port) as connection:
                while not self._stopping.is_set():
                    started = time.monotonic()
                    answer = decode_metadata_v1(connection.request(metadata_v1(self.rounds, ["control"])))
                    assert answer["correlation_id"] == self.rounds, answer
                    correlation_id, error, _ = decode_api_versions(connection.request(frame(API_VERSIONS, 0, 7)))
                    assert (correlation_id, error) == (7, 0)
                    self.slowest_s = max(self.slowest_s, time.monotonic() - started)
                    self.rounds += 1
                    time.sleep(0.01)
        except Exception as exc:  # noqa: BLE001 (reported by the test)
            self.errors.append(repr(exc))

    def stop(self) -> None:
        self._stopping.set()
        self.join(10)


@pytest.mark.needs_api(API_VERSIONS, METADATA)
def test_fuzzed_frames_never_crash_the_broker_nor_stop_it_serving_others(modern_broker, request):
    seed = int(os.environ.get("RELIABILITY_SEED", time.time_ns() % 1_000_000))
    cases = FUZZ_CASES[os.environ.get("RELIABILITY_SCALE", "short")]
    fuzzer = ModernFrameFuzzer(seed)
    steady = SteadyClient(modern_broker.kafka_port)
    steady.start()
    runner = CaseRunner(modern_broker.kafka_port, concurrency=8)
    started = time.monotonic()
    runner.run(fuzzer.case() for _ in range(cases))
    elapsed = time.monotonic() - started
    steady.stop()
    assert modern_broker.process.process.poll() is None, f"seed {seed}: the broker died\n{modern_broker.log_tail()}"
    assert not runner.hung, f"seed {seed}: {len(runner.hung)} connections never closed, e.g. {runner.hung[0][:200]!r}"
    assert not steady.errors, f"seed {seed}: the steady client failed: {steady.errors}"
    assert runner.bytes_received > 0, "no case was answered: the well-formed requests did not get through"
    assert steady.rounds > 0 and steady.slowest_s < 5.0, (steady.rounds, steady.slowest_s)
    log_text = modern_broker.log_tail(10_000_000)
    for word in ("Traceback", "Unhandled"):
        at = log_text.find(word)
        assert at < 0, f"seed {seed}: the broker logged\n{log_text[max(0, at - 600):at + 3000]}"
    assert served(modern_broker)
    record(request, cases_tried=cases, connections_held=runner.connections, faults_injected=cases,
           messages_checked=steady.rounds)
    print(f"\nmodern fuzz seed {seed}: {cases} cases on {runner.connections} connections in {elapsed:.1f} s, "
          f"{runner.bytes_received:,} bytes answered, steady rounds {steady.rounds} (slowest {steady.slowest_s:.3f} s)")
