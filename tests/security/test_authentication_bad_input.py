"""Authentication's bad input over real sockets (docs/security.md, "The SASL exchange",
"Failures"): malformed SaslHandshake and SaslAuthenticate frames, an exchange out of order, a
request before authentication, SCRAM with a wrong nonce and with a wrong proof (scramp's client
side, driven by hand), a thousand failed logins from one address while an authenticated
producer keeps producing, and the failed-login counter in ``mntr`` and ``/metrics``. Each is a
clean refusal, and the broker keeps serving everyone else.

The frames are written by hand from Kafka's published layouts (as tests/support/kafka_clients/
kafka_frames.py's), not with the broker's codecs:

    SaslHandshake v1 request:     mechanism string16
    SaslHandshake v1 response:    correlation_id int32, error_code int16, [mechanism string16]
    SaslAuthenticate v1 request:  auth_bytes bytes (int32 length)
    SaslAuthenticate v1 response: correlation_id int32, error_code int16, error_message
                                  nullable string16, auth_bytes bytes, session_lifetime_ms int64
"""

from __future__ import annotations

import re
import statistics
import struct
import subprocess
import sys
import time

import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families
from scramp import ScramClient

from tests.support.brokers import DebugSession
from tests.support.console_process import http, wait_for_port_file
from tests.support.kafka_clients.kafka_frames import Connection, frame, metadata_v1, string16
from tests.support.kafka_clients.secure import Login, SecureBroker, librdkafka_config, start_secure
from tests.support.polling import wait_for
from tests.support.zookeeper import new_chroot

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
ILLEGAL_SASL_STATE, SASL_AUTHENTICATION_FAILED = 34, 58
ALICE = ("alice", "alice-secret")  # SCRAM-SHA-256 (tests/support/kafka_clients/secure.py's USERS)
FAILED = "Authentication failed: invalid credentials with SASL mechanism"


@pytest.fixture(scope="module")
def secure(zookeeper, tmp_path_factory):
    directory = tmp_path_factory.mktemp("sasl-bad-input")
    broker = start_secure(directory, new_chroot(zookeeper), extra_args=[
        "--debug", "tcp:0:interface=127.0.0.1", "--debug-port-file", str(directory / "debug-port"),
        "--webui", "tcp:0:interface=127.0.0.1", "--webui-port-file", str(directory / "webui-port")])
    broker.debug_port = wait_for_port_file(directory / "debug-port", broker.process.process, 30)
    broker.webui_port = wait_for_port_file(directory / "webui-port", broker.process.process, 30)
    yield broker
    broker.process.kill()


# -- frames ----------------------------------------------------------------------------------------

def handshake(correlation_id: int, mechanism: str, version: int = 1) -> bytes:
    return frame(SASL_HANDSHAKE, version, correlation_id, string16(mechanism))


def authenticate(correlation_id: int, token: bytes) -> bytes:
    return frame(SASL_AUTHENTICATE, 1, correlation_id, struct.pack(">i", len(token)) + token)


def handshake_answer(body: bytes) -> tuple[int, int, list[str]]:
    correlation_id, error, count = struct.unpack_from(">ihi", body)
    position, mechanisms = 10, []
    for _ in range(count):
        (size,) = struct.unpack_from(">h", body, position)
        mechanisms.append(body[position + 2:position + 2 + size].decode())
        position += 2 + size
    return correlation_id, error, mechanisms


def authenticate_answer(body: bytes) -> tuple[int, str | None, bytes]:
    """(error code, error message, auth bytes) of a SaslAuthenticate v1 answer."""
    _correlation_id, error, size = struct.unpack_from(">ihh", body)
    position = 8
    message = None
    if size >= 0:
        message, position = body[position:position + size].decode(), position + size
    (length,) = struct.unpack_from(">i", body, position)
    token = body[position + 4:position + 4 + length]
    assert len(body) == position + 4 + length + 8, "a SaslAuthenticate v1 answer ends with session_lifetime_ms"
    return error, message, token


