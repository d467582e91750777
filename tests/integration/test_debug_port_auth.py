"""The debug port beyond loopback (docs/security.md, "The debug port"): a real ``twistd -n
broker`` refuses to start unprotected, and with ``--debug-password-file`` serves only after
``auth``. The broker binds every interface (``interface=0.0.0.0``); the test connects to
127.0.0.1, which is one of them."""

from __future__ import annotations

import socket
import subprocess
import time

import pytest

from tests.support.brokers import BrokerProcess, DebugSession
from tests.support.forked_processes import TWISTD

PASSWORD = "correct horse"


def test_a_debug_port_beyond_loopback_without_protection_fails_at_start_saying_why(tmp_path):
    broker = BrokerProcess(tmp_path / "b")
    result = subprocess.run([*TWISTD, "-n", "--pidfile=", "broker", "--config", str(broker.config),
                             "--debug", "tcp:0:interface=0.0.0.0"],
                            cwd=broker.directory, capture_output=True, timeout=60)
    assert result.returncode != 0
    error = result.stderr.decode() + result.stdout.decode()
    assert "reachable beyond loopback" in error and "--debug-password-file" in error
    assert not broker.port_file.exists()  # nothing served


@pytest.fixture
def guarded(broker_factory, tmp_path):
    (tmp_path / "pw").write_text(PASSWORD + "\n")
    port_file = tmp_path / "debug-port"
    broker = broker_factory(extra_args=["--debug", "tcp:0:interface=0.0.0.0", "--debug-port-file", str(port_file),
                                        "--debug-password-file", str(tmp_path / "pw")])
    return broker, int(port_file.read_text())


def test_commands_before_auth_are_refused_and_the_right_password_serves_stat_and_mntr(guarded):
    broker, port = guarded
    with DebugSession(port) as session:
        assert session.greeting == ["twisted_broker debug port: send 'auth PASSWORD' first"]
        refused = ["error: authentication required: send 'auth PASSWORD' first"]
        assert session.ask("mntr") == refused
        assert session.ask("tail t 0") == refused
        assert session.ask(f"auth {PASSWORD}") == ["twisted_broker debug port, broker 0: 'help' lists the commands"]
        assert session.ask("stat")[0].startswith("twisted-broker version:")
        assert any(line.startswith("tb_open_connections\t") for line in session.ask("mntr"))


def test_a_four_letter_word_one_shot_needs_auth_first(guarded):
    _broker, port = guarded
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"ruok\n")
        sock.shutdown(socket.SHUT_WR)
        answer = b"".join(iter(lambda: sock.recv(4096), b""))
    assert b"imok" not in answer and b"authentication required" in answer
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"auth {PASSWORD}\nruok\n".encode())
        sock.shutdown(socket.SHUT_WR)
        answer = b"".join(iter(lambda: sock.recv(4096), b""))
    assert answer.endswith(b"imok\n\n")


def test_a_wrong_password_closes_after_a_delay_with_one_warning(guarded):
    broker, port = guarded
    with DebugSession(port) as session:
        started = time.monotonic()
        session.sock.sendall(b"auth wrong\nmntr\n")
        rest = session.read_to_end()
        assert time.monotonic() - started >= 0.4  # the delay (0.5 s) before the close
    assert rest == b"error: authentication failed\n\n"
    log = broker.log_file.read_text()
    assert log.count("debug port: wrong password from 127.0.0.1:") == 1
    assert "wrong\n" not in log.split("wrong password from", 1)[1].split("\n", 1)[0]


def test_an_ssl_debug_port_requiring_client_certificates_serves_their_holders_only(broker_factory, tmp_path):
    import ssl

    import trustme

    ca = trustme.CA()
    server, client = ca.issue_cert("127.0.0.1"), ca.issue_cert("operator@example.com")
    (tmp_path / "ca").mkdir()
    ca.cert_pem.write_to_path(str(tmp_path / "ca" / "ca.pem"))
    server.private_key_pem.write_to_path(str(tmp_path / "server.key"))
    server.cert_chain_pems[0].write_to_path(str(tmp_path / "server.pem"))
    port_file = tmp_path / "debug-port"
    broker_factory(extra_args=[
        "--debug", f"ssl:0:interface=0.0.0.0:privateKey={tmp_path / 'server.key'}:certKey={tmp_path / 'server.pem'}"
                   f":caCertsDir={tmp_path / 'ca'}", "--debug-port-file", str(port_file)])
    port = int(port_file.read_text())

    def ask(context: ssl.SSLContext) -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
                sock.sendall(b"ruok\n")
                return b"".join(iter(lambda: sock.recv(4096), b""))

    holder = ssl.create_default_context()
    ca.configure_trust(holder)
    client.configure_cert(holder)
    assert ask(holder) == b"imok\n"
    stranger = ssl.create_default_context()
    ca.configure_trust(stranger)
    with pytest.raises((ssl.SSLError, ConnectionError)):
        ask(stranger)
