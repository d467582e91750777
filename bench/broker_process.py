"""The broker under benchmark: ``twistd -n broker`` with etc/server.properties' settings
(without ZooKeeper, on a free loopback port), and a client of its visible end offset.

Shared by bench/broker_bench.py, client_bench.py, spark_bench.py and peers/tbroker.py.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from twisted_broker.codec.kafka07.requests import OffsetRequest, encode_request
from twisted_broker.codec.kafka07.responses import decode_error_and_body, decode_offsets

FLUSH_INTERVAL = 10_000  # log.flush.interval
# twistd of this interpreter (twisted.scripts.twistd has no __main__ guard).
TWISTD = [sys.executable, "-c", "from twisted.scripts.twistd import run; run()"]
# etc/server.properties, without ZooKeeper and on a free port.
BROKER_PROPERTIES = {
    "brokerid": "0", "hostname": "127.0.0.1", "port": "0", "num.partitions": "1",
    "socket.send.buffer": "1048576", "socket.receive.buffer": "1048576",
    "log.flush.interval": str(FLUSH_INTERVAL), "log.default.flush.interval.ms": "1000",
    "log.default.flush.scheduler.interval.ms": "1000", "log.file.size": str(1 << 30),
    "log.cleanup.interval.mins": "10", "enable.zookeeper": "false",
}


def reactor_options() -> list[str]:
    """``BENCH_REACTOR=uvloop`` (or any ``twistd -r`` name): the brokers' reactor; twistd's
    default (epoll) otherwise. Issue 24 measures the two in one run (bench/small_requests.py)."""
    reactor = os.environ.get("BENCH_REACTOR")
    return [f"--reactor={reactor}"] if reactor else []


class BrokerProcess:
    """``twistd -n broker`` on a free loopback port, with its log and config under ``directory``."""

    def __init__(self, directory: str, properties: dict[str, str] | None = None) -> None:
        self.directory = directory
        self.log_dir = os.path.join(directory, "logs")
        self.port_file = os.path.join(directory, "port")
        self.log_file = os.path.join(directory, "twistd.log")
        self.config = os.path.join(directory, "server.properties")
        settings = {**BROKER_PROPERTIES, "log.dir": self.log_dir, **(properties or {})}
        Path(self.config).write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
        self.process: subprocess.Popen | None = None
        self.port = 0

    def start(self, timeout_s: float = 30.0) -> "BrokerProcess":
        with open(os.path.join(self.directory, "twistd.stderr"), "wb") as stderr:
            self.process = subprocess.Popen(
                [*TWISTD, "-n", "--pidfile=", f"--logfile={self.log_file}", *reactor_options(), "broker",
                 "--config", self.config, "--port-file", self.port_file],
                cwd=self.directory, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr)
        deadline = time.monotonic() + timeout_s
        while not (os.path.exists(self.port_file) and Path(self.port_file).read_text().strip()):
            if self.process.poll() is not None:
                raise RuntimeError(f"broker exited with {self.process.returncode}\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"broker did not listen within {timeout_s:.0f} s\n{self.log_tail()}")
            time.sleep(0.05)
        self.port = int(Path(self.port_file).read_text())
        return self

    def segment_files(self, topic: str) -> list[str]:
        directory = os.path.join(self.log_dir, f"{topic}-0")
        return [os.path.join(directory, name) for name in sorted(os.listdir(directory)) if name.endswith(".kafka")]

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM (a clean shutdown), SIGKILL if it does not exit in time."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def log_tail(self, max_bytes: int = 4000) -> str:
        text = ""
        for path in (os.path.join(self.directory, "twistd.stderr"), self.log_file):
            try:
                text += Path(path).read_text(errors="replace")[-max_bytes:]
            except FileNotFoundError:
                pass
        return text


def stop_together(brokers: list[BrokerProcess]) -> None:
    """Stop every broker of a cluster: SIGTERM to all at once (nothing to hand over at the end
    of a run), then wait for each."""
    for broker in brokers:
        if broker.process is not None and broker.process.poll() is None:
            broker.process.terminate()
    for broker in brokers:
        broker.stop()


class OffsetsClient:
    """Asks the broker for the visible (flushed) end offset of a topic's partition 0."""

    def __init__(self, port: int) -> None:
        self._sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buf = bytearray(64)

    def end(self, topic: str) -> int:
        self._sock.sendall(encode_request(OffsetRequest(topic, 0, -1, 1)))
        view, got = memoryview(self._buf), 0
        while got < 4 or got < 4 + int.from_bytes(self._buf[:4], "big"):
            n = self._sock.recv_into(view[got:])
            if not n:
                raise ConnectionError("the broker closed the Offsets connection")
            got += n
        error, body = decode_error_and_body(view[4:got])
        if error:
            raise RuntimeError(f"Offsets answered error {error}")
        return decode_offsets(body)[0]

    def close(self) -> None:
        self._sock.close()