def sasl(broker: SecureBroker) -> Connection:
    return Connection(broker.ports["SASL_PLAINTEXT"])


def warnings_about(broker: SecureBroker, port: int, text: str) -> int:
    """The log's WARNING lines naming the client's port ``port`` and containing ``text``."""
    return sum(1 for line in broker.log_tail(2_000_000).splitlines()
               if "WARNING" in line or "closing connection" in line or "authentication failed" in line
               if f":{port}" in line and text in line)


def produce_works(broker: SecureBroker) -> bool:
    """An authenticated client still produces (SCRAM-SHA-256 on SASL_PLAINTEXT)."""
    results = []
    producer = Producer({**librdkafka_config(broker, Login("SASL_PLAINTEXT", "SCRAM-SHA-256", *ALICE)),
                         "message.timeout.ms": 10000})
    producer.produce("still-serving", b"v", partition=0, on_delivery=lambda err, msg: results.append(err))
    producer.flush(15)
    return results == [None]


def scram_first(connection: Connection, client: ScramClient) -> str:
    """Handshake SCRAM-SHA-256 and send client-first; the server-first."""
    _, error, _ = handshake_answer(connection.request(handshake(1, "SCRAM-SHA-256")))
    assert error == 0
    error, message, token = authenticate_answer(connection.request(authenticate(2, client.get_client_first().encode())))
    assert (error, message) == (0, None), message
    return token.decode()


# -- the tests ------------------------------------------------------------------------------

@pytest.mark.parametrize("case, request_frame", [
    ("handshake body cut short", frame(SASL_HANDSHAKE, 1, 1, struct.pack(">h", 40) + b"PLA")),
    ("handshake mechanism not UTF-8", frame(SASL_HANDSHAKE, 1, 1, struct.pack(">h", 2) + b"\xff\xfe")),
    ("authenticate bytes longer than the frame", frame(SASL_AUTHENTICATE, 1, 1, struct.pack(">i", 1000) + b"x")),
    ("authenticate bytes with trailing garbage", frame(SASL_AUTHENTICATE, 1, 1, struct.pack(">i", 1) + b"xyz")),
    ("handshake of an unknown version", handshake(1, "PLAIN", version=9)),
])
def test_a_malformed_sasl_frame_closes_its_connection_and_nothing_else(secure, case, request_frame):
    with sasl(secure) as bad, sasl(secure) as good:
        port = bad.sock.getsockname()[1]
        bad.send(request_frame)
        assert bad.is_closed_by_peer(), case
        wait_for(lambda: warnings_about(secure, port, "") == 1, f"one WARNING naming the peer ({case})")
        assert handshake_answer(good.request(handshake(5, "PLAIN")))[:2] == (5, 0)  # the next one is served


@pytest.mark.parametrize("mechanism, token", [
    ("PLAIN", b"no separators at all"),
    ("PLAIN", b"\0alice\0alice-secret\0extra"),
    ("PLAIN", b"\0\xff\xfe\0alice-secret"),
    ("SCRAM-SHA-256", b"\xff\xfe not UTF-8"),
    ("SCRAM-SHA-256", b"n,,n=alice"),  # client-first without a nonce
    ("SCRAM-SHA-256", b"x" * 20000),  # above the token bound
], ids=["plain-no-nul", "plain-four-parts", "plain-not-utf8", "scram-not-utf8", "scram-no-nonce", "too-long"])
def test_a_malformed_sasl_token_is_a_failed_login(secure, mechanism, token):
    with sasl(secure) as connection:
        assert handshake_answer(connection.request(handshake(1, mechanism)))[1] == 0
        error, message, _ = authenticate_answer(connection.request(authenticate(2, token)))
        assert (error, message) == (SASL_AUTHENTICATION_FAILED, f"{FAILED} {mechanism}")
        assert connection.is_closed_by_peer()
    assert produce_works(secure)


