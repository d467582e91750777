"""A local ZooKeeper for development and tests: Debian's zookeeper package run in the foreground.

``ZooKeeperServer`` starts one server as a child process and stops it; the integration
tests use it as a session fixture and ``make run`` (devcluster) for 127.0.0.1:2181.
``is_serving`` asks any ZooKeeper ``ruok``, ``server_mode`` its role (``srvr``). Given
``peers``, a server is one member of an ensemble (tests start three on loopback). Run as a
program, it serves one config file until SIGINT or SIGTERM:

    python -m twisted_broker.local_zookeeper --config etc/zookeeper.cfg

Debian's package starts nothing by itself (the service is in zookeeperd), and its
``PORT DATADIR`` form binds every interface with sessions of at least 6 s, so the server
always gets a config file. A config file must allow the ``ruok`` four-letter word.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

from twisted_broker.config import read_properties

log = logging.getLogger(__name__)

CLASSPATH = ("/usr/share/java/zookeeper.jar", "/usr/share/java/slf4j-simple.jar")
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
QUORUM_MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"  # a member of an ensemble
# The JVM would size its heap from the machine's memory; a test server needs ~60 MB.
JVM_OPTIONS = ("-Xmx256m", "-XX:+UseSerialGC")
LOG_NAME = "zookeeper.log"  # in the data directory: the server's stdout and stderr


class ZooKeeperStartError(RuntimeError):
    """The server did not come up; the message ends with the tail of its log."""


def _ask(host: str, port: int, word: bytes, timeout_s: float) -> bytes | None:
    """A four-letter word's answer, or None if the server cannot be reached."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(word)
            sock.shutdown(socket.SHUT_WR)
            answer = b""
            while chunk := sock.recv(4096):
                answer += chunk
    except OSError:
        return None
    return answer


