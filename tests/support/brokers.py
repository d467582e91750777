"""Real broker processes for tests, and raw-socket clients of their ports.

Brokers are real ``twistd -n broker`` processes on loopback with ``--port 0``, forked from a
warm interpreter that has imported Twisted and the project (tests/support/forked_processes.py;
``TEST_PROCESSES=exec`` exec's each instead); they write the port they bound to a file, and their
files live under the test's ``tmp_path``. The fixtures
``broker_factory`` and ``broker`` (registered for every folder by tests/conftest.py) stop what
they started.
"""

from __future__ import annotations

import signal
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.forked_processes import ForkedProcess, launch as launch_twistd

ROOT = Path(__file__).resolve().parents[2]


class BrokerProcess:
    """A ``twistd -n broker`` child process. ``start()`` waits until it listens."""

    def __init__(self, directory: Path, *, broker_id: int = 0, zk_connect: str | None = None,
                 properties: dict[str, str] | None = None, extra_args: list[str] | None = None,
                 twistd_args: list[str] | None = None) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.log_dir = directory / "logs"
        self.port_file = directory / "port"
        self.log_file = directory / "twistd.log"
        self.stderr_file = directory / "stderr.log"
        self.config = directory / "server.properties"
        settings = {"brokerid": str(broker_id), "hostname": "127.0.0.1", "port": "0",
                    "log.dir": str(self.log_dir), "num.partitions": "1",
                    "log.flush.interval": "1", "log.default.flush.scheduler.interval.ms": "100",
                    "enable.zookeeper": "true" if zk_connect else "false",
                    "zk.sessiontimeout.ms": "2000", "zk.connectiontimeout.ms": "5000"}
        if zk_connect:
            settings["zk.connect"] = zk_connect
        settings.update(properties or {})
        self.config.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
        self.broker_id = broker_id
        self.extra_args = extra_args or []  # the broker plugin's options
        self.twistd_args = twistd_args or []  # twistd's own, before the plugin's name (--reactor=...)
        self.process: subprocess.Popen | ForkedProcess | None = None
        self.port: int | None = None

    def start(self, timeout_s: float = 30.0) -> "BrokerProcess":
        self.launch()
        return self.wait_listening(timeout_s)

    def launch(self) -> None:
        """Start the process without waiting for it (``wait_listening`` does): brokers launched
        together start together."""
        if self.port_file.exists():
            self.port_file.unlink()
        # stderr to a file, not a pipe nobody reads: a chatty process would block on it.
        with self.stderr_file.open("wb") as stderr:
            self.process = launch_twistd(
                ["-n", "--pidfile=", f"--logfile={self.log_file}", *self.twistd_args, "broker",
                 "--config", str(self.config), "--port-file", str(self.port_file), *self.extra_args],
                cwd=self.directory, stdout=subprocess.DEVNULL, stderr=stderr)

    def wait_listening(self, timeout_s: float = 30.0) -> "BrokerProcess":
        deadline = time.monotonic() + timeout_s
        while not (self.port_file.exists() and self.port_file.read_text().strip()):
            if self.process.poll() is not None:
                raise RuntimeError(f"broker exited with {self.process.returncode}: "
                                   f"{self.stderr_file.read_text(errors='replace')}\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.kill()
                raise TimeoutError(f"broker did not listen within {timeout_s} s\n{self.log_tail()}")
            time.sleep(0.05)
        self.port = int(self.port_file.read_text())
        return self

    def stop(self, timeout_s: float = 20.0) -> int:
        """SIGTERM (a clean shutdown) and wait; return the exit status (twistd re-raises the
        signal after stopping cleanly, so a clean stop is -SIGTERM)."""
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        """SIGKILL: a crash, no clean-shutdown marker."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def connect(self, timeout_s: float = 10.0) -> "WireClient":
        return WireClient(("127.0.0.1", self.port), timeout_s)

    def log_tail(self, max_bytes: int = 4000) -> str:
        try:
            return self.log_file.read_text(errors="replace")[-max_bytes:]
        except FileNotFoundError:
            return "(no log)"


class SocketClient:
    """A loopback TCP connection for tests: closing, and telling whether the peer closed it."""

    def __init__(self, address: tuple[str, int], timeout_s: float) -> None:
        self.sock = socket.create_connection(address, timeout=timeout_s)

    def is_closed_by_peer(self, timeout_s: float = 5.0) -> bool:
        """True if the broker closes the connection (EOF or reset) within the timeout."""
        self.sock.settimeout(timeout_s)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False

    def close(self) -> None:
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class WireClient(SocketClient):
    """A raw-socket Kafka 0.7 client for tests: send request bytes, read whole responses."""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_exactly(self, count: int) -> bytes:
        chunks, remaining = [], count
        while remaining:
            chunk = self.sock.recv(min(remaining, 1 << 20))
            if not chunk:
                raise ConnectionError(f"connection closed with {remaining} of {count} bytes unread")
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)

    def response(self) -> bytes:
        """One response frame's body (error code first), without its size."""
        (size,) = struct.unpack(">i", self.read_exactly(4))
        return self.read_exactly(size)

    def request(self, data: bytes) -> bytes:
        self.send(data)
        return self.response()


class DebugSession(SocketClient):
    """A telnet-like client: ``ask(line)`` returns the answer's lines."""

    def __init__(self, port: int, timeout_s: float = 10.0) -> None:
        super().__init__(("127.0.0.1", port), timeout_s)
        self._buffer = b""
        self.greeting = self.answer()

    def answer(self) -> list[str]:
        while b"\n\n" not in self._buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError(f"closed by the broker; unanswered: {self._buffer!r}")
            self._buffer += chunk
        text, self._buffer = self._buffer.split(b"\n\n", 1)
        return text.decode("utf-8").split("\n")

    def ask(self, line: str | bytes) -> list[str]:
        self.sock.sendall((line.encode() if isinstance(line, str) else line) + b"\n")
        return self.answer()

    def read_to_end(self, timeout_s: float = 5.0) -> bytes:
        """Everything the broker still sends until it closes the connection."""
        self.sock.settimeout(timeout_s)
        data = self._buffer
        while chunk := self.sock.recv(65536):
            data += chunk
        return data


@pytest.fixture
def broker_factory(tmp_path) -> Iterator:
    """``broker_factory(name, **options)`` starts a broker; all are stopped after the test."""
    started: list[BrokerProcess] = []

    def start(name: str = "broker", **options) -> BrokerProcess:
        broker = BrokerProcess(tmp_path / name, **options)
        started.append(broker)
        return broker.start()

    yield start
    for broker in started:
        broker.kill()


@pytest.fixture
def broker(broker_factory) -> BrokerProcess:
    """One broker without ZooKeeper, flushing after every message."""
    return broker_factory()
