"""The admin console in a child process (``twistd -n webui``) and plain HTTP to it: what the
console tests in tests/integration, tests/browser, tests/kafka_clients and tests/replication
start and ask.
"""

from __future__ import annotations

from http.client import HTTPConnection
import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.support.forked_processes import ForkedProcess, launch as launch_twistd


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes
    cookies: list[str] = field(default_factory=list)

    def json(self):
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")


def http(port: int, method: str, path: str, *, headers: dict[str, str] | None = None,
         body: bytes | None = None) -> Response:
    """One HTTP request to 127.0.0.1:port with exactly the headers given (Host included)."""
    connection = HTTPConnection("127.0.0.1", port, timeout=15)
    try:
        connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for name, value in {"Host": f"127.0.0.1:{port}", **(headers or {})}.items():
            connection.putheader(name, value)
        if body is not None:
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        response = connection.getresponse()
        data = response.read()
        return Response(response.status, {k.lower(): v for k, v in response.getheaders()}, data,
                        response.headers.get_all("Set-Cookie") or [])
    finally:
        connection.close()


class ConsoleProcess:
    """``twistd -n webui`` in a child process; ``start()`` waits until it serves."""

    def __init__(self, directory: Path, zk_connect: str, *extra_args: str) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.port_file = directory / "port"
        self.log_file = directory / "twistd.log"
        self.args = ["webui", "--zk", zk_connect, "--listen", "tcp:0:interface=127.0.0.1",
                     "--port-file", str(self.port_file), *extra_args]
        self.process: subprocess.Popen | ForkedProcess | None = None
        self.port: int | None = None

    def start(self, timeout_s: float = 30.0) -> "ConsoleProcess":
        with (self.directory / "stderr.log").open("wb") as stderr:
            self.process = launch_twistd(["-n", "--pidfile=", f"--logfile={self.log_file}", *self.args],
                                         cwd=self.directory, stdout=subprocess.DEVNULL, stderr=stderr)
        self.port = wait_for_port_file(self.port_file, self.process, timeout_s)
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def get(self, path: str, **kwargs) -> Response:
        return http(self.port, "GET", path, **kwargs)

    def api(self, path: str):
        response = self.get(path)
        assert response.status == 200, (path, response.status, response.body[:500])
        return response.json()


def wait_for_port_file(path: Path, process: subprocess.Popen | ForkedProcess, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while not (path.exists() and path.read_text().strip()):
        if process.poll() is not None:
            raise RuntimeError(f"exited with {process.returncode} before writing {path.name}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} not written within {timeout_s} s")
        time.sleep(0.05)
    return int(path.read_text())


def metric_families(port: int) -> dict:
    body = http(port, "GET", "/metrics").text
    return {family.name: family for family in text_string_to_metric_families(body)}


def kind_shown(console, group: str) -> str | None:
    """The group's kind on the console: "kafka" once it has read the group and the listeners."""
    response = console.get(f"/api/groups/{group}")
    return response.json()["kind"] if response.status == 200 else None