def is_serving(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """True if a ZooKeeper at host:port answers ``ruok`` with ``imok``. Blocks up to ~timeout_s."""
    return _ask(host, port, b"ruok", timeout_s) == b"imok"


def server_mode(host: str, port: int, timeout_s: float = 1.0) -> str | None:
    """The ``Mode:`` a ZooKeeper reports to ``srvr`` ("standalone", "leader", "follower"), or
    None when it does not serve (an ensemble member outside a quorum answers without one)."""
    answer = _ask(host, port, b"srvr", timeout_s) or b""
    for line in answer.decode(errors="replace").splitlines():
        if line.startswith("Mode: "):
            return line.removeprefix("Mode: ").strip()
    return None


@dataclass(frozen=True)
class Peer:
    """One member of an ensemble, as every member's ``server.<id>`` line names it."""

    server_id: int
    host: str
    client_port: int
    quorum_port: int
    election_port: int


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free on host just now (another process may still take it first)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def config_text(*, data_dir: Path, host: str, port: int, tick_time_ms: int, peers: Sequence[Peer] = ()) -> str:
    """The zoo.cfg for a single loopback server, or for one member of the ensemble ``peers``."""
    ensemble = "".join(f"server.{p.server_id}={p.host}:{p.quorum_port}:{p.election_port}\n" for p in peers)
    if peers:
        ensemble = "initLimit=10\nsyncLimit=5\n" + ensemble
    return (f"tickTime={tick_time_ms}\n"
            f"dataDir={data_dir}\n"
            f"clientPort={port}\n"
            f"clientPortAddress={host}\n"
            "maxClientCnxns=0\n"
            "admin.enableServer=false\n"  # else its Jetty takes :8080, the admin console's port
            "4lw.commands.whitelist=ruok,srvr,mntr,cons\n" + ensemble)


class ZooKeeperServer:
    """One ZooKeeper server in a child process, on loopback.

    With port=0 a free port is picked when the server starts. tick_time_ms bounds session
    timeouts to [2, 20] ticks: the 200 ms default lets tests use 0.5-2 s sessions. With
    ``peers`` (every member, this one included as ``server_id``), it runs as an ensemble
    member; start() then returns once it runs, before the ensemble has a quorum.
    Not thread-safe; start and stop from one thread.
    """

    def __init__(self, data_dir: str | os.PathLike[str], port: int = 0, *,
                 host: str = "127.0.0.1", tick_time_ms: int = 200, server_id: int | None = None,
                 peers: Sequence[Peer] = ()) -> None:
        self.data_dir = Path(data_dir).absolute()
        self.host, self.port, self.tick_time_ms = host, port, tick_time_ms
        self.server_id, self.peers = server_id, tuple(peers)
        self._config_file: Path | None = None  # None: start() writes one into data_dir
        self._process: subprocess.Popen[bytes] | None = None

    @classmethod
    def from_config(cls, path: str | os.PathLike[str]) -> Self:
        """A server run with an existing zoo.cfg as it is; relative paths in it are
        relative to the current directory, as ZooKeeper reads them."""
        props = read_properties(path)
        server = cls(props["dataDir"], int(props["clientPort"]),
                     host=props.get("clientPortAddress", "127.0.0.1"),
                     tick_time_ms=int(props.get("tickTime", "2000")))
        server._config_file = Path(path)
        return server

    @property
    def connect_string(self) -> str:
        """host:port, as kazoo and zk.connect take it."""
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        """True while the child process started by start() has not exited."""
        return self._process is not None and self._process.poll() is None

    @property
    def log_file(self) -> Path:
        return self.data_dir / LOG_NAME

    def start(self, timeout_s: float = 20.0) -> None:
        """Launch the server and wait until it answers ruok.

        Raises ZooKeeperStartError (with the tail of its log) if it exits or stays silent
        for timeout_s, FileNotFoundError if Java or Debian's zookeeper package is missing.
        """
        if self._process is not None:
            raise RuntimeError("ZooKeeperServer.start called twice")
        java = shutil.which("java")
        missing = [jar for jar in CLASSPATH if not Path(jar).exists()]
        if java is None or missing:
            raise FileNotFoundError(
                f"need java and {', '.join(CLASSPATH)}: apt-get install default-jre-headless"
                " zookeeper (make run and make test install them)")
        if self.port and is_serving(self.host, self.port):
            # Ours would fail to bind, and the polling below would take the other for ours.
            raise ZooKeeperStartError(f"a ZooKeeper already serves on {self.connect_string}")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config_file = self._config_file
        if config_file is None:
            if self.port == 0:
                self.port = free_port(self.host)
            config_file = self.data_dir / "zoo.cfg"
            config_file.write_text(config_text(data_dir=self.data_dir, host=self.host,
                                               port=self.port, tick_time_ms=self.tick_time_ms, peers=self.peers))
            if self.peers:
                (self.data_dir / "myid").write_text(f"{self.server_id}\n")
        with self.log_file.open("ab") as output:
            # A file, not a pipe: nobody reads a pipe while tests run, and a full one would
            # block the server. A new session keeps a terminal's Ctrl-C away from it, so
            # whoever started it decides the order of shutdown.
            self._process = subprocess.Popen(
                [java, *JVM_OPTIONS, "-cp", ":".join(CLASSPATH), QUORUM_MAIN_CLASS if self.peers else MAIN_CLASS,
                 str(config_file)],
                stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                start_new_session=True)
        log.info("ZooKeeper starting on %s (pid %d, log %s)",
                 self.connect_string, self._process.pid, self.log_file)
        deadline = time.monotonic() + timeout_s
        while not is_serving(self.host, self.port, timeout_s=0.5):
            status = self._process.poll()
            if status is not None:
                self._process = None
                raise ZooKeeperStartError(
                    f"ZooKeeper exited with status {status}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise ZooKeeperStartError(
                    f"ZooKeeper did not answer ruok on {self.connect_string} within"
                    f" {timeout_s:g} s:\n{self.log_tail()}")
            time.sleep(0.1)
        log.info("ZooKeeper serving on %s", self.connect_string)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the server: SIGTERM, then SIGKILL after timeout_s. Does nothing if not started."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("ZooKeeper (pid %d) ignored SIGTERM for %g s; killing it",
                            process.pid, timeout_s)
                process.kill()
                process.wait()
        log.info("ZooKeeper on %s stopped", self.connect_string)

    def kill(self) -> None:
        """SIGKILL, for crash tests: no clean shutdown. Does nothing if not started."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    def log_tail(self, max_bytes: int = 4000) -> str:
        """The end of the server's log, for error messages."""
        try:
            with self.log_file.open("rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - max_bytes))
                return f.read().decode("utf-8", "replace")
        except OSError as e:
            return f"(no log: {e})"

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()


def ignore_stop_signals() -> None:
    """Ignore SIGINT and SIGTERM from now on, so a second Ctrl-C cannot cut a shutdown short
    and leave a child (in its own session, out of the terminal's reach) running."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)


def main(argv: list[str] | None = None) -> int:
    """Serve one zoo.cfg in the foreground until SIGINT or SIGTERM; return the exit status."""
    parser = argparse.ArgumentParser(prog="python -m twisted_broker.local_zookeeper",
                                     description="Run Debian's ZooKeeper in the foreground.")
    parser.add_argument("--config", required=True, help="a zoo.cfg, e.g. etc/zookeeper.cfg")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop as Ctrl-C does
    server = ZooKeeperServer.from_config(args.config)
    try:
        server.start()
        while server.running:
            time.sleep(0.5)
        log.error("ZooKeeper exited by itself:\n%s", server.log_tail())
        return 1
    except (ZooKeeperStartError, FileNotFoundError) as e:
        log.error("%s", e)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        ignore_stop_signals()
        server.stop()


if __name__ == "__main__":
    raise SystemExit(main())