@pytest.mark.parametrize("steps, reason", [
    ([authenticate(1, b"\0alice\0alice-secret")], "SaslAuthenticate in state start"),
    ([handshake(1, "PLAIN"), handshake(2, "PLAIN")], "SaslHandshake in state handshaken"),
    ([handshake(1, "PLAIN", version=0)], "SaslHandshake v0"),
    ([handshake(1, "PLAIN"), authenticate(2, b"\0alice\0alice-secret"), handshake(3, "PLAIN")], None),
], ids=["authenticate-first", "second-handshake", "handshake-v0", "handshake-after-login"])
def test_a_sasl_exchange_out_of_order_is_illegal_sasl_state_and_closed(secure, steps, reason):
    with sasl(secure) as connection:
        port = connection.sock.getsockname()[1]
        *before, last = steps
        for step in before:
            connection.request(step)
        body = connection.request(last)
        error = handshake_answer(body)[1] if struct.unpack_from(">h", last, 4)[0] == SASL_HANDSHAKE \
            else authenticate_answer(body)[0]
        assert error == ILLEGAL_SASL_STATE
        if reason is not None:  # before a login: the connection closes, one WARNING saying why
            assert connection.is_closed_by_peer()
            wait_for(lambda: warnings_about(secure, port, reason) == 1, f"one WARNING: {reason}")
        else:  # once logged in, the table answers 34 (re-authentication is not served) and serves on
            assert not connection.is_closed_by_peer(0.5)


def test_a_request_before_authentication_closes_with_one_warning(secure):
    with sasl(secure) as connection:
        port = connection.sock.getsockname()[1]
        connection.send(metadata_v1(1))
        assert connection.is_closed_by_peer()
    wait_for(lambda: warnings_about(secure, port, "Metadata before SASL authentication") == 1,
             "one WARNING naming the peer and the request")
    time.sleep(0.3)
    assert warnings_about(secure, port, "") == 1  # one line, no more


def test_scram_with_a_wrong_nonce_or_a_wrong_proof_fails_and_a_right_one_logs_in(secure):
    with sasl(secure) as connection:  # the control: scramp's client, the right password
        client = ScramClient(["SCRAM-SHA-256"], *ALICE)
        client.set_server_first(scram_first(connection, client))
        error, message, token = authenticate_answer(connection.request(authenticate(3, client.get_client_final().encode())))
        assert (error, message) == (0, None)
        client.set_server_final(token.decode())  # scramp checks the server's signature: raises if wrong

    with sasl(secure) as connection:  # the nonce changed in client-final
        client = ScramClient(["SCRAM-SHA-256"], *ALICE)
        server_first = scram_first(connection, client)
        client.set_server_first(server_first)
        nonce = re.search(r"r=([^,]+)", server_first).group(1)
        final = client.get_client_final().replace(f"r={nonce}", f"r={nonce[:-1]}{'A' if nonce[-1] != 'A' else 'B'}")
        error, message, _ = authenticate_answer(connection.request(authenticate(3, final.encode())))
        assert (error, message) == (SASL_AUTHENTICATION_FAILED, f"{FAILED} SCRAM-SHA-256")
        assert connection.is_closed_by_peer()

    with sasl(secure) as connection:  # a proof made with the wrong password
        client = ScramClient(["SCRAM-SHA-256"], "alice", "not-her-password")
        client.set_server_first(scram_first(connection, client))
        error, message, _ = authenticate_answer(connection.request(authenticate(3, client.get_client_final().encode())))
        assert (error, message) == (SASL_AUTHENTICATION_FAILED, f"{FAILED} SCRAM-SHA-256")
        assert connection.is_closed_by_peer()


FLOOD = """
import socket, struct, sys
port, handshake, authenticate = int(sys.argv[1]), bytes.fromhex(sys.argv[2]), bytes.fromhex(sys.argv[3])
def answer(sock):
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before the answer")
        data += chunk
    return data[4:]
refused = 0
for _ in range(1000):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(handshake)
        answer(sock)
        sock.sendall(authenticate)
        refused += struct.unpack_from(">h", answer(sock), 4)[0] == 58
print(refused)
"""


def failed_login(broker: SecureBroker) -> None:
    with sasl(broker) as connection:
        connection.request(handshake(1, "PLAIN"))
        error, _, _ = authenticate_answer(connection.request(authenticate(2, b"\0alice\0wrong-password")))
        assert error == SASL_AUTHENTICATION_FAILED


def test_a_thousand_failed_logins_do_not_hold_up_an_authenticated_producer(secure):
    producer = Producer({**librdkafka_config(secure, Login("SASL_PLAINTEXT", "SCRAM-SHA-256", *ALICE)),
                         "message.timeout.ms": 10000, "linger.ms": 0})

    def produce_one() -> float:
        results, started = [], time.perf_counter()
        producer.produce("beside-failures", b"v", partition=0, on_delivery=lambda err, msg: results.append(err))
        producer.flush(15)
        assert results == [None], results
        return time.perf_counter() - started

    produce_one()  # connected and authenticated
    quiet = [produce_one() for _ in range(100)]
    busy = []
    # The logins fail from a process of their own (one address, one connection after another),
    # so that they do not share this process's interpreter lock with the producer's figures.
    flooding = subprocess.Popen([sys.executable, "-c", FLOOD, str(secure.ports["SASL_PLAINTEXT"]),
                                 handshake(1, "PLAIN").hex(), authenticate(2, b"\0alice\0wrong-password").hex()],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started = time.monotonic()
    while flooding.poll() is None:
        busy.append(produce_one())
    flood_s = time.monotonic() - started
    out, err = flooding.communicate()
    assert flooding.returncode == 0 and out.split() == ["1000"], err[-2000:]
    quiet_p99, busy_p99 = statistics.quantiles(quiet, n=100)[98], statistics.quantiles(busy, n=100)[98]
    print(f"\n1000 failed logins in {flood_s:.1f} s; produces meanwhile: {len(busy)}, median "
          f"{statistics.median(busy) * 1000:.1f} ms, p99 {busy_p99 * 1000:.1f} ms, max {max(busy) * 1000:.1f} ms; "
          f"before: median {statistics.median(quiet) * 1000:.1f} ms, p99 {quiet_p99 * 1000:.1f} ms")
    assert len(busy) >= 20  # the producer kept producing the whole time
    # Each failed PLAIN login costs the reactor one PBKDF2 (4096 iterations, ~2 ms); the timers
    # of the delayed closes cost nothing. Bound: no produce waits more than half a second.
    assert max(busy) < 0.5, f"a produce took {max(busy) * 1000:.0f} ms during the failed logins"


def mntr_failed(broker: SecureBroker) -> int:
    with DebugSession(broker.debug_port) as session:
        lines = session.ask("mntr")
    return int(dict(line.split("\t", 1) for line in lines if "\t" in line)["tb_kafka_failed_authentications"])


def metrics_failed(broker: SecureBroker) -> int:
    text = http(broker.webui_port, "GET", "/metrics").text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "twisted_broker_broker_kafka_failed_authentications_total":
                return int(sample.value)
    raise AssertionError("no twisted_broker_broker_kafka_failed_authentications in /metrics")


def test_failed_logins_are_counted_in_mntr_and_metrics(secure):
    before = mntr_failed(secure)
    assert metrics_failed(secure) == before
    for _ in range(3):
        failed_login(secure)
    with sasl(secure) as connection:  # an exchange out of order is not a failed login
        connection.request(authenticate(1, b"\0alice\0alice-secret"))
    wait_for(lambda: mntr_failed(secure) == before + 3, "mntr counts the three failed logins")
    assert metrics_failed(secure) == before + 3
